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

from torchmark import format as fmt
from torchmark import reference
from torchmark.devices import is_host
from torchmark.report.table import case_key, devices_of
from torchmark.results import Ceiling, Result, RunRecord
from torchmark.results.payloads import BreakEvenFindings, ProfilePayload

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


def _tick_text(x: float, base: int) -> str:
    if base == 10 and x >= 1e3:
        scale, prefix = next(sp for sp in fmt.SI_PREFIXES if x >= sp[0])
        return f"{x / scale:g} {prefix}"
    return f"{x:g}"


def _log(ax: Axes, which: str, base: int = 10) -> None:
    """A log axis labelled in plain text (100, 1 k, 10 G): matplotlib's default labels are
    TeX ($10^{2}$), which chart text drawn as written would show raw."""
    from matplotlib import ticker

    class Plain(ticker.Formatter):
        def __init__(self, minor: bool) -> None:
            self.minor = minor

        def __call__(self, x: float, pos: int | None = None) -> str:
            if self.minor:  # minor ticks named only where the axis spans under ~1.5 decades
                lo, hi = sorted(self.axis.get_view_interval()) if self.axis else (0, 0)
                if not (lo > 0 and hi / lo < 30):
                    return ""
            return _tick_text(x, base)

    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=base)
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_formatter(Plain(minor=False))
    axis.set_minor_formatter(Plain(minor=True))


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
                f"{_run_prefix(runs, run)}{r.device} {fmt.case_label(r.variant, rest, r.workload)}"
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
        _log(ax, "x", base=2)
        _log(ax, "y")
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
        _log(ax, "y")
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
    """GPU speedup over the CPU by batch, per view of time, from a model run's break-even."""
    title = "CPU-vs-GPU break-even"
    curves: dict[str, list[tuple[int, float]]] = {}
    marks: list[tuple[str, int | str]] = []
    notes = []
    for run in runs:
        if not isinstance(run.payload, BreakEvenFindings):
            continue
        be = run.payload.break_even
        if not be:
            note = run.payload.break_even_note
            if note:
                notes.append(f"{run.run_id}: {note}")
            continue
        for gpu, entry in be.items():
            label = f"{_run_prefix(runs, run)}{entry.label or gpu}"
            for p in entry.per_batch:
                if p.speedup:
                    curves.setdefault(f"{label} ({p.mode})", []).append((p.batch, p.speedup))
            marks.append((f"{label} e2e", entry.e2e))
            marks.append((f"{label} device", entry.device))
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
        _log(ax, "x", base=2)
        _log(ax, "y")
        ax.set_xlabel("batch size")
        ax.set_ylabel("GPU speedup over CPU")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    words = "; ".join(f"{n}: {_be_words(v)}" for n, v in marks)
    return Chart("break_even", title, _svg(fig), f"break-even batch: {words}")


def _be_words(v: int | str) -> str:
    return f"from batch {v}" if isinstance(v, int) else str(v)


def _point_labels(pts: Sequence[Result]) -> list[str]:
    """Each point's workload, plus the variant and parameters that tell it from the same
    workload's other points on the panel."""
    out = []
    for r in pts:
        same = [x for x in pts if x.workload == r.workload]
        # a user model is named by its spec: dir/file.py:factory reads as file.py:factory
        words = [r.workload.rsplit("/", 1)[-1]]
        if len({x.variant for x in same}) > 1:
            words.append(r.variant)
        varying = {
            k: v
            for k, v in r.params.items()
            if len({str(x.params.get(k)) for x in same}) > 1 and str(v) != r.variant
        }
        words.append(fmt.case_label("", varying))
        out.append(" ".join(w for w in words if w))
    return out


