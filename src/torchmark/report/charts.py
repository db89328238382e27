"""Charts of stored runs as inline SVG (matplotlib, Agg; text kept as text).

Each function returns a ``Chart``: the SVG, or ``None`` and one line saying why there is
nothing to draw. Pure functions of RunRecords: nothing here measures.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchmark.devices import is_host
from torchmark.report import format as fmt
from torchmark.report.table import case_key, devices_of
from torchmark.results import Result, RunRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH, HEIGHT = 8.0, 3.8  # inches; the page scales the SVG to its column width
BATCH_KEYS = ("batch", "batch_size")
RC: Any = {  # matplotlib types rc keys as Literals; plain strings here
    "svg.fonttype": "none",  # text stays text: the browser's sans-serif draws it
    "svg.hashsalt": "torchmark",  # stable element ids: the same runs give the same file
    "font.family": "sans-serif",
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.frameon": False,
    "legend.fontsize": 8,
    # Names come from users ("$\\frac{a$" as a workload name crashed mathtext): every
    # label is drawn as written, never parsed as TeX.
    "text.parse_math": False,
    "text.usetex": False,
}


@contextlib.contextmanager
def _rc() -> Iterator[None]:
    """matplotlib's settings for one chart. matplotlib (0.6-0.7 s to import here) loads on the
    first chart drawn, so commands that draw none never pay for it."""
    import matplotlib

    matplotlib.use("Agg")  # no display, no GUI toolkit: reports render on headless machines
    with matplotlib.rc_context(RC):
        yield


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    svg: str | None
    note: str = ""  # why there is no chart, or how to read it


def _svg(fig: Figure) -> str:
    buf = io.StringIO()
    with _rc():
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    # Natural size (width/height in pt) kept: charts show at one text size, and CSS
    # (max-width: 100 %; height: auto) shrinks a wide one to the page.
    return '<svg class="chart"' + text[text.index("<svg") + 4 :]


def _figure(
    nrows: int = 1, ncols: int = 1, height: float = HEIGHT, sharex: bool = False
) -> tuple[Figure, Any]:
    from matplotlib.figure import Figure

    with _rc():
        fig = Figure(figsize=(WIDTH, height))
        axes = fig.subplots(nrows, ncols, squeeze=False, sharex=sharex)
    return fig, axes


def _run_prefix(runs: Sequence[RunRecord], run: RunRecord) -> str:
    return f"{run.run_id} " if len(runs) > 1 else ""


def _batch(r: Result) -> int | None:
    for k in BATCH_KEYS:
        v = r.params.get(k)
        if isinstance(v, int | float) and v > 0:
            return int(v)
    return None


def throughput_vs_batch(runs: Sequence[RunRecord]) -> Chart:
    title = "Throughput vs batch size"
    series: dict[str, list[tuple[int, float]]] = {}
    units: set[str] = set()
    for run in runs:
        for r in run.results:
            b, rate = _batch(r), r.rate(r.headline)
            if b is None or rate is None:
                continue
            rest = {k: v for k, v in r.params.items() if k not in BATCH_KEYS}
            label = (
                f"{_run_prefix(runs, run)}{r.device} {r.workload}/{r.variant} {fmt.params(rest)}"
            )
            series.setdefault(label.strip(), []).append((b, rate))
            units.add(fmt.base_unit(r))
    series = {k: sorted(v) for k, v in series.items() if len(v) >= 2}
    if not series:
        return Chart("batch", title, None, "no workload in these runs swept a batch size")
    with _rc():
        fig, axes = _figure()
        ax: Axes = axes[0][0]
        for label, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel(" / ".join(sorted(units)))
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart("batch", title, _svg(fig), "median throughput; both axes logarithmic")


def speedup_per_workload(runs: Sequence[RunRecord]) -> Chart:
    """Geometric mean over each workload's cases of GPU rate / CPU rate, per accelerator."""
    title = "Speedup over the CPU, per workload"
    bars: dict[str, dict[str, float]] = {}  # workload -> device label -> geomean
    for run in runs:
        by_case: dict[Any, dict[str, Result]] = {}
        for r in run.results:
            by_case.setdefault(case_key(r), {})[r.device] = r
        ratios: dict[tuple[str, str], list[float]] = {}
        for key, per_dev in by_case.items():
            host = next((r for d, r in per_dev.items() if is_host(d) and r.ok), None)
            if host is None:
                continue
            for d, r in per_dev.items():
                a, b = r.rate(r.headline), host.rate(host.headline)
                if not is_host(d) and a and b:
                    ratios.setdefault((key[0], _run_prefix(runs, run) + d), []).append(a / b)
        for (w, d), xs in ratios.items():
            bars.setdefault(w, {})[d] = math.exp(sum(map(math.log, xs)) / len(xs))
    if not bars:
        return Chart(
            "speedup", title, None, "no case was measured on both the CPU and an accelerator"
        )
    devices = sorted({d for v in bars.values() for d in v})
    with _rc():
        fig, axes = _figure()
        ax: Axes = axes[0][0]
        width = 0.8 / len(devices)
        names = list(bars)
        for j, d in enumerate(devices):
            xs = [i + j * width for i, w in enumerate(names) if d in bars[w]]
            ys = [bars[w][d] for w in names if d in bars[w]]
            rects = ax.bar(xs, ys, width, label=d)
            ax.bar_label(rects, labels=[fmt.ratio(y) for y in ys], fontsize=8)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xticks([i + width * (len(devices) - 1) / 2 for i in range(len(names))], names)
        ax.set_ylabel("× CPU throughput (geometric mean)")
        ax.legend()
    return Chart(
        "speedup",
        title,
        _svg(fig),
        "each bar: geometric mean over the workload's cases of accelerator / CPU median rate; "
        "below 1× the CPU is faster",
    )


