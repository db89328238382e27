"""A serving run as tables, sentences and the latency-vs-rate curve: pure functions of the
stored payload (no torch; numpy only for the curve's drawing, through matplotlib).

    answer_table   one row per device: max rate at the bound, how, p99, cost, energy, count
    points_table   one fleet's load points: the hockey stick in numbers
    lines          each device's sentence, the verdict, the generator's limit, the notes
    hockey_stick   p99 (and p50) latency against the offered rate, per device and split
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.text import Text

from torchmark import format as fmt
from torchmark.report.charts import Chart, _figure, _log, _svg
from torchmark.report.layout import Alt, Col, FitTable
from torchmark.results import RunRecord
from torchmark.serving.payload import FleetDoc, PointDoc, ServingPayload, ms

KIND = "serving"
OUTCOME_WORD = {"within": "within", "over": "OVER", "generator_behind": "gen. behind"}


def payload(run: RunRecord) -> ServingPayload | None:
    raw = run.extra.get(KIND)
    return ServingPayload.model_validate(raw) if run.kind == KIND and raw else None


def _ms(s: float | None) -> str:
    return fmt.DASH if s is None else fmt.sig(1e3 * s, 3)


def _rate(x: float | None) -> str:
    if x is None:
        return fmt.DASH
    return f"{x:,.0f}" if x >= 100 else fmt.sig(x, 3)


def _ci(ci: tuple[float | None, float | None]) -> str:
    lo, hi = ci
    return f"{_ms(lo)}-{_ms(hi) if hi is not None else '?'}"


def title(p: ServingPayload) -> str:
    inputs = f" (inputs {p.inputs})" if p.inputs else ""
    rate = f", sized for {_rate(p.rate)} req/s" if p.rate else ""
    return f"Serving {p.model}{inputs} within p99 <= {ms(p.bound_s)}{rate}"


def answer_table(p: ServingPayload) -> FitTable:
    """The answer per device, in 80 columns (the bracket's top and the CI give way last)."""
    t = FitTable(
        Col("device"),
        Col("split", short_header="p x t", drop=3),
        Col("max req/s", justify="right", wrap=9, vital=True),
        Col("batching", wrap=10, drop=2),
        Col("p99 ms", justify="right"),
        Col("95 % CI", justify="right", drop=4),
        Col("cost/M", justify="right", drop=5),
        Col("J/req", justify="right", drop=1),
        Col("count", justify="right", keep_empty=False),
    )
    for a in p.answers:
        if a.max_rate is None:
            t.row(a.device, "", "none", "", "", "", "", "", "")
            continue
        top = "" if a.top is None or a.generator_bound else f"-{_rate(a.top)}"
        at_least = ">= " if a.generator_bound else ""
        count = ""
        if a.needed_range is not None:
            lo, hi = a.needed_range
            count = str(hi) if lo == hi else f"{lo}-{hi}"
        t.row(
            a.device,
            a.split.replace(" ", ""),
            Alt(f"{at_least}{_rate(a.max_rate)}{top}", f"{at_least}{_rate(a.max_rate)}"),
            a.batching.replace("batch ", ""),
            _ms(a.p99_s),
            _ci(a.p99_ci_s),
            fmt.DASH if a.cost_per_million is None else fmt.sig(a.cost_per_million, 3),
            fmt.DASH if a.j_per_request is None else fmt.sig(a.j_per_request, 3),
            count,
        )
    return t


def points_table(f: FleetDoc) -> FitTable:
    """Every load point of one fleet in the order measured: rate, batching, outcome, latency."""
    t = FitTable(
        Col("rate/s", justify="right"),
        Col("batching", wrap=10),
        Col("outcome"),
        Col("p50 ms", justify="right", drop=2),
        Col("p99 ms", justify="right"),
        Col("done/s", justify="right", drop=3),
        Col("n", justify="right", drop=4),
        Col("flags", wrap=12, drop=1),
    )
    for i, pt in enumerate(f.points):
        best = " *" if i == f.best else ""
        t.row(
            _rate(pt.rate) + best,
            _batching(pt),
            OUTCOME_WORD[pt.outcome],
            _ms(pt.p50_s),
            _ms(pt.p99_s),
            _rate(pt.achieved_rate),
            str(pt.n),
            ", ".join(pt.flags),
        )
    return t


def _batching(pt: PointDoc) -> str:
    if pt.max_batch == 1:
        return "1"
    return f"<= {pt.max_batch}, {fmt.sig(1e3 * pt.max_wait_s, 2)} ms"


def fleet_heading(f: FleetDoc) -> str:
    split = f" as {f.processes} process(es) x {f.threads} thread(s)" if f.threads else ""
    single = (
        f"; one at a time p50 {_ms(f.single_p50_s)} ms, p99 {_ms(f.single_p99_s)} ms"
        if f.single_n
        else ""
    )
    return f"{f.device}{split}{single}"


def lines(p: ServingPayload) -> list[str]:
    """What the answer means, in sentences: per device, then the verdict, then honesty."""
    out = [a.sentence for a in p.answers]
    if p.verdict:
        out.append(f"verdict: {p.verdict}")
    for f in p.fleets:
        if f.stop_reason and f.best is None:
            out.append(f"{f.device} {f.split}: {f.stop_reason}".replace("  ", " "))
    if p.generator.sentence:
        out.append(p.generator.sentence)
    out.append(
        f"p99's 95 % interval from the binomial; within p98.5-p99.5 it needs "
        f"{p.min_requests:,} requests (a point short of that is flagged few_requests)"
    )
    energy = {a.energy_note for a in p.answers if a.energy_note}
    for note in sorted(energy):
        out.append(f"energy: {note}")
    out.extend(p.notes)
    return out


def hockey_stick(p: ServingPayload) -> Chart:
    """p99 latency against the offered rate per fleet (the knee is the device's limit),
    p50 dashed, the bound as a line, points the generator fell behind on as crosses."""
    key, heading = "serving_curve", "Latency vs request rate (the hockey stick)"
    fleets = [f for f in p.fleets if any(pt.p99_s is not None for pt in f.points)]
    if not fleets:
        return Chart(key, heading, None, "no load point finished a request")
    fig, axes = _figure()
    ax = axes[0][0]
    for f in fleets:
        label = f"{f.device} {f.split}".strip()
        best = f.best_point
        batching = (best.max_batch, best.max_wait_s) if best else None
        pts = sorted(
            (
                pt
                for pt in f.points
                if pt.p99_s is not None
                and (batching is None or (pt.max_batch, pt.max_wait_s) == batching)
            ),
            key=lambda pt: pt.rate,
        )
        ok = [pt for pt in pts if pt.outcome != "generator_behind"]
        behind = [pt for pt in pts if pt.outcome == "generator_behind"]
        (line,) = ax.plot(
            [pt.rate for pt in ok], [1e3 * (pt.p99_s or 0) for pt in ok], "o-", label=label
        )
        ax.plot(
            [pt.rate for pt in ok],
            [1e3 * (pt.p50_s or 0) for pt in ok],
            "--",
            color=line.get_color(),
            alpha=0.6,
        )
        if behind:
            ax.plot(
                [pt.rate for pt in behind],
                [1e3 * (pt.p99_s or 0) for pt in behind],
                "x",
                color=line.get_color(),
            )
    ax.axhline(1e3 * p.bound_s, color="grey", linewidth=1)
    ax.set_xlabel("offered rate (requests/s)")
    ax.set_ylabel("latency (ms): p99 solid, p50 dashed")
    _log(ax, "y")
    ax.legend()
    note = (
        f"each device's best batching; the grey line is the {ms(p.bound_s)} "
        "bound; x: the load generator fell behind (the host's timing, not the device)"
    )
    return Chart(key, heading, _svg(fig), note)


def serving_view(run: RunRecord) -> list[RenderableType]:
    """`torchmark serving` (and `show` of its run): the answer table, then each fleet's
    points, then the sentences."""
    p = payload(run)
    if p is None:
        return [Text("no serving result stored in this run")]
    out: list[RenderableType] = [Text(title(p), style="bold"), answer_table(p)]
    for f in p.fleets:
        out.append(Text(fleet_heading(f)))
        if f.points:
            out.append(points_table(f))
    out.append(Text("* the highest rate within the bound; done/s: requests finished per s"))
    out.extend(Text(line) for line in lines(p))
    v = run.verdict
    if v is not None and v.reasons:
        out.append(Text(f"run verdict: {v.level}: " + "; ".join(v.reasons)))
    return out


def html_context(run: RunRecord) -> dict[str, Any] | None:
    """The serving section of the HTML report (None for another kind of run)."""
    p = payload(run)
    if p is None:
        return None
    return {
        "title": title(p),
        "answers": [
            {
                "device": a.device,
                "label": a.label,
                "max_rate": ("≥ " if a.generator_bound or a.top is None else "")
                + _rate(a.max_rate),
                "top": _rate(a.top) if a.top and not a.generator_bound else "",
                "split": a.split,
                "batching": a.batching,
                "p99": _ms(a.p99_s),
                "ci": _ci(a.p99_ci_s),
                "cost": "" if a.cost_per_million is None else fmt.sig(a.cost_per_million, 3),
                "energy": "" if a.j_per_request is None else fmt.sig(a.j_per_request, 3),
                "needed": "" if a.needed is None else str(a.needed),
            }
            for a in p.answers
        ],
        "lines": lines(p),
    }