def roofline(runs: Sequence[RunRecord]) -> Chart:
    """Each result at its arithmetic intensity, under the measured bandwidth and compute roofs.

    Models count their FLOPs but (gpt2 decode aside) not their bytes, so their intensity is
    unknown: they stand in a strip right of the roofline at their achieved FLOP/s, against
    the same compute roofs."""
    title = "Roofline (measured ceilings)"
    panels: list[tuple[str, RunRecord, list[Result], list[Result]]] = []
    no_flops: list[str] = []
    for run in runs:
        for d in devices_of(run):
            mine = [r for r in run.results if r.device == d and r.ok]
            placed = [r for r in mine if r.work.flops > 0 and r.work.bytes > 0]
            strip = [r for r in mine if r.work.flops > 0 and not r.work.bytes > 0]
            no_flops += [f"{case_words(r)} · {d}" for r in mine if not r.work.flops > 0]
            peak = any(c.device == d and c.key.startswith("matmul:") for c in run.ceilings)
            if placed or (strip and peak):  # FLOP/s alone, with no roof, is no roofline
                panels.append((_run_prefix(runs, run) + d, run, placed, strip))
    if not panels:
        return Chart(
            "roofline",
            title,
            None,
            "no result declares both its FLOPs and its bytes, nor stands against a measured "
            "matmul peak",
        )
    workloads = list(dict.fromkeys(r.workload for p in panels for r in [*p[2], *p[3]]))
    with _rc():
        import matplotlib as mpl
        from matplotlib.figure import Figure

        cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
        colour = {w: cycle[i % len(cycle)] for i, w in enumerate(workloads)}
        ratios: list[float] = []
        for p in panels:
            ratios += [4.0, 1.6] if p[3] else [4.0]
        fig = Figure(figsize=(WIDTH * max(1, len(panels)) ** 0.5, HEIGHT + 0.6))
        grid = fig.add_gridspec(1, len(ratios), width_ratios=ratios, wspace=0.2)
        col = 0
        for label, run, placed, strip in panels:
            ax: Axes = fig.add_subplot(grid[0, col])
            col += 1
            device = (placed or strip)[0].device
            bw = run.ceiling(device, "bandwidth")
            peaks = [c for c in run.ceilings if c.device == device and c.key.startswith("matmul:")]
            xs = [r.work.flops / r.work.bytes for r in placed]
            lo, hi = _roof(ax, xs, peaks, bw)
            ys = [r.rate("flops") or math.nan for r in placed]
            span = [*ys, *(c.value for c in peaks)]
            _labelled(
                ax,
                [
                    (x, y, text, colour[r.workload], 18.0)
                    for r, x, y, text in zip(placed, xs, ys, _point_labels(placed), strict=True)
                ],
                lo,
                hi,
                span,
            )
            ax.set_title(f"{label} {_model(run, device)}".strip(), fontsize=9)
            ax.set_xlabel("arithmetic intensity (FLOP/byte)")
            if col == 1:
                ax.set_ylabel("achieved FLOP/s (median)")
            if not strip:
                continue
            side: Axes = fig.add_subplot(grid[0, col], sharey=ax)
            col += 1
            for c in peaks:
                side.axhline(c.value, color="grey", linewidth=1, linestyle="--")
            ys = [r.rate("flops") or math.nan for r in strip]
            tops = [c.value for c in peaks] + [y for y in ys if math.isfinite(y)]
            for r, y, text, ty in zip(
                strip, ys, _point_labels(strip), _spread(ys, tops), strict=True
            ):
                side.scatter([0.12], [y], color=colour[r.workload], zorder=3, s=18, marker="D")
                side.annotate(
                    text,
                    (0.12, y),
                    xytext=(0.3, ty),
                    fontsize=6.5,
                    va="center",
                    arrowprops={"arrowstyle": "-", "color": "#999", "lw": 0.5},
                )
            side.set_xlim(0, 1)
            side.set_xticks([])
            side.tick_params(axis="y", labelleft=False)
            side.grid(axis="x", visible=False)
            side.set_xlabel("models:\nbytes not counted")
    note = (
        "grey lines: measured memory bandwidth × intensity, capped by each measured matmul "
        "peak; a point's distance below its roof is the headroom. Diamonds: results that "
        "count FLOPs but not bytes (models), at their achieved FLOP/s"
    )
    if no_flops:
        note += f". Not drawn, no FLOP count: {_listed(no_flops)}"
    return Chart("roofline", title, _svg(fig), note)


def _spread(ys: Sequence[float], span: Sequence[float]) -> list[float]:
    """Label heights for points at ``ys`` on a log axis covering ``span``: in the points'
    order, at least ~6 % of the axis apart, so stacked labels do not overprint."""
    finite = [y for y in span if y > 0 and math.isfinite(y)]
    if not finite:
        return list(ys)
    gap = max(0.08, 0.06 * (math.log10(max(finite)) - math.log10(min(finite))))
    order = sorted(range(len(ys)), key=lambda i: ys[i] if math.isfinite(ys[i]) else 0.0)
    out = list(ys)
    last = -math.inf
    for i in order:
        if not (ys[i] > 0 and math.isfinite(ys[i])):
            continue
        at = max(math.log10(ys[i]), last + gap)
        out[i], last = 10**at, at
    return out


