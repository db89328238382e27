"""torchmark: how fast is deep learning on this machine, CPU or GPU, and why."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("torchmark")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+unknown"

from torchmark.errors import TorchmarkError
from torchmark.results import Ceiling, Result, RunRecord, Work
from torchmark.timing import Measurement, measure

__all__ = [
    "Ceiling",
    "Measurement",
    "Result",
    "RunRecord",
    "TorchmarkError",
    "Work",
    "__version__",
    "benchmark_model",
    "measure",
    "open_store",
]


def open_store(url: str | None = None):  # type: ignore[no-untyped-def]
    """Open the results store at ``url`` (default: SQLite in the user data directory)."""
    from torchmark.store import open_store as _open

    return _open(url)


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    # benchmark_model pulls in the runner and telemetry: imported on first use only
    if name == "benchmark_model":
        from torchmark.user.bench import benchmark_model

        return benchmark_model
    raise AttributeError(f"module 'torchmark' has no attribute {name!r}")
