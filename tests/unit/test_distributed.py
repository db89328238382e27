"""Distributed runs without processes: busbw factors, joining torchrun/Slurm, failures."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from torchmark.devices import resolve
from torchmark.errors import InputError, WrongResultError, first_line
from torchmark.kinds.ranks.rank import merged
from torchmark.launch.env import first_host, joined
from torchmark.launch.torchrun import Launch, failed_ranks, validate
from torchmark.results import Result
from torchmark.workloads.base import Case
from torchmark.workloads.micro import collectives as coll


@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("all_reduce", 2, 1.0),
        ("all_reduce", 8, 1.75),
        ("all_gather", 4, 0.75),
        ("reduce_scatter", 2, 0.5),
        ("all_to_all", 8, 0.875),
        ("broadcast", 8, 1.0),
        ("send_recv", 2, 1.0),
    ],
)
def test_bus_factor_is_nccl_tests(op: str, n: int, factor: float) -> None:
    assert coll.bus_factor(op, n) == pytest.approx(factor)


def test_busbw_of_fixed_numbers() -> None:
    # 64 MiB all_reduce over 4 ranks in 10 ms: algbw 6.71 GB/s, busbw x 1.5 = 10.07 GB/s
    size, t = 64 * 2**20, 0.010
    algbw = size / t
    assert algbw * coll.bus_factor("all_reduce", 4) == pytest.approx(10.066e9, rel=1e-3)


def test_sizes_start_at_1_kib_and_split_into_whole_chunks() -> None:
    cpu = resolve(["cpu"])[0]
    sizes = coll.default_sizes(cpu, "quick", 3)
    assert sizes[0] >= 1024 and sizes[0] < 1024 + 12
    assert all(s % (4 * 3) == 0 for s in sizes)


def test_one_rank_plans_one_row_that_says_why() -> None:
    from torchmark.errors import CaseSkipped
    from torchmark.workloads.base import PlanOptions

    cpu = resolve(["cpu"])[0]
    w = coll.Collectives()
    cases = w.cases(cpu, PlanOptions())
    assert len(cases) == 1
    with pytest.raises(CaseSkipped, match=">= 2 ranks"):
        w.prepare(cases[0])


class LyingDist:
    """A process group of 2 whose all_reduce gets element 5 wrong."""

    def all_reduce(self, t: torch.Tensor) -> None:
        t.fill_(3.0)  # 1 + 2 from ranks 0 and 1
        t[5] = 4.0


def test_a_wrong_element_is_named() -> None:
    _, check = coll._all_reduce(LyingDist(), 0, 2, 16, torch.device("cpu"))
    with pytest.raises(WrongResultError, match=r"element 5 is 4\.0, expected 3\.0"):
        check()


def test_first_host_of_slurm_node_lists() -> None:
    assert first_host("gpu[003-005,010],cpu1") == "gpu003"
    assert first_host("node7") == "node7"
    assert first_host("a,b") == "a"


def test_joins_torchrun_and_slurm_steps_only() -> None:
    w = joined({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h"})
    assert w is not None and (w.rank, w.world_size, w.source) == (1, 2, "torchrun")
    slurm = {
        "SLURM_PROCID": "3",
        "SLURM_NTASKS": "4",
        "SLURM_LOCALID": "1",
        "SLURM_JOB_NODELIST": "n[01-02]",
        "SLURM_JOB_ID": "12345",
    }
    # the batch script's own shell is no rank: it has no SLURM_STEP_ID
    assert joined(slurm) is None
    w = joined({**slurm, "SLURM_STEP_ID": "0"})
    assert w is not None
    assert (w.rank, w.world_size, w.local_rank, w.master_addr) == (3, 4, 1, "n01")
    assert w.master_port == 20000 + 12345 % 10000
    assert joined({}) is None
    with pytest.raises(InputError, match="RANK='x'"):
        joined({"RANK": "x", "WORLD_SIZE": "2"})


def test_launch_options_are_checked() -> None:
    with pytest.raises(InputError, match="--rdzv-endpoint"):
        validate(Launch(nnodes=2))
    with pytest.raises(InputError, match="--nproc-per-node must be >= 1"):
        validate(Launch(nproc_per_node=0))


def test_failed_ranks_names_the_first_failure_first() -> None:
    failures: dict[int, Any] = {
        0: SimpleNamespace(exitcode=143, timestamp=20),
        1: SimpleNamespace(exitcode=-9, timestamp=10),
    }
    assert failed_ranks(failures) == (
        "distributed run failed: rank 1 was killed by SIGKILL; rank 0 exited with 143"
    )


def test_a_rank_that_was_wrong_makes_the_case_wrong() -> None:
    cpu = resolve(["cpu"])[0]
    case = Case("collectives", "all_reduce", cpu, (("bytes", 1024), ("ranks", 2)))
    ok = Result(workload="collectives", variant="all_reduce", device="cpu", samples_s=[1e-3])
    ranks = [
        {"rank": 0, "status": "ok", "reason": None, "samples_s": [1e-3]},
        {"rank": 1, "status": "wrong", "reason": "recv: element 0 is 0", "samples_s": []},
    ]
    r = merged(case, ok, ranks)
    assert r.status == "wrong" and r.reason == "rank 1: recv: element 0 is 0"
    assert r.extra["per_rank"] == ranks and r.extra["world_size"] == 2
    assert merged(case, ok, ranks[:1]).status == "ok"


def test_weak_scaling_efficiency_of_fixed_numbers() -> None:
    from torchmark.workloads.models.ddp import efficiency

    assert efficiency(900.0, 1000.0) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="> 0"):
        efficiency(1.0, 0.0)


def _ddp_train_step() -> tuple[Case, Result]:
    """A simplenet training case on the CPU and its rank-0 result: 64 samples in 0.1 s."""
    from torchmark.results import Work

    case = Case("simplenet", "train", resolve(["cpu"])[0])
    r = Result(
        workload="simplenet",
        variant="train",
        device="cpu",
        samples_s=[0.1] * 7,
        work=Work(items=64, item_unit="samples"),
        extra={"optimizer": "sgd"},
    )
    return case, r


def test_a_ddp_training_step_reports_its_total_over_ranks() -> None:
    case, r = _ddp_train_step()
    ranks = [{"rank": i, "status": "ok", "reason": None, "samples_s": [0.1] * 7} for i in (0, 1)]
    m = merged(case, r, ranks)
    assert m.extra["total_items_per_s"] == pytest.approx(2 * 640.0)
    assert "DDP x2, each rank its own batch" in m.notes[-1]
    assert "1.28 k samples/s in total" in m.notes[-1]


def test_ranks_that_disagree_are_said_and_flagged_not_averaged() -> None:
    cpu = resolve(["cpu"])[0]
    case = Case("collectives", "all_reduce", cpu, (("bytes", 1024), ("ranks", 2)))
    ok = Result(workload="collectives", variant="all_reduce", device="cpu", samples_s=[1e-3])
    ranks = [
        {"rank": 0, "status": "ok", "reason": None, "torch": "2.13.0", "device": "cpu"},
        {"rank": 1, "status": "ok", "reason": None, "torch": "2.12.1", "device": "cpu"},
    ]
    r = merged(case, ok, ranks)
    assert "ranks disagree on torch: 2.13.0 on ranks 0; 2.12.1 on ranks 1" in r.notes
    assert "ranks_disagree" in r.flags
    same = merged(case, ok, [ranks[0], {**ranks[0], "rank": 1}])
    assert "ranks_disagree" not in same.flags


def test_more_gpu_ranks_than_gpus_is_refused_more_cpu_ranks_than_cores_warned(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchmark.cli import ranks as cli_run
    from torchmark.run.config import RunConfig

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(InputError, match="--nproc-per-node 2 is more than the 1 GPUs"):
        cli_run.check_ranks(RunConfig(devices=("cuda",)), Launch(nproc_per_node=2))
    monkeypatch.setattr("torchmark.devices.host.available_cores", lambda: 2)
    cli_run.check_ranks(RunConfig(devices=("cpu",)), Launch(nproc_per_node=3))
    assert "--nproc-per-node 3 is more than the 2 cores" in capsys.readouterr().out


def test_exposed_communication_of_fixed_numbers() -> None:
    from torchmark.workloads.models.ddp import explain

    t = {"backward_comm_s": 0.004, "overlap_s": 0.001}
    assert explain(t, 0.010) == pytest.approx({"exposed_comm_s": 0.003, "exposed_comm_share": 0.3})
    # fully hidden: nothing exposed, never negative
    hidden = explain({"backward_comm_s": 0.001, "overlap_s": 0.002}, 0.01)
    assert hidden == {"exposed_comm_s": 0.0, "exposed_comm_share": 0.0}
    assert explain({}, 0.01) is None


@pytest.fixture
def one_rank_group() -> Any:
    """A 1-rank gloo group in this process (an in-memory store, no ports)."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


