"""Run the suite and store its figures as one torchmark run (kind ``bench``).

    python -m benchmarks all --quick            # every script at its small size, this CPU
    python -m benchmarks startup overhead       # some, at full size
    python -m benchmarks list                   # each script's question and goal
    torchmark compare BEFORE AFTER              # two suite runs: what got slower

Each script runs as its own process with this tree's ``src`` first on the path, its output
shown as it comes; its outcome is its exit status (0 met, 1 missed, 3 can't tell: the noise
straddles a goal; "not available" where it said so, as a GPU script does without a GPU).
Its timed figures become the run's results (``benchmarks/figures.py``), so ``torchmark
compare`` says FASTER / SLOWER against their noise; its other figures are stored beside
their goals. Exit 1 when any goal was missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.figures import CANT_TELL, ENV
from benchmarks.suite import BY_NAME, SUITE, Bench

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = {True: 300.0, False: 3600.0}  # a script that hangs fails; the rest go on


@dataclass(frozen=True)
class BenchConfig:
    """What a suite run ran, as its record stores it."""

    scripts: tuple[str, ...]
    quick: bool

    def as_dict(self) -> dict[str, Any]:
        return {"scripts": list(self.scripts), "quick": self.quick}


@dataclass
class Outcome:
    bench: Bench
    outcome: str  # met / missed / can't tell / not available / failed / done (no goal)
    wall_s: float
    figures: list[dict[str, Any]]


def run_script(bench: Bench, quick: bool) -> Outcome:
    args = bench.quick if quick else bench.args
    assert args is not None
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as out:
        env = {
            **os.environ,
            ENV: out.name,
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
            ),
        }
        print(f"\n== {bench.name}: {bench.question}", flush=True)
        t = time.perf_counter()
        said = []
        p = subprocess.Popen(
            [sys.executable, bench.script, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert p.stdout is not None
        killer = threading.Timer(TIMEOUT_S[quick], p.kill)  # a silent hang too
        killer.start()
        try:
            for line in p.stdout:
                print(line, end="", flush=True)
                said.append(line)
            code = p.wait()
        except KeyboardInterrupt:
            p.kill()
            raise
        finally:
            killer.cancel()
        if code < 0:
            print(f"stopped: over {TIMEOUT_S[quick]:.0f} s (signal {-code})")
        wall = time.perf_counter() - t
        figures = [json.loads(line) for line in out if line.strip()]
    return Outcome(bench, outcome_of(code, "".join(said), bool(bench.goal)), wall, figures)


def outcome_of(code: int, output: str, has_goal: bool) -> str:
    """A script's exit status and output in one word."""
    text = output.lower()
    said = [line for line in text.splitlines() if line and not line.startswith("load average")]
    if "traceback (most recent call last)" in text:
        return "failed"  # a crash exits 1 too: it is no missed goal
    if code == 0 and said and said[0].startswith("not available"):
        return "not available"  # its first word: a part of it not available is no outcome
    if code == 0:
        return "met" if has_goal else "done"
    return {1: "missed", CANT_TELL: "can't tell"}.get(code, "failed")


def store_run(outcomes: list[Outcome], quick: bool, db: str | None, argv: list[str]) -> str | None:
    """The suite's figures as a torchmark run through the one run path."""
    from torchmark.devices import resolve
    from torchmark.results import Result
    from torchmark.results.payloads import BenchFigure, BenchScript
    from torchmark.run.record import open_run
    from torchmark.store import open_store

    store = open_store(db or os.environ.get("TORCHMARK_DB") or None)
    cfg = BenchConfig(tuple(o.bench.name for o in outcomes), quick)
    session = open_run("bench", cfg, resolve("cpu"), store)
    session.record.command = shlex.join(["python", "-m", "benchmarks", *argv])
    payload = session.record.payload
    with session:
        for o in outcomes:
            payload.scripts.append(  # type: ignore[union-attr]
                BenchScript(
                    name=o.bench.name,
                    question=o.bench.question,
                    goal=o.bench.goal,
                    outcome=o.outcome,
                    wall_s=o.wall_s,
                )
            )
            for f in o.figures:
                if "samples_s" in f:
                    result = Result(
                        workload=o.bench.name,
                        variant=f["name"],
                        device="cpu",
                        samples_s=f["samples_s"],
                        rule="bench",
                        stop_reason=f"{len(f['samples_s'])} samples, a fixed count",
                        timing="e2e",
                        notes=[f"goal: {f['goal']}"] if f.get("goal") else [],
                    )
                    session.add(None, result)
                else:
                    payload.figures.append(  # type: ignore[union-attr]
                        BenchFigure(script=o.bench.name, **f)
                    )
    store.close()
    return session.record.run_id


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="+", metavar="NAME", help="scripts, `all` or `list`")
    ap.add_argument("--quick", action="store_true", help="each script at its small size")
    ap.add_argument("--db", help="results store URL (default: $TORCHMARK_DB or torchmark's)")
    ap.add_argument("--no-store", action="store_true", help="print only; store no run")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    if args.names == ["list"]:
        for b in SUITE:
            size = "" if b.quick is not None else "  (not in --quick)"
            print(f"{b.name}{size}")
            for line in (b.question, f"goal: {b.goal or 'none: compare runs'}"):
                print(textwrap.fill(line, 78, initial_indent="  ", subsequent_indent="    "))
        return 0
    unknown = [n for n in args.names if n != "all" and n not in BY_NAME]
    if unknown:
        print(f"error: no script {unknown[0]!r}; one of: all, list, {', '.join(BY_NAME)}")
        return 2
    chosen = list(SUITE) if "all" in args.names else [BY_NAME[n] for n in args.names]
    skipped = [b for b in chosen if args.quick and b.quick is None]
    chosen = [b for b in chosen if b not in skipped]
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    t = time.perf_counter()
    outcomes = [run_script(b, args.quick) for b in chosen]
    print(
        f"\nsuite: {len(outcomes)} scripts in {time.perf_counter() - t:.0f} s, load average "
        f"at end {os.getloadavg()[0]:.2f}"
    )
    for o in outcomes:
        print(
            f"  {o.bench.name:<22} {o.outcome:<14} {o.wall_s:>6.1f} s  {len(o.figures)} figure(s)"
        )
    if skipped:
        print(
            textwrap.fill(
                "not in --quick: " + ", ".join(b.name for b in skipped),
                78,
                initial_indent="  ",
                subsequent_indent="    ",
            )
        )
    if not args.no_store:
        run_id = store_run(outcomes, args.quick, args.db, argv)
        print(f"stored as run {run_id}\nwhat moved: torchmark compare OTHER {run_id}")
    return 1 if any(o.outcome in ("missed", "failed") for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
