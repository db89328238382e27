"""Clock, temperature and power over a run's results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
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


OTHER = "other_cores"


@dataclass
class Timelines:
    """Each device's telemetry over its results, back to back (per run where several)."""

    series: dict[str, list[dict[str, float | None]]] = field(default_factory=dict)
    bounds: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # result starts
    cores: dict[str, int] = field(default_factory=dict)  # logical cores, where recorded
    means: set[str] = field(default_factory=set)  # other load as each result's mean


def timelines(runs: Sequence[RunRecord]) -> Timelines:
    """Each result's timeline after the one before it on its device. A run stored before
    its timeline had the other load row by row has each result's mean instead."""
    out = Timelines()
    for run in runs:
        for r in run.results:
            rows = timeline_rows(r.telemetry)
            if not rows:
                continue
            name = _run_prefix(runs, run) + r.device
            tel = r.telemetry or {}
            mean = tel.get(OTHER)
            if isinstance(mean, int | float) and all(row.get(OTHER) is None for row in rows):
                rows = [{**row, OTHER: float(mean)} for row in rows]
                out.means.add(name)
            if isinstance(tel.get("logical_cores"), int):
                out.cores[name] = tel["logical_cores"]
            seq = out.series.setdefault(name, [])
            # a timeline starts before its result's first sample (set-up: -10 s for a model):
            # each follows the one before, never drawn back over it
            first = rows[0].get("t") or 0.0
            offset = (seq[-1]["t"] or 0.0) + 0.5 - first if seq else 0.0
            out.bounds.setdefault(name, []).append((offset + first, f"{r.workload}/{r.variant}"))
            seq += [{**row, "t": (row.get("t") or 0.0) + offset} for row in rows]
    return out


def telemetry_timeline(runs: Sequence[RunRecord]) -> Chart:
    """Clock, temperature and power of each device over its results, end to end, and the
    cores other processes used meanwhile (the run's own never count): on a shared machine
    that load, not the device, often moves the figures."""
    title = "Telemetry timeline"
    tls = timelines(runs)
    series, bounds, cores, means = tls.series, tls.bounds, tls.cores, tls.means
    if not series:
        return Chart("telemetry", title, None, "no telemetry recorded in these runs")
    fields = [
        ("clock_mhz", "clock (MHz)"),
        ("temp_c", "temperature (°C)"),
        ("power_w", "power (W)"),
        (OTHER, "other load (cores)"),
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
                line = name
                if field == OTHER:
                    of = f" of {cores[name]}" if name in cores else ""
                    each = ", mean per result" if name in means else ""
                    line = f"{name}: other processes' load\n(cores{of}{each})"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=line, linewidth=1.2)
                for start, _ in bounds[name][1:]:
                    ax.axvline(start, color="grey", linewidth=0.5, linestyle=":")
            ax.set_ylabel(label)
            if field == OTHER:
                highest = max(
                    [*cores.values()]
                    + [row[OTHER] or 0.0 for s in series.values() for row in s if row.get(OTHER)]
                )
                ax.set_ylim(0, max(highest, 0.1) * 1.05)
        axes[-1][0].set_xlabel("seconds of measurement (results back to back)")
        axes[0][0].legend(loc="upper left", bbox_to_anchor=(1.01, 1))
        if present[-1][0] == OTHER and len(present) > 1:  # what the line is, beside it
            axes[-1][0].legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart(
        "telemetry",
        title,
        _svg(fig),
        "dotted lines separate results; a clock drop with rising temperature is throttling; "
        "other load: the cores processes outside the run used (its ranks, workers and "
        "children never count), which slows a CPU result and widens its spread",
    )
