"""What `torchmark list` shows (cli/machine.py): the workloads with their facts and the
devices found, without torch where it can.

Both halves were slow: naming the workloads imports them (torch, ~2 s), and their facts
count each model's FLOPs on the meta device (2.0 s of the 3.7 s `list` took, BERT's
``torch.arange`` importing torch._dynamo). The workloads and their facts are a function of
the installed code alone, so they are worked out once and kept in the user cache directory
under a key of torchmark's version, the workload sources, torch's version file and the
plug-ins installed: a later `list` reads them back. The devices are asked of torch unless
the installed torch is a CPU-only build, or a CUDA build on a machine with no NVIDIA
driver, where the CPU is the only answer it could give.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

PLUGINS = "torchmark.workloads"  # the workload registry's entry-point group


def _key() -> str:
    """Changes whenever what `list` would compute could: torchmark, its workload sources,
    torch's version, the workload plug-ins installed."""
    from importlib.metadata import entry_points

    from torchmark import __version__

    h = hashlib.sha256(__version__.encode())
    spec = importlib.util.find_spec("torchmark.workloads")
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent
    for path in sorted(root.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(root)}:{st.st_mtime_ns}:{st.st_size}".encode())
    torch_spec = importlib.util.find_spec("torch")
    if torch_spec is not None and torch_spec.origin is not None:
        with contextlib.suppress(OSError):
            h.update((Path(torch_spec.origin).parent / "version.py").read_bytes())
    for ep in entry_points(group=PLUGINS):
        h.update(f"{ep.name}={ep.value}".encode())
    return h.hexdigest()[:16]


def _cache_file() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("torchmark")) / f"workloads-{_key()}.json"


def compute() -> list[dict[str, Any]]:
    """Every registered workload with its facts (imports the workloads: torch)."""
    from torchmark.workloads import WORKLOADS, load_builtins

    load_builtins()
    out: list[dict[str, Any]] = []
    for name in WORKLOADS.names():
        cls = WORKLOADS.get(name)
        out.append(
            {
                "name": name,
                "group": cls.group,
                "summary": cls.summary,
                "quick": cls.in_quick,
                **cls().describe(),
            }
        )
    return list(json.loads(json.dumps(out)))  # as a cached copy reads back: tuples as lists


def workloads() -> list[dict[str, Any]]:
    """The workload rows: from the cache when this install has one, else computed and kept
    (a cache that cannot be written only costs the next `list` the same time)."""
    path = _cache_file()
    with contextlib.suppress(OSError, ValueError):
        rows = json.loads(path.read_text())
        if isinstance(rows, list):
            return rows
    rows = compute()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(rows))
        tmp.replace(path)  # atomic: a `list` running beside reads all or nothing
    return rows


def devices() -> list[dict[str, str | bool]]:
    from torchmark.devices import host

    if host.torch_sees_only_the_host():
        return [{"name": "cpu", "label": host.label(), "accelerator": False}]
    from torchmark.devices import available

    return [
        {"name": d.name, "label": d.label(), "accelerator": d.is_accelerator} for d in available()
    ]
