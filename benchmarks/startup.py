"""How long each command takes to start: fresh `python -m torchmark ...` processes.

    python benchmarks/startup.py                       # this tree, 7 runs per command
    python benchmarks/startup.py --before /work/main/src --runs 9

Each command runs against a temporary SQLite store holding two small runs. Figures per
command: median wall time and median CPU time (user + sys of the child; on a shared machine
the wall clock also counts waiting for a core, CPU time does not), and which heavy libraries
the process imported. With --before, the other source tree's command runs beside this
tree's, round by round in ABBA order, so both see the same load; the ratio printed is the
median of the rounds' after/before ratios with its 95 % interval, and it says faster or
slower only where that interval lies wholly on one side of 1 (else "can't tell"). The load
average before and after, and the steal time over the runs (a VM's host busy with other
guests slows every command and the libraries alike), say how quiet the machine was.

Targets: every read-only command (`--help`, `--version`, `history`, `export`, `compare`,
`report --markdown`, `show latest`, `list`, `env`) <= 0.4 s wall or <= 3x `python -c pass`
(timed here too, as are the libraries the commands that show stored runs cannot start
without: `libraries alone`, typer, rich and pydantic imported, and `libraries + model`, the
same with one two-field pydantic model defined and validated, which imports the rest of
pydantic: the floor under those commands at that moment); `list` is timed with its workload
catalog kept and `env` with torch's facts kept (the first `list` per install and an `env
--refresh`, run first, keep them; any run keeps torch's facts too). `doctor` prints the
checks that need no torch first and the rest after importing torch: its time to the first
check printed has the same target (``doctor, first check``); its whole time is printed
beside `python -c "import torch"`. A target is met where the median's 95 % interval (order
statistics) lies at or under it, MISSED where it lies above, CAN'T TELL where it straddles
it (more --runs: 7 runs give the interval from the fastest to the slowest). Exits 0 when
every target is met, 1 when one is MISSED, else 3. Under the table, each command that reads
stored runs is given beyond the floor, timed beside it round by round: torchmark's own share
of its start, which the machine's faster and slower hours move far less than the wall time.

The commands start as an installed tool does: with its modules' bytecode compiled (pip
compiles an installed package; the trees here are compiled once first) and
PYTHONDONTWRITEBYTECODE dropped, so no round compiles a module. Some sandboxes set it, and
there every fresh process compiled each torchmark module again (~0.06 s of `show latest`).
"""

from __future__ import annotations

import argparse
import compileall
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import figures
import psutil

SRC = Path(__file__).resolve().parent.parent / "src"
HEAVY = ("torch", "scipy", "matplotlib", "sqlalchemy", "numpy", "pydantic")
# every command that only reads (import writes a run; report --html draws with matplotlib;
# doctor imports torch to check it, so only its first line is held to the goal)
TARGETED = (
    "--help",
    "--version",
    "history",
    "export",
    "compare",
    "report --markdown",
    "show latest",
    "list",
    "env",
    "doctor, first check",
)
FIRST_LINE = {"doctor, first check": ["doctor"]}  # timed to the first line of output
GOAL_S = 0.4
# What a command that shows stored runs cannot start without, timed as one: the floor
# under those commands at this moment (this VM's speed moves ~1.3x within an hour), and,
# the same in both trees, a control for --before (its ratio is the rounds' noise).
LIBRARIES = "import typer, rich.console, rich.table; from pydantic import BaseModel"
FLOOR = "libraries + model"
READS_RUNS = ("export", "compare", "report --markdown", "show latest")
# pydantic imports most of itself (its fields, types, schema builder, and importlib.metadata
# for its plugins) only when a model is defined and first validated: as reading a run does
ONE_MODEL = LIBRARIES + (
    "\nclass Run(BaseModel):\n    run_id: str\n    notes: list[str] = []\n"
    "Run.model_validate({'run_id': 'r'})"
)


