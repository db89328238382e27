"""Reports: pure functions of stored runs (terminal tables, compare, HTML, Markdown).

Nothing here measures; every figure is derived from a RunRecord. Submodules load on use.
Numbers and case labels come from ``torchmark.format``, which library code uses too.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ceilings_table", "results_table", "run_tables", "seed_placement"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("torchmark.report.table"), name)
    raise AttributeError(f"module 'torchmark.report' has no attribute {name!r}")
