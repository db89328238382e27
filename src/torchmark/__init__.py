"""torchmark: how fast is deep learning on this machine, CPU or GPU, and why."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torchmark.errors import TorchmarkError

if TYPE_CHECKING:
    from torchmark.kinds.model.kind import benchmark_model
    from torchmark.results import Ceiling, Result, RunRecord, Work
    from torchmark.timing import Measurement
    from torchmark.timing.checked import measure

    __version__: str

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

# Public names imported on first use: `measure` pulls in torch (~2 s) and the results
# model pydantic, and `import torchmark.cli` must not pay for them before parsing argv.
_LAZY = {
    "Ceiling": "torchmark.results",
    "Result": "torchmark.results",
    "RunRecord": "torchmark.results",
    "Work": "torchmark.results",
    "Measurement": "torchmark.stats.measurement",
    "measure": "torchmark.timing.checked",  # the loop, with the machine's load read
    "benchmark_model": "torchmark.kinds.model.kind",
}


def open_store(url: str | None = None):  # type: ignore[no-untyped-def]
    """Open the results store at ``url`` (default: SQLite in the user data directory)."""
    from torchmark.store import open_store as _open

    return _open(url)


def _version() -> str:
    # importlib.metadata costs ~30 ms to import; only --version and stored runs need it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torchmark")
    except PackageNotFoundError:  # a source tree on PYTHONPATH, as on a lent GPU machine
        return _source_version()


def _source_version() -> str:
    import re
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    text = pyproject.read_text() if pyproject.is_file() else ""
    found = re.search(r'^version = "([^"]+)"', text, re.M)
    return f"{found.group(1)}+src" if found else "0.0.0+unknown"


def _lazy_getattr(package: str, home: dict[str, str]) -> Callable[[str], Any]:
    """A package's module ``__getattr__`` (PEP 562): each name in ``home`` is imported from
    its module (absolute, or relative to ``package``) on first use, then kept as a global."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(module, package), name)
        return value

    return __getattr__


_lazy = _lazy_getattr(__name__, _LAZY)


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    if name == "__version__":
        globals()[name] = value = _version()
        return value
    return _lazy(name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
