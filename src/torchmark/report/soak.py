"""Terminal view of `torchmark soak`: throughput per time window beside the clocks, heat,
power and throttle reasons of the same span, a sparkline and the trend's verdict; a pure
function of the stored RunRecord."""

from __future__ import annotations

from rich.console import RenderableType
from rich.text import Text

from torchmark import format as fmt
from torchmark.report.layout import Col, FitTable
from torchmark.results import RunRecord
from torchmark.results.payloads import SoakPayload

__all__ = ["soak_view", "sparkline"]

LEVEL_STYLE = {"ok": "green", "warn": "yellow", "invalid": "bold red"}
BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None]) -> str:
    """Unicode bars scaled from 0 to the largest value (a fall reads as a falling bar)."""
    top = max((v for v in values if v is not None), default=0.0)
    if top <= 0:
        return ""
    return "".join(
        " " if v is None else BARS[min(len(BARS) - 1, int(v / top * (len(BARS) - 1) + 0.5))]
        for v in values
    )


# telemetry columns of the soak table: (window key, header, what to say when no window has it)
SOAK_SENSORS = (
    ("clock_mhz", "clock MHz", "clock"),
    ("temp_c", "temp °C", "temperature"),
    ("power_w", "power W", "power"),
)


# The throughput bar's full width: with every sensor and the throttle reasons the table
# takes exactly 80 columns.
BAR = 10


def soak_view(record: RunRecord) -> list[RenderableType]:
    """Throughput per window beside the telemetry of the same span, in 80 columns; a
    sensor no window read is said once under the table instead of a column of dashes."""
    parts: list[RenderableType] = []
    s = record.payload.soak if isinstance(record.payload, SoakPayload) else None
    if s is None:
        return [Text("this run has no soak windows (it stopped before the first was stored)")]
    wins = s.windows
    unit = s.unit or ""
    parts.append(Text.assemble("Soak of ", (s.case, "bold"), f" for {s.elapsed_s:.0f} s"))
    sensors = [x for x in SOAK_SENSORS if any(getattr(w, x[0]) is not None for w in wins)]
    # FitTable: at 60 columns rich cut every header ("secon…", "temp…") and dropped the
    # throttle reasons; here the bar gives way first (the sparkline below keeps the
    # shape), then each window stacks over its figures.
    t = FitTable(
        Col("seconds", justify="right"),
        Col(unit, justify="right"),
        Col("", drop=1),
        *(Col(header, justify="right") for _, header, _ in sensors),
        Col("throttle", wrap=12, vital=True),
    )
    top = max((w.rate or 0.0 for w in wins), default=0.0) or 1.0
    digits = 0 if s.elapsed_s >= 60 else 1
    for w in wins:
        rate = w.rate
        t.row(
            f"{w.t0_s:.{digits}f}–{w.t1_s:.{digits}f}",
            fmt.DASH if rate is None else fmt.sig(rate, 3),
            "█" * round(BAR * (rate or 0.0) / top),
            *(_num(getattr(w, key)) for key, _, _ in sensors),
            # a no-break space: "100 %" never wraps apart
            ", ".join(f"{k} {v}\u00a0%" for k, v in w.throttle.items()),
        )
    parts.append(t)
    missing = [sensor[2] for sensor in SOAK_SENSORS if sensor not in sensors]
    if missing:
        parts.append(f"not read on this device: {', '.join(missing)} (no sensor exposed)")
    parts.append(f"throughput over time: {sparkline([w.rate for w in wins])}")
    v = record.verdict
    if v is not None:
        parts.append(Text.assemble("verdict: ", (v.level, LEVEL_STYLE[v.level])))
        for reason in v.reasons:
            parts.append(f"  - {reason}")
    return parts


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"