def _listed(items: list[str], most: int = 4) -> str:
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


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


MINE = "#d9480f"  # this machine's rows and bars
KIND_COLOURS = {"gpu": "#4c78a8", "cpu": "#72b7b2", "unknown": "#9aa0a6"}
ABOVE = "#b3261e"  # above a measured ceiling: impossible, a measurement error


def seed_table(run: RunRecord) -> Chart:
    """This machine's ``seed-add as-published`` rate among the seed blog's 2023 rows (and
    any committed reference runs): the ranking of ``compare --reference seed-2023``, drawn."""
    title = "This machine in the seed blog's 2023 table"
    ref = reference.load(reference.SEED_SET)
    mine = reference.seed_rows(run)
    if not mine:
        return Chart(
            "seed_table",
            title,
            None,
            f"no {reference.SEED_WORKLOAD} {reference.SEED_VARIANT} result at the blog's size "
            f"to place (`torchmark run --workload {reference.SEED_WORKLOAD}`)",
        )
    rows = reference.placed(ref, mine)
    with _rc():
        from matplotlib.patches import Patch

        fig, axes = _figure(height=0.3 * len(rows) + 1.2)
        ax: Axes = axes[0][0]
        ys = range(len(rows))
        colours = [MINE if r.this_machine else KIND_COLOURS.get(r.device_type) for r in rows]
        bars = ax.barh(ys, [r.value for r in rows], color=colours, height=0.7)
        for bar, r in zip(bars, rows, strict=True):
            if r.implausible:
                bar.set_hatch("///")
                bar.set_alpha(0.45)
        labels = [
            f"{fmt.sig(r.value) if r.this_machine else f'{r.value:g}'} it/s"
            + (f" · {fmt.si(r.implied_bytes_per_s, 'B/s')}" if r.implied_bytes_per_s else "")
            + (" · implausible" if r.implausible else "")
            for r in rows
        ]
        ax.bar_label(bars, labels=labels, fontsize=7.5, padding=3)
        names = [
            f"▶ {r.hardware} (this machine)"
            if r.this_machine
            else r.hardware + (f" [{r.source}]" if r.source != ref.name else "")
            for r in rows
        ]
        ax.set_yticks(list(ys), names)
        for tick, r in zip(ax.get_yticklabels(), rows, strict=True):
            if r.this_machine:
                tick.set_color(MINE)
                tick.set_fontweight("bold")
        ax.invert_yaxis()  # fastest at the top, as the ranking reads
        _log(ax, "x")
        lo, hi = min(r.value for r in rows), max(r.value for r in rows)
        ax.set_xlim(lo / 2, hi * 6)  # room for the value labels right of the longest bar
        ax.set_xlabel(f"{ref.unit} of the blog's loop (log scale)")
        ax.grid(axis="y", visible=False)
        handles = [
            Patch(color=MINE, label="this machine"),
            Patch(color=KIND_COLOURS["gpu"], label="GPU, another machine"),
            Patch(color=KIND_COLOURS["cpu"], label="CPU, another machine"),
            Patch(facecolor="white", edgecolor="grey", hatch="///", label="implausible"),
        ]
        ax.legend(handles=handles, loc="lower right")
    per_it = fmt.si(ref.bytes_per_iteration, "B") if ref.bytes_per_iteration else "?"
    return Chart(
        "seed_table",
        title,
        _svg(fig),
        f"rank {', '.join(str(rows.index(m) + 1) for m in mine)} of {len(rows)}, log scale; "
        f"each it is {per_it} of memory traffic, so the bars are memory bandwidth; a row "
        "marked [name] is a reference run measured by torchmark, the others the blog's as "
        "published; hatched rows cannot be taken at face value (`torchmark compare "
        "--reference seed-2023` says why)",
    )


def case_words(r: Result) -> str:
    """The case as the tables name it: ``simplenet/infer fp32 b=64``."""
    return fmt.case_label(r.variant, r.params, r.workload)