class StepClock:
    """A clock shared by the ranks that moves ``step`` seconds at every read."""

    def __init__(self, step: float) -> None:
        self.t, self.step, self.reads = 0.0, step, 0

    def __call__(self) -> float:
        self.t += self.step
        self.reads += 1
        return self.t


def test_buckets_are_timed_alone_in_rounds_bounded_by_count_and_budget(one_rank_group: Any) -> None:
    from torchmark.kinds.ranks import buckets

    timings = {"bucket_sizes_bytes": [4096, 1000], "grad_dtype": "float32"}
    cpu = torch.device("cpu")
    syncs: list[int] = []
    # a fast group: the budget never runs out, the count stops it
    fast = buckets.check(timings, cpu, StepClock(1e-3), lambda: syncs.append(1))
    assert fast is not None and fast["sizes_bytes"] == [4096, 1000]
    assert fast["dtype"] == "float32" and len(fast["samples_s"]) == buckets.MAX_ROUNDS
    assert all(t > 0 for t in fast["samples_s"])
    assert len(syncs) == 2 * (buckets.MAX_ROUNDS + 1)  # each round (and the warm-up) waits
    # a slow one: the budget is spent at once, the minimum for a noise estimate still taken
    slow = buckets.check(timings, cpu, StepClock(10.0), lambda: None)
    assert slow is not None and len(slow["samples_s"]) == buckets.MIN_ROUNDS
    # nothing to time: a collectives case, a skipped one (rank 0 decides for every rank)
    assert buckets.check(None, cpu, StepClock(1.0), lambda: None) is None
    no_dtype = {"bucket_sizes_bytes": [4096]}
    assert buckets.check(no_dtype, cpu, StepClock(1.0), lambda: None) is None


