"""Rows built once for every view of a run (terminal table, HTML, Markdown)."""

from __future__ import annotations

from dataclasses import dataclass

from torchmark import format as fmt
from torchmark.judge.load import COMPETING_CORES
from torchmark.results import Ceiling, RunRecord, is_host


@dataclass(frozen=True)
class CeilingRow:
    """One measured ceiling, its figures already formatted."""

    ceiling: Ceiling
    device: str
    key: str
    measured: str
    theoretical: str  # fmt.DASH when there is no datasheet figure
    pct: str  # measured as % of theoretical, or fmt.DASH
    method: str
    source: str  # where the theoretical figure comes from, or ""
    busy_cores: float | None  # other processes' load while measuring: the ceiling may be low
    origin: str = ""  # where it came from: measured in this run, or reused (``origin``)
    stale: tuple[str, ...] = ()  # why a reused ceiling is stale (``stale_reasons``)

    @property
    def caveat(self) -> str:
        if self.busy_cores is None:
            return ""
        return f"measured while other processes used {self.busy_cores:.1f} cores: may be low"


# A reused ceiling older than this is stale: drivers, BIOS settings and DIMMs change, and a
# cloud machine of the same fingerprint may be another host.
STALE_DAYS = 7


def reused(c: Ceiling, record: RunRecord) -> bool:
    """Whether ``record`` took ``c`` from the ceiling cache: it was measured before the run
    started (a resumed run's own ceilings were measured after)."""
    p = c.provenance
    return p is not None and p.measured_utc < record.created_utc


def _load(cores: float | None) -> str:
    return "load not recorded" if cores is None else f"other processes {cores:.1f} cores"


def origin(c: Ceiling, record: RunRecord) -> str:
    """``measured in this run (other processes 0.1 cores)`` or ``reused from run X,
    measured 2026-11-26 04:18 UTC (other processes 0.1 cores, torch 2.13.0)``; "" for a
    ceiling stored before torchmark recorded where it came from."""
    p = c.provenance
    if p is None:
        return ""
    if not reused(c, record):
        return f"measured in this run ({_load(p.other_cores)})"
    run = f"run {p.run_id}" if p.run_id else "a run that was not stored"
    torch = f", torch {p.torch}" if p.torch else ""
    return (
        f"reused from {run}, measured {p.measured_utc:%Y-%m-%d %H:%M} UTC "
        f"({_load(p.other_cores)}{torch})"
    )


def stale_reasons(c: Ceiling, record: RunRecord) -> list[str]:
    """Why a reused ceiling may no longer be this machine's: measured under other load,
    more than ``STALE_DAYS`` days before the run, or with another torch or torchmark."""
    p = c.provenance
    if p is None or not reused(c, record):
        return []
    out = []
    if p.other_cores is not None and p.other_cores >= COMPETING_CORES:
        out.append(f"measured while other processes used {p.other_cores:.1f} cores")
    age = (record.created_utc - p.measured_utc).total_seconds() / 86400
    if age > STALE_DAYS:
        out.append(f"measured {age:.0f} days before this run (stale after {STALE_DAYS})")
    torch = (record.environment.get("software") or {}).get("torch")
    if p.torch and torch and p.torch != torch:
        out.append(f"measured with torch {p.torch}, this run has {torch}")
    if p.tool_version and record.tool_version and p.tool_version != record.tool_version:
        out.append(f"measured by torchmark {p.tool_version}, this run is {record.tool_version}")
    return out


def reuse_notes(record: RunRecord) -> list[str]:
    """One line per source of reused ceilings (by default under the ceilings table): where
    they came from, why they are stale where they are, and the option that measures them
    again. A run under other load against quiet ceilings says so too: its percentages are
    of the machine's quiet limits."""
    groups: dict[tuple[str, str], list[Ceiling]] = {}
    for c in record.ceilings:
        if reused(c, record):
            groups.setdefault((c.device, origin(c, record)), []).append(c)
    out = []
    for (device, said), cs in groups.items():
        stale = list(dict.fromkeys(w for c in cs for w in stale_reasons(c, record)))
        loads = [
            float(x)
            for r in record.results
            if r.device == device
            and isinstance(x := (r.telemetry or {}).get("other_cores"), int | float)
        ]
        then = cs[0].provenance.other_cores if cs[0].provenance else None
        if loads and max(loads) >= COMPETING_CORES and (then or 0.0) < COMPETING_CORES:
            stale.append(
                f"this run measured under other load (up to {max(loads):.1f} cores), its "
                "ceilings quiet: its percentages are of the machine's quiet limits"
            )
        line = f"ceilings of {device} {said}"
        if stale:
            line += f"; stale: {'; '.join(stale)}"
        out.append(f"{line}; `torchmark run --remeasure-ceilings` measures them again")
    return out


def devices_of(record: RunRecord) -> list[str]:
    """Devices in the run, the host CPU first (the speedup denominator), then as recorded."""
    seen = list(dict.fromkeys(r.device for r in record.results))
    seen += [c.device for c in record.ceilings if c.device not in seen]
    return sorted(seen, key=lambda d: not is_host(d))


def ceiling_rows(record: RunRecord) -> list[CeilingRow]:
    """The run's ceilings, host first, then by key."""
    order = {d: i for i, d in enumerate(devices_of(record))}
    rows = []
    for c in sorted(record.ceilings, key=lambda c: (order.get(c.device, 99), c.key)):
        busy = c.details.get("competing_load_cores")
        rows.append(
            CeilingRow(
                ceiling=c,
                device=c.device,
                key=c.key,
                measured=fmt.ceiling_value(c),
                theoretical=fmt.ceiling_value(c, c.theoretical) if c.theoretical else fmt.DASH,
                pct=fmt.pct(c.pct_of_theoretical),
                method=c.method,
                source=c.theoretical_source or "",
                busy_cores=float(busy) if isinstance(busy, int | float) else None,
                origin=origin(c, record),
                stale=tuple(stale_reasons(c, record)),
            )
        )
    return rows
