"""The user's own model: load it, benchmark it over a batch sweep, find the CPU/GPU
break-even, its energy and cost per item, and the settings that make it faster (tune)."""

from torchmark.user.bench import benchmark_model

__all__ = ["benchmark_model"]