def ceiling_pct(runs: Sequence[RunRecord]) -> Chart:
    """Each result's median rate as % of the ceiling it is held against, quartiles as
    whiskers, the 100 % line drawn: above it is a measurement error."""
    title = "% of the measured ceiling, per case"
    bars: list[tuple[str, float, float, float, str]] = []  # label, pct, lo, hi, ceiling
    for run in runs:
        for r in run.results:
            p = r.pct_of_ceiling
            if p is None or r.ceiling is None or not r.ok or not r.median_s:
                continue
            q1, q3 = r.measurement.quartiles
            # a rate is work / time: the slow quartile (q3) gives the low percentage
            lo, hi = p * r.median_s / q3, p * r.median_s / q1 if q1 > 0 else p
            label = f"{_run_prefix(runs, run)}{case_words(r)} · {r.device}"
            bars.append((label, p, lo, hi, fmt.ceiling_label(r.ceiling)))
    if not bars:
        return Chart("ceiling_pct", title, None, "no result is held against a measured ceiling")
    kinds = list(dict.fromkeys(b[4] for b in bars))
    with _rc():
        import matplotlib as mpl
        from matplotlib.patches import Patch

        cycle = mpl.rcParams["axes.prop_cycle"].by_key()["color"]
        colour = {k: cycle[i % len(cycle)] for i, k in enumerate(kinds)}
        fig, axes = _figure(height=0.26 * len(bars) + 1.3)
        ax: Axes = axes[0][0]
        ys = list(range(len(bars)))
        top = max(100.0, *(b[3] for b in bars))
        ps = [b[1] for b in bars]
        above = [p > 100 for p in ps]
        rects = ax.barh(
            ys,
            ps,
            height=0.7,
            color=[ABOVE if a else colour[b[4]] for a, b in zip(above, bars, strict=True)],
            xerr=[[b[1] - b[2] for b in bars], [b[3] - b[1] for b in bars]],
            error_kw={"elinewidth": 0.8, "capsize": 2, "ecolor": "#444"},
        )
        for rect, a in zip(rects, above, strict=True):
            if a:
                rect.set_hatch("xx")
        for y, b, a in zip(ys, bars, above, strict=True):
            ax.text(
                max(b[1], b[3]) + top * 0.01,
                y,
                f"{fmt.pct(b[1])} of {b[4]}" + ("  ABOVE CEILING: measurement error" if a else ""),
                fontsize=7.5,
                va="center",
                color=ABOVE if a else "black",
            )
        ax.set_yticks(ys, [b[0] for b in bars])
        for tick, a in zip(ax.get_yticklabels(), above, strict=True):
            if a:
                tick.set_color(ABOVE)
                tick.set_fontweight("bold")
        ax.invert_yaxis()
        ax.axvline(100, color="black", linewidth=1, linestyle="--")
        ax.set_xlim(0, top * 1.45)  # room for the value labels
        ax.annotate(
            "100 %",
            (100, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=8,
            ha="center",
            va="bottom",
        )
        ax.set_xlabel("% of this machine's measured ceiling (median; whiskers: quartiles)")
        ax.grid(axis="y", visible=False)
        handles = [Patch(color=colour[k], label=k) for k in kinds]
        if any(above):
            handles.append(Patch(facecolor=ABOVE, hatch="xx", label="above ceiling"))
        ax.legend(handles=handles, loc="lower right")
    return Chart(
        "ceiling_pct",
        title,
        _svg(fig),
        "bw: memory bandwidth; peak: matmul FLOP/s at that precision, both measured on this "
        "machine in this run; 100 % is the best any kernel here reached, so a bar past it is "
        "a measurement error, never a fast machine",
    )


def all_charts(runs: Sequence[RunRecord]) -> list[Chart]:
    charts = [
        ceiling_pct(runs),
        throughput_vs_batch(runs),
        speedup_per_workload(runs),
        break_even(runs),
        roofline(runs),
        precision_bars(runs),
        telemetry_timeline(runs),
    ]
    if any(r.workload == "collectives" for run in runs for r in run.results):
        charts.append(collectives_busbw(runs))  # only distributed runs have any
    return charts


def collectives_busbw(runs: Sequence[RunRecord]) -> Chart:
    """busbw per message size, one line per collective (nccl-tests' figure: comparable with
    the link's own speed whatever the rank count)."""
    title = "Collectives: bus bandwidth per message size"
    series: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        for r in run.results:
            if r.workload != "collectives" or not r.ok or "busbw_Bps" not in r.extra:
                continue
            ranks = r.extra.get("ranks", "?")
            label = f"{_run_prefix(runs, run)}{r.variant} ({ranks} ranks, {r.device})"
            bytes_ = r.work.bytes or float(r.params.get("bytes", 0))
            series.setdefault(label, []).append((bytes_, r.extra["busbw_Bps"]))
    series = {k: sorted(v) for k, v in series.items() if v}
    if not series:
        return Chart(
            "busbw",
            title,
            None,
            "no collective finished (each needs >= 2 ranks: --nproc-per-node 2)",
        )
    with _rc():
        fig, axes = _figure()
        ax: Axes = axes[0][0]
        for label, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] / 1e9 for p in pts], marker="o", label=label)
        _log(ax, "x", base=2)
        _log(ax, "y")
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart(
        "busbw",
        title,
        _svg(fig),
        "busbw = size / time (the slowest rank's) x nccl-tests' factor: all_reduce 2(n-1)/n, "
        "all_gather, reduce_scatter and all_to_all (n-1)/n, broadcast and send/recv 1",
    )


