"""`torchmark doctor`: is this install and this machine fit to measure on?

``gather()`` reads the machine once into a plain facts dict; every check is a pure function
of those facts returning ok / warn / fail / skip lines with the fix, so each can be tested
with made-up facts (a CPU-only torch on a box with an H100, a GPU at PCIe x4, ...).

One module per area: ``facts`` and ``nvml`` gather; ``install``, ``devices``, ``host`` and
``gpu`` check.
"""

from __future__ import annotations

from collections.abc import Callable

from torchmark.doctor.base import GIB, Check, Facts, Status
from torchmark.doctor.devices import check_devices, check_tiny_ops
from torchmark.doctor.facts import gather, gather_host, gather_torch, with_load
from torchmark.doctor.gpu import (
    check_clocks_power,
    check_ecc_mig,
    check_gpu_processes,
    check_pcie,
    check_persistence,
    check_tf32,
)
from torchmark.doctor.host import check_governor, check_load, check_memory, check_threads
from torchmark.doctor.install import (
    CUDA_WHEELS,
    check_cudnn,
    check_driver,
    check_torch_build,
    wheel_for,
)

CHECKS: tuple[Callable[[Facts], list[Check]], ...] = (
    check_torch_build,
    check_driver,
    check_devices,
    check_tiny_ops,
    check_cudnn,
    check_threads,
    check_tf32,
    check_governor,
    check_persistence,
    check_clocks_power,
    check_pcie,
    check_ecc_mig,
    check_memory,
    check_gpu_processes,
    check_load,
)


# Checks that read no fact only an imported torch knows: `doctor` prints them at once, and
# the rest after torch's import (~3 s). The threads check needs torch's default threads,
# known without torch once a run (or `env`) kept them (run/torchfacts.py).
TORCH_FREE: tuple[Callable[[Facts], list[Check]], ...] = (
    check_driver,
    check_threads,
    check_governor,
    check_persistence,
    check_clocks_power,
    check_ecc_mig,
    check_memory,
    check_gpu_processes,
    check_load,
)


def _ready(check: Callable[[Facts], list[Check]], facts: Facts) -> bool:
    if facts.get("torch_imported") is not False:
        return True
    if check is check_threads:
        return bool(facts["threads"]["torch"])
    if check is check_load:
        return facts["load"] is not None
    return check in TORCH_FREE


def run_checks(facts: Facts) -> list[Check]:
    """Every check, in ``CHECKS`` order; on ``gather_host``'s facts only those they decide."""
    return [c for check in CHECKS if _ready(check, facts) for c in check(facts)]


def exit_code(checks: list[Check]) -> int:
    return 1 if any(c.status == "fail" for c in checks) else 0


__all__ = [
    "CHECKS",
    "CUDA_WHEELS",
    "GIB",
    "TORCH_FREE",
    "Check",
    "Facts",
    "Status",
    "check_clocks_power",
    "check_cudnn",
    "check_devices",
    "check_driver",
    "check_ecc_mig",
    "check_governor",
    "check_gpu_processes",
    "check_load",
    "check_memory",
    "check_pcie",
    "check_persistence",
    "check_tf32",
    "check_threads",
    "check_tiny_ops",
    "check_torch_build",
    "exit_code",
    "gather",
    "gather_host",
    "gather_torch",
    "run_checks",
    "wheel_for",
    "with_load",
]
