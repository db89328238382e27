"""How close does `torchmark predict` come? Leave one out on the committed reference runs.

1. Anchored: every case of h200-quick predicted from h100-quick's results
   and the H200 run's ceilings and other cases (predictor B: kinds/predict/terms.py), and
   the reverse, on the GPU and on the host CPUs; each case's error beside the naive
   predictor's (each case scaled by the ratio of the measured ceiling that bounds it), the
   medians, and whether the measured median fell inside the interval.
2. Unanchored (what `predict` does for your model): each model case of a run predicted from
   its profile here and the rest of that run, without its own workload.
3. This machine's CPU predicted from a reference host CPU, from a quick run of this CPU
   (--cpu FILE: `torchmark run --quick -d cpu --json FILE`); said plainly where it cannot be.

    python benchmarks/predict_loo.py [--cpu this-cpu-quick.json]

Prints the figures and the issue's targets, met or missed; exit status 1 when one is missed
(docs/your-model.md says which and why). Times nothing itself: the
figures are the committed runs'; profiling the four reference models here takes ~30 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

from torchmark import reference
from torchmark.kinds.predict import loo
from torchmark.kinds.predict.machine import CaseKey, machine
from torchmark.kinds.predict.profile import reference_works
from torchmark.kinds.predict.work import Side, Work
from torchmark.results import RunRecord
from torchmark.workloads import load_builtins

# The "Done when", as printed and checked here.
MODEL_TARGET_PCT = 15.0  # every model case within 15 % of the measured median
MEDIAN_TARGET_PCT = 5.0  # the median case within 5 %
SIDES: tuple[Side, ...] = ("cpu", "gpu")


def profiles(runs: Sequence[RunRecord]) -> dict[CaseKey, Work]:
    """The model cases of these runs, each recorded here as its side would run it."""
    cases = {}
    for run in runs:
        for side in SIDES:
            m = machine(run, side)
            for key, c in (m.cases if m else {}).items():
                if c.is_model:
                    cases[key] = (key, c.workload, dict(c.result.params))
    works, said = reference_works(list(cases.values()))
    for line in said:
        print(f"  {line}")
    return works


def pct(x: float | None) -> str:
    return "      -" if x is None else f"{100 * x:+6.1f} %"


def us(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e6:,.1f}"


def table(rows: list[loo.Row], direction: str) -> None:
    print(f"\n{direction}: measured median, each predictor's signed error, B's interval")
    print(f"  {'case':44s} {'measured µs':>13s} {'naive':>8s} {'A':>8s} {'B':>8s}"
          f"  {'B interval µs':>22s}  B dominant")  # fmt: skip
    for r in (r for r in rows if r.direction == direction):
        lo, hi = r.interval["B"]
        naive = loo.error(r.naive_s, r.measured_s) if r.naive_s else None
        print(
            f"  {r.case:44s} {us(r.measured_s):>13s} {pct(naive)} "
            f"{pct(loo.error(r.predicted_s['A'], r.measured_s))} "
            f"{pct(loo.error(r.predicted_s['B'], r.measured_s))}  "
            f"{us(lo):>10s} - {us(hi):<10s}{'' if r.covered('B') else ' ✗'} {r.dominant['B']}"
        )
    for r in (r for r in rows if r.direction == direction):
        # where B falls back to the naive rule, it says so
        for said in r.basis["B"].split("; "):
            if "priced by no ceiling" in said:
                print(textwrap.fill(f"{r.case}: {said}", 78, initial_indent="  ",
                                    subsequent_indent="    "))  # fmt: skip


def summaries(rows: list[loo.Row], title: str) -> dict[str, loo.Summary]:
    print(f"\n{title} (|error| against the measured median)")
    out = {}
    for name in ("naive", "A", "B"):
        s = out[name] = loo.summary(rows, name)
        line = f"  {name:5s}: median {s.median_pct:.1f} % over {s.n} cases"
        if s.models:
            line += (f"; model cases {s.models_within_15}/{s.models} within 15 %, worst "
                     f"{s.worst_model_pct:.1f} % ({s.worst_model})")  # fmt: skip
        if s.covered is not None:
            line += (f"; micro cases worse than naive: {len(s.micro_worse_than_naive)}"
                     f"; measured inside the interval: {s.covered}/{s.n}")  # fmt: skip
        print(line)
        for case in s.micro_worse_than_naive:
            print(f"         worse than naive: {case}")
    return out


def unanchored(runs: dict[str, RunRecord], works: dict[CaseKey, Work]) -> list[loo.Unanchored]:
    print("\nUnanchored (what `predict` does for a model the target never measured): each "
          "model case from its profile here and the rest of its run")  # fmt: skip
    out = []
    for name, run in runs.items():
        for u in loo.unanchored(run, works, name, SIDES):
            out.append(u)
            err = loo.error(u.predicted_s, u.measured_s) if u.predicted_s else None
            print(f"  {name:11s} {u.case:40s} measured {us(u.measured_s):>10s} µs  predicted "
                  f"{us(u.predicted_s):>10s} µs  {pct(err)}  {u.dominant}"
                  f"{'  refused: ' + u.refused if u.refused else ''}")  # fmt: skip
    errs = [abs(loo.error(u.predicted_s, u.measured_s)) for u in out if u.predicted_s]
    if errs:
        within = sum(e <= MODEL_TARGET_PCT / 100 for e in errs)
        print(f"  median |error| {100 * statistics.median(errs):.1f} %, {within}/{len(errs)} "
              f"within {MODEL_TARGET_PCT:g} %, worst {100 * max(errs):.1f} %")  # fmt: skip
    return out


def this_cpu(path: Path | None, refs: dict[str, RunRecord], works: dict[CaseKey, Work]) -> None:
    print("\nThis machine's CPU predicted from a reference host CPU")
    if path is None:
        print("  not available: no run of this CPU given (make one with `torchmark run --quick "
              "-d cpu --json FILE`, then --cpu FILE)")  # fmt: skip
        return
    from torchmark.store.exchange import import_run

    mine = import_run(path)
    here = machine(mine, "cpu", "this CPU")
    if here is None:
        print(f"  not available: {path} has no CPU result")
        return
    rows = []
    for name, ref in refs.items():
        theirs = machine(ref, "cpu", name)
        if theirs and here.threads and theirs.threads and here.threads != theirs.threads:
            print(f"  {name}'s host ran {theirs.threads} threads, this run {here.threads}: "
                  "`predict` refuses a CPU at another thread count (no ceiling says how host "
                  "time or GEMM efficiency change with threads); the figures below are that "
                  "refusal's evidence, not a prediction it makes")  # fmt: skip
        rows += loo.predict_pair(ref, mine, works, f"{name} host -> this CPU", ("cpu",),
                                 (name, "this CPU"))  # fmt: skip
    loo.add_intervals(rows)
    for d in dict.fromkeys(r.direction for r in rows):
        table(rows, d)
    summaries(rows, "this CPU from a reference host CPU")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cpu", type=Path, help="a quick run of this CPU (JSON)")
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    load_builtins()  # the reference cases' workloads, profiled by name
    refs = {n: reference.load(f"{n}-quick").run for n in ("h100", "h200")}
    runs = {n: r for n, r in refs.items() if r is not None}
    print("profiling the reference model cases here (CPU as run; GPU with foreach optimizers)")
    works = profiles(list(runs.values()))
    rows = loo.predict_pair(runs["h100"], runs["h200"], works, "h100 -> h200", SIDES,
                            ("h100", "h200"))  # fmt: skip
    rows += loo.predict_pair(runs["h200"], runs["h100"], works, "h200 -> h100", SIDES,
                             ("h200", "h100"))  # fmt: skip
    loo.add_intervals(rows)
    for d in ("h100 -> h200", "h200 -> h100"):
        table(rows, d)
    both = summaries(rows, f"Both directions, {len(rows)} predictions")
    summaries([r for r in rows if r.side == "gpu"], "GPU cases")
    summaries([r for r in rows if r.side == "cpu"], "host CPU cases")
    unanchored(runs, works)
    this_cpu(args.cpu, runs, works)
    b = both["B"]
    checks = [
        (f"every model case within {MODEL_TARGET_PCT:g} %",
         b.models_within_15 == b.models, f"{b.models_within_15}/{b.models}"),
        (f"the median case within {MEDIAN_TARGET_PCT:g} %", b.median_pct <= MEDIAN_TARGET_PCT,
         f"{b.median_pct:.1f} %"),
        ("no micro-benchmark worse than naive", not b.micro_worse_than_naive,
         f"{len(b.micro_worse_than_naive)} worse"),
    ]  # fmt: skip
    print("\nIssue 31's targets (predictor B, both directions):")
    for what, ok, got in checks:
        print(f"  {'met   ' if ok else 'MISSED'} {what}: {got}")
    print(f"load average at end: {os.getloadavg()}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