def ops_roofline(run: RunRecord) -> Chart:
    """A ``profile`` run's top ops on the roofline: each op whose FLOPs and bytes are known
    at its arithmetic intensity and achieved FLOP/s, under the bandwidth and matmul
    ceilings measured in the same run on its device."""
    from torchmark.report.profile import op_labels

    title = "Top ops on the roofline (measured ceilings)"
    p = run.payload.profile if isinstance(run.payload, ProfilePayload) else None
    ops = p.ops if p is not None else []
    device = (p.device if p is not None else None) or ""
    bw = run.ceiling(device, "bandwidth")
    named = {o.ceiling_key for o in ops}
    peaks = [c for c in run.ceilings if c.device == device and c.key.startswith("matmul:")]
    peaks = [c for c in peaks if c.key in named] or peaks[:1]
    labels = op_labels([o.name for o in ops])
    placed = [
        (label, o)
        for label, o in zip(labels, ops, strict=True)
        if o.flops and o.bytes and o.flop_rate
    ]
    missing = [label for label, o in zip(labels, ops, strict=True) if (label, o) not in placed]
    if not ops:
        return Chart("ops_roofline", title, None, "this profile has no top ops")
    if bw is None and not peaks:
        return Chart(
            "ops_roofline", title, None, "no ceiling was measured in this run (--no-ceilings)"
        )
    if not placed:
        return Chart(
            "ops_roofline",
            title,
            None,
            "no top op has both a FLOP count and bytes (torch counts FLOPs of matmul, "
            "convolution, add and mul; GPU kernels inherit them from the op that launched "
            "them where one kernel does its work)",
        )
    xs = [(o.flops or 0.0) / (o.bytes or 1.0) for _, o in placed]
    ys = [o.flop_rate or 0.0 for _, o in placed]
    fig, axes = _figure()
    ax: Axes = axes[0][0]
    with _rc():
        lo, hi = _roof(ax, xs, peaks, bw)
        span = [*ys, *(c.value for c in peaks)]
        _labelled(
            ax,
            [
                (x, y, f"{label} ({fmt.pct(o.share)})", "#4e79a7", 10 + 90 * o.share / 100)
                for (label, o), x, y in zip(placed, xs, ys, strict=True)
            ],
            lo,
            hi,
            span,
        )
        case = p.case if p is not None else ""
        ax.set_title(f"{case} · {device} {_model(run, device)}".strip(), fontsize=9)
        ax.set_xlabel("arithmetic intensity (FLOP/byte; bytes: the op's tensor inputs)")
        ax.set_ylabel("achieved FLOP/s (over its self time)")
    note = (
        "grey lines: the measured bandwidth × intensity, capped by the measured matmul peak; "
        "a dot's size is its share of the step. Bytes count the op's inputs only (a lower "
        "bound), so an intensity is an upper bound"
    )
    if missing:
        note += f". Not drawn, no FLOP or byte count: {_listed(missing)}"
    return Chart("ops_roofline", title, _svg(fig), note)


