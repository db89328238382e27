"""Clock, temperature and power over a run's results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchmark.report.charts.base import Chart, _figure, _rc, _run_prefix, _svg
from torchmark.results import RunRecord


def timeline_rows(telemetry: dict[str, Any] | None) -> list[dict[str, float | None]]:
    """A result's telemetry timeline as rows of {t, clock_mhz, temp_c, power_w}.

    Accepts the telemetry package's ``{"columns": [...], "rows": [[...]]}`` and a plain
    list of dicts.
    """
    tl = (telemetry or {}).get("timeline")
    if isinstance(tl, dict) and "columns" in tl:
        cols = ["t" if c == "t_s" else c for c in tl["columns"]]
        return [dict(zip(cols, row, strict=False)) for row in tl.get("rows", [])]
    if isinstance(tl, list):
        return [dict(x) for x in tl if isinstance(x, dict)]
    return []


def telemetry_timeline(runs: Sequence[RunRecord]) -> Chart:
    """Clock, temperature and power of each device over its results, end to end."""
    title = "Telemetry timeline"
    series: dict[str, list[dict[str, float | None]]] = {}
    bounds: dict[str, list[tuple[float, str]]] = {}
    for run in runs:
        for r in run.results:
            rows = timeline_rows(r.telemetry)
            if not rows:
                continue
            name = _run_prefix(runs, run) + r.device
            seq = series.setdefault(name, [])
            offset = (seq[-1]["t"] or 0.0) + 0.5 if seq else 0.0
            bounds.setdefault(name, []).append((offset, f"{r.workload}/{r.variant}"))
            seq += [{**row, "t": (row.get("t") or 0.0) + offset} for row in rows]
    if not series:
        return Chart("telemetry", title, None, "no telemetry recorded in these runs")
    fields = [
        ("clock_mhz", "clock (MHz)"),
        ("temp_c", "temperature (°C)"),
        ("power_w", "power (W)"),
    ]
    present = [
        f for f in fields if any(row.get(f[0]) is not None for s in series.values() for row in s)
    ]
    if not present:
        return Chart("telemetry", title, None, "telemetry has no clock, temperature or power")
    with _rc():
        fig, axes = _figure(len(present), 1, height=1.6 * len(present) + 0.6, sharex=True)
        for ax, (field, label) in zip(axes[:, 0], present, strict=True):
            for name, rows in series.items():
                pts = [(row["t"], row[field]) for row in rows if row.get(field) is not None]
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name, linewidth=1.2)
                for start, _ in bounds[name][1:]:
                    ax.axvline(start, color="grey", linewidth=0.5, linestyle=":")
            ax.set_ylabel(label)
        axes[-1][0].set_xlabel("seconds of measurement (results back to back)")
        axes[0][0].legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart(
        "telemetry",
        title,
        _svg(fig),
        "dotted lines separate results; a clock drop with rising temperature is throttling",
    )
