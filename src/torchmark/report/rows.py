"""Rows built once for every view of a run (terminal table, HTML, Markdown)."""

from __future__ import annotations

from dataclasses import dataclass

from torchmark import format as fmt
from torchmark.devices import is_host
from torchmark.results import Ceiling, RunRecord


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

    @property
    def caveat(self) -> str:
        if self.busy_cores is None:
            return ""
        return f"measured while other processes used {self.busy_cores:.1f} cores: may be low"


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
            )
        )
    return rows