def seed(db: Path, out: Path) -> list[str]:
    """Two stored runs (a few results each) and one of them exported as JSON."""
    sys.path.insert(0, str(SRC))
    from torchmark.results import Ceiling, Result, RunRecord, Work
    from torchmark.store import open_store
    from torchmark.store.exchange import export_run

    t0 = datetime(2026, 11, 21, 8, 30, tzinfo=timezone.utc)
    bw = Ceiling(device="cpu", key="bandwidth", value=4.5e10, unit="B/s", method="mul_")
    runs = []
    for i, scale in enumerate((1.0, 1.5)):
        results = [
            Result(
                workload="seed_add",
                variant="fp32",
                device="cpu",
                params={"numel": n},
                samples_s=[scale * n * 1e-9 * (1 + 0.01 * k) for k in range(12)],
                work=Work(bytes=12.0 * n),
                headline="bytes",
                ceiling=bw,
            )
            for n in (2**16, 2**20, 2**24)
        ]
        runs.append(
            RunRecord(
                tool_version="0.1.0",
                created_utc=t0 + timedelta(hours=i),
                status="complete",
                command="torchmark run --quick",
                environment={"host": "bench", "devices": {"cpu": {}}},
                fingerprint="fp",
                ceilings=[bw],
                results=results,
            )
        )
    store = open_store(f"sqlite:///{db}")
    try:
        ids = [store.save(r) for r in runs]
        for i, run_id in enumerate(ids):  # run.json, run1.json: the other tree imports them
            (out / f"run{i or ''}.json").write_text(export_run(store.load(run_id), "json"))
    finally:
        store.close()
    return ids


def seed_other(src: Path, db: Path, out: Path, ids: list[str]) -> None:
    """The same two runs stored by another source tree itself (its `import`): a store this
    tree wrote may be at a newer layout, which an older tree refuses."""
    for i in range(len(ids)):
        argv = ["import", str(out / f"run{i or ''}.json"), "--db", f"sqlite:///{db}"]
        p = subprocess.run(
            [sys.executable, "-m", "torchmark", *argv],
            env={**installed_env(), "PYTHONPATH": str(src)},
            capture_output=True,
            text=True,
        )
        if p.returncode != 0 or p.stdout.strip() != ids[i]:
            raise SystemExit(f"{src}: torchmark {' '.join(argv)} failed:\n{p.stderr}")


def commands(ids: list[str], tmp: Path) -> dict[str, list[str]]:
    a, b = ids
    return {
        "--help": ["--help"],
        "--version": ["--version"],
        "history": ["history"],
        "export": ["export", a],
        # each tree its own file ({tree}): an older tree refuses a newer one's layout
        "import": ["import", str(tmp / "run.json"), "--db", f"sqlite:///{tmp}/imp-{{tree}}.db"],
        "compare": ["compare", a, b],
        "report --markdown": ["report", a, "--markdown", "-"],
        "report --html": ["report", a, "--html", str(tmp / "r.html")],
        "show latest": ["show", "latest"],
        "list": ["list"],
        "env": ["env"],
        "doctor": ["doctor"],
        **FIRST_LINE,
        "libraries alone": ["-c", LIBRARIES],
        FLOOR: ["-c", ONE_MODEL],
    }


def program(argv: list[str]) -> list[str]:
    """A fresh interpreter's command line: ``python -m torchmark ARGV``, or ARGV as it is
    where it is a ``-c`` program."""
    return [sys.executable, *(argv if argv[0] == "-c" else ["-m", "torchmark", *argv])]


