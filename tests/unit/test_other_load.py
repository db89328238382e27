"""Load is *other* load: the run's own processes (its children, its sibling ranks) never
count, ranks share the node's cores, and ``--threads auto`` takes the free ones."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from torchmark.cli.run import threads_of
from torchmark.doctor.host import check_load
from torchmark.errors import InputError
from torchmark.judge.load import free_cores
from torchmark.launch.env import joined
from torchmark.telemetry import host
from torchmark.telemetry.host import HostSource, RunTree, run_root

# A child that burns this much of its own CPU time (not wall time: the outcome must not
# depend on how loaded the machine is).
BURN_S = 0.3
BURN = f"import time\nwhile time.process_time() < {BURN_S}:\n    pass\n"


def test_a_child_process_cpu_time_is_the_runs_own_not_other_load() -> None:
    src = HostSource()
    src.open()
    before = src.read()["proc_s"]
    subprocess.run([sys.executable, "-c", BURN], check=True)
    after = src.read()["proc_s"]
    # the child's CPU time lands in the run's own (old code: this process's alone, ~0)
    assert after - before >= BURN_S * 0.9


def test_a_running_child_counts_before_it_ends() -> None:
    tree = RunTree(root=os.getpid(), clock=iter(range(0, 1000, 10)).__next__)
    before = tree.cpu_s()
    child = subprocess.Popen(
        [sys.executable, "-c", BURN + "import sys\nsys.stdout.write('x')\nsys.stdin.read()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.read(1) == b"x"  # burned, waiting
        assert child.pid in tree.pids()
        assert tree.cpu_s() - before >= BURN_S * 0.9
    finally:
        child.communicate(b"")


def test_a_rank_is_one_of_its_parents_ranks() -> None:
    rank = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}
    assert run_root(rank, lambda: [4242, 1]) == 4242  # torchrun's agent: the siblings' parent
    assert run_root({"SLURM_STEP_ID": "0"}, lambda: [77, 1]) == 77
    assert run_root({}, lambda: [4242, 1]) == os.getpid()  # alone: its own tree


def test_ranks_share_the_nodes_cores_by_default() -> None:
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"}
    world = joined(env)
    assert world is not None and world.threads(2) == 1 and world.threads(16) == 8
    alone = joined({"RANK": "0", "WORLD_SIZE": "1"})
    assert alone is not None and alone.threads(2) == 2
    slurm = {
        "SLURM_PROCID": "3",
        "SLURM_STEP_ID": "0",
        "SLURM_NTASKS": "8",
        "SLURM_NNODES": "2",
        "SLURM_JOB_NODELIST": "n[1-2]",
    }
    world = joined(slurm)
    assert world is not None and world.local_world_size == 4 and world.threads(8) == 2


def test_free_cores_leave_the_busy_ones_out() -> None:
    assert free_cores(1.1, 2) == 1
    assert free_cores(0.2, 2) == 2
    assert free_cores(3.9, 2) == 1
    assert free_cores(0.0, None) == 1


class _Busy:
    """OtherLoad as if one other process held 1.1 of 2 cores."""

    def __init__(self, *a: Any, **k: Any) -> None:
        self.cores, self.logical_cores = None, 2

    def __enter__(self) -> _Busy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cores = 1.1


def test_threads_auto_takes_the_free_cores_and_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(host, "OtherLoad", _Busy)
    monkeypatch.setattr("torchmark.cli.run.AUTO_THREADS_SAMPLE_S", 0.0)
    assert threads_of("auto") == 1
    out = capsys.readouterr().out
    assert "--threads auto: 1 thread, the cores other processes leave free" in out
    assert "1.1 of 2" in out and len(out.splitlines()) == 1
    assert threads_of("3") == 3 and threads_of(None) is None
    with pytest.raises(InputError, match="--threads takes a count >= 1 or auto"):
        threads_of("many")


def _facts(other: float, load1: float) -> dict[str, Any]:
    return {
        "threads": {"logical_cores": 2},
        "load": {"other_cores": other, "loadavg": [load1, 1.0, 0.5], "top": [], "sample_s": 1.0},
    }


def test_doctor_warns_of_a_busy_minute_behind_a_quiet_sample() -> None:
    c = check_load(_facts(0.0, 2.15))[0]
    assert c.status == "warn"
    assert c.detail == "other processes use 0.0 of 2 cores over 1 s; 1-minute load 2.15"
    assert check_load(_facts(0.0, 0.1))[0].status == "ok"
