"""The user's own model: load it, benchmark it over a batch sweep, find the CPU/GPU
break-even, its energy and cost per item, and the settings that make it faster (tune)."""

from __future__ import annotations

from typing import Any

__all__ = ["benchmark_model"]


def __getattr__(name: str) -> Any:
    # bench imports torch (~1.3 s): `torchmark show` of a model run reads the break-even
    # words from torchmark.user.breakeven, and must not load it
    if name == "benchmark_model":
        from torchmark.user.bench import benchmark_model

        return benchmark_model
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
