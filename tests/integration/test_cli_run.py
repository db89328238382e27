"""`torchmark run` end to end on the CPU at tiny sizes, and its bad-input behaviour."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from clitest import cli, spawn
from torchmark.results import SCHEMA_VERSION


def test_unknown_device_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", "--device", "cuda:7", "--no-ceilings")
    assert code == 2
    assert err.strip().count("\n") == 0, err
    assert "cuda:7" in err and "cpu" in err and "Traceback" not in err


def test_unknown_workload_lists_valid_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", "--workload", "nope", "--device", "cpu")
    assert code == 2
    assert "unknown workload 'nope'" in err and "seed-add" in err and "matmul" in err


def test_bad_batch_list(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "run", "--batch", "1,x")
    assert code == 2 and "--batch takes comma-separated integers" in err


def test_run_writes_json_with_the_promised_fields(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    code, out, err = cli(
        capsys,
        "run",
        "--device",
        "cpu",
        "--workload",
        "add",
        "--size",
        "65536",
        "--stopping",
        "test",
        "--no-ceilings",
        "--no-telemetry",
        "--json",
        str(out_json),
    )
    assert code == 0, err
    doc = json.loads(out_json.read_text())
    assert doc["status"] == "complete" and doc["schema_version"] == SCHEMA_VERSION
    res = doc["results"][0]
    for key in (
        "workload",
        "variant",
        "device",
        "params",
        "median_s",
        "iqr_s",
        "n",
        "samples_s",
        "throughput",
        "pct_of_ceiling",
        "flags",
    ):
        assert key in res, key
    assert res["workload"] == "add" and res["device"] == "cpu"
    assert res["throughput"]["unit"] == "GB/s" and res["throughput"]["value"] > 0
    assert len(res["samples_s"]) == res["n"]
    assert "add" in out  # the final table shows the case
    # `latest` names this run in the store
    code, out, _ = cli(capsys, "export", "latest", "--format", "json")
    assert code == 0 and json.loads(out)["run_id"] == doc["run_id"]


def _stored_a_result(url: str) -> bool:
    from torchmark.store import open_store

    runs = open_store(url).list_runs()
    return bool(runs and runs[0].n_results >= 1)


def _stop_after_first_result(
    args: list[str],
    db: Path,
    signum: int,
    tmp_path: Path,
    ready: Callable[[str], bool] = _stored_a_result,
) -> tuple[int, str, str]:
    """Start `torchmark ARGS` in a subprocess, send ``signum`` once ``ready(store url)``
    (a result is stored)."""
    from torchmark.store import open_store

    # created here first: two processes creating one new database race
    open_store(f"sqlite:///{db}").close()
    env = {**os.environ, "TORCHMARK_DB": f"sqlite:///{db}", "PYTHONUNBUFFERED": "1"}
    proc = spawn(args, env, tmp_path)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:  # wait until at least one case is stored
            time.sleep(0.5)
            if ready(f"sqlite:///{db}"):
                break
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    return proc.returncode, out, err


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]
)
def test_a_signal_saves_finished_cases_and_exits_128_plus_it(
    tmp_path: Path, signum: int, code: int
) -> None:
    db = tmp_path / "signal.db"
    out_json = tmp_path / "partial.json"
    # many sizes so the run is still going when the signal arrives
    sizes = ",".join(str(2**k) for k in range(10, 22)) * 3
    args = ["run", "--device", "cpu", "--workload", "add", "--size", sizes]
    args += ["--stopping", "micro", "--no-ceilings", "--no-telemetry", "--json", str(out_json)]
    rc, out, err = _stop_after_first_result(args, db, signum, tmp_path)
    assert rc == code, err
    assert "interrupted" in err and "Traceback" not in err
    from torchmark.store import open_store

    run = open_store(f"sqlite:///{db}").load("latest")
    assert run.status == "incomplete"
    assert len(run.results) >= 1 and all(r.n > 0 for r in run.results if r.status == "ok")
    doc = json.loads(out_json.read_text())  # the partial run, written as asked
    assert doc["status"] == "incomplete" and len(doc["results"]) == len(run.results)
    assert "add" in out  # the partial table was shown


def test_a_soak_stopped_with_ctrl_c_is_stored_incomplete_and_exits_130(tmp_path: Path) -> None:
    db = tmp_path / "soak.db"
    args = ["soak", "--duration", "40s", "--workload", "add", "--json", "soak.json"]

    def a_window_stored(url: str) -> bool:
        from torchmark.store import open_store

        store = open_store(url)
        runs = store.list_runs()  # `latest` is the newest *finished* run: name the running one
        soaked = runs and store.load(runs[0].run_id).payload
        return bool(soaked and soaked.soak and soaked.soak.windows)

    rc, _, err = _stop_after_first_result(args, db, signal.SIGINT, tmp_path, a_window_stored)
    assert rc == 130, err
    from torchmark.store import open_store

    run = open_store(f"sqlite:///{db}").load("latest")
    # stopped early, the windows stored as they filled: the soak's own clock says so, not
    # this test's wall clock (a loaded 2-core CI machine starts the CLI slowly)
    assert run.payload.soak.elapsed_s < 35
    assert run.kind == "soak" and run.status == "incomplete" and run.results[0].n > 0
    assert run.payload.soak.windows  # what it measured before the signal is there
    assert json.loads((tmp_path / "soak.json").read_text())["status"] == "incomplete"


def test_json_path_is_checked_before_anything_is_measured(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = cli(
        capsys, "run", "--device", "cpu", "--workload", "add", "--json", str(tmp_path / "no/x.json")
    )
    assert code == 2 and "does not exist" in err
    code, out, _ = cli(capsys, "history", "--json")
    assert code == 0 and json.loads(out) == []  # nothing was measured nor stored


def test_dry_run_lists_the_plan_and_measures_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "run", "--quick", "--device", "cpu", "--dry-run")
    assert code == 0, err
    assert "planned cases" in out and "seed-add" in out and "as-published" in out
    code, out, _ = cli(capsys, "history", "--json")
    assert code == 0 and json.loads(out) == []  # nothing was stored


def test_a_store_that_stays_down_leaves_a_rescue_file_naming_the_cause(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.cli import run as run_cli
    from torchmark.errors import StoreUnavailable
    from torchmark.testing import MemoryStore

    class Locked(MemoryStore):
        def add_result(self, run_id: str, result: object) -> None:
            raise StoreUnavailable("cannot store a result (database is locked)")

        def finish_run(self, run_id: str, run: object) -> None:
            raise StoreUnavailable("cannot finish a run (database is locked)")

    monkeypatch.setattr(run_cli, "open_store", lambda db: Locked())
    monkeypatch.chdir(tmp_path)
    args = ["run", "--device", "cpu", "--workload", "add", "--size", "65536,131072"]
    code, out, err = cli(capsys, *args, "--stopping", "test", "--no-ceilings", "--no-telemetry")
    assert code == 1 and "database is locked" in err and "Traceback" not in err
    (rescue,) = tmp_path.glob("torchmark-unsaved-run-*.json")
    assert rescue.name in out.replace("\n", "")  # its path is printed
    doc = json.loads(rescue.read_text())
    assert [r["params"]["n"] for r in doc["results"]] == [65536, 131072]
    assert (
        all(r["n"] > 0 for r in doc["results"])
        and "database is locked" in doc["payload"]["not_stored"]
    )


def test_an_option_no_planned_workload_uses_is_refused_before_measuring(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "run", "--device", "cpu", "--workload", "add", "--precision", "bf16")
    assert code == 2 and "--precision bf16 is not used by any planned workload (add)" in err
    code, out, _ = cli(capsys, "history", "--json")
    assert code == 0 and json.loads(out) == []  # refused before anything was measured
    code, out, err = cli(
        capsys, "run", "-d", "cpu", "-w", "add", "-w", "matmul", "--precision", "bf16", "--dry-run"
    )
    assert code == 0, err
    assert "note: --precision bf16 is ignored by add" in out


def test_verbose_says_how_each_ceiling_was_measured(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.results import RunRecord
    from torchmark.run import runner

    fixture = Path(__file__).parents[1] / "fixtures" / "runs" / "cpu-only.json"
    record = RunRecord.model_validate_json(fixture.read_text())
    monkeypatch.setattr(runner, "run", lambda *a, **k: record)
    method = "best of a 1024-4096 square sweep"
    code, out, err = cli(capsys, "run", "-d", "cpu", "-w", "add", "--db", str(tmp_path / "v.db"))
    assert code == 0, err
    assert method not in out  # the table stays narrow: methods are not in it by default
    code, out, err = cli(
        capsys, "run", "-d", "cpu", "-w", "add", "-v", "--db", str(tmp_path / "v.db")
    )
    assert code == 0, err
    assert method in " ".join(out.split())  # wrapped at the console's width


def test_a_full_disk_is_said_at_once_and_the_run_kept_in_a_json_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a 5 s run spent 60 s retrying at its start and 60 s at its end, in silence
    from fullstore import full_store
    from torchmark.cli import run as run_cli

    store, waits = full_store(tmp_path / "full.db", every_write=True)
    monkeypatch.setattr(run_cli, "open_store", lambda db: store)
    monkeypatch.chdir(tmp_path)
    args = ["run", "--device", "cpu", "--workload", "add", "--size", "65536"]
    code, out, err = cli(capsys, *args, "--stopping", "test", "--no-ceilings", "--no-telemetry")
    assert code == 1 and "the disk is full" in err and "Traceback" not in err
    assert waits == []  # no retry: nothing frees space by waiting
    lines = out.splitlines()
    warned = next(i for i, line in enumerate(lines) if line.startswith("warning: results store"))
    assert warned < next(i for i, line in enumerate(lines) if line.startswith("[1/1]"))
    (rescue,) = tmp_path.glob("torchmark-unsaved-run-*.json")
    doc = json.loads(rescue.read_text())
    assert [r["params"]["n"] for r in doc["results"]] == [65536]
    assert "the disk is full" in doc["payload"]["not_stored"]