def break_even(runs: Sequence[RunRecord]) -> Chart:
    """GPU speedup over the CPU by batch, per view of time, from RunRecord.extra["break_even"]."""
    title = "CPU-vs-GPU break-even"
    curves: dict[str, list[tuple[int, float]]] = {}
    marks: list[tuple[str, int | str]] = []
    notes = []
    for run in runs:
        be = run.extra.get("break_even")
        if not be:
            note = run.extra.get("break_even_note")
            if note:
                notes.append(f"{run.run_id}: {note}")
            continue
        for gpu, entry in be.items():
            if not isinstance(entry, dict):
                continue
            label = f"{_run_prefix(runs, run)}{entry.get('label', gpu)}"
            for p in entry.get("per_batch", []):
                if p.get("speedup"):
                    curves.setdefault(f"{label} ({p.get('mode', '?')})", []).append(
                        (int(p["batch"]), float(p["speedup"]))
                    )
            for mode in ("e2e", "device"):
                if mode in entry:
                    marks.append((f"{label} {mode}", entry[mode]))
    if not curves:
        why = "; ".join(notes) or "no user-model run with a CPU-vs-GPU batch sweep (break_even)"
        return Chart("break_even", title, None, why)
    with _rc():
        fig, axes = _figure()
        ax: Axes = axes[0][0]
        for label, pts in curves.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.annotate(
            "GPU faster ↑ / CPU faster ↓",
            (0.01, 1.0),
            xycoords=("axes fraction", "data"),
            fontsize=8,
            va="bottom",
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size")
        ax.set_ylabel("GPU speedup over CPU")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    words = "; ".join(f"{n}: {_be_words(v)}" for n, v in marks)
    return Chart("break_even", title, _svg(fig), f"break-even batch: {words}")


def _be_words(v: int | str) -> str:
    return f"from batch {v}" if isinstance(v, int) else str(v)


def roofline(runs: Sequence[RunRecord]) -> Chart:
    """Each result at its arithmetic intensity, under the measured bandwidth and compute roofs."""
    title = "Roofline (measured ceilings)"
    panels: list[tuple[str, RunRecord, list[Result]]] = []
    for run in runs:
        for d in devices_of(run):
            pts = [
                r
                for r in run.results
                if r.device == d and r.ok and r.work.flops > 0 and r.work.bytes > 0
            ]
            if pts:
                panels.append((_run_prefix(runs, run) + d, run, pts))
    if not panels:
        return Chart("roofline", title, None, "no result declares both FLOPs and bytes")
    with _rc():
        fig, axes = _figure(1, len(panels), height=HEIGHT + 0.4)
        for ax, (label, run, pts) in zip(axes[0], panels, strict=True):
            device = pts[0].device
            xs = [r.work.flops / r.work.bytes for r in pts]
            ys = [r.rate("flops") or math.nan for r in pts]
            bw = run.ceiling(device, "bandwidth")
            peaks = [c for c in run.ceilings if c.device == device and c.key.startswith("matmul:")]
            lo, hi = min(min(xs) / 4, 0.05), max(xs) * 4
            if bw is not None:
                hi = max([hi, *(4 * c.value / bw.value for c in peaks)])
                for c in peaks:
                    ridge = c.value / bw.value
                    ax.plot(
                        [lo, ridge, hi],
                        [lo * bw.value, c.value, c.value],
                        color="grey",
                        linewidth=1,
                    )
                    label_c = f"{fmt.ceiling_label(c)} {fmt.ceiling_value(c)}"
                    ax.annotate(label_c, (hi, c.value), ha="right", va="bottom", fontsize=7)
                if not peaks:  # no compute ceiling measured: the bandwidth slope alone
                    ax.plot([lo, hi], [lo * bw.value, hi * bw.value], color="grey", linewidth=1)
                ax.annotate(
                    f"bw {fmt.ceiling_value(bw)}",
                    (lo * 1.5, lo * 1.5 * bw.value),
                    fontsize=7,
                    va="bottom",
                )
            for w in dict.fromkeys(r.workload for r in pts):
                sel = [(x, y) for x, y, r in zip(xs, ys, pts, strict=True) if r.workload == w]
                ax.scatter([s[0] for s in sel], [s[1] for s in sel], label=w, zorder=3, s=18)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_title(f"{label} {_model(run, device)}".strip(), fontsize=9)
            ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        axes[0][0].set_ylabel("achieved FLOP/s (median)")
        axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart(
        "roofline",
        title,
        _svg(fig),
        "grey lines: measured memory bandwidth × intensity, capped by each measured matmul "
        "peak; a point's distance below its roof is the headroom",
    )


def _model(run: RunRecord, device: str) -> str:
    info = run.environment.get("devices", {}).get(device, {})
    return str(info.get("model", "")) if isinstance(info, dict) else ""


def precision_bars(runs: Sequence[RunRecord]) -> Chart:
    """Best throughput per precision, relative to float32, per workload and device."""
    title = "Precision comparison"
    groups: dict[str, dict[str, float]] = {}
    for run in runs:
        for r in run.results:
            key = next((k for k in fmt.PRECISION_KEYS if k in r.params), None)
            rate = r.rate(r.headline)
            if key is None or rate is None:
                continue
            g = f"{_run_prefix(runs, run)}{r.workload}/{r.variant} {r.device}"
            p = fmt.DTYPE_SHORT.get(str(r.params[key]), str(r.params[key]))
            best = groups.setdefault(g, {})
            best[p] = max(best.get(p, 0.0), rate)
    groups = {g: v for g, v in groups.items() if len(v) >= 2}
    if not groups:
        return Chart("precision", title, None, "no workload ran at more than one precision")
    precisions = sorted({p for v in groups.values() for p in v})
    with _rc():
        fig, axes = _figure(height=max(2.0, 0.45 * len(groups) * len(precisions) / 2 + 1))
        ax: Axes = axes[0][0]
        h = 0.8 / len(precisions)
        names = list(groups)
        for j, p in enumerate(precisions):
            ys = [i + j * h for i, g in enumerate(names) if p in groups[g]]
            rel = [
                groups[g][p] / groups[g].get("fp32", max(groups[g].values()))
                for g in names
                if p in groups[g]
            ]
            rects = ax.barh(ys, rel, h, label=p)
            ax.bar_label(rects, labels=[fmt.ratio(x) for x in rel], fontsize=7, padding=2)
        ax.set_yticks([i + h * (len(precisions) - 1) / 2 for i in range(len(names))], names)
        ax.invert_yaxis()
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel("best throughput relative to fp32 (or to the fastest precision)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart("precision", title, _svg(fig), "best over the other parameters of each case")


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


def all_charts(runs: Sequence[RunRecord]) -> list[Chart]:
    return [
        throughput_vs_batch(runs),
        speedup_per_workload(runs),
        break_even(runs),
        roofline(runs),
        precision_bars(runs),
        telemetry_timeline(runs),
    ]
