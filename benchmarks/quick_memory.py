"""Peak memory of `torchmark run --quick`, alone and four at once.

    python benchmarks/quick_memory.py [--parts alone,fake-l3,four] [--src /other/tree/src]

- ``alone``: one quick run on a fresh store, the LLC as this machine reports it.
- ``fake-l3``: the same with the CPU pretending a 1 GiB last-level cache (a VM that
  reports its host's: the buffers must still be sized from what the machine can spare).
- ``four``: four quick runs started together, each on its own store: all must complete.
- ``small``: the same as ``alone`` on a machine pretending 3 GiB available: seed-add's
  three tensors must fit half of it too (workloads/micro/seed_add.py).

Each run is a fresh process; its peak RSS is the kernel's (``wait4``'s ru_maxrss). Printed
with the machine, its memory and its load. Goals: <= 2 GB peak RSS alone, with
the fake L3 and with little memory; four concurrent runs all exit 0. Exit 1 when a goal is
missed. The blog's loop at the blog's 12288^2 holds three 604 MB tensors: with torch's own
resident pages (``python -c "import torch"``: 0.28 GB here) 2.09 GB at the least. A quick
run on the CPU measures that size where the tensors fit a quarter of the memory available
(goal 2.3 GB then), else the largest side that fits its 2 GB beside the 450 MiB a run holds
besides it (11264^2).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

SRC = Path(__file__).resolve().parent.parent / "src"
GOAL_BYTES = 2e9
# Where the blog's three 604 MB tensors fit a quarter of the memory available, a quick run
# measures 12288^2 (the seed's table is the headline): its goal is then 2.3 GB (~2.2 GB
# expected: 1.81 GB of tensors beside torch's own pages and the run's heap).
BLOG_GOAL_BYTES = 2.3e9
BLOG_BYTES = 3 * 4 * 12288**2
# Runs torchmark's CLI, the CPU's reported LLC replaced first where asked.
DRIVER = """
import sys
llc, free = int(sys.argv[1]), int(sys.argv[2])
from torchmark.devices import cpu
if llc:
    cpu._llc_bytes = lambda: llc
if free:
    cpu.CPUDevice.available_memory_bytes = lambda self: free
from torchmark.cli import main
main(sys.argv[3:])
"""


def start(src: Path, db: Path, llc: int, free: int = 0) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(src), "TERM": "dumb", "COLUMNS": "100"}
    argv = ["run", "--quick", "--db", f"sqlite:///{db}"]
    with db.with_suffix(".err").open("wb") as err:  # a file: a full pipe would block it
        return subprocess.Popen(
            [sys.executable, "-c", DRIVER, str(llc), str(free), *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def finish(p: subprocess.Popen[bytes]) -> tuple[int, float]:
    """(exit code, peak RSS bytes) of a started run, waited for with its own rusage."""
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss * 1024.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="alone,fake-l3,small,four")
    ap.add_argument("--src", type=Path, default=SRC, help="the source tree to run (src/)")
    args = ap.parse_args()
    parts = args.parts.split(",")
    vm = psutil.virtual_memory()
    llc = Path("/sys/devices/system/cpu/cpu0/cache/index3/size")
    print(f"tree {args.src}")
    print(
        f"machine: {os.cpu_count()} CPUs, {vm.total / 2**30:.1f} GiB memory "
        f"({vm.available / 2**30:.1f} available), L3 reported "
        f"{llc.read_text().strip() if llc.exists() else 'unknown'}"
    )
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    missed = []
    with tempfile.TemporaryDirectory() as d:
        for part in parts:
            n, fake = (4, 0) if part == "four" else (1, (1 << 30) if part == "fake-l3" else 0)
            free = 3 << 30 if part == "small" else 0
            t0 = time.perf_counter()
            runs = [start(args.src, Path(d) / f"{part}-{i}.db", fake, free) for i in range(n)]
            done = [finish(p) for p in runs]
            wall = time.perf_counter() - t0
            codes = [c for c, _ in done]
            peaks = ", ".join(f"{rss / 1e9:.2f}" for _, rss in done)
            ok = all(c == 0 for c in codes)
            blog = part != "small" and vm.available >= 4 * BLOG_BYTES
            goal = BLOG_GOAL_BYTES if blog else GOAL_BYTES
            if part != "four":
                ok = ok and done[0][1] <= goal
            print(
                f"{part:8} {n} run(s): exit {codes}, peak RSS GB [{peaks}], {wall:.0f} s wall"
                f"  goal <= {goal / 1e9:g} GB{' (blog size)' if blog else ''} "
                f"{'met' if ok else 'MISSED'}",
                flush=True,
            )
            for i, p in enumerate(runs):
                if p.returncode:
                    err = (Path(d) / f"{part}-{i}.err").read_text()
                    print(f"  stderr: {err.strip()[-300:]}")
            if not ok:
                missed.append(part)
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