def _roof(
    ax: Axes, xs: list[float], peaks: list[Ceiling], bw: Ceiling | None
) -> tuple[float, float]:
    """The roofline's frame on ``ax``: the bandwidth slope up to each measured matmul peak
    (or the peaks alone as lines), each labelled; returns the x range (FLOP/B) it spans."""
    lo = min([*(x / 4 for x in xs), 0.05])
    hi = max([*(4 * x for x in xs), 100.0])
    if bw is not None:
        hi = max([hi, *(4 * c.value / bw.value for c in peaks)])
        for c in peaks:
            ridge = c.value / bw.value
            ax.plot([lo, ridge, hi], [lo * bw.value, c.value, c.value], color="grey", lw=1)
        if not peaks:  # no compute ceiling measured: the bandwidth slope alone
            ax.plot([lo, hi], [lo * bw.value, hi * bw.value], color="grey", lw=1)
        # Along the slope below the first ridge, where the low-intensity points
        # (elementwise work, ~0.1 FLOP/B) do not sit.
        knee = min([c.value / bw.value for c in peaks] or [hi])
        at = math.sqrt(max(lo, 0.5) * knee) if knee > 0.5 else lo * 1.5
        ax.annotate(
            f"bw {fmt.ceiling_value(bw)}",
            (at, at * bw.value),
            xytext=(-3, 3),
            textcoords="offset points",
            fontsize=7,
            ha="right",
            va="bottom",
        )
    else:
        for c in peaks:
            ax.axhline(c.value, color="grey", lw=1)
    for c in peaks:
        ax.annotate(
            f"{fmt.ceiling_label(c)} {fmt.ceiling_value(c)}",
            (hi, c.value),
            ha="right",
            va="bottom",
            fontsize=7,
        )
    return lo, hi


STEP_PARTS = (("wait", "#e45756"), ("copy", "#f2b701"), ("compute", "#4c78a8"))


