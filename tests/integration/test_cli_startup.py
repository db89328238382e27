"""Commands start at once: each imports only what it needs (no torch to list stored runs),
the command table matches the commands, and exit codes pass through main()."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from torchmark.cli import COMMANDS, main

HEAVY = ("torch", "scipy", "matplotlib", "sqlalchemy", "numpy")

# Runs torchmark's main() in a fresh interpreter, then writes the heavy top-level packages
# it imported (even when main() exits through SystemExit).
DRIVER = """
import json, sys
try:
    from torchmark.cli import main
    main(sys.argv[2:])
finally:
    loaded = sorted({m.split(".")[0] for m in sys.modules} & set(json.loads(sys.argv[1])))
    sys.stderr.write("HEAVY=" + json.dumps(loaded) + "\\n")
"""


def heavy_after(*argv: str, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    p = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(HEAVY), *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    line = next(x for x in p.stderr.splitlines() if x.startswith("HEAVY="))
    return p.returncode, json.loads(line.removeprefix("HEAVY=")), p.stdout


def test_import_cli_loads_no_torch() -> None:
    code = "import sys, torchmark.cli; print(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "torchmark" in out.stdout
    assert not set(json.loads(out.stdout.replace("'", '"'))) & set(HEAVY)


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], list[str], Path]:
    """A store with two small runs (made in this process) and one run exported as JSON."""
    from torchmark.results import Ceiling, Result, RunRecord, Work
    from torchmark.store import open_store
    from torchmark.store.exchange import export_run

    bw = Ceiling(device="cpu", key="bandwidth", value=4.5e10, unit="B/s", method="mul_")

    def run(hours: int, scale: float) -> RunRecord:
        return RunRecord(
            tool_version="0.1.0",
            created_utc=datetime(2026, 11, 21, tzinfo=timezone.utc) + timedelta(hours=hours),
            status="complete",
            command="torchmark run --quick",
            environment={"host": "box", "devices": {"cpu": {}}},
            fingerprint="fp",
            ceilings=[bw],
            results=[
                Result(workload="add", variant="fp32", device="cpu", params={"numel": 1024},
                       samples_s=[scale * (0.30 + 0.01 * k) for k in range(8)],
                       work=Work(bytes=1.2e10), headline="bytes", ceiling=bw),
                Result(workload="matmul", variant="int8", device="cpu", status="skipped",
                       reason="no int8 kernel"),
            ],
        )  # fmt: skip

    tmp = tmp_path_factory.mktemp("startup")
    db = f"sqlite:///{tmp / 'runs.db'}"
    store = open_store(db)
    try:
        ids = [store.save(run(0, 1.0)), store.save(run(1, 1.5))]
        (tmp / "run.json").write_text(export_run(store.load(ids[0]), "json"))
    finally:
        store.close()
    return {**os.environ, "TORCHMARK_DB": db}, ids, tmp


@pytest.mark.parametrize(
    ("argv", "allowed"),
    [
        (["--help"], ()),
        (["-h"], ()),
        (["--version"], ()),
        (["history", "--help"], ("sqlalchemy",)),  # its module imports the store
        (["history"], ("sqlalchemy",)),
        (["history", "--json"], ("sqlalchemy",)),
        # JSON carries each result's derived statistics, the median's CI from scipy.stats
        (["export", "{a}"], ("sqlalchemy", "numpy", "scipy")),
        (["export", "{a}", "--format", "csv"], ("sqlalchemy", "numpy", "scipy")),
        (["import", "{tmp}/run.json", "--db", "sqlite:///{tmp}/imported.db"],
         ("sqlalchemy", "numpy", "scipy")),
        # the Mann-Whitney test of each pair of cases in pure Python: no numpy, no scipy
        (["compare", "{a}", "{b}"], ("sqlalchemy",)),
        (["report", "{a}", "--markdown", "-"], ("sqlalchemy", "numpy")),
        # show: each kind's printer, as its measuring command printed it (never torch, which
        # the measuring commands import); the model view's break-even verdicts are scipy's
        (["show", "{a}"], ("sqlalchemy", "numpy", "scipy")),
        (["show", "latest", "-v"], ("sqlalchemy", "numpy", "scipy")),
        (["show", "{tmp}/run.json"], ("sqlalchemy", "numpy", "scipy")),
        (["show", "{runs}/model-cpu-gpu.json", "{runs}/tune-cpu.json", "{runs}/input-h100.json"],
         ("sqlalchemy", "numpy", "scipy")),
        # a serving run: its answer, points and sentences from the stored payload
        (["show", "{runs}/serving-cpu.json"], ("sqlalchemy", "numpy")),
        (["report", "{runs}/serving-cpu.json", "--markdown", "-"], ("sqlalchemy", "numpy")),
        # charts are drawn with matplotlib
        (["report", "{a}", "--html", "{tmp}/r.html"], ("sqlalchemy", "numpy", "matplotlib")),
    ],
    ids=lambda v: " ".join(v).replace("{", "").replace("}", "") if isinstance(v, list) else "",
)  # fmt: skip
def test_views_of_stored_runs_import_no_torch(
    stored: tuple[dict[str, str], list[str], Path], argv: list[str], allowed: tuple[str, ...]
) -> None:
    env, (a, b), tmp = stored
    runs = Path(__file__).parents[1] / "fixtures" / "runs"
    args = [x.format(a=a, b=b, tmp=tmp, runs=runs) for x in argv]
    code, heavy, out = heavy_after(*args, env=env)
    assert code == 0, out
    assert set(heavy) <= set(allowed), f"torchmark {' '.join(argv)} imported {heavy}"
    assert "torch" not in heavy


# The installed command's entry in a fresh interpreter: each collection the cyclic garbage
# collector starts once the entry runs says whether `show`'s module was imported by then;
# at the end, whether collection is on.
ENTRY = """
import gc, json, sys
from torchmark.__main__ import main
starts = []
gc.callbacks.append(
    lambda phase, info: phase == "start" and starts.append("torchmark.cli.show" in sys.modules)
)
sys.argv = ["torchmark", *sys.argv[1:]]
try:
    main()
