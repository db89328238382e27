"""A serving run as tables, sentences and the latency-vs-rate curve: pure functions of the
stored payload (no torch; numpy only for the curve's drawing, through matplotlib).

    answer_table   one row per device: max rate at the bound, how, p99, cost, energy, count
    points_table   one fleet's load points: the hockey stick in numbers
    lines          each device's sentence, the verdict, the generator's limit, the notes
(the latency-vs-rate curve, the hockey stick, is ``report.charts.serving``)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from torchmark import format as fmt
from torchmark.judge import pace
from torchmark.report.layout import Alt, Col, FitTable
from torchmark.results import RunRecord
from torchmark.results.serving import KIND, FleetDoc, ServingPayload, batch_wait, ms, per_s, read

OUTCOME_WORD = {"within": "within", "over": "OVER", "generator_behind": "gen. behind"}


def payload(run: RunRecord) -> ServingPayload | None:
    return read(run)


def _ms(s: float | None) -> str:
    return fmt.DASH if s is None else fmt.sig(1e3 * s, 3)


def _rate(x: float | None) -> str:
    return fmt.DASH if x is None else per_s(x)


def _ci(ci: tuple[float | None, float | None]) -> str:
    lo, hi = ci
    return f"{_ms(lo)}-{_ms(hi) if hi is not None else '?'}"


def title(p: ServingPayload) -> str:
    inputs = f" (inputs {p.inputs})" if p.inputs else ""
    rate = f", sized for {_rate(p.rate)} req/s" if p.rate else ""
    if p.endpoint:
        inputs += f" at {p.endpoint}"
    return f"Serving {p.model}{inputs} within p99 <= {ms(p.bound_s)}{rate}"


def answer_table(p: ServingPayload, capacity: bool = False) -> FitTable:
    """The answer per device, in 80 columns (the bracket's top and the CI give way last);
    ``capacity``: the model's in-process capacity beside an as-served answer."""
    answers = p.capacity if capacity else p.answers
    title = None
    if p.capacity:
        title = "model capacity (in process, no front end)" if capacity else "as served"
    t = FitTable(
        Col("device"),
        Col("split", short_header="p x t", drop=3),
        Col("max req/s", justify="right", wrap=9, vital=True),
        Col("batch, wait", drop=2),
        Col("p99 ms", justify="right"),
        Col("95 % CI", justify="right", drop=4),
        Col("cost/M", justify="right", drop=5),
        Col("J/req", justify="right", drop=1),
        Col("count", justify="right", keep_empty=False),
        title=title,
    )
    for a in answers:
        if a.max_rate is None:
            t.row(a.device, "", "none", "", "", "", "", "", "")
            continue
        top = "" if a.top is None or a.generator_bound else f"-{_rate(a.top)}"
        # no rate above measured over the bound, or the generator ended the climb: the
        # device's limit lies somewhere above this rate
        at_least = ">= " if a.generator_bound or a.top is None else ""
        count = ""
        if a.needed_range is not None:
            lo, hi = a.needed_range
            count = str(hi) if lo == hi else f"{lo}-{hi}"
        t.row(
            a.device,
            a.split.replace(" ", ""),
            Alt(f"{at_least}{_rate(a.max_rate)}{top}", f"{at_least}{_rate(a.max_rate)}"),
            _short(a.batching),
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
        Col("batch, wait"),
        Col("outcome"),
        Col("p50 ms", justify="right", drop=3),
        Col("p99 ms", justify="right"),
        Col("done/s", justify="right", drop=2),
        Col("n", justify="right", drop=1),
        Col("s", justify="right", drop=5, keep_empty=False),
        Col("LoadGen", drop=6, keep_empty=False),
        Col("flags", wrap=12, drop=4),
    )
    for i, pt in enumerate(f.points):
        best = " *" if i == f.best else ""
        again = " R" if pt.confirm else ""  # the answer's re-confirmation
        t.row(
            _rate(pt.rate) + best + again,
            _short(batch_wait(pt.max_batch, pt.max_wait_s)),
            OUTCOME_WORD[pt.outcome],
            _ms(pt.p50_s),
            _ms(pt.p99_s),
            _rate(pt.achieved_rate),
            str(pt.n),
            "" if pt.duration_s is None else fmt.sig(pt.duration_s, 2),
            pt.loadgen,
            ", ".join(f for f in pt.flags if f != "generator_behind"),  # the outcome says it
        )
    return t


def _short(batching: str) -> str:
    """``batch <= 32, wait 0 ms`` -> ``32, 0 ms`` (the column says what the figures are)."""
    return batching.replace("batch <= ", "").replace("batch ", "").replace("wait ", "")


def fleet_heading(f: FleetDoc) -> str:
    """``cpu as 2 x 1 (processes x threads): single-stream p50 0.28 ms, p99 8.7 ms;
    offline 1: 870/s, 8: 4,981/s``: the two scenarios the search starts from (as served,
    the cores the client and the server ran on: ``client on core 15, server on cores
    0-14``)."""
    split = f" as {f.processes} x {f.threads} (processes x threads)" if f.threads else ""
    if f.served:
        split = f" {f.served_as}" + (f", {f.cores}" if f.cores else "")
    parts = []
    if f.single_n:
        mean = ""
        if f.single_mean_s:  # what a rate one at a time follows: the mean, not the median
            mean = f", mean {_ms(f.single_mean_s)} ms ({_rate(1 / f.single_mean_s)}/s)"
        parts.append(
            f"single-stream p50 {_ms(f.single_p50_s)} ms{mean}, p99 {_ms(f.single_p99_s)} ms"
        )
    if f.offline:
        rates = ", ".join(f"{b}: {_rate(r)}/s" for b, r in f.offline.items())
        parts.append(f"offline by max batch {rates}")
    if f.pace_s and f.pace_end_s:  # judge.pace: the host's, beside the model's own figures
        a, b = statistics.median(f.pace_s), statistics.median(f.pace_end_s)
        parts.append(f"host pace {1e3 * a:.3g} ms, then {1e3 * b:.3g} ms")
    return f"{f.device}{split}" + (": " + "; ".join(parts) if parts else "")


def lines(p: ServingPayload) -> list[str]:
    """What the answer means, in sentences: per device, then the verdict, then honesty."""
    out = [a.sentence for a in p.answers]
    out += [a.sentence for a in p.capacity]
    for device, share in p.front_end.items():
        out.append(front_end_sentence(p, device, share))
    if p.verdict:
        out.append(f"verdict: {p.verdict}" + (" (as served)" if p.capacity else ""))
    for f in p.fleets:
        split = f" {f.served_as}" if f.served else (f" {f.split}" if f.split else "")
        if f.stop_reason:
            out.append(f"{f.device}{split}: search ended: {f.stop_reason}")
        out.extend(f"{f.device}{split}: {note}" for note in f.notes)
    tried = [pt.rate for f in p.fleets for pt in f.points]
    if tried:  # the run's own, said apart from the generator's checks
        out.append(f"the highest rate tried: {_rate(max(tried))} req/s")
    gen = p.generator.said(p.bound_s)
    if gen:
        out.append(gen)
    out.append(
        f"p99's 95 % interval from the binomial; within p98.5-p99.5 it needs "
        f"{p.min_requests:,} requests (a point short of that is flagged few_requests)"
    )
    if p.min_duration_s is not None:
        out.append(
            f"a rate is within only if it held: {p.min_duration_s:g} s at least, no third of "
            "the point surely over the bound, VALID by MLPerf LoadGen's Server rules (its "
            "p99, its early stopping: 459 requests with none over); the answer is run "
            "again for 3x that (R), 10 % lower where it fails"
        )
    if any(f.pace_s for f in p.fleets):
        out.append(
            "host pace: the median time of one fixed piece of Python, timed before each "
            "fleet started and after it closed; a change beyond its noise flags the answer "
            "(load_changed), and `compare` says can't tell where two runs' hosts differ"
        )
    energy = {a.energy_note for a in p.answers if a.energy_note}
    for note in sorted(energy):
        out.append(f"energy: {note}")
    if p.energy_price is not None:
        out.append(
            f"cost/M includes the energy per request at {p.energy_price:g} per kWh where a "
            "counter read it"
            + "".join(f"; {a.energy_cost_note}" for a in p.answers if a.energy_cost_note)
        )
    out.extend(p.notes)
    return out


def front_end_sentence(p: ServingPayload, device: str, share: float) -> str:
    """``cpu: the front end takes 99 % (1,718 req/s as served, 356,438 in process)``; where
    the load generator had a core of its own, the server's share of the cores is said: the
    gap then holds that core too."""
    answer = next((a for a in p.answers if a.device == device), None)
    served = answer.max_rate if answer is not None else None
    cap = next((a.max_rate for a in p.capacity if a.device == device), None)
    rates = f" ({_rate(served)} req/s as served, {_rate(cap)} in process)" if served and cap else ""
    f = p.fleets[answer.fleet] if answer is not None and answer.fleet is not None else None
    if f is not None and f.client_cores and f.server_cores and f.client_cores != f.server_cores:
        n, of = len(f.server_cores), len(f.server_cores) + len(f.client_cores)
        rates += f"; as served the server had {n} of the {of} cores, the load generator the rest"
    if share < 0:  # served above the in-process capacity: each a bracket, neither exact
        return (
            f"{device}: as served reached {-100 * share:.0f} % more than in process{rates}: "
            "the two brackets overlap, the front end's share can't be told"
        )
    return f"{device}: the front end takes {100 * share:.0f} %{rates}"


POINTS_KEY = (
    "* the highest rate within the bound; R: a re-confirmation; done/s: requests finished per s"
)


def parts(p: ServingPayload, run: RunRecord) -> list[tuple[str, str | FitTable]]:
    """Everything a serving run says, in order, as (what, it): the answer tables ("table":
    as served, then the model's capacity in process), each fleet's heading ("heading") and
    points, then the sentences ("line"). The terminal and the HTML report both lay out
    these, so neither says what the other leaves out."""
    out: list[tuple[str, str | FitTable]] = [("table", answer_table(p))]
    if p.capacity:
        out.append(("table", answer_table(p, capacity=True)))
    for f in p.fleets:
        out.append(("heading", fleet_heading(f)))
        if f.points:
            out.append(("table", points_table(f)))
    out.append(("line", POINTS_KEY))
    out.extend(("line", line) for line in lines(p))
    v = run.verdict
    if v is not None and v.reasons:
        out.append(("line", f"run verdict: {v.level}: " + "; ".join(v.reasons)))
    return out


def serving_view(run: RunRecord) -> list[RenderableType]:
    """`torchmark serving` (and `show` of its run): the answer table, then each fleet's
    points, then the sentences."""
    p = payload(run)
    if p is None:
        return [Text("no serving result stored in this run")]
    out: list[RenderableType] = [Text(title(p), style="bold")]
    out += [it if isinstance(it, FitTable) else Text(it) for _, it in parts(p, run)]
    return out


def held(a: Any) -> str:
    """Whether the answer held its re-confirmation, in a word ('' for a run stored before
    answers were re-confirmed)."""
    if a.max_rate is None or a.confirmed is None:
        return ""
    return f"yes, {a.duration_s or 0:.3g} s" if a.confirmed else "NO"


def html_context(run: RunRecord) -> dict[str, Any] | None:
    """The serving section of the HTML report (None for another kind of run): the same
    tables and sentences as the terminal's (``parts``), each table in full."""
    p = payload(run)
    if p is None:
        return None
    return {
        "title": title(p),
        "parts": [
            {"kind": kind, "table": it.full()}
            if isinstance(it, FitTable)
            else {"kind": kind, "text": it}
            for kind, it in parts(p, run)
        ],
    }


def markdown_lines(
    run: RunRecord, cell: Callable[[str], str], text: Callable[[object], str]
) -> list[str]:
    """The answer per device as a Markdown table (as served, then the model's capacity in
    process where the run has both, each titled as the terminal's), then the sentences
    (``report --markdown``)."""
    p = payload(run)
    if p is None:
        return []
    out = [text(title(p))]
    for capacity in (False, True) if p.capacity else (False,):
        named = answer_table(p, capacity=capacity).title
        out += ["", f"*{text(named)}*"] if named else [""]
        out += _markdown_answers(p.capacity if capacity else p.answers, cell)
    cores = cores_lines(p)
    if cores:
        out += ["", *(text(line) for line in cores)]
    out += ["", *(text(line) for line in lines(p))]
    return out


def cores_lines(p: ServingPayload) -> list[str]:
    """The cores each served fleet's client and server ran on, one line for all where they
    agree (``as served: client on core 15, server on cores 0-14``); the terminal and HTML
    say it in each fleet's heading, which Markdown has not."""
    said = {(f.device, f.served_as, f.cores) for f in p.fleets if f.served and f.cores}
    if len({c for _, _, c in said}) == 1:
        return [f"as served: {next(iter(said))[2]}"]
    return [f"{d} {how}: {c}" for d, how, c in sorted(said)]


def _markdown_answers(answers: list[Any], cell: Callable[[str], str]) -> list[str]:
    out = [
        "| Device | Max req/s | Over at | Split | Batching | p99 (95 % CI) | Cost/M | J/req "
        "| Re-confirmed |",
        "|---|---:|---:|---|---|---:|---:|---:|---|",
    ]
    for a in answers:
        least = ">= " if a.generator_bound or a.top is None else ""
        over = "" if a.top is None or a.generator_bound else _rate(a.top)
        row = (
            f"{a.device} ({a.label})",
            f"{least}{_rate(a.max_rate)}" if a.max_rate is not None else "none",
            over,
            a.split,
            a.batching,
            f"{_ms(a.p99_s)} ms ({_ci(a.p99_ci_s)})" if a.max_rate is not None else "",
            "" if a.cost_per_million is None else fmt.sig(a.cost_per_million, 3),
            "" if a.j_per_request is None else fmt.sig(a.j_per_request, 3),
            held(a),
        )
        out.append("| " + " | ".join(cell(x) for x in row) + " |")
    return out


# -- comparing serving runs -------------------------------------------------------------------


def _bracket(a: Any) -> tuple[float, float] | None:
    """Where the device's true limit lies: [highest within, lowest over] (inf on top where
    nothing above was measured or the generator, not the device, ended the climb)."""
    if a.max_rate is None:
        return None
    top = a.top if a.top is not None and not a.generator_bound else float("inf")
    return (a.max_rate, top)


def change(
    first: Any, later: Any, paces: tuple[list[float], list[float]] | None = None
) -> tuple[str, str]:
    """FASTER / SLOWER when the later run's bracket lies wholly above / below the first's;
    UNCLEAR when they overlap (the search resolves a limit to its bracket, no finer).
    ``paces``: the host's pace timed in each run (``judge.pace``, one machine's two runs):
    a host that ran slower in the slower run (faster in the faster) beyond its noise makes
    the change UNCLEAR, the host's and not the serving's as far as the runs can tell; so
    does an answer flagged ``load_changed`` (its machine changed during its search)."""
    a, b = _bracket(first), _bracket(later)
    for name, x in (("A", first), ("this run", later)):
        if a is not None and b is not None and getattr(x, "confirmed", None) is False:
            return "UNCLEAR", f"{name}'s rate was not re-confirmed: can't tell"
    if a is None or b is None:
        return "UNCLEAR", "no rate met the bound in " + ("A" if a is None else "this run")
    if b[0] > a[1]:
        verdict, why = "FASTER", f"serves >= {_rate(b[0])}/s where A failed at {_rate(a[1])}/s"
    elif b[1] < a[0]:
        verdict, why = "SLOWER", f"failed at {_rate(b[1])}/s where A served {_rate(a[0])}/s"
    else:
        return "UNCLEAR", "the searches' brackets overlap"
    for name, x in (("A", first), ("this run", later)):
        if "load_changed" in (getattr(x, "flags", None) or ()):
            return "UNCLEAR", (
                f"{why}, but {name}'s machine changed during its search (load_changed): "
                "can't tell the serving from the machine"
            )
    ratio = pace.changed(*paces) if paces else None
    if paces and ratio is not None and (ratio > 1) == (verdict == "SLOWER"):
        host = pace.sentence(paces[0], paces[1], "in A", "in this run")
        return "UNCLEAR", f"{why}, but {host}: can't tell the serving from the host"
    return verdict, why


def fleet_pace(p: ServingPayload, a: Any) -> list[float]:
    """The host's pace timed around the search that gave answer ``a`` (start and end)."""
    if a is None or a.fleet is None or not 0 <= a.fleet < len(p.fleets):
        return []
    f = p.fleets[a.fleet]
    return [*f.pace_s, *f.pace_end_s]


def comparable(runs: list[RunRecord]) -> list[ServingPayload]:
    """The payloads of serving runs of one model and bound, else a clear error."""
    from torchmark.errors import InputError

    kinds = {r.kind for r in runs}
    if KIND in kinds and kinds != {KIND}:
        raise InputError("compare serving runs with serving runs (a serving run has no cases)")
    ps = [payload(r) for r in runs]
    if any(p is None for p in ps):
        raise InputError("a serving run without its stored answer cannot be compared")
    done = [p for p in ps if p is not None]
    if len({(p.model, p.bound_s) for p in done}) > 1:
        raise InputError(
            "compare serving runs of the same model and --p99-ms: "
            + ", ".join(f"{p.model} at {ms(p.bound_s)}" for p in done)
        )
    return done


def compare_table(
    runs: list[RunRecord],
) -> tuple[FitTable, list[tuple[str, str, str, float]]]:
    """Each device's max rate per run (A first), and each later run's change against A:
    (device, verdict, why, the least drop a SLOWER bracket proves) for the gate."""
    ps = comparable(runs)
    letters = [fmt.run_letter(i) for i in range(len(ps))]
    # like with like: as served where every run served the model over HTTP, else each
    # run's in-process answer (runs stored before as served have only that)
    served = all(p.capacity for p in ps)
    answers = [p.answers if served or not p.capacity else p.capacity for p in ps]
    title = "as served" if served else ("in process" if any(p.capacity for p in ps) else None)
    t = FitTable(
        Col("device"),
        *(Col(f"{x} req/s", justify="right") for x in letters),
        Col("vs A", wrap=24),
        title=title,
    )
    changes: list[tuple[str, str, str, float]] = []
    devices = list(dict.fromkeys(a.device for ans in answers for a in ans))
    for dev in devices:
        found = [next((a for a in ans if a.device == dev), None) for ans in answers]
        cells = []
        for a in found:
            b = _bracket(a) if a is not None else None
            if b is None:
                cells.append("none" if a is not None else fmt.DASH)
            else:
                # nothing measured over it (or the generator ended the climb): at least
                at_least = b[1] == float("inf")
                cells.append(f">= {_rate(b[0])}" if at_least else f"{_rate(b[0])}-{_rate(b[1])}")
        words = []
        for i, a in enumerate(found[1:], start=1):
            if found[0] is None or a is None:
                continue
            # one machine's two runs: the host's pace is compared (two machines differ)
            same_host = bool(runs[0].fingerprint) and runs[0].fingerprint == runs[i].fingerprint
            paces = (fleet_pace(ps[0], found[0]), fleet_pace(ps[i], a)) if same_host else None
            verdict, why = change(found[0], a, paces)
            a0, b = _bracket(found[0]), _bracket(a)
            drop = 1 - b[1] / a0[0] if verdict == "SLOWER" and a0 and b else 0.0
            changes.append((dev, verdict, f"{letters[i]}: {why}", drop))
            words.append(f"{letters[i]} {verdict}: {why}")
        t.row(dev, *cells, "; ".join(words))
    return t, changes


def compare_view(runs: list[RunRecord]) -> list[RenderableType]:
    ps = comparable(runs)
    table, _ = compare_table(runs)
    head = f"Serving {ps[0].model} within p99 <= {ms(ps[0].bound_s)}: max rate per device"
    ids = ", ".join(f"{chr(ord('A') + i)} {r.run_id or '(file)'}" for i, r in enumerate(runs))
    note = "a rate is where its search bracketed the limit (within - over)"
    return [Text(head, style="bold"), Text(ids), table, Text(note)]