def input_breakdown(run: RunRecord, workload: str = "input") -> Chart:
    """One stacked bar per loader configuration: the median step split into the time
    blocked waiting for the batch, copying it to the device and computing (ms per step),
    the device-resident step on top as the floor every bar is read against."""
    from torchmark.report.pipeline import by_device, config_cell, step_parts

    title = f"{workload}: where each step goes (wait / copy / compute)"
    bars: list[tuple[str, tuple[float, float, float]]] = []
    groups = by_device(run, workload)
    for device, mine, _ in groups:
        for r in mine:
            parts = step_parts(r)
            if parts is not None:
                where = f" {device}" if len(groups) > 1 else ""
                bars.append((f"{config_cell(r).full}{where}", parts))
    if not bars:
        return Chart(
            f"{workload}-breakdown", title, None, "no configuration finished with a breakdown"
        )
    with _rc():
        fig, axes = _figure(height=max(2.0, 0.32 * len(bars) + 1))
        ax: Axes = axes[0][0]
        left = [0.0] * len(bars)
        for k, (name, colour) in enumerate(STEP_PARTS):
            widths = [1e3 * parts[k] for _, parts in bars]
            ax.barh(range(len(bars)), widths, 0.7, left=left, label=name, color=colour)
            left = [x + w for x, w in zip(left, widths, strict=True)]
        ax.set_yticks(range(len(bars)), [name for name, _ in bars])
        ax.invert_yaxis()
        ax.set_xlabel("ms per step (median)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    cpu = not any(parts[1] for _, parts in bars)
    return Chart(
        f"{workload}-breakdown",
        title,
        _svg(fig),
        "each bar is one configuration's median step; the device-resident step has no wait "
        "and no copy: the gap to it is what the pipeline costs"
        + ("; no copy on the CPU (the batch is already in its memory)" if cpu else ""),
    )


def workers_curve(run: RunRecord, workload: str = "input") -> Chart:
    """Items/s against num_workers for the plain configurations (one line per device),
    the other knobs as points at their worker count, and the device-resident rate as the
    ceiling line no loader can pass."""
    from torchmark.loaders import LOADER, LoaderConfig, config_of
    from torchmark.report.pipeline import by_device, config_cell, rate, unit_of

    groups = by_device(run, workload)
    rs = [r for _, mine, _ in groups for r in mine]
    unit = unit_of(rs)
    title = f"{workload}: {unit}/s vs num_workers"
    plain = [
        r
        for r in rs
        if r.variant == LOADER
        and r.ok
        and config_of(r.params) == LoaderConfig(config_of(r.params).workers)
    ]
    # by identity: `r in plain` compared the pydantic Results field by field, samples too
    is_plain = {id(r) for r in plain}
    if len({config_of(r.params).workers for r in plain}) < 2:
        return Chart(
            f"{workload}-workers",
            title,
            None,
            "fewer than two worker counts finished: no curve to draw",
        )
    with _rc():
        fig, axes = _figure()
        ax: Axes = axes[0][0]
        for device, mine, resident in groups:
            where = f" {device}" if len(groups) > 1 else ""
            curve = sorted(
                ((config_of(r.params).workers, r) for r in mine if id(r) in is_plain),
                key=lambda wr: wr[0],
            )
            xs = [w for w, _ in curve]
            ys = [rate(r) for _, r in curve]
            (line,) = ax.plot(xs, ys, marker="o", label=f"plain DataLoader{where}")
            # the 95 % CI of each median as a bar: a count whose bar overlaps the next one's
            # is not shown to be faster (fewer than 6 samples: no CI, no bar)
            for w, r in curve:
                ci, per = r.ci_median_s, r.work.items if r.work else None
                if ci and per and ci[0] > 0:
                    ax.vlines(w, per / ci[1], per / ci[0], color=line.get_color(), linewidth=1)
            others = [r for r in mine if r.variant == LOADER and r.ok and id(r) not in is_plain]
            top = max([rate(r) for r in mine if r.ok] or [1.0])
            last: dict[int, float] = {}  # per worker count: the highest label so far
            for k, r in enumerate(sorted(others, key=rate)):
                w, y = config_of(r.params).workers, rate(r)
                ax.scatter(
                    [w],
                    [y],
                    marker="D",
                    color=line.get_color(),
                    zorder=3,
                    label=f"other knobs{where}" if k == 0 else None,
                )
                # labels at one worker count stacked ~6 % of the axis apart: three knobs
                # at 16 workers within 40 images/s of each other overprinted
                at = max(y, last.get(w, -math.inf) + 0.06 * top)
                last[w] = at
                ax.annotate(
                    str(config_cell(r).short),
                    (w, at),
                    xytext=(6, 0),
                    fontsize=7,
                    textcoords="offset points",
                    ha="left",
                    va="center",
                )
            if resident is not None:
                ax.axhline(
                    rate(resident),
                    color=line.get_color(),
                    linestyle="--",
                    label=f"device-resident{where}: {fmt.sig(rate(resident))} {unit}/s",
                )
        ax.set_xscale("symlog", base=2, linthresh=1)
        ticks = sorted({config_of(r.params).workers for r in plain})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_xlabel("num_workers")
        ax.set_ylabel(f"{unit}/s (median)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    return Chart(
        f"{workload}-workers",
        title,
        _svg(fig),
        "line: num_workers alone, with the 95 % confidence interval of each median (none "
        "under 6 samples); diamonds: other knobs at their worker count; dashed: the same "
        "step fed from device memory, the ceiling a loader can only approach",
    )


def _labelled(
    ax: Axes,
    points: list[tuple[float, float, str, str, float]],
    lo: float,
    hi: float,
    span: list[float],
) -> None:
    """Roofline points (x, y, label, colour, size) on log-log axes over [lo, hi], each
    labelled beside it; labels spread apart vertically (a thin line back to the point when
    moved), to the left near the right edge."""
    edge = math.log10(lo) + 0.7 * (math.log10(hi) - math.log10(lo))
    ys = [p[1] for p in points]
    for (x, y, text, colour, size), ty in zip(points, _spread(ys, span), strict=True):
        ax.scatter([x], [y], color=colour, zorder=3, s=size)
        left = math.log10(x) > edge
        ax.annotate(
            text,
            (x, y),
            xytext=(x * (0.8 if left else 1.25), ty),
            fontsize=6.5,
            va="center",
            ha="right" if left else "left",
            arrowprops={"arrowstyle": "-", "color": "#bbb", "lw": 0.4} if ty != y else None,
        )
    _log(ax, "x")
    _log(ax, "y")
    ax.set_xlim(lo, hi)
