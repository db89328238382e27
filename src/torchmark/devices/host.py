"""The host CPU's static facts without torch: model, ISA flags, caches, cores.

Read here so that ``torchmark list`` can name the CPU without importing torch (~2 s), and
fast: py-cpuinfo runs itself in a subprocess to read CPUID (1.4-2.5 s measured on the 2-core
VM, most of ``env`` and ``doctor`` after torch's import). On Linux x86 ``/proc/cpuinfo``
holds the same brand string and flags (the kernel reads them from CPUID); elsewhere
py-cpuinfo answers.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import platform
import sys
from pathlib import Path
from typing import Any

import psutil

PROC_CPUINFO = Path("/proc/cpuinfo")


def _from_proc(text: str) -> dict[str, Any] | None:
    """brand_raw and flags as py-cpuinfo names them, from /proc/cpuinfo's first CPU; None
    where it lacks either (ARM kernels list ``Features`` and no model name)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # the first processor's block is enough
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if "model name" not in fields or "flags" not in fields:
        return None
    return {"brand_raw": fields["model name"], "flags": fields["flags"].split()}


@functools.cache
def cpu_facts() -> dict[str, Any]:
    """``brand_raw``, ``arch_string_raw`` and ``flags``, as py-cpuinfo's dict has them."""
    found = None
    if sys.platform.startswith("linux"):
        try:
            found = _from_proc(PROC_CPUINFO.read_text())
        except OSError:
            found = None
    if found is None:
        import cpuinfo

        try:
            found = dict(cpuinfo.get_cpu_info())
        except Exception:  # py-cpuinfo shells out; a locked-down host may refuse
            found = {}
    return {"arch_string_raw": platform.machine(), **found}


def llc_bytes() -> int | None:
    """The largest cache CPU 0 reports (sysfs), as reported: devices.cache bounds it."""
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            path = os.path.join(base, entry, "size")
            if os.path.exists(path):
                with open(path) as f:
                    text = f.read().strip().upper()
                mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
                size = int(text.rstrip("KMG")) * mult
                best = max(best or 0, size)
    except (OSError, ValueError):
        return None
    return best


def label() -> str:
    """'Intel(R) Xeon(R) Processor (2 cores)': the CPU device's name in tables."""
    model = cpu_facts().get("brand_raw") or "unknown CPU"
    return f"{model} ({psutil.cpu_count(logical=False)} cores)"


# Where the NVIDIA driver shows itself: its kernel module (in containers too), its device
# files, and WSL2's GPU bridge, through which CUDA works with no /proc/driver/nvidia.
NVIDIA_SIGNS = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def torch_dir() -> Path | None:
    """The installed torch's package folder, found without importing it; None without."""
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent


def version_file(where: Path) -> dict[str, Any]:
    """The plain assignments of literals in torch's ``version.py`` under ``where``
    (``__version__`` as ``version``: ``cuda``, ``hip``, ``debug``...); {} where unreadable."""
    import ast

    out: dict[str, Any] = {}
    try:
        body = ast.parse((where / "version.py").read_text()).body
    except (OSError, SyntaxError):
        return out
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id != "__all__":
            try:
                out["version" if target.id == "__version__" else target.id] = ast.literal_eval(
                    value
                )
            except ValueError:
                continue
    return out


def torch_sees_only_the_host() -> bool:
    """Whether the installed torch can use no device but the CPU, told from its version file
    without importing it: a build with no CUDA, ROCm or XPU, and not on macOS (MPS); or a
    CUDA-only build (PyPI's default) on a machine with no NVIDIA driver, which CUDA needs."""
    if sys.platform == "darwin":
        return False
    where = torch_dir()
    if where is None:
        return False  # no torch: the slow path says so the usual way
    built = version_file(where)
    if "cuda" not in built:
        return False  # says nothing of cuda (or unreadable): ask torch
    if built.get("hip") or built.get("rocm") or built.get("xpu"):
        return False
    return not built["cuda"] or not any(os.path.exists(p) for p in NVIDIA_SIGNS)


def allowed_cores() -> tuple[int, ...]:
    """The cores this process may run on, its affinity (a Slurm, taskset or cpuset limit
    counts); () where the platform cannot say."""
    get = getattr(os, "sched_getaffinity", None)
    return tuple(sorted(get(0))) if get is not None else ()


def available_cores() -> int:
    """How many cores this process may run on (``allowed_cores``; the machine's count where
    the platform cannot say)."""
    return len(allowed_cores()) or os.cpu_count() or 1
