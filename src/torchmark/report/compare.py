"""Compare runs case by case: FASTER / SLOWER / SAME / UNCLEAR relative to measured noise.

The rule (METHOD.md §2.12), for a case measured in a baseline run A and another run B:

    speed   = median_A / median_B          (> 1: B is faster)
    noise   = max(2 %, hypot(rel IQR of A, rel IQR of B))
    p       = Mann-Whitney U, two-sided, on the kept raw samples of A and B
    ci      = [lo_A / hi_B, hi_A / lo_B]   (95 % order-statistic CIs of both medians:
                                            conservative, coverage >= 90 %)
    if p < 0.01:  FASTER / SLOWER if |speed - 1| >= noise, else SAME (real but too small to matter)
    else:         SAME if ci lies inside 1 ± noise (the data rule out a change that matters),
                  else UNCLEAR (too noisy or too few samples to tell)

A bare ratio is never a verdict: two 5-sample runs 8 % apart with 15 % spread are UNCLEAR.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from scipy.stats import mannwhitneyu

from torchmark import reference
from torchmark.errors import InputError
from torchmark.report import format as fmt
from torchmark.report.table import add_row
from torchmark.results import Result, RunRecord

ALPHA = 0.01
MIN_CHANGE = 0.02  # below 2 % no change matters in practice, whatever the test says
Verdict = Literal["FASTER", "SLOWER", "SAME", "UNCLEAR"]
Key = tuple[str, str, str, tuple[tuple[str, str], ...]]
RULE = (
    f"verdict rule: Mann-Whitney U on the raw samples (p < {ALPHA}) and a practical "
    f"threshold of max({MIN_CHANGE:.0%}, combined relative IQR); not significant is SAME only "
    "when the ratio's 95 % CI lies within that threshold, else UNCLEAR"
)


@dataclass(frozen=True)
class Change:
    """B against A for one case. ``speed`` > 1 means B is faster."""

    key: Key
    a: Result
    b: Result
    verdict: Verdict | None  # None: not comparable (a side skipped or wrong)
    speed: float | None = None
    ci: tuple[float, float] = (math.nan, math.nan)
    p_value: float | None = None
    threshold: float | None = None
    why: str = ""

    @property
    def time_change(self) -> float | None:
        """Relative change of the median time, B vs A (+0.10: B takes 10 % longer)."""
        return None if self.speed is None else 1 / self.speed - 1


@dataclass(frozen=True)
class Comparison:
    """Baseline ``runs[0]`` against each later run."""

    runs: tuple[RunRecord, ...]
    changes: tuple[tuple[Change, ...], ...]  # one tuple per later run, in key order
    only_in: dict[int, list[Result]] = field(default_factory=dict)  # run index -> unmatched

    @property
    def shared_keys(self) -> list[Key]:
        return [c.key for c in self.changes[0]] if self.changes else []


def judge(a: Result, b: Result) -> Change:
    """The verdict for one case measured in A (baseline) and B."""
    if not (a.ok and b.ok):
        side = "A" if not a.ok else "B"
        r = a if not a.ok else b
        return Change(a.key, a, b, None, why=f"{r.status} in {side}: {r.reason or ''}".strip())
    xa, xb = a.measurement.kept, b.measurement.kept
    ma, mb = a.measurement.median, b.measurement.median
    speed = ma / mb
    threshold = max(MIN_CHANGE, math.hypot(a.measurement.rel_iqr, b.measurement.rel_iqr))
    lo_a, hi_a = a.measurement.ci
    lo_b, hi_b = b.measurement.ci
    ci = (lo_a / hi_b, hi_a / lo_b) if lo_b > 0 and hi_b > 0 else (math.nan, math.nan)
    if xa.size < 2 or xb.size < 2:
        # one sample has no noise estimate: no test can call it faster or slower
        return Change(
            a.key,
            a,
            b,
            "UNCLEAR",
            speed,
            ci,
            None,
            threshold,
            f"too few samples to compare (n={xa.size}, {xb.size})",
        )
    if min(min(xa), min(xb)) == max(max(xa), max(xb)):
        p = 1.0  # every value identical: nothing to rank (Mann-Whitney is undefined)
    else:
        p = float(mannwhitneyu(xa, xb, alternative="two-sided").pvalue)
    change = abs(speed - 1)
    verdict: Verdict
    if p < ALPHA:
        if change >= threshold:
            verdict = "FASTER" if speed > 1 else "SLOWER"
            why = f"p={p:.2g}, {change:.1%} beyond the {threshold:.1%} threshold"
        else:
            verdict = "SAME"
            why = f"significant (p={p:.2g}) but {change:.1%} < {threshold:.1%} threshold"
    else:
        tight = math.isfinite(ci[0]) and 1 - threshold <= ci[0] and ci[1] <= 1 + threshold
        verdict = "SAME" if tight else "UNCLEAR"
        why = (
            f"p={p:.2g}; ratio CI {ci[0]:.3g}-{ci[1]:.3g} within ±{threshold:.1%}"
            if tight
            else f"p={p:.2g}; ratio CI {_ci_text(ci)} wider than ±{threshold:.1%}: "
            f"too noisy or too few samples (n={xa.size}, {xb.size})"
        )
    return Change(a.key, a, b, verdict, speed, ci, p, threshold, why)


def _ci_text(ci: tuple[float, float]) -> str:
    if not all(math.isfinite(x) for x in ci):
        return "unbounded"
    return f"{ci[0]:.3g}-{ci[1]:.3g}"


def _name(record: RunRecord, i: int) -> str:
    return record.run_id or f"run {i + 1}"


def compare(runs: Sequence[RunRecord]) -> Comparison:
    """Every case the baseline ``runs[0]`` shares with each later run, and the leftovers."""
    if len(runs) < 2:
        raise InputError("compare needs at least two runs (or --reference NAME and one run)")
    indexed = [{r.key: r for r in run.results} for run in runs]
    base = indexed[0]
    shared = [k for k in base if all(k in other for other in indexed[1:])]
    if not shared:
        names = ", ".join(_name(r, i) for i, r in enumerate(runs))
        what = "; ".join(
            f"{_name(r, i)}: {', '.join(sorted({x.workload for x in r.results})) or 'no results'}"
            for i, r in enumerate(runs)
        )
        raise InputError(
            f"runs {names} have no case in common ({what}); compare runs of the same "
            "workloads, sizes and devices"
        )
    changes = tuple(tuple(judge(base[k], other[k]) for k in shared) for other in indexed[1:])
    only = {
        i: [r for k, r in idx.items() if k not in shared]
        for i, idx in enumerate(indexed)
        if any(k not in shared for k in idx)
    }
    return Comparison(tuple(runs), changes, only)


def regressions(cmp: Comparison, pct: float) -> list[tuple[int, Change]]:
    """SLOWER cases whose median time grew by more than ``pct`` % (run index from 1)."""
    out = []
    for i, changes in enumerate(cmp.changes, start=1):
        for c in changes:
            tc = c.time_change
            if c.verdict == "SLOWER" and tc is not None and tc * 100 > pct:
                out.append((i, c))
    return out


# ---- rendering -------------------------------------------------------------------------


def letter(i: int) -> str:
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


def run_legend(runs: Sequence[RunRecord]) -> list[str]:
    lines = []
    for i, r in enumerate(runs):
        host = r.environment.get("host", "?")
        devs = ", ".join(
            f"{d} {info.get('model', '')}".strip()
            for d, info in r.environment.get("devices", {}).items()
            if isinstance(info, dict)
        )
        lines.append(
            f"{letter(i)} = {_name(r, i)}  {r.created_utc:%Y-%m-%d %H:%M} UTC  {host}  "
            f"[{devs or 'devices not recorded'}]  {r.status}"
        )
    return lines


def comparison_table(cmp: Comparison) -> Table:
    """Baseline A, then per later run: its throughput, speed relative to A, verdict."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left", expand=True)
    table.add_column("case", overflow="fold", ratio=2)
    table.add_column("device", no_wrap=True)
    table.add_column("A", justify="right", no_wrap=True)
    for i in range(1, len(cmp.runs)):
        x = letter(i)
        table.add_column(x, justify="right", no_wrap=True)
        table.add_column(f"{x}/A speed", justify="right", no_wrap=True)
        table.add_column(f"{x} vs A", no_wrap=True)
    if len(cmp.runs) == 2:
        table.add_column("why", overflow="fold", ratio=3)
    for j in range(len(cmp.shared_keys)):
        a = cmp.changes[0][j].a
        row = [f"{a.workload}/{a.variant} {fmt.params(a.params)}".strip(), a.device, _cell(a)]
        for changes in cmp.changes:
            c = changes[j]
            row += [_cell(c.b), fmt.ratio(c.speed), c.verdict or fmt.DASH]
        if len(cmp.runs) == 2:
            row.append(cmp.changes[0][j].why)
        add_row(table, *row)
    return table