def first_line(src: Path, argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s to the first line on stdout, NaN) of one fresh process, left to finish."""
    t = time.perf_counter()
    p = subprocess.Popen(
        program(argv),
        env={**env, "PYTHONPATH": str(src)},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert p.stdout is not None
    p.stdout.readline()
    wall = time.perf_counter() - t
    p.stdout.read()
    p.wait()
    return wall, math.nan


def once(src: Path, argv: list[str], env: dict[str, str], strict: bool) -> tuple[float, float]:
    """(wall s, child CPU s) of one fresh process; NaN where it fails and not ``strict``
    (the tree before may lack a command, such as --version)."""
    env = {**env, "PYTHONPATH": str(src)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.run(program(argv), env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode not in (0, 1) and not strict:  # doctor exits 1 on a failed check
        return math.nan, math.nan
    if p.returncode not in (0, 1):
        raise SystemExit(f"torchmark {' '.join(argv)} exited {p.returncode}:\n{p.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def goal_words(verdict: figures.Judged) -> str:
    """``met``, ``MISSED`` or ``CAN'T TELL (lo-hi s)``: the median's interval where the
    noise straddles the goal."""
    if verdict.said != "CAN'T TELL":
        return verdict.said
    if verdict.lo != verdict.lo:  # NaN: too few runs
        return f"{verdict.said} (no interval under 6 runs)"
    return f"{verdict.said} ({verdict.lo:.2f}-{verdict.hi:.2f} s)"


def ratio_words(ratios: Iterable[float]) -> str:
    """The median of the rounds' ratios (this tree / before, each pair taken back to back)
    with its 95 % interval, and which way it goes only where the interval says so."""
    j = figures.judged(ratios, high=1.0)
    if j.median != j.median:  # NaN: the tree before lacks the command
        return f"{'-':>6} {'':>11}"
    way = {"met": "faster", "MISSED": "slower"}.get(j.said, "can't tell")
    return f"{j.median:>6.2f} {f'{j.lo:.2f}-{j.hi:.2f}':>11} {way:<10}"


def installed_env() -> dict[str, str]:
    """This environment as an installed tool's: modules' bytecode written and read."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def plain(argv: list[str]) -> float:
    env = installed_env()
    t = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True, env=env)
    return time.perf_counter() - t


def heavy_imports(src: Path, argv: list[str], env: dict[str, str]) -> list[str]:
    env = {**env, "PYTHONPATH": str(src)}
    python, *rest = program(argv)
    p = subprocess.run(
        [python, "-X", "importtime", *rest],
        env=env,
        capture_output=True,
        text=True,
    )
    loaded = {line.rsplit("|", 1)[-1].strip() for line in p.stderr.splitlines()}
    return [m for m in HEAVY if m in loaded]


def over_the_floor(beyond: dict[str, list[float]]) -> str:
    """What each command that reads runs takes beyond the libraries and one model read, the
    floor timed in the same round (the median of the rounds' differences): torchmark's own
    share of the start, which the machine's faster and slower hours move far less than the
    wall time."""
    if not beyond:
        return ""
    said = f"beyond the floor ({FLOOR}, timed beside each round): " + ", ".join(
        f"{label} {statistics.median(d):+.2f} s" for label, d in beyond.items()
    )
    return "\n" + textwrap.fill(said, 79, subsequent_indent="  ")


