"""The hardware catalogue (``catalog.toml`` beside this file; GPUs: ``datasheet``): what a
device the board is told about can do at most, from its maker's datasheet, matched by the
model name the run reports. The board's bounds come from here, never from the core count or
cache the submitter wrote; a model the catalogue does not know is bounded by the fastest
it does know (``ANY_CPU``), and is never ranked above a catalogued one on that claim
alone (``web.population``). Torch-free.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from torchmark.hardware import datasheet

HERE = Path(__file__).parent

# Per core and cycle, by the widest vector unit (Intel's and AMD's optimization manuals):
# FP32 FLOP (2 FMA units x lanes x 2), a low precision's (bf16: AVX512-BF16 dot products at
# twice the fp32 rate; AMX: 1,024 bf16 multiply-adds a cycle) and bytes to and from L1 (two
# loads and a store of one vector).
ISA: dict[str, tuple[int, int, int]] = {
    "avx512": (64, 128, 192),  # two 512-bit FMA units
    "amx": (64, 2048, 192),  # AVX-512 plus AMX tiles
    "zen4": (32, 64, 96),  # 512-bit instructions on 256-bit datapaths
    "avx2": (32, 32, 96),  # two 256-bit FMA units
    "neon": (32, 64, 96),  # four 128-bit FMA pipes (Apple M)
}


@dataclass(frozen=True)
class Cpu:
    """One catalogued CPU model's ceilings, whole machine (every socket it may run in)."""

    model: str
    pattern: str
    sockets: int
    cores: int  # per socket
    threads: int  # per socket
    boost_hz: float
    llc_bytes: float  # per socket
    memory_bps: float  # per socket
    isa: str
    family: str = ""
    measured: dict[str, float] = field(default_factory=dict)  # reference runs' ceilings
    stands_for: str = ""  # a masked name: the family it bounds itself by

    @property
    def max_threads(self) -> int:
        return self.sockets * self.threads

    def flops(self, low: bool) -> float:
        fp32, low_rate, _ = ISA[self.isa]
        return self.sockets * self.cores * self.boost_hz * (low_rate if low else fp32)

    @property
    def cache_bps(self) -> float:
        """Every core moving its L1's bytes each cycle: no cache level moves more."""
        return self.sockets * self.cores * self.boost_hz * ISA[self.isa][2]

    @property
    def dram_bps(self) -> float:
        return self.sockets * self.memory_bps

    @property
    def cache_total(self) -> float:
        return self.sockets * self.llc_bytes


def _row(d: dict[str, Any]) -> Cpu:
    memory = d["memory_gbs"] * 1e9 if "memory_gbs" in d else d["channels"] * d["mts"] * 1e6 * 8
    return Cpu(
        model=d["model"],
        pattern=d["pattern"],
        sockets=d["sockets"],
        cores=d["cores"],
        threads=d["threads"],
        boost_hz=d["boost_ghz"] * 1e9,
        llc_bytes=d["llc_mb"] * 2**20,
        memory_bps=memory,
        isa=d["isa"],
        family=d.get("family", ""),
        measured=dict(d.get("measured", {})),
    )


def _fastest(model: str, pattern: str, rows: list[Cpu], **kw: Any) -> Cpu:
    """A row that no member of ``rows`` exceeds in any figure (a masked name's bounds)."""
    best = max(rows, key=lambda r: r.flops(True))
    return Cpu(
        model=model,
        pattern=pattern,
        sockets=max(r.sockets for r in rows),
        cores=max(r.cores for r in rows),
        threads=max(r.threads for r in rows),
        boost_hz=max(r.boost_hz for r in rows),
        llc_bytes=max(r.llc_bytes for r in rows),
        memory_bps=max(r.memory_bps for r in rows),
        isa=best.isa,
        **kw,
    )


@functools.cache
def cpus() -> tuple[Cpu, ...]:
    """Every catalogued CPU, most specific first; a masked name's row derived from its
    family's rows."""
    raw = tomllib.loads((HERE / "catalog.toml").read_text(encoding="utf-8"))["cpu"]
    rows = [_row(d) for d in raw if "stands_for" not in d]
    out = []
    for d in raw:
        if "stands_for" not in d:
            out.append(next(r for r in rows if r.model == d["model"]))
            continue
        members = [r for r in rows if r.family == d["stands_for"]]
        out.append(
            _fastest(
                d["model"],
                d["pattern"],
                members,
                stands_for=d["stands_for"],
                measured=dict(d.get("measured", {})),
            )
        )
    return tuple(out)


@functools.cache
def any_cpu() -> Cpu:
    """The bounds of a CPU the catalogue does not know: the fastest it knows, in each
    figure (the most any catalogued CPU does)."""
    return _fastest("an uncatalogued CPU", "", [r for r in cpus() if not r.stands_for])


def cpu(model: str | None) -> Cpu | None:
    """The catalogued row for a CPU model name as the OS reports it, None if unknown."""
    if not model:
        return None
    return next((r for r in cpus() if re.search(r.pattern, model, re.IGNORECASE)), None)


# A result this much faster than torchmark measured on the same catalogued model (its
# reference run) waits for another submitter's: the runs' own ceilings scatter ~2 % between
# machines of one model; 15 % leaves room for a newer torch or driver.
MEASURED_SLACK = 1.15


@dataclass(frozen=True)
class Measured:
    """What torchmark measured on one catalogued model: ceilings by key (``bandwidth``,
    ``matmul:<dtype>``) and the cache a working set must pass to be read from memory."""

    model: str
    ceilings: dict[str, float]
    cache_bytes: float


@functools.cache
def _measured_gpus() -> dict[str, Measured]:
    raw = tomllib.loads((HERE / "catalog.toml").read_text(encoding="utf-8")).get("gpu", [])
    return {d["model"]: Measured(d["model"], dict(d["measured"]), d["l2_mb"] * 2**20) for d in raw}


def measured(model: str | None, accelerator: bool) -> Measured | None:
    """The measured ceilings of a catalogued model (None: none measured, or a masked CPU
    name whose family spans machines 10x apart)."""
    if accelerator:
        spec = datasheet.lookup(model)
        return _measured_gpus().get(spec.model) if spec else None
    row = cpu(model)
    if row is None or row.stands_for or not row.measured:
        return None
    return Measured(row.model, row.measured, row.cache_total)


def known(info: dict[str, Any], accelerator: bool) -> bool:
    """Whether the catalogue knows the device an environment record describes."""
    model = str(info.get("model") or "")
    if accelerator:
        return datasheet.lookup(model, info.get("memory_bytes")) is not None
    return cpu(model) is not None


def claim_refusal(devices: dict[str, Any]) -> str | None:
    """Why a run's device records cannot be the devices they name (one line), else None:
    a CPU with more cores than the catalogued model has in its most sockets (an uncatalogued
    one: than any catalogued CPU)."""
    for name, info in devices.items():
        if not isinstance(info, dict):
            continue
        model = str(info.get("model") or "")
        if (info.get("kind") or name.split(":")[0]) == "cpu":  # a GPU's cores: not counted
            row = cpu(model)
            most = (row or any_cpu()).max_threads
            for key in ("physical_cores", "logical_cores"):
                n = info.get(key)
                if isinstance(n, int) and n > most:
                    what = (
                        f"a {row.model} has at most {most} in {row.sockets} socket(s)"
                        if row
                        else f"no catalogued CPU has more than {most}"
                    )
                    return f"environment.devices.{name}.{key}: {n:,} cores; {what}"
    return None