def _cell(r: Result) -> str:
    if not r.ok:
        return r.status
    return fmt.throughput(r)


def only_lines(cmp: Comparison) -> list[str]:
    lines = []
    for i, results in sorted(cmp.only_in.items()):
        cases = ", ".join(
            f"{r.workload}/{r.variant} {fmt.params(r.params)} {r.device}".replace("  ", " ")
            for r in results
        )
        lines.append(f"only in {letter(i)} ({len(results)} cases, not compared): {cases}")
    return lines


def summary_lines(cmp: Comparison) -> list[str]:
    lines = []
    for i, changes in enumerate(cmp.changes, start=1):
        counts: dict[str, int] = {}
        for c in changes:
            v = c.verdict or "not comparable"
            counts[v] = counts.get(v, 0) + 1
        tally = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        lines.append(f"{letter(i)} vs A, {len(changes)} shared cases: {tally}")
    return lines


def comparison_renderables(cmp: Comparison) -> list[RenderableType]:
    return [
        Text("\n".join(run_legend(cmp.runs))),
        comparison_table(cmp),
        Text("\n".join([*summary_lines(cmp), *only_lines(cmp)])),
        Text(RULE, style="dim"),
    ]


def placement_table(ref: reference.ReferenceSet, mine: list[reference.ReferenceRow]) -> Table:
    """The reference rows and this machine's rows, fastest first, with what each measured."""
    extra = [] if ref.kind == "run" else [r for s in reference.runs() for r in s.rows]
    rows = reference.ranked([*ref.rows, *extra, *mine])
    table = Table(
        title=f"{ref.title} ({ref.name}), ranked",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        title_justify="left",
        expand=True,
    )
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("hardware", overflow="fold", ratio=2)
    table.add_column(ref.unit, justify="right", no_wrap=True)
    table.add_column("implied", justify="right", no_wrap=True)
    table.add_column("% of datasheet bw", justify="right", no_wrap=True)
    table.add_column("caveat", overflow="fold", ratio=3)
    for rank, r in enumerate(rows, start=1):
        name = f"▶ {r.hardware}  (this machine)" if r.this_machine else r.hardware
        if r.source not in (ref.name, "this machine"):
            name += f"  [{r.source}]"
        caveat = "; ".join(
            x for x in (f"IMPLAUSIBLE: {r.implausible}" if r.implausible else "", r.note) if x
        )
        add_row(
            table,
            str(rank),
            Text(name, style="bold") if r.this_machine else name,
            fmt.sig(r.value) if r.this_machine else f"{r.value:g}",
            fmt.si(r.implied_bytes_per_s, "B/s"),
            fmt.pct(r.pct_of_datasheet),
            caveat,
        )
    return table


def placement_renderables(ref: reference.ReferenceSet, record: RunRecord) -> list[RenderableType]:
    mine = reference.seed_rows(record)
    if not mine:
        raise InputError(
            f"run {record.run_id or '(file)'} has no {reference.SEED_WORKLOAD} "
            f"{reference.SEED_VARIANT} result to place; run `torchmark run --workload "
            f"{reference.SEED_WORKLOAD}` first"
        )
    per_it = (
        f"one iteration = {fmt.si(ref.bytes_per_iteration, 'B')} of memory traffic, so "
        f"implied = it/s × {fmt.si(ref.bytes_per_iteration, 'B')}. "
        if ref.bytes_per_iteration
        else ""
    )
    return [
        placement_table(ref, mine),
        Text(f"source: {ref.provenance}"),
        Text(f"what it measured: {ref.what} {per_it}".strip()),
    ]