def test_a_ddp_step_says_its_comm_beside_the_buckets_timed_alone() -> None:
    case, r = _ddp_train_step()
    alone = {"sizes_bytes": [2_577_416], "dtype": "float32", "samples_s": [0.002] * 5}
    ddp = {"backward_comm_s": 0.004, "overlap_s": 0.003, "alone": alone}
    ranks = [{"rank": i, "status": "ok", "reason": None, "samples_s": [0.1] * 7} for i in (0, 1)]
    m = merged(case, r, [{**ranks[0], "ddp": ddp}, ranks[1]])
    assert m.extra["ddp"]["alone"] == alone
    assert (
        "rank 0: DDP says backward comm 4.00 ms per step; all_reduce of its 1 bucket "
        "(2.58 MB, float32) timed alone: 2.00 ms (IQR 0 %): DDP's figure is 2.00 ms longer"
    ) in " ".join(m.notes)


def test_a_ladder_rung_does_not_announce_its_json_file(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from torchmark.cli.output import write_json
    from torchmark.kinds.ranks.ladder import rung_env
    from torchmark.launch.env import RUNG_ENV
    from torchmark.results import RunRecord

    rec = RunRecord(tool_version="t", kind="run")
    assert RUNG_ENV not in os.environ
    with rung_env():
        assert os.environ[RUNG_ENV] == "1"  # the launcher's ranks inherit it
        write_json(rec, tmp_path / "rung.json")
    assert RUNG_ENV not in os.environ
    assert (tmp_path / "rung.json").exists() and capsys.readouterr().out == ""
    write_json(rec, tmp_path / "mine.json")
    assert "JSON written to" in capsys.readouterr().out  # (a long path may fold)


def test_collectives_say_which_link_carries_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from types import SimpleNamespace

    from torchmark.devices import CPUDevice
    from torchmark.workloads.micro.collectives import link_type

    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert link_type("gloo", CPUDevice()) == "network (ranks on several hosts)"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert link_type("gloo", CPUDevice()).startswith("loopback TCP (gloo")

    class NVMLError(Exception):
        pass

    def nvml(links: int) -> SimpleNamespace:
        def state(handle: object, i: int) -> int:
            if i >= links:
                raise NVMLError("invalid argument")
            return 1

        return SimpleNamespace(
            nvmlInit=lambda: None,
            nvmlDeviceGetHandleByIndex=lambda i: i,
            nvmlDeviceGetNvLinkState=state,
            NVML_FEATURE_ENABLED=1,
            NVML_NVLINK_MAX_LINKS=18,
            NVMLError=NVMLError,
        )

    gpu = SimpleNamespace(index=0)
    monkeypatch.setitem(sys.modules, "pynvml", nvml(18))
    assert link_type("nccl", gpu) == "NVLink (18 active links on this GPU)"  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "pynvml", nvml(0))
    assert link_type("nccl", gpu) == "PCIe (no active NVLink on this GPU)"  # type: ignore[arg-type]


def test_first_line_of_an_error() -> None:
    e = RuntimeError("\n  connect() timed out.\n  at c10d/TCPStore.cpp:123\n")
    assert first_line(e) == "connect() timed out."
    assert first_line(e, 7) == "connect"
    assert first_line(TimeoutError()) == "TimeoutError"
