"""torch's facts for `env` and `doctor` without importing torch (2.5-3 s on the 2-core VM).

What torch is comes from its install: the version from its metadata, the build (CUDA,
ROCm, debug) from the package's own ``version.py``. What only an imported torch can say
(cuDNN's version, its default threads, the precision flags' defaults, the CPU's kernel
capability, each device's properties) is kept by the last command that imported torch
anyway: every run's environment record (``environment.collect``, rewritten by each run) and
`env` (where nothing is kept yet, or with ``--refresh``); `doctor` only reads it. It is
kept in the user cache directory under a key of everything that could change it: torch's
version and path, torchmark's version, the host and its CPU, the environment variables that
matter (``envvars.RELEVANT_ENV``), the CPUs this process may use, and the NVIDIA driver and
GPUs the kernel lists. No entry for the key: import torch.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

# Every CLI command imports this module to set KEEP_BY, `history` and `show` too: what only
# building or keying the facts needs is imported there (metadata, psutil through
# devices.host, hashlib, socket: ~20 ms of a read-only command's start).

# The sections of the environment record that need an imported torch (run/environment.py).
SECTIONS = ("software", "devices", "threads", "precision")
# Who keeps them: the CLI names its command here; a library caller, who may have set torch's
# threads or flags before importing torchmark, keeps nothing.
KEEP_BY: str | None = None
NVIDIA_PROC = Path("/proc/driver/nvidia")


def build() -> dict[str, Any]:
    """``version``, ``cuda``, ``hip``, ``debug``, ``path`` of the installed torch, read from
    its version.py (``devices.host.version_file``), the version from its metadata where
    version.py has none (a metadata look-up scans every installed package: ~4 ms, most of
    this); {} without torch."""
    import importlib.metadata

    from torchmark.devices.host import torch_dir, version_file

    where = torch_dir()
    if where is None:
        return {}
    out: dict[str, Any] = {"path": str(where), **version_file(where)}
    if "version" not in out:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out["version"] = importlib.metadata.version("torch")
    return out


def _nvidia() -> str:
    """The NVIDIA driver's version line and the GPUs' bus ids, as the kernel lists them."""
    with contextlib.suppress(OSError):
        version = (NVIDIA_PROC / "version").read_text().splitlines()[0]
        return version + ";" + ",".join(sorted(os.listdir(NVIDIA_PROC / "gpus")))
    return "no NVIDIA driver"


def key() -> str:
    import hashlib
    import socket

    from torchmark import __version__
    from torchmark.devices import host
    from torchmark.envvars import RELEVANT_ENV

    cpu = host.cpu_facts()
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    parts = {
        "torchmark": __version__,
        "torch": build(),
        "host": socket.gethostname(),
        "cpu": [cpu.get("brand_raw"), sorted(cpu.get("flags", []))],
        "cpus": [os.cpu_count(), affinity],
        "env": {k: os.environ.get(k) for k in RELEVANT_ENV},
        "nvidia": _nvidia(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def cache_file() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("torchmark")) / f"torch-facts-{key()}.json"


def keep(record: dict[str, Any], by: str | None) -> None:
    """Keep the torch-only sections of an environment record collected with torch's
    defaults (a cache that cannot be written costs the next `env` a torch import)."""
    if by is None:
        return
    from datetime import datetime, timezone

    kept = {k: record[k] for k in SECTIONS if k in record}
    kept |= {"by": by, "written_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    with contextlib.suppress(OSError):
        path = cache_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(kept, default=str))
        tmp.replace(path)  # atomic: a reader beside sees all or nothing


def kept() -> dict[str, Any] | None:
    """The kept sections for this install and machine, with ``by``, ``written_utc`` and
    ``file``; None where none are kept (or unreadable)."""
    path = cache_file()
    with contextlib.suppress(OSError, ValueError):
        found = json.loads(path.read_text())
        if isinstance(found, dict) and all(k in found for k in SECTIONS):
            return found | {"file": str(path)}
    return None
