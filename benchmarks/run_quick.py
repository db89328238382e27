"""How long `torchmark run --quick` takes on a fresh database, this tree against another.

    python benchmarks/run_quick.py --before /work/main/src --rounds 3
    python benchmarks/run_quick.py --rounds 3          # this tree alone

Each round runs both trees one after the other (the order flips every round), each on a
fresh SQLite store, so ceilings are measured every time. Per run: wall time and CPU time
(user + sys of the process and its children). On a shared machine compare the paired
ratios printed here, never absolute times across sessions.

Target: <= 45 s wall on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def once(src: Path, db: Path) -> tuple[float, float, dict[str, float]]:
    """(wall s, CPU s, seconds per phase) of one quick run: its per-case lines (printed when
    not on a terminal) timed as they arrive."""
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "torchmark", "run", "--quick", "--db", f"sqlite:///{db}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert p.stdout is not None
    lines = [(time.perf_counter() - t, line) for line in p.stdout]
    p.wait()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        tail = "".join(line for _, line in lines)[-2000:]
        raise SystemExit(f"run --quick with {src} exited {p.returncode}:\n{tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, phases(lines, wall)


def phases(lines: list[tuple[float, str]], wall: float) -> dict[str, float]:
    """Start-up (to the plan), then each workload's cases (a case ends at its line: set-up,
    check and measuring; the ceilings print no line of their own, so they fall in the first
    case's), and the tables and store at the end."""
    planned = next((t for t, line in lines if line.startswith("Planned")), 0.0)
    out = {"start-up": planned}
    last = planned
    for i, (t, workload) in enumerate(
        (t, m.group(1)) for t, line in lines if (m := CASE.match(line))
    ):
        key = f"ceilings + {workload}" if i == 0 else workload
        out[key] = out.get(key, 0.0) + t - last
        last = t
    out["tables, store"] = wall - last
    return out


CASE = re.compile(r"\[\d+/\d+\] ([\w-]+)/")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="the other tree's src/ (default: none)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    trees = {"after": SRC} | ({"before": args.before} if args.before else {})
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    got: dict[str, list[tuple[float, float, dict[str, float]]]] = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.rounds):
            order = list(trees) if i % 2 == 0 else list(reversed(trees))
            for name in order:
                got[name].append(once(trees[name], Path(d) / f"{name}-{i}.db"))
            (wa, ca, pa) = got["after"][-1]
            print("  phases s: " + ", ".join(f"{k} {v:.1f}" for k, v in pa.items()))
            if not args.before:
                print(f"round {i + 1}: {wa:6.1f} s wall {ca:6.1f} s cpu", flush=True)
                continue
            (wb, cb, _) = got["before"][-1]
            print(
                f"round {i + 1}: after {wa:6.1f} s wall {ca:6.1f} s cpu | before {wb:6.1f} s "
                f"wall {cb:6.1f} s cpu | ratio wall {wa / wb:.2f} cpu {ca / cb:.2f}",
                flush=True,
            )
    if not args.before:
        print(f"median wall {statistics.median(w for w, _, _ in got['after']):.1f} s (goal <= 45)")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        return 0
    wall = statistics.median(a[0] / b[0] for a, b in zip(got["after"], got["before"], strict=True))
    cpu = statistics.median(a[1] / b[1] for a, b in zip(got["after"], got["before"], strict=True))
    print(f"median ratio after/before: wall {wall:.2f}, cpu {cpu:.2f}")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
