"""The environment record stored with every run (METHOD.md §2.1) and its fingerprints.

``collect`` reads it from torch and keeps the sections only torch can tell
(run/torchfacts.py); ``collect_kept`` builds the same record without importing torch from
what was kept, for `torchmark env`.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
import sys
from typing import TYPE_CHECKING, Any

import psutil

from torchmark import __version__
from torchmark.envvars import RELEVANT_ENV
from torchmark.run import torchfacts

if TYPE_CHECKING:
    from torchmark.devices import Device


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML: not an NVIDIA machine, or no driver
        return None


def software() -> dict[str, Any]:
    import torch

    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "torchmark": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "cudnn": cudnn,
        "driver": _driver_version() if torch.cuda.is_available() else None,
        "debug_build": bool(torch.version.debug),
        "parallel_info_threads": torch.get_num_threads(),
    }


def precision_flags() -> dict[str, Any]:
    import torch

    return {
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cuda_matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
    }


def load() -> dict[str, Any]:
    """How busy the machine was when the run started (competing load skews CPU results)."""
    la = os.getloadavg() if hasattr(os, "getloadavg") else (None, None, None)
    return {
        "loadavg": list(la),
        "cpu_percent": psutil.cpu_percent(interval=0.1),
        "memory_available_bytes": psutil.virtual_memory().available,
    }


def _record(torch_facts: dict[str, Any]) -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),  # lets `history` tell a live run from one whose process died
        "os": platform.platform(),
        "python_executable": sys.executable,
        **{k: torch_facts[k] for k in torchfacts.SECTIONS},
        "env_vars": {k: os.environ[k] for k in RELEVANT_ENV if k in os.environ},
        "load_at_start": load(),
    }


def collect(devices: list[Device]) -> dict[str, Any]:
    import torch

    from torchmark.devices import cpu

    facts = {
        "software": software(),
        "devices": {d.name: d.info() for d in devices},
        "threads": {
            "torch_num_threads": torch.get_num_threads(),
            "torch_interop_threads": torch.get_num_interop_threads(),
        },
        "precision": precision_flags(),
    }
    # the memory available each device's buffers were sized from (run.plan.make_plan): a
    # resumed run plans its sizes from these again. Not compared, not in the fingerprint.
    planned = {d.name: d.planned_memory[0] for d in devices if d.planned_memory is not None}
    # kept only by the CLI (a library caller keeps nothing): no second device scan, no copy
    by = torchfacts.KEEP_BY
    if by is not None and [d.name for d in devices] == [d.name for d in _every_device()]:
        torchfacts.keep(_at_defaults(facts, *cpu.DEFAULT_THREADS), by)  # as `env` lists them
    return _record(facts) | ({"plan_memory_bytes": planned} if planned else {})


def _every_device() -> list[Device]:
    from torchmark.devices import available

    return available()


def _at_defaults(facts: dict[str, Any], threads: int, interop: int) -> dict[str, Any]:
    """``facts`` with torch's threads as a fresh process has them (a run may have set its
    own with --threads before its record was made)."""
    out = json.loads(json.dumps(facts, default=str))
    out["software"]["parallel_info_threads"] = threads
    out["threads"] = {"torch_num_threads": threads, "torch_interop_threads": interop}
    for info in out["devices"].values():
        if info.get("kind") == "cpu":
            info["threads"] = threads
    return out


def collect_kept() -> dict[str, Any] | None:
    """The record ``collect(available())`` would make in a fresh process, without torch:
    from the kept sections (``facts_from`` says whose, and when); None where none are kept."""
    found = torchfacts.kept()
    if found is None:
        return None
    record = _record(found)
    record["facts_from"] = {k: found[k] for k in ("by", "written_utc", "file")}
    return record


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def device_fingerprint(device: Device, env: dict[str, Any]) -> str:
    """Same machine, same device, same software and threads -> same ceilings (cache key)."""
    sw = env.get("software", {})
    return _digest(
        {
            "host": env.get("host"),
            "device": device.info() | {"threads": None},
            "threads": env.get("threads"),
            "torch": sw.get("torch"),
            "cuda": sw.get("cuda_runtime"),
            "driver": sw.get("driver"),
        }
    )


def machine_fingerprint(env: dict[str, Any]) -> str:
    """Identifies machine + software for a run (hardware, versions; not the load)."""
    return _digest({k: env.get(k) for k in ("host", "devices", "software", "threads")})