class Stolen:
    """CPU time the hypervisor gave other guests while the commands ran (steal), in cores:
    on a VM the one sign of a busy host that no process here shows."""

    def __init__(self) -> None:
        self.t0, self.steal0 = time.monotonic(), self._steal()

    @staticmethod
    def _steal() -> float | None:
        return getattr(psutil.cpu_times(), "steal", None)  # Linux only

    def said(self) -> str:
        now = self._steal()
        if now is None or self.steal0 is None:
            return "steal time: not available on this system"
        cores = (now - self.steal0) / (time.monotonic() - self.t0)
        return f"steal time over the runs: {cores:.2f} cores"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=7, help="fresh processes per command")
    ap.add_argument("--before", type=Path, help="another source tree (src/) to compare")
    ap.add_argument("--only", nargs="*", help="command labels to time (default: all)")
    args = ap.parse_args()

    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    stolen = Stolen()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        ids = seed(tmp / "runs.db", tmp)
        trees = {"after": SRC} | ({"before": args.before} if args.before else {})
        # one store per tree: a newer tree may migrate the file, an older one refuse it
        envs = {}
        for tree, src in trees.items():
            if tree == "after":
                shutil.copy(tmp / "runs.db", tmp / f"{tree}.db")
            else:
                seed_other(src, tmp / f"{tree}.db", tmp, ids)
            envs[tree] = {
                **installed_env(),
                "TORCHMARK_DB": f"sqlite:///{tmp / f'{tree}.db'}",
                "COLUMNS": "120",
            }
        cmds = {k: v for k, v in commands(ids, tmp).items() if not args.only or k in args.only}
        for env in envs.values():
            env["XDG_CACHE_HOME"] = str(tmp / "cache")
        for src in trees.values():  # as pip leaves an installed package: compiled
            compileall.compile_dir(src, quiet=1)
        for tree, src in trees.items():  # list's catalog and torch's facts, kept once
            once(src, ["list"], envs[tree], False)
            once(src, ["env", "--refresh"], envs[tree], False)
        base = [plain(["-c", "pass"]) for _ in range(args.runs)]
        torch_s = [plain(["-c", "import torch"]) for _ in range(3)]
        times: dict[tuple[str, str], list[tuple[float, float]]] = {}
        beyond: dict[str, list[float]] = {}  # a command that reads runs less the floor
        for label, argv in cmds.items():
            for r in range(args.runs):  # interleaved, ABBA: both trees see the same load
                for tree, src in list(trees.items())[:: 1 if r % 2 == 0 else -1]:
                    mine = [a.replace("{tree}", tree) for a in argv]
                    times.setdefault((label, tree), []).append(
                        first_line(src, mine, envs[tree])
                        if label in FIRST_LINE
                        else once(src, mine, envs[tree], tree == "after")
                    )
                if label in READS_RUNS:  # the floor in the same round: the hour cancels
                    floor_s, _ = once(SRC, ["-c", ONE_MODEL], envs["after"], True)
                    beyond.setdefault(label, []).append(times[(label, "after")][-1][0] - floor_s)
        imports = {
            (k, t): heavy_imports(s, [a.replace("{tree}", t) for a in v], envs[t])
            for k, v in cmds.items()
            for t, s in trees.items()
        }

    said: list[str] = []  # each targeted command's verdict
    floor = statistics.median(base)
    goal = max(GOAL_S, 3 * floor)
    with_torch = statistics.median(torch_s)
    print(f"python -c pass {floor:.3f} s, python -c 'import torch' {with_torch:.2f} s")
    print(f"goal for {', '.join(TARGETED)}: <= {goal:.2f} s (0.4 s or 3x python -c pass)")
    head = f"{'command':<18} {'wall s':>7} {'cpu s':>6}  heavy imports"
    if args.before:
        head = (
            f"{'command':<18} {'wall s':>7} {'cpu s':>6} {'before':>7} {'ratio':>6} "
            f"{'95% CI':>11} {'':<10}  heavy imports"
        )
    print(f"\nmedian of {args.runs} fresh processes each (python -m torchmark ...)\n{head}")
    for label in cmds:
        walls = [w for w, _ in times[(label, "after")]]
        wall = statistics.median(walls)
        cpu = statistics.median(c for _, c in times[(label, "after")])
        line = f"{label:<18} {wall:>7.2f} {cpu:>6.2f}"
        if args.before:
            was = statistics.median(w for w, _ in times[(label, "before")])
            pairs = zip(walls, (w for w, _ in times[(label, "before")]), strict=True)
            line += f" {was:>7.2f} {ratio_words(a / b for a, b in pairs)}"
        line += "  " + (", ".join(imports[(label, "after")]) or "-")
        ok = None
        if label in TARGETED:
            verdict = figures.judged(walls, high=goal)
            ok = verdict.said == "met"
            line += f"   goal: {goal_words(verdict)}"
            said.append(verdict.said)
        target = f"<= {goal:.2f} s" if label in TARGETED else ""
        figures.timed(label, walls, target, ok)
        print(line)
    print(over_the_floor(beyond))
    if args.before:
        print("\nbefore, heavy imports:")
        for label in cmds:
            print(f"  {label:<18} {', '.join(imports[(label, 'before')]) or '-'}")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}; {stolen.said()}")
    return figures.exit_status(said)


if __name__ == "__main__":
    sys.exit(main())
