"""Workloads: micro-benchmarks and models. Importing this package registers the built-ins."""

from torchmark.workloads.base import WORKLOADS, Case, PlanOptions, Prepared, Workload

__all__ = ["WORKLOADS", "Case", "PlanOptions", "Prepared", "Workload", "load_builtins"]


def load_builtins() -> None:
    """Import the built-in workload modules so they register themselves."""
    import importlib
    import pkgutil

    from torchmark.workloads import micro, models, pipeline

    for pkg in (micro, models, pipeline):
        for mod in pkgutil.iter_modules(pkg.__path__):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{pkg.__name__}.{mod.name}")
