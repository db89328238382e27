"""Device discovery and parsing of ``--device`` specs.

``cpu``, ``cuda``, ``cuda:N``, ``mps``, ``xpu[:N]``, ``all`` (every device found).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from torchmark import _lazy_getattr
from torchmark.errors import InputError

if TYPE_CHECKING:
    from torchmark.devices.base import Device, HostTimer, SampleTimer, TimingMode
    from torchmark.devices.cpu import CPUDevice
    from torchmark.devices.cuda import CUDADevice
    from torchmark.devices.other import MPSDevice, XPUDevice

__all__ = [
    "CPUDevice",
    "CUDADevice",
    "Device",
    "HostTimer",
    "MPSDevice",
    "SampleTimer",
    "TimingMode",
    "XPUDevice",
    "available",
    "is_host",
    "resolve",
]


# The classes need torch (~2 s to import); views of stored runs only call is_host, so the
# names below are imported on first use.
_HOME = {
    "Device": ".base",
    "HostTimer": ".base",
    "SampleTimer": ".base",
    "TimingMode": ".base",
    "CPUDevice": ".cpu",
    "CUDADevice": ".cuda",
    "MPSDevice": ".other",
    "XPUDevice": ".other",
}

__getattr__ = _lazy_getattr(__name__, _HOME)


def available() -> list[Device]:
    """Every device this process can use: the CPU first, then each accelerator."""
    import torch

    from torchmark.devices.cpu import CPUDevice
    from torchmark.devices.cuda import CUDADevice
    from torchmark.devices.other import MPSDevice, XPUDevice

    found: list[Device] = [CPUDevice()]
    if torch.cuda.is_available():
        found += [CUDADevice(i) for i in range(torch.cuda.device_count())]
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        found += [XPUDevice(i) for i in range(torch.xpu.device_count())]
    if torch.backends.mps.is_available():
        found.append(MPSDevice())
    return found


def resolve(specs: Iterable[str] | str | None, found: list[Device] | None = None) -> list[Device]:
    """Turn ``--device`` values into devices; an unknown one names the valid choices."""
    found = available() if found is None else found
    if specs is None or specs == "all":
        return list(found)
    if isinstance(specs, str):
        specs = [specs]
    by_name = {d.name: d for d in found}
    kinds: dict[str, list[Device]] = {}
    for d in found:
        kinds.setdefault(d.kind, []).append(d)
    chosen: list[Device] = []
    for raw in specs:
        for spec in (s.strip().lower() for s in raw.split(",") if s.strip()):
            if spec == "all":
                picks = list(found)
            elif spec in by_name:
                picks = [by_name[spec]]
            elif spec in kinds:
                picks = kinds[spec]
            else:
                valid = list(dict.fromkeys(["all", *kinds, *by_name]))
                from torchmark.errors import UnknownNameError  # its 'did you mean' rule

                near = UnknownNameError.closest(spec, valid)
                raise InputError(
                    f"device {spec!r} is not available on this machine; "
                    + (f"did you mean {near!r}? " if near else "")
                    + f"choose from: {', '.join(valid)}"
                )
            chosen += [d for d in picks if d not in chosen]
    return chosen
