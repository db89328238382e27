"""`torchmark run` end to end on the CPU at tiny sizes, and its bad-input behaviour."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from torchmark.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


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
    assert doc["status"] == "complete" and doc["schema_version"] == 1
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


def test_sigint_saves_finished_cases_and_exits_130(tmp_path: Path) -> None:
    db = tmp_path / "sigint.db"
    env = {**os.environ, "TORCHMARK_DB": f"sqlite:///{db}", "PYTHONUNBUFFERED": "1"}
    # many sizes so the run is still going when the signal arrives
    sizes = ",".join(str(2**k) for k in range(10, 22)) * 3
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torchmark",
            "run",
            "--device",
            "cpu",
            "--workload",
            "add",
            "--size",
            sizes,
            "--stopping",
            "micro",
            "--no-ceilings",
            "--no-telemetry",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    from torchmark.store import open_store

    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:  # wait until at least one case is stored
            time.sleep(0.5)
            if db.exists():
                runs = open_store(f"sqlite:///{db}").list_runs()
                if runs and runs[0].n_results >= 1:
                    break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    run = open_store(f"sqlite:///{db}").load("latest")
    assert run.status == "incomplete"
    assert len(run.results) >= 1 and all(r.n > 0 for r in run.results if r.status == "ok")


def test_dry_run_lists_the_plan_and_measures_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "run", "--quick", "--device", "cpu", "--dry-run")
    assert code == 0, err
    assert "planned cases" in out and "seed-add" in out and "as-published" in out
    code, out, _ = cli(capsys, "history", "--json")
    assert code == 0 and json.loads(out) == []  # nothing was stored
