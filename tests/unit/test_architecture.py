"""The architecture as checked contracts, not as hopes in a README:

- the rooms (first-level packages and modules of src/torchmark) stand in one order, and
  each imports only rooms below it: every import statement counts, function-level and
  ``if TYPE_CHECKING:`` ones too; a kind of run imports no other kind;
- no import circles between modules (the rules of /work/shared/tools/import_circles.py);
- the commands that only read stored runs start without torch (~1.3 s to import): each
  runs in a fresh interpreter on real stored runs, and a failure names the torchmark
  module that imported torch and the chain of imports that led there.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import torchmark

SRC = Path(torchmark.__file__).parent
RUNS = Path(__file__).parents[1] / "fixtures" / "runs"

# Circles known and being removed elsewhere, each with who removes it; the test fails when a
# listed circle is gone, so the list cannot go stale. Empty since the engine and verdicts
# branches merged (they removed user.bench <-> workloads.pipeline.user, cli.run <->
# cli.scaling and report.charts <-> report.profile).
ALLOWED: set[frozenset[str]] = set()


def modules() -> dict[str, Path]:
    """``torchmark.x.y`` -> its file (a package by its ``__init__.py``)."""
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """The torchmark modules ``name`` imports, each resolved to the module that holds it;
    a package's ``__init__`` importing its own modules, and any module importing one of
    its parent packages, is no edge."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if not target.startswith("torchmark") or target == name:
                continue
            own = path.name == "__init__.py" and target.startswith(name + ".")
            if not own and not name.startswith(target + "."):
                yield target


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, edges = work[-1]
            for w in edges:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    scc = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        scc.add(w)
                        if w == v:
                            break
                    if len(scc) > 1:
                        found.append(frozenset(m.removeprefix("torchmark.") for m in scc))
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(name, path, known)) for name, path in known.items()}


