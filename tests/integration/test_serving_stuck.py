"""A user model's forward that never returns, holding the GIL, served: its forward runs only
in worker processes, each ended at the bound with where it stuck; the run ends, keeps what
it measured, exits as ``model`` does and leaves no process behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

from torchmark.devices.host import available_cores
from torchmark.kinds.serving.served import missing
from torchmark.results import RunRecord
from torchmark.results.serving import read

FIX = Path(__file__).parents[1] / "fixtures" / "user_models"
TAG = "TORCHMARK_STUCK_TEST"


def _tagged(tag: str) -> list[int]:
    """The live processes whose environment carries ``TAG=tag`` (the run and its children)."""
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(TAG) == tag and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


def test_a_served_forward_holding_the_gil_ends_each_fleet_with_where_it_stuck(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run.json"
    argv = [
        sys.executable, "-m", "torchmark", "serving", f"{FIX}/holds_the_gil.py:make_model",
        "--input", "4", "--p99-ms", "50", "--batch", "1,4",
        "--budget", "8s", "--point", "2s", "--min-duration", "0.5s", "--min-requests", "100",
        "--max-procs", "2",
        "--json", str(out), "--db", f"sqlite:///{tmp_path / 'r.db'}",
    ]  # fmt: skip
    tag = uuid.uuid4().hex
    env = {**os.environ, "COLUMNS": "80", TAG: tag}
    # each fleet (1 x N, 2 x 1, as served...) stops at the bound (10 s) once its forward
    # hangs: the run ends long before this; before, the in-process fleet hung for hours
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=400)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text  # as `model`: a stuck call is its case's verdict
    said = " ".join(text.split())
    assert "the model's forward did not return within 10 s" in said, text
    assert "holds_the_gil.py:22 in forward" in said, text  # where: the user's own line
    record = RunRecord.model_validate(json.loads(out.read_text()))
    payload = read(record)
    assert payload is not None and record.status == "complete"
    fleets = payload.fleets
    assert len(fleets) >= 1
    if missing() is None:  # behind the server: the model in its process, then in workers
        oip = [f.model_workers for f in fleets if f.served == "oip"]
        assert 0 in oip and (available_cores() < 2 or 1 in oip), oip
    for f in fleets:
        assert f.stop_reason.startswith("stuck: "), f.stop_reason
        assert "holds_the_gil.py:22 in forward" in f.stop_reason, f.stop_reason
    printed = [x for x in p.stdout.splitlines() if x.startswith("[cpu ")]
    assert sum(len(f.points) for f in fleets) >= len(printed)  # every point kept
    deadline = time.monotonic() + 5
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _tagged(tag), "processes left behind"


def test_a_server_killed_without_its_shutdown_leaves_no_model_worker_behind() -> None:
    # SIGKILL skips the pool's own clean-up: its worker, waiting on its queue, stayed for
    # good (one of 250 MB was found an hour after a killed LoadGen check)
    server = subprocess.Popen(
        [sys.executable, "-m", "torchmark.kinds.serving.oip", "--model", "simplenet",
         "--model-workers", "1", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 120
        line = ""
        while "listening on http://" not in line and time.monotonic() < deadline:
            line = server.stdout.readline()
        assert "listening on http://" in line
        workers = [
            p
            for p in psutil.Process(server.pid).children()
            if "resource_tracker" not in " ".join(p.cmdline())
        ]
        assert workers, "the server started its model worker"
        server.kill()
        server.wait(10)
        _, alive = psutil.wait_procs(workers, timeout=15)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()
