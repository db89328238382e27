"""`torchmark run --resume` end to end on the CPU at tiny sizes: a run stopped by SIGTERM
(as `timeout` stops it) is finished in the same run; plan options with --resume are refused."""

from __future__ import annotations

import gc
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from clitest import cli, spawn
from torchmark import format as fmt
from torchmark.store import open_store

N = 5
SIZES = [2**k for k in range(8, 8 + N)]


def sizes_of(run: Any) -> list[int]:
    return sorted(r.params["n"] for r in run.results)


def test_plan_options_with_resume_are_refused_before_anything_is_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = cli(capsys, "run", "--resume", "3", "--workload", "add", "--quick")
    assert code == 2 and err.count("\n") == 1, err
    assert "--resume re-makes the stored run's plan: drop --workload, --quick" in err
    code, _, err = cli(capsys, "run", "--resume", "latest")
    assert (code == 2 and "no runs stored" in err) or "no incomplete" in err, err


def test_a_run_stopped_by_sigterm_resumes_in_the_same_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.devices.cpu import CPUDevice

    # CPUDevice.info() is cached for the process; tests that fake the LLC size (64 KiB in
    # test_ceilings_cpu.py) leave theirs there, and the resume would rightly refuse it
    CPUDevice.info.cache_clear()
    db = f"sqlite:///{tmp_path / 'r.db'}"
    open_store(db).close()  # made here first: two processes creating one database race
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sizes = ",".join(map(str, SIZES))
    args = ["run", "--device", "cpu", "--workload", "add", "--size", sizes]
    args += ["--stopping", "test", "--no-ceilings", "--no-telemetry", "--db", db]
    proc = spawn(args, env, tmp_path)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            time.sleep(0.2)
            runs = open_store(db).list_runs()
            if runs and runs[0].n_results >= 1:
                break
        proc.send_signal(signal.SIGTERM)  # what `timeout 540 torchmark run ...` sends
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    first = open_store(db).load("latest")
    run_id, done = first.run_id or "", len(first.results)
    assert f"`torchmark run --resume {run_id} --db {db}` measures the cases left" in out
    assert first.status == "incomplete" and 1 <= done < N

    # the resumed part in-process; gc.collect() after each case costs ~0.35 s here
    monkeypatch.setattr(gc, "collect", lambda *_: 0)
    code, out, err = cli(capsys, "run", "--resume", "latest", "--db", db)
    assert code == 0, err
    assert f"resuming run {run_id}: {done} of {N} cases done, {N - done} to go" in out
    run = open_store(db).load(run_id)
    assert run.status == "complete" and sizes_of(run) == SIZES  # each planned case once
    assert [r.params["n"] for r in run.results] == SIZES  # in plan order, as one part
    assert run.results[:done] == first.results  # the first part's results kept as they were
    assert [p.results for p in run.payload.parts] == [done, N - done]

    code, _, err = cli(capsys, "run", "--resume", run_id, "--db", db)
    assert code == 2 and f"run {run_id} is complete: nothing to resume" in err
    code, out, _ = cli(capsys, "report", run_id, "--db", db)
    assert code == 0 and f"measured in 2 parts: {fmt.plural(done, 'result')} " in out