def test_the_circle_finder_sees_function_level_and_type_checking_imports(tmp_path: Path) -> None:
    src = tmp_path / "x.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from torchmark.b import B\n"
        "def f():\n    from torchmark.c.d import e\n    import torchmark.x.y\n"
    )
    known = {n: src for n in ("torchmark.x", "torchmark.b", "torchmark.c", "torchmark.c.d")}
    # c.d.e is a name in c.d; torchmark.x.y is no module: its package x is the importer
    # itself; importing one's own parent package is no edge
    assert set(imports("torchmark.x", src, known)) == {"torchmark.b", "torchmark.c.d"}
    graph = {"torchmark.a": {"torchmark.b"}, "torchmark.b": {"torchmark.c"}}
    graph |= {"torchmark.c": {"torchmark.a"}, "torchmark.d": {"torchmark.a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]


# The rooms, bottom first: each may import only the rooms before it. What is measured sits
# above what is judged, which sits above what is stored; the engine above what it runs; the
# kinds of run above the engine; views, the board and the commands on top.
LAYERS = (
    "errors envvars loaders",  # leaves: the error tree, settings, entry points
    "registry",  # named registries
    "stats",  # pure statistics of samples
    "results",  # what is stored: value objects with raw samples, every kind's payload
    "format",  # numbers in words
    "hardware",  # datasheets and physical bounds
    "judge",  # every verdict: validity, what it allows, comparisons, stragglers
    "store reference",  # where runs are kept; the committed reference runs
    "telemetry",  # samplers
    "devices",  # the one Device interface
    "testing",  # the one set of fakes
    "timing",  # the measure loop and stopping rules
    "ceilings",  # the machine's measured limits
    "variants",  # precisions and optimisations
    "workloads",  # what is measured, with the work it declares
    "launch",  # torchrun, Slurm
    "run",  # the one engine
    "doctor",  # is this install fit to measure
    "user",  # your model: loaded, its inputs, its workload, break-even and cost
    "kinds",  # one room per kind of run
    "report",  # views of stored runs
    "web",  # the leaderboard
    "cli",  # one module per command
    "__main__ torchmark",  # python -m torchmark; the public API
)
# A kind imports no other kind; the exceptions, each with why.
KIND_EDGES = {("model", "loader")}  # `model --loader` is the loader kind's run


def rank_of_rooms(layers: tuple[str, ...] = LAYERS) -> dict[str, int]:
    return {room: i for i, line in enumerate(layers) for room in line.split()}


def against_the_order(graph: dict[str, set[str]], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """Each import from a room to one at or above it in ``layers`` (a kind to another kind
    outside ``KIND_EDGES``), as ``importer -> imported``; a room not in ``layers`` too."""
    rank = rank_of_rooms(layers)

    def room(module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "torchmark"

    bad = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            ra, rb = room(a), room(b)
            if ra not in rank or rb not in rank:
                bad.append(f"{a} -> {b}: room {ra if ra not in rank else rb} not in LAYERS")
            elif ra == rb == "kinds":
                ka, kb = a.split(".")[2], b.split(".")[2]
                if ka != kb and (ka, kb) not in KIND_EDGES:
                    bad.append(f"{a} -> {b}: one kind imports another")
            elif ra != rb and rank[ra] <= rank[rb]:
                bad.append(f"{a} -> {b}: {ra} may not import {rb}, above it")
    return bad


def test_every_room_imports_only_rooms_below_it() -> None:
    bad = against_the_order(import_graph())
    assert not bad, "imports against the order of rooms (move the shared rule down):\n" + (
        "\n".join(bad)
    )


def test_the_order_check_fails_on_an_import_against_it() -> None:
    graph = {
        "torchmark.stats.measurement": {"torchmark.results.record"},  # stats below results
        "torchmark.results.record": {"torchmark.stats.measurement"},
        "torchmark.kinds.serving.kind": {"torchmark.kinds.tune.kind", "torchmark.run.case"},
        "torchmark.kinds.model.kind": {"torchmark.kinds.loader.kind"},
        "torchmark.nowhere": {"torchmark.errors"},
    }
    assert against_the_order(graph) == [
        "torchmark.kinds.serving.kind -> torchmark.kinds.tune.kind: one kind imports another",
        "torchmark.nowhere -> torchmark.errors: room nowhere not in LAYERS",
        "torchmark.stats.measurement -> torchmark.results.record: stats may not import "
        "results, above it",
    ]


def test_no_import_circles_beyond_the_ones_other_branches_remove() -> None:
    found = set(circles(import_graph()))
    new = sorted(" <-> ".join(sorted(c)) for c in found - ALLOWED)
    assert not new, f"import circles: {new}; break them (move the shared rule down a layer)"
    gone = sorted(" <-> ".join(sorted(c)) for c in ALLOWED - found)
    assert not gone, f"circles {gone} are gone: remove them from ALLOWED in this test"


def test_every_torchmark_module_imported_exists() -> None:
    """An import of a moved module fails only when the line runs (a function-level one: when
    that command does), and mypy skips what it cannot find: so each module named in an
    import statement of the package, the tests and the benchmarks must exist."""
    known = set(modules())
    roots = [SRC, SRC.parents[1] / "tests", SRC.parents[1] / "benchmarks"]
    missing = []
    for path in (p for root in roots if root.is_dir() for p in root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                named = [node.module or ""]
            elif isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            else:
                continue
            for name in named:
                if name.startswith("torchmark.") and name not in known:
                    missing.append(f"{path.relative_to(SRC.parents[1])}:{node.lineno} {name}")
    assert not missing, missing


# -- the torch-free boundary --------------------------------------------------------------

# Runs the command in a fresh interpreter with a finder first on sys.meta_path: the first
# `import torch` (or of $WATCHED) records which torchmark modules were on the stack,
# innermost last.
DRIVER = """
import json, os, sys

WATCHED = os.environ.get("WATCHED", "torch")

class Watch:
    chain = None

    def find_spec(self, name, path=None, target=None):
        lookup = sys._getframe(2).f_globals.get("__name__") == "importlib.util"  # no import
        if name == WATCHED and Watch.chain is None and not lookup:
            frames, f = [], sys._getframe(1)
            while f is not None:
                mod = f.f_globals.get("__name__", "")
                if mod.startswith("torchmark") and (not frames or frames[-1] != mod):
                    frames.append(mod)
                f = f.f_back
            Watch.chain = frames[::-1]
            sys.stdout.write("\\n<<torch imported>>\\n")  # where in the output it happened
            sys.stdout.flush()
        return None

sys.meta_path.insert(0, Watch())
code = 0
try:
    from torchmark.cli import main
    main(sys.argv[1:])
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
sys.stderr.write("TORCH=" + json.dumps(Watch.chain) + "\\n")
sys.exit(code)
"""

KINDS = ["run", "model", "tune", "soak", "profile", "loader", "ranks", "collectives", "resumed"]
ALL = [str(RUNS / f"v1-{k}.json") for k in KINDS]
ONE = str(RUNS / "v1-run.json")

# The commands that only read stored runs, on runs of every kind; a command that becomes
# torch-free joins the list. `list`, `env` and `doctor` read what torch said from what was
# kept (below).
READ_ONLY = {
    "history": ["history"],
    "history --json": ["history", "--json"],
    "show (every kind)": ["show", *ALL],
    "show latest -v": ["show", "latest", "-v"],
    "export json": ["export", "latest"],
    "export csv": ["export", "latest", "--format", "csv"],
    "import": ["import", ONE, "--db", "sqlite:///{tmp}/imported.db"],
    "compare": ["compare", ONE, ONE],
    "compare (model)": ["compare", str(RUNS / "v1-model.json"), str(RUNS / "v1-model.json")],
    "compare --reference": ["compare", "--reference", "seed-2023", str(RUNS / "cpu-gpu.json")],
    # a prediction (torchmark predict) beside the run of the machine it predicts
    "show (a prediction)": ["show", str(RUNS / "predict-h100.json")],
    "compare (a prediction)": ["compare", str(RUNS / "predict-h100.json"), "{h100}"],
    "report (a prediction)": ["report", "--html", "{tmp}/p.html", str(RUNS / "predict-h100.json")],
    "report --markdown (every kind)": ["report", "--markdown", "-", *ALL],
    "report --html (every kind)": ["report", "--html", "{tmp}/r.html", *ALL],
    "submit --dry-run": ["submit", "--dry-run", ONE],
    "doctor --help": ["doctor", "--help"],
    "board --help": ["board", "--help"],
    "--help": ["--help"],
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    from torchmark.store import open_store
    from torchmark.store.exchange import import_run

    tmp = tmp_path_factory.mktemp("readonly")
    db = f"sqlite:///{tmp / 'runs.db'}"
    s = open_store(db)
    try:
        for path in ALL:
            s.save(import_run(Path(path)))
    finally:
        s.close()
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return {**env, "TORCHMARK_DB": db}, tmp


@pytest.mark.parametrize("what", READ_ONLY)
def test_read_only_commands_start_without_torch(
    what: str, store: tuple[dict[str, str], Path]
) -> None:
    env, tmp = store
    h100 = SRC / "reference" / "h100-quick.json"  # a reference file: its run, wrapped
    argv = [a.format(tmp=tmp, h100=h100) for a in READ_ONLY[what]]
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    line = next(x for x in p.stderr.splitlines() if x.startswith("TORCH="))
    chain = json.loads(line.removeprefix("TORCH="))
    assert chain is None, (
        f"torchmark {what} imported torch: {chain[-1]} imported it (through {' -> '.join(chain)})"
    )


# The readers of stored runs that hold no input workload (whose advice tests its gains with
# numpy) start without numpy: ~0.05 s of `show latest`'s start. The readers of a local
# SQLite store read it with the standard library (store/read.py) and start without
# SQLAlchemy: importing it alone is 0.2-0.4 s, most of their start. `history` reads no run
# document and starts without pydantic (~0.13 s of its start).
WITHOUT = {
    "numpy": {
        "history": ["history"],
        "show (a run, a model run)": ["show", ONE, str(RUNS / "v1-model.json")],
        "show latest": ["show", "latest"],
        "export json": ["export", "latest"],
        "report --markdown": ["report", "--markdown", "-", ONE],
    },
    "sqlalchemy": {
        "history": ["history"],
        "history --json": ["history", "--json"],
        "show latest": ["show", "latest"],
        "export json": ["export", "latest"],
        "compare (two stored runs)": ["compare", "latest", "latest"],
        "report --markdown (stored)": ["report", "--markdown", "-", "latest"],
    },
    "pydantic": {
        "history": ["history"],
        "history --json": ["history", "--json"],
    },
}


@pytest.mark.parametrize(
    ("module", "what"), [(m, what) for m, commands in WITHOUT.items() for what in commands]
)
def test_readers_of_stored_runs_start_without_what_they_do_not_use(
    module: str, what: str, store: tuple[dict[str, str], Path]
) -> None:
    env, _ = store
    p, chain = _watched(WITHOUT[module][what], {**env, "WATCHED": module})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert chain is None, (
        f"torchmark {what} imported {module}: {chain[-1]} imported it "
        f"(through {' -> '.join(chain)})"
    )


# `list`, `env` and `doctor` read what only an imported torch knows from what the
# last command that imported it kept: the workload catalog (cli/catalog.py) and torch's facts
# (run/torchfacts.py), here after one `list` and one `env --refresh`. `list` and `env` start
# without pydantic too: typer coerces plain values without it (cli.app.PlainValues), where
# its adapters were ~0.15 s of their start.
KEPT = {
    "list": ["list"],
    "list --json": ["list", "--json"],
    "env": ["env"],
    "env --json": ["env", "--json"],
}


def _watched(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], Any]:
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, *argv], capture_output=True, text=True, env=env, timeout=180
    )
    line = next(x for x in p.stderr.splitlines() if x.startswith("TORCH="))
    return p, json.loads(line.removeprefix("TORCH="))


@pytest.fixture(scope="module")
def kept(store: tuple[dict[str, str], Path]) -> dict[str, str]:
    env, tmp = store
    env = {**env, "XDG_CACHE_HOME": str(tmp / "kept-cache")}
    for argv in (["list"], ["env", "--refresh"]):
        p, chain = _watched(argv, env)
        assert p.returncode == 0, p.stderr[-2000:]
        assert chain, f"torchmark {' '.join(argv)} keeps what torch says: it imports torch"
    return env


@pytest.mark.parametrize("module", ["torch", "pydantic"])
@pytest.mark.parametrize("what", KEPT)
def test_list_and_env_start_without_torch_or_pydantic_once_kept(
    what: str, module: str, kept: dict[str, str]
) -> None:
    p, chain = _watched(KEPT[what], {**kept, "WATCHED": module})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert chain is None, f"torchmark {what} imported {module} (through {' -> '.join(chain)})"


def test_doctor_prints_its_torch_free_checks_before_importing_torch(
    kept: dict[str, str],
) -> None:
    p, chain = _watched(["doctor"], kept)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    before, marker, after = p.stdout.partition("<<torch imported>>")
    assert marker and chain and chain[-1] == "torchmark.doctor.facts", chain  # gather_torch
    for name in ("threads", "host memory", "machine load", "CPU governor"):
        assert name in before, f"{name!r} waited for torch:\n{p.stdout}"
    for name in ("torch build", "tiny op on cpu"):
        assert name in after


def test_the_boundary_check_names_the_module_that_imports_torch(tmp_path: Path) -> None:
    """The driver run on a command that does import torch (planning a run finds the
    devices) names a torchmark module, so a failure above says where to look."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, "run", "--dry-run", "-w", "add", "-d", "cpu"],
        capture_output=True,
        text=True,
        env={**env, "TORCHMARK_DB": f"sqlite:///{tmp_path / 'r.db'}"},
        timeout=180,
    )
    chain = json.loads(next(x for x in p.stderr.splitlines() if x.startswith("TORCH="))[6:])
    assert chain and chain[0].startswith("torchmark") and chain[-1].startswith("torchmark.")
