"""`torchmark history`, `export` and `import` end to end, through the real CLI entry point."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from clitest import cli
from torchmark.cli import COMMAND_MODULES
from torchmark.results import Ceiling, Result, RunRecord, Work
from torchmark.store import open_store
from torchmark.store.exchange import export_run

T0 = datetime(2026, 11, 21, 8, 30, 12, tzinfo=timezone.utc)
FIELDS = ("workload", "variant", "device", "params", "median_s", "iqr_s", "n", "samples_s",
          "throughput", "pct_of_ceiling", "flags")  # fmt: skip


def make_run(hours: int = 0, status: str = "complete", host: str = "box") -> RunRecord:
    bw = Ceiling(device="cpu", key="bandwidth", value=4.5e10, unit="B/s", method="mul_")
    return RunRecord(
        tool_version="0.1.0",
        created_utc=T0 + timedelta(hours=hours),
        status=status,  # type: ignore[arg-type]
        command=f"/venv/bin/torchmark run --quick  # {hours}",
        environment={"host": host, "devices": {"cpu": {}}},
        fingerprint="fp",
        ceilings=[bw],
        results=[
            Result(
                workload="add",
                variant="fp32",
                device="cpu",
                params={"numel": 1024},
                samples_s=[0.1 + 0.2, 1 / 3, 0.31, 0.32, 0.305],
                work=Work(bytes=1.2e10),
                headline="bytes",
                ceiling=bw,
            ),
            Result(workload="matmul", variant="int8", device="cpu", status="skipped",
                   reason="no int8 kernel"),
        ],
    )  # fmt: skip


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


def seed(db: str, *runs: RunRecord) -> list[str]:
    store = open_store(db)
    try:
        return [store.save(r) for r in runs]
    finally:
        store.close()


def snapshot(db: str) -> list[str]:
    store = open_store(db)
    try:
        return [export_run(store.load(r.run_id), "json") for r in store.list_runs()]
    finally:
        store.close()


def test_history_is_a_registered_command() -> None:
    assert "history" in COMMAND_MODULES


def test_history_lists_runs_newest_first(capsys: pytest.CaptureFixture[str], db: str) -> None:
    old, new = seed(db, make_run(0), make_run(5, status="incomplete", host="gpu-box"))
    code, out, _ = cli(capsys, "history", "--db", db)
    assert code == 0
    assert out.index(new) < out.index(old)
    assert "1/2" in out and "incomplete" in out and "gpu-box" in out
    assert "11-21 13:30" in out  # 80 columns when piped: the short time
    assert "torchmark run" in out and "/venv/bin" not in out

    code, out, _ = cli(capsys, "history", "--db", db, "--json", "--limit", "1")
    assert code == 0
    [row] = json.loads(out)
    assert (row["id"], row["status"], row["total"], row["ok"]) == (
        new,
        "incomplete",
        2,
        1,
    )


def test_history_uses_torchmark_db(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "history")
    assert (code, "No runs stored") == (0, out[:14])
    [run_id] = seed(os.environ["TORCHMARK_DB"], make_run())  # set per test by conftest
    code, out, _ = cli(capsys, "history")
    assert code == 0 and run_id in out


def test_history_rejects_a_bad_limit(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, _, err = cli(capsys, "history", "--db", db, "--limit", "0")
    assert code == 2 and "--limit must be at least 1" in err


def test_export_json_to_stdout(capsys: pytest.CaptureFixture[str], db: str) -> None:
    _, new = seed(db, make_run(0), make_run(1))
    code, out, _ = cli(capsys, "export", "latest", "--db", db)
    assert code == 0
    doc = json.loads(out)
    assert doc["run_id"] == new
    for result in doc["results"]:
        assert set(FIELDS) <= set(result)
    assert doc["results"][0]["throughput"]["unit"] == "GB/s"
    assert out == snapshot(db)[0]


def test_export_csv_to_a_file(capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path) -> None:
    [run_id] = seed(db, make_run())
    target = tmp_path / "out.csv"
    code, out, _ = cli(capsys, "export", run_id, "-f", "csv", "-o", str(target), "--db", db)
    assert code == 0 and str(target) in out
    rows = list(csv.DictReader(io.StringIO(target.read_text())))
    assert [(r["workload"], r["status"]) for r in rows] == [("add", "ok"), ("matmul", "skipped")]
    assert rows[1]["reason"] == "no int8 kernel"


def test_export_errors_are_one_line(capsys: pytest.CaptureFixture[str], db: str) -> None:
    seed(db, make_run())
    code, out, err = cli(capsys, "export", "nope", "--db", db)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "no run 'nope'" in err and "torchmark history" in err
    code, _, err = cli(capsys, "export", "latest", "--format", "xml", "--db", db)
    assert code == 2 and "valid formats: csv, json" in err


def test_export_import_round_trip(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    [run_id] = seed(db, make_run())
    exported = tmp_path / "run.json"
    assert cli(capsys, "export", run_id, "-o", str(exported), "--db", db)[0] == 0

    other = f"sqlite:///{tmp_path / 'other.db'}"
    code, out, err = cli(capsys, "import", str(exported), "--db", other)
    assert (code, out.strip(), err) == (0, run_id, "")
    code, out, _ = cli(capsys, "export", run_id, "--db", other)
    assert out == exported.read_text()

    # The same file again: one copy, said so (it made a new copy each time).
    code, out, err = cli(capsys, "import", str(exported), "--db", other)
    assert (code, out.strip()) == (0, run_id) and "nothing imported" in err
    assert len(snapshot(other)) == 1
    # Another run under the same id: both are kept, the new one under a new id.
    doc = json.loads(exported.read_text())
    doc["command"] = "torchmark run --changed"
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(doc))
    code, out, err = cli(capsys, "import", str(changed), "--db", other)
    second = out.strip()
    assert code == 0 and second != run_id and second.startswith("20261121-083012-")
    assert "already in" in err and "both are kept" in err
    assert len(snapshot(other)) == 2


def test_bad_imports_leave_the_store_alone(
    capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path
) -> None:
    seed(db, make_run())
    before = snapshot(db)
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 1,')
    code, out, err = cli(capsys, "import", str(broken), "--db", db)
    assert (code, out) == (2, "")
    assert f"{broken} is not valid JSON (line 1, column 22)" in err
    notes = tmp_path / "notes.json"
    notes.write_text('{"todo": ["buy milk"]}')
    code, _, err = cli(capsys, "import", str(notes), "--db", db)
    assert code == 2 and f"{notes} is not a torchmark run" in err
    assert snapshot(db) == before


def test_corrupt_database_is_named_and_untouched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "results.db"
    bad.write_bytes(b"this is my thesis, not a database\n" * 100)
    before = bad.read_bytes()
    good = tmp_path / "run.json"
    good.write_text(export_run(make_run(), "json"))
    for args in (["history"], ["export", "latest"], ["import", str(good)]):
        code, _, err = cli(capsys, *args, "--db", str(bad))
        assert code == 2, args  # the --db given is not a database: bad input
        assert f"{bad} is not a usable torchmark database" in err
        assert "Traceback" not in err
    assert bad.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.db", "run.json"]


def test_module_entry_point(tmp_path: Path) -> None:
    """`python -m torchmark`: a user error is one line and exit 2, no traceback."""
    db = f"sqlite:///{tmp_path / 'x.db'}"
    seed(db, make_run())
    env = os.environ | {"TORCHMARK_DB": db}
    bad = subprocess.run(
        [sys.executable, "-m", "torchmark", "export", "missing"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "torchmark history" in bad.stderr


def test_short_command() -> None:
    from torchmark.cli.history import short_command

    assert short_command("/venv/bin/torchmark run --quick") == "torchmark run --quick"
    assert short_command("/src/torchmark/__main__.py history") == "torchmark history"
    assert short_command("python bench.py --x") == "python bench.py --x"


def test_a_killed_run_shows_as_incomplete_not_running(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    from torchmark.cli.history import shown_status
    from torchmark.results import RunRecord
    from torchmark.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'k.db'}")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    env = {"host": socket.gethostname()}
    store.begin_run(RunRecord(environment={**env, "pid": int(dead.stdout)}))
    store.begin_run(RunRecord(environment={**env, "pid": os.getpid()}))
    shown = sorted(shown_status(r) for r in store.list_runs())
    assert shown == ["incomplete (process gone)", "running"]


def test_history_prints_commands_as_written_not_as_markup(tmp_path: Path) -> None:
    from rich.console import Console

    from torchmark.cli.history import history_table
    from torchmark.results import RunRecord
    from torchmark.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 'm.db'}")
    store.begin_run(RunRecord(command="torchmark run --tag [nightly]", status="complete"))
    console = Console(width=200, record=True, color_system=None)
    console.print(history_table(store.list_runs(), "x"))
    assert "--tag [nightly]" in console.export_text()


def test_history_and_export_read_a_store_on_a_read_only_mount(tmp_path: Path) -> None:
    # Before: "cannot write the results store ... (unable to open database file)" for
    # history and export alike. A real read-only bind mount, in a private mount namespace.
    import shutil

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare for a read-only mount")
    ro = tmp_path / "ro"
    ro.mkdir()
    db = ro / "results.db"
    [run_id] = seed(str(db), make_run())
    before = {p.name: p.read_bytes() for p in ro.iterdir()}
    tm = f"{sys.executable} -m torchmark"
    script = (
        f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} || exit 77; "
        f"{tm} history --db {db} --json && {tm} export latest --db {db} && "
        f"{tm} import {tmp_path / 'none.json'} --db {db}"
    )
    (tmp_path / "none.json").write_text(export_run(make_run(1)))
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120
    )
    if done.returncode == 77:
        pytest.skip("no permission to mount here")
    history, _, exported = done.stdout.partition("]\n")
    assert json.loads(history + "]")[0]["id"] == run_id
    assert json.loads(exported)["run_id"] == run_id
    assert done.returncode == 2  # the import: a write to the --db given, refused in one line
    assert done.stderr.count("\n") == 1 and "cannot write the results store" in done.stderr
    assert {p.name: p.read_bytes() for p in ro.iterdir()} == before
