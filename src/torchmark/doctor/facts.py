"""Gathering the facts: the only impure part of the doctor (about a second, and torch's
import). ``gather_host`` reads what needs no torch (the install's build from its files,
NVML, /proc and /sys, the load; torch's default threads as the last run kept them), so
`doctor` prints those checks at once; ``gather_torch`` adds what only an imported torch can
tell (is the GPU usable, a tiny op on every device, cuDNN, the precision flags)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from torchmark.doctor.base import Facts
from torchmark.doctor.nvml import pcie_busy, read_nvml
from torchmark.errors import first_line
from torchmark.run import torchfacts
from torchmark.telemetry.host import OtherLoad


def _try(fn: Callable[[], Any], default: Any = None) -> Any:
    try:
        return fn()
    except Exception:  # a fact that cannot be read is recorded as unknown, never guessed
        return default


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _smi_gpus() -> int:
    """NVIDIA GPUs the kernel driver sees, without NVML (nvidia-smi -L, /proc)."""
    gpus = _try(lambda: len(os.listdir(torchfacts.NVIDIA_PROC / "gpus")), 0)
    if not gpus and shutil.which("nvidia-smi"):
        out = _try(
            lambda: (
                subprocess.run(
                    ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10
                ).stdout
            ),
            "",
        )
        gpus = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    return int(gpus)


def _tiny_ops() -> list[Facts]:
    """A small matmul + add on every device, compared with the same on the CPU."""
    import torch

    from torchmark.devices import available

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 64, generator=g), torch.randn(64, 64, generator=g)
    ref = a @ b + a
    out = []
    for d in _try(available, []) or []:
        fact: Facts = {"device": d.name, "label": _try(d.label, d.name)}
        try:
            t0 = time.perf_counter()
            got = (a.to(d.torch_device) @ b.to(d.torch_device) + a.to(d.torch_device)).cpu()
            fact["seconds"] = time.perf_counter() - t0
            err = float((got - ref).abs().max() / ref.abs().max())
            fact["max_rel_err"] = err
        except Exception as e:
            fact["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        out.append(fact)
    return out


def _cuda_init_error(torch: Any) -> str | None:
    if torch.version.cuda is None and not getattr(torch.version, "hip", None):
        return None
    try:
        torch.cuda.init()
        return None
    except Exception as e:
        return first_line(e)


# CPU times tick every 10 ms and jobs come in bursts: a 0.3 s sample read 0.0 cores of
# other load while the 1-minute load average was 2.15. One second, with the load average
# beside it, tells a quiet moment from a quiet machine.
LOAD_SAMPLE_S = 1.0


def _load() -> Facts:
    me = os.getpid()
    procs = list(psutil.process_iter(["pid", "name"]))
    for p in procs:
        _try(p.cpu_percent)
    with OtherLoad() as load:
        time.sleep(LOAD_SAMPLE_S)
    others, own_cores = load.cores or 0.0, load.own_cores or 0.0
    top = []
    for p in procs:
        pct = _try(p.cpu_percent, 0.0) or 0.0
        if p.pid != me and pct >= 10:
            top.append({"pid": p.pid, "name": p.info.get("name"), "cpu_pct": round(pct)})
    top.sort(key=lambda x: -x["cpu_pct"])
    return {
        "busy_cores": round(others + own_cores, 2),
        "other_cores": round(others, 2),
        "sample_s": LOAD_SAMPLE_S,
        "loadavg": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "top": top[:3],
    }


def gather_host(sample_load: bool = True) -> Facts:
    """The facts no check needs torch for (``torch_imported`` False): the torch section has
    only the build, and threads' ``torch`` is None where no run kept it; ``load`` is None
    unless ``sample_load`` (``with_load`` adds it: a 1 s sample)."""
    governors = sorted(
        {
            g
            for p in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor")
            if (g := _read(str(p)))
        }
    )
    vm = psutil.virtual_memory()
    affinity = _try(lambda: len(os.sched_getaffinity(0)))
    build, kept = torchfacts.build(), torchfacts.kept()
    nvml = read_nvml()
    nvml["pcie_under_load"] = False
    threads = kept["threads"] if kept else {}
    return {
        "torch_imported": False,
        "torch": {k: build.get(k) for k in ("version", "cuda", "hip")},
        "nvml": nvml,
        "nvidia_gpus_seen": max(len(nvml["gpus"]), _smi_gpus()),
        "env": {
            k: os.environ[k]
            for k in (
                "CUDA_VISIBLE_DEVICES",
                "OMP_NUM_THREADS",
                "MKL_NUM_THREADS",
                "NVIDIA_TF32_OVERRIDE",
            )
            if k in os.environ
        },
        "threads": {
            "torch": threads.get("torch_num_threads"),
            "interop": threads.get("torch_interop_threads"),
            "logical_cores": psutil.cpu_count(logical=True),
            "physical_cores": psutil.cpu_count(logical=False),
            "affinity": affinity,
        },
        "cpufreq": {
            "governors": governors or None,
            "boost": _read("/sys/devices/system/cpu/cpufreq/boost"),
            "no_turbo": _read("/sys/devices/system/cpu/intel_pstate/no_turbo"),
        },
        "memory": {"total": vm.total, "available": vm.available},
        "load": _load() if sample_load else None,
        "pid": os.getpid(),
    }


def with_load(host: Facts) -> Facts:
    return host | {"load": _load()}


def gather_torch(host: Facts) -> Facts:
    """``host`` with what only an imported torch tells (about a second past its import)."""
    import torch

    if host["load"] is None:
        host = with_load(host)
    cuda_ok = torch.cuda.is_available()
    nvml = host["nvml"]
    if cuda_ok:  # an idle GPU drops its PCIe link to gen1: read the link while copies run
        with pcie_busy(cuda_ok) as busy:
            nvml = read_nvml()
        nvml["pcie_under_load"] = busy
    return host | {
        "torch_imported": True,
        "torch": {
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "cuda_available": cuda_ok,
            "cuda_device_count": torch.cuda.device_count() if cuda_ok else 0,
            "cuda_init_error": None if cuda_ok else _cuda_init_error(torch),
            "cudnn": _try(torch.backends.cudnn.version) if cuda_ok else None,
            "cudnn_available": _try(torch.backends.cudnn.is_available, False),
            "mps_available": _try(torch.backends.mps.is_available, False),
        },
        "nvml": nvml,
        "nvidia_gpus_seen": max(len(nvml["gpus"]), host["nvidia_gpus_seen"]),
        "devices": _tiny_ops(),
        "threads": host["threads"]
        | {"torch": torch.get_num_threads(), "interop": torch.get_num_interop_threads()},
        "precision": {
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        },
    }


def gather() -> Facts:
    """Read every fact the checks need (about a second: a 0.3 s load sample, tiny ops)."""
    return gather_torch(gather_host())