finally:
    print("GC=" + json.dumps({"starts": starts, "enabled": gc.isenabled()}))
"""


def test_the_entry_holds_collection_until_the_command_is_imported(
    stored: tuple[dict[str, str], list[str], Path],
) -> None:
    env, (a, _), _ = stored
    p = subprocess.run(
        [sys.executable, "-c", ENTRY, "show", a],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    assert f"Run {a}" in p.stdout
    seen = json.loads(next(x for x in p.stdout.splitlines() if x.startswith("GC="))[3:])
    # importing typer, rich, pydantic and the command collects nothing; reading the run
    # (its validators built) does, with collection on again for the command's own work
    assert seen["starts"] and all(seen["starts"])
    assert seen["enabled"]


def test_a_caller_running_the_cli_in_its_process_keeps_its_collector_setting(
    stored: tuple[dict[str, str], list[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import gc

    env, (a, _), _ = stored
    gc.disable()
    try:
        main(["show", a, "--db", env["TORCHMARK_DB"]])
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert f"Run {a}" in capsys.readouterr().out


@pytest.mark.parametrize("set_by_user", [None, ""])
def test_pydantic_plugins_are_off_only_for_commands_that_read_stored_runs(
    stored: tuple[dict[str, str], list[str], Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    set_by_user: str | None,
) -> None:
    """Reading a run needs no plugin; a command that runs a user's model or starts a
    process keeps them (its children inherit the environment); the user's choice stands."""
    env, (a, _), _ = stored
    for argv, off in [
        (["model", "--help"], False),
        (["serving", "--help"], False),
        (["show", a, "--db", env["TORCHMARK_DB"]], True),
    ]:
        if set_by_user is None:
            monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
        else:
            monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", set_by_user)
        main(argv)
        said = os.environ.get("PYDANTIC_DISABLE_PLUGINS")
        assert said == ("__all__" if off and set_by_user is None else set_by_user), argv
    capsys.readouterr()


def test_help_lists_every_command_and_version_prints(capsys: pytest.CaptureFixture[str]) -> None:
    main(["-h"])  # exit 0: main() returns
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    assert "--version" in out

    main(["--version"])
    from torchmark import __version__

    assert capsys.readouterr().out.strip() == f"torchmark {__version__}"


def test_command_table_matches_the_commands() -> None:
    """The table's help line is each command's own; every registered command is listed."""
    import typer

    from torchmark.cli import app, load_commands

    load_commands()
    group = typer.main.get_command(app)
    registered = set()
    for info in app.registered_commands:
        cmd = typer.main.get_command_from_info(
            info, pretty_exceptions_short=False, rich_markup_mode=app.rich_markup_mode
        )
        assert cmd.name in COMMANDS, f"{cmd.name} is missing from torchmark.cli.COMMANDS"
        assert COMMANDS[cmd.name].help == (cmd.help or "").split("\n\n")[0].replace("\n", " ")
        assert info.callback is not None
        assert info.callback.__module__ == f"torchmark.cli.{COMMANDS[cmd.name].module}"
        registered.add(cmd.name)
    assert registered == set(COMMANDS)
    assert group.name is not None


def test_unknown_command_suggests_the_near_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["histroy"])
    assert e.value.code == 2
    assert "Did you mean 'history'?" in capsys.readouterr().err


def test_failing_doctor_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchmark import doctor

    monkeypatch.setattr(doctor, "gather", lambda: None)
    monkeypatch.setattr(
        doctor, "run_checks", lambda facts: [doctor.Check("faked", "fail", "broken", "mend it")]
    )
    with pytest.raises(SystemExit) as e:
        main(["doctor"])
    assert e.value.code == 1
    assert "broken" in capsys.readouterr().out

    monkeypatch.setattr(
        doctor, "run_checks", lambda facts: [doctor.Check("faked", "warn", "meh", "mend it")]
    )
    main(["doctor"])  # warnings alone exit 0: no SystemExit


def test_ctrl_c_in_a_command_exits_130(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """click turns a KeyboardInterrupt into Exit(130), which main() must pass on: never
    swallowed (exit 0)."""
    import torchmark.cli.history as history

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(history, "read_store", interrupted)
    with pytest.raises(SystemExit) as e:
        main(["history", "--db", f"sqlite:///{tmp_path / 'x.db'}"])
    assert e.value.code == 130


def test_list_reads_its_catalog_back_without_torch(tmp_path: Path) -> None:
    # `list` imported torch and counted every model's FLOPs each time (3.7 s); the first
    # run keeps its workloads and facts, later ones read them back
    from torchmark.devices import host

    if not host.torch_sees_only_the_host():
        pytest.skip("this torch may see accelerators: `list` asks it which")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "COLUMNS": "200"}
    first = heavy_after("list", "--json", env=env)
    again = heavy_after("list", "--json", env=env)
    assert first[0] == again[0] == 0
    assert "torch" in first[1] and "torch" not in again[1]
    assert json.loads(first[2]) == json.loads(again[2])
    facts = {w["name"]: w for w in json.loads(again[2])["workloads"]}
    assert facts["bert-base"]["flops_per_item"] > 1e10  # the facts travel in the cache
    table = heavy_after("list", env=env)
    assert table[0] == 0 and "torch" not in table[1] and "resnet50" in table[2]
    assert "cpu" in table[2]
