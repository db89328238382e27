"""The scaling ladder's arithmetic and table on fixed numbers, the ladder's command lines,
the start-up handshake with a fake disagreeing rank, and compare across world sizes."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from torchmark.devices import resolve
from torchmark.errors import InputError
from torchmark.judge.comparison import compare
from torchmark.judge.stragglers import RankTimes
from torchmark.judge.worlds import world_difference
from torchmark.kinds.ranks import ladder as ladder_mod
from torchmark.kinds.ranks import rank as rank_mod
from torchmark.launch.env import World
from torchmark.launch.torchrun import Launch
from torchmark.report.scaling import ladder, ladder_renderables, loss_lines, straggler
from torchmark.results import Result, RunRecord, Work
from torchmark.run.config import RunConfig
from torchmark.workloads import Case

PARAMS = {"scenario": "train", "precision": "fp32", "batch": 8}


def spread(median: float, rel: float = 0.01, n: int = 20) -> list[float]:
    """n samples evenly over median ± rel: relative IQR ~ rel (deterministic)."""
    return [float(x) for x in median * (1 + np.linspace(-rel, rel, n))]


def train(samples: list[float], world: int | None = None, **extra: Any) -> Result:
    """A training result; ``extra`` as a rank or a DataParallel run records it."""
    e: dict[str, Any] = {"optimizer": "sgd", **extra}
    if world is not None:
        e["world_size"] = world
    return Result(
        workload="simplenet",
        variant="train",
        device="cpu",
        params=PARAMS,
        samples_s=samples,
        work=Work(items=8, item_unit="samples"),
        extra=e,
    )


def rank(i: int, samples: list[float], comm: float = 0.0, overlap: float = 0.0) -> dict:
    ddp = {"forward_s": 1e-3, "backward_compute_s": 2e-3}
    ddp |= {"backward_comm_s": comm, "overlap_s": overlap}
    return {"rank": i, "status": "ok", "reason": None, "samples_s": samples, "ddp": ddp}


def record(r: Result, world: int | None = None) -> RunRecord:
    config: dict[str, Any] = {}
    if world is not None:
        config["distributed"] = {"world_size": world, "backend": "gloo", "strategy": "ddp"}
    return RunRecord(tool_version="t", kind="run", config=config, results=[r])


def fake_ladder(slow_rank: float = 1.0) -> list[RunRecord]:
    """no DDP 10 ms, DDP x1 10.5 ms (exposed 0.2 ms), DDP x2 12.5 ms (exposed 1.7 ms)."""
    plain = train(spread(0.010))
    one = spread(0.0105)
    ddp1 = train(
        one,
        world=1,
        per_rank=[rank(0, one, 0.001, 0.0008)],
        ddp={"exposed_comm_s": 0.0002, "exposed_comm_share": 0.0002 / 0.0105},
    )
    two = spread(0.0125)
    slow = [t * slow_rank for t in two]
    ddp2 = train(
        slow,  # in lockstep each sample is the slowest rank's
        world=2,
        per_rank=[rank(0, two, 0.004, 0.0023), rank(1, slow)],
        ddp={"exposed_comm_s": 0.0017, "exposed_comm_share": 0.0017 / 0.0125},
    )
    return [record(plain), record(ddp1, 1), record(ddp2, 2)]


def text(records: list[RunRecord], width: int = 80, labels: list[str] | None = None) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    for r in ladder_renderables(records, labels):
        console.print(r)
    return out.getvalue()


def test_ladder_rows_of_fixed_numbers() -> None:
    (rungs,) = ladder(fake_ladder()).values()
    assert [g.label for g in rungs] == ["no DDP", "DDP x1", "DDP x2"]
    plain, one, two = rungs
    assert plain.per_rank == pytest.approx(800.0) and plain.total == pytest.approx(800.0)
    assert two.per_rank == pytest.approx(8 / 0.0125) and two.total == pytest.approx(2 * 640.0)
    assert one.vs_plain is not None and one.vs_plain.value == pytest.approx(10 / 10.5)
    assert two.vs_plain is not None and two.vs_plain.value == pytest.approx(0.8)
    assert two.vs_ddp1 is not None and two.vs_ddp1.value == pytest.approx(10.5 / 12.5)
    assert two.vs_ddp1.verdict == "SLOWER"
    assert plain.vs_plain is None and one.vs_ddp1 is None
    assert [t.rank for t in two.ranks] == [0, 1]
    assert two.ranks[0].p50_s == pytest.approx(0.0125)
    assert two.straggler is None  # equal ranks


def test_the_loss_vs_ddp1_is_split_into_exposed_communication_and_the_rest() -> None:
    (rungs,) = ladder(fake_ladder()).values()
    lines = loss_lines(rungs)
    assert lines[0].startswith("DDP x1 vs no DDP (DDP's own overhead): step time +5")
    # 2 ms lost per step, exposed communication grew 1.5 ms: 75 % of the loss
    assert lines[1] == (
        "DDP x2 vs DDP x1: step +2.00 ms: exposed communication +1.50 ms explains 75.0 % of "
        "it; the other 25.0 % is not communication (compute slowed by shared cores, stragglers, "
        "waiting)"
    )


def test_exposed_communication_beyond_the_loss_covers_it_all_and_says_why() -> None:
    recs = fake_ladder()
    two = recs[2].results[0]
    ddp = {**two.extra["ddp"], "exposed_comm_s": 0.005}  # 4.8 ms grown, 2 ms lost
    recs[2] = record(two.model_copy(update={"extra": {**two.extra, "ddp": ddp}}), 2)
    (rungs,) = ladder(recs).values()
    assert loss_lines(rungs)[1] == (
        "DDP x2 vs DDP x1: step +2.00 ms: exposed communication +4.80 ms covers all of it "
        "(DDP's timers average sampled steps, warm-up included)"
    )


def test_a_loss_within_the_noise_is_not_called_one() -> None:
    recs = fake_ladder()
    noisy = train(spread(0.0107, rel=0.4, n=8), world=2, per_rank=[rank(0, [0.01])])
    recs[2] = record(noisy, 2)
    (rungs,) = ladder(recs).values()
    assert rungs[2].vs_ddp1 is not None and rungs[2].vs_ddp1.verdict == "UNCLEAR"
    assert rungs[2].vs_ddp1.text().endswith("?")
    assert loss_lines(rungs)[1].endswith("can't tell from the noise")


def test_a_straggler_is_named_beyond_the_noise_only() -> None:
    def rt(i: int, p50: float, iqr: float = 0.01) -> RankTimes:
        return RankTimes(i, p50, p50 * 1.1, iqr, None)

    assert straggler([rt(0, 0.010), rt(1, 0.0101), rt(2, 0.010)]) is None  # 1 % < 2 %
    named = straggler([rt(0, 0.010), rt(1, 0.013), rt(2, 0.010)])
    assert named is not None and named.startswith("rank 1: step p50 13.0 ms vs 10.0 ms")
    # +30 % inside a 40 % spread is noise
    assert straggler([rt(0, 0.010, 0.4), rt(1, 0.013, 0.4)]) is None
    assert straggler([rt(0, 0.010)]) is None


def test_the_ladder_table_reads_in_80_columns() -> None:
    out = text(fake_ladder(slow_rank=1.3))
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "scaling of simplenet/train fp32 b=8: samples/s, weak (8 per rank a step), gloo" in out
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    plain, one, two = lines[rule + 1 : rule + 4]
    assert plain.split()[:4] == ["no", "DDP", "800", "800"]
    assert one.split()[:5] == ["DDP", "x1", "762", "762", "95.2"]
    # 16.25 ms a step: 492 samples/s per rank, 61.5 % of no DDP's 800, 64.6 % of DDP x1's
    assert "492" in two and "985" in two and "61.5 %" in two and "64.6 %" in two
    assert "16.2 ms" in two and "13.6 %" in two and "rank 1" in two
    assert "DDP x2 straggler: rank 1: step p50 16.2 ms vs 12.5 ms" in out
    assert "DDP x2 step p50/p95 per rank: r0 12.5 ms/" in out


def test_compare_across_world_sizes_says_why() -> None:
    plain, _, two = fake_ladder()
    cmp = compare([plain, two])
    (change,) = cmp.changes[0]
    assert change.verdict == "SLOWER"  # per rank: the scaling loss, and said so
    assert change.why.startswith("A ran no DDP, B DDP x2: weak scaling, so the speed is per rank")
    same = compare([plain, plain])
    assert "DDP" not in same.changes[0][0].why
    assert world_difference(two.results[0], two.results[0]) is None


def test_compare_across_world_sizes_says_why_in_80_columns_too() -> None:
    from torchmark.report.compare import comparison_table

    plain, _, two = fake_ladder()
    cmp = compare([plain, two])
    assert cmp.changes[0][0].verdict == "SLOWER"  # not UNCLEAR: still said under the table
    _, notes = comparison_table(cmp, width=80)
    assert len(notes) == 1 and "SLOWER, A ran no DDP, B DDP x2: weak scaling" in notes[0]
    _, notes = comparison_table(compare([plain, plain]), width=80)
    assert notes == []


# -- the handshake ---------------------------------------------------------------------------


def ident(**kw: Any) -> dict[str, Any]:
    cpu = resolve(["cpu"])[0]
    cases = [Case("simplenet", "train", cpu, tuple(PARAMS.items()))]
    base = rank_mod.identity(RunConfig(devices=("cpu",), batches=(8,)), cases)
    return {**base, **kw}


def test_ranks_that_agree_pass_the_handshake() -> None:
    assert rank_mod.disagreement([ident(), ident()]) is None


@pytest.mark.parametrize(
    ("other", "said"),
    [
        ({"torch": "2.12.0"}, "rank 1 disagrees with rank 0 on the torch version: 2.12.0 on"),
        ({"torchmark": "0.0.1"}, "on the torchmark version: 0.0.1 on rank 1"),
        ({"cases": []}, "on the planned cases: 0 on rank 1, 1 on rank 0 (one plan ends early)"),
    ],
)
def test_a_disagreeing_rank_is_named_with_the_difference(other: dict, said: str) -> None:
    problem = rank_mod.disagreement([ident(), ident(), ident(**other)])
    assert problem is not None and said.replace("rank 1", "rank 2") in problem
    assert problem.endswith("start every rank with the same torchmark, torch and command line")


def test_a_rank_with_other_options_is_named_with_the_option() -> None:
    cpu = resolve(["cpu"])[0]
    other = rank_mod.identity(RunConfig(devices=("cpu",), batches=(16,)), [])
    problem = rank_mod.disagreement([ident(), other])
    said = "on the option batches: (16,) on rank 1, (8,) on rank 0"
    assert problem is not None and said in problem
    assert cpu.name == "cpu"


def test_handshake_refuses_on_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake process group whose rank 1 runs another torch."""

    def all_gather_object(out: list, mine: dict) -> None:
        out[:] = [mine, {**mine, "torch": "2.0.0"}]

    monkeypatch.setattr(rank_mod.dist, "all_gather_object", all_gather_object)
    world = World(0, 2, 0, "127.0.0.1", 29500, "torchrun")
    with pytest.raises(rank_mod.RanksDisagree, match=r"torch version: 2\.0\.0 on rank 1") as e:
        rank_mod.handshake(ident(), world)
    assert e.value.exit_code != 0


# -- DDP x1 is a launch, and says so ----------------------------------------------------------


def test_nproc_per_node_1_is_a_launch_not_a_plain_run() -> None:
    assert Launch(nproc_per_node=1).wanted and Launch(nproc_per_node=1).nproc == 1
    assert not Launch().wanted and Launch().nproc == 1


def test_the_header_says_ddp_world_size_and_backend() -> None:
    info = {
        "world_size": 1,
        "backend": "gloo",
        "launched_by": "torchrun",
        "master": "127.0.0.1:29500",
        "strategy": "ddp",
    }
    assert rank_mod.header(info) == (
        "DDP x1: world size 1, backend gloo, started by torchrun (master 127.0.0.1:29500); "
        "each rank trains its own batch, throughput is per rank"
    )
    assert rank_mod.header({**info, "strategy": None, "world_size": 2}).startswith(
        "2 ranks: world size 2, backend gloo"
    )


# -- the ladder's command lines ---------------------------------------------------------------


def test_each_rung_is_the_users_command_with_its_own_world_size() -> None:
    argv = ["run", "-w", "simplenet", "--scaling", "1,2", "--json=x.json", "--db", "sqlite://"]
    argv += ["--strategy", "ddp,fsdp"]
    out = ladder_mod.rung_argv(argv, 2, Path("/t/r.json"), "fsdp")
    assert out == [
        "run", "-w", "simplenet", "--db", "sqlite://",
        "--nproc-per-node", "2", "--strategy", "fsdp", "--json", "/t/r.json",
    ]  # fmt: skip


def test_bad_ladders_are_refused() -> None:
    cpu = resolve(["cpu"])[0]
    trains = [Case("simplenet", "train", cpu, tuple(PARAMS.items()))]
    infer = [Case("simplenet", "infer", cpu, (("scenario", "infer"),))]
    ladder_mod.check((1, 2), Launch(), trains)
    with pytest.raises(InputError, match="increasing world sizes"):
        ladder_mod.check((2, 1), Launch(), trains)
    with pytest.raises(InputError, match="drop --nproc-per-node"):
        ladder_mod.check((1, 2), Launch(nproc_per_node=2), trains)
    with pytest.raises(InputError, match="add --scenario train"):
        ladder_mod.check((1, 2), Launch(), trains + infer)
    with pytest.raises(InputError, match="unknown --strategy zero; valid: ddp, fsdp, dp"):
        ladder_mod.check((1, 2), Launch(), trains, ("ddp", "zero"))
    gpu = [Case("simplenet", "train", FakeCuda(), tuple(PARAMS.items()))]
    with pytest.raises(InputError, match="--scaling 2 ranks need 2 GPUs, one each; 1 here"):
        ladder_mod.check((1, 2), Launch(), gpu, ("ddp", "dp"), gpus=1)
    ladder_mod.check((1, 2), Launch(), gpu, ("dp",), gpus=1)  # DP x2: skipped, said why


class FakeCuda:
    kind, name = "cuda", "cuda:0"


# -- DataParallel and FSDP rows -----------------------------------------------------------------


def test_dataparallel_is_skipped_with_the_reason_on_a_cpu() -> None:
    from torch import nn

    from torchmark.errors import CaseSkipped
    from torchmark.workloads.models.ddp import data_parallel, describe, using

    cpu = resolve(["cpu"])[0]
    with using("dp", 2), pytest.raises(CaseSkipped, match="DataParallel splits a batch over CUDA"):
        data_parallel(nn.Linear(2, 2), cpu)
    with using("dp", 2):
        assert describe() == {"strategy": "dp", "gpus": 2}
    assert describe() == {}  # a plain run records no strategy
    plain = nn.Linear(2, 2)
    assert data_parallel(plain, cpu) is plain  # no process group: no DDP


def test_dataparallel_beyond_the_gpus_here_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from torch import nn

    from torchmark.errors import CaseSkipped
    from torchmark.workloads.models.ddp import data_parallel, using

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with using("dp", 2), pytest.raises(CaseSkipped, match="DP x2 needs 2 GPUs; 1 here"):
        data_parallel(nn.Linear(2, 2), FakeCuda())  # type: ignore[arg-type]


def test_a_dataparallel_row_is_per_gpu_and_a_skipped_row_says_why() -> None:
    recs = fake_ladder()
    # DP x2 on 2 GPUs: batch 16 in 12 ms = 1333 samples/s in all, 667 per GPU
    dp = train(spread(0.012), strategy="dp", gpus=2)
    dp = dp.model_copy(update={"params": {**PARAMS, "batch": 16}, "work": Work(items=16)})
    skipped = Result(
        workload="simplenet",
        variant="train",
        device="cpu",
        params={**PARAMS, "batch": 16},
        status="skipped",
        reason="nn.DataParallel splits a batch over CUDA GPUs; cpu is not one",
    )
    (rungs,) = ladder([*recs, record(dp)]).values()
    assert [g.label for g in rungs][-1] == "DP x2"
    assert rungs[-1].per_rank == pytest.approx(16 / 0.012 / 2)
    assert rungs[-1].total == pytest.approx(16 / 0.012)
    assert rungs[-1].vs_plain is not None and rungs[-1].vs_plain.value == pytest.approx(10 / 12)
    labels = ["no DDP", "DDP x1", "DDP x2", "DP x2"]
    (rungs,) = ladder([*recs, record(skipped)], labels).values()
    assert rungs[-1].label == "DP x2" and rungs[-1].per_rank is None
    assert "DP x2 skipped: nn.DataParallel splits a batch over CUDA GPUs; cpu is not one" in (
        loss_lines(rungs)
    )
    out = text([*recs, record(skipped)], 80, labels)
    assert out.count("scaling of") == 1, out  # the skipped row joins its case (batch per GPU)
    assert any(line.split() == ["DP", "x2", "skipped"] for line in out.splitlines()), out


# -- DDP's comm figure against all_reduce timed alone; DDP x1's overhead split -------------


def ddp_extra(comm: float, alone: list[float], exposed: float | None = None) -> dict[str, Any]:
    sizes = [1_050_624, 26_214_400, 26_214_400, 26_214_400, 23_000_000]
    d: dict[str, Any] = {"backward_comm_s": comm, "overlap_s": comm - (exposed or 0.0)}
    d["alone"] = {"sizes_bytes": sizes, "dtype": "float32", "samples_s": alone}
    if exposed is not None:
        d["exposed_comm_s"] = exposed
    return d


def test_ddp_comm_beside_its_buckets_timed_alone() -> None:
    from torchmark.kinds.ranks.comm import comm_check, comm_check_text, sizes_text

    assert sizes_text([1_050_624, 26_214_400, 26_214_400, 5]) == "1.05 MB, 26.2 MB x2, 5 B"
    assert sizes_text(list(range(1, 9)), most=3) == "1 B, 2 B, 3 B, ... 5 more"
    # the H100's DDP x1: an 18.2 ms window (17.6 ms of it overlapped), 0.4 ms alone
    c = comm_check(ddp_extra(0.0182, spread(0.0004, rel=0.02), exposed=0.0006), 0.10)
    assert c is not None and c.alone_s == pytest.approx(0.0004)
    assert c.threshold == pytest.approx(np.hypot(c.alone_rel_iqr, 0.10))
    assert comm_check_text(c) == (
        "DDP says backward comm 18.2 ms per step; all_reduce of its 5 buckets (1.05 MB, "
        "26.2 MB x3, 23.0 MB, float32) timed alone: 400 µs (IQR 2.0 %): DDP's figure is "
        "17.8 ms longer (+4,450 %, noise ±10 %): its window runs from the first bucket's "
        "all_reduce to the last's end, so it also holds the waits for gradients still being "
        "computed; exposed comm 600 µs is more than all the buckets take alone: DDP counts "
        "more than communication as exposed (its work after the last bucket), or "
        "communication ran slower inside the step (sharing cores or links)"
    )


def test_comm_figures_agree_only_when_the_noise_is_small_else_cant_tell() -> None:
    from torchmark.kinds.ranks.comm import comm_check, comm_check_text

    quiet = comm_check(ddp_extra(0.0101, spread(0.010, rel=0.001), exposed=0.002), 0.001)
    assert quiet is not None
    text = comm_check_text(quiet)
    assert text.endswith(
        ": they agree within 2 %; exposed comm 2.00 ms is within what all the buckets take alone"
    )
    # +5 % inside a 30 % spread: not "agree"
    noisy = comm_check(ddp_extra(0.0105, spread(0.010, rel=0.3)), 0.0)
    assert noisy is not None
    assert "can't tell them apart (+5.00 % inside the ±30 % noise)" in comm_check_text(noisy)
    assert "agree" not in comm_check_text(noisy)
    slower = comm_check(ddp_extra(0.005, spread(0.010, rel=0.01)), 0.01)
    assert slower is not None
    assert "the all_reduce alone takes 5.00 ms more than DDP's window (-50.0 %, noise ±2.0 %)" in (
        comm_check_text(slower)
    )
    assert comm_check({"backward_comm_s": 0.01}, 0.0) is None  # no buckets timed


def h100_ladder(plain_rel: float = 0.048, ddp1_rel: float = 0.10) -> list[RunRecord]:
    """The lent H100's resnet50 amp-bf16 b=64 rungs: no DDP 2,024 images/s (31.6 ms), DDP x1
    1,671 (38.3 ms), backward comm 18.2 ms of which 17.6 ms overlapped."""
    plain = train(spread(64 / 2024, rel=plain_rel))
    one = spread(64 / 1671, rel=ddp1_rel)
    ddp = {"exposed_comm_s": 0.0006, "exposed_comm_share": 0.0006 / (64 / 1671)}
    ddp |= {"backward_comm_s": 0.0182, "overlap_s": 0.0176}
    ddp1 = train(one, world=1, per_rank=[rank(0, one, 0.0182, 0.0176)], ddp=ddp)
    return [record(plain), record(ddp1, 1)]


def test_ddp_x1_overhead_is_split_into_exposed_comm_and_the_rest_against_the_noise() -> None:
    (rungs,) = ladder(h100_ladder()).values()
    ci = rungs[1].vs_plain.ci if rungs[1].vs_plain else None
    assert ci is not None and ci[0] < 1671 / 2024 < ci[1]  # the speed ratio's CI
    lo, hi = 100 * (1 / ci[1] - 1), 100 * (1 / ci[0] - 1)
    assert 10 < lo < 21.1 < hi < 35
    # 38.30 / 31.62 ms = +21.1 %; exposed 0.6 ms = 1.90 points of no DDP's 31.6 ms step
    comm = 100 * 0.0006 / (64 / 2024)
    assert loss_lines(rungs)[0] == (
        f"DDP x1 vs no DDP (DDP's own overhead): step time +21.1 % (95 % CI +{lo:.1f} to "
        f"+{hi:.1f} %): exposed communication 600 µs is 1.90 points of it; the other +19.2 "
        f"points (CI +{lo - comm:.1f} to +{hi - comm:.1f}) are not communication: DDP's own "
        "work outside its comm timers (a hook per parameter, gradients copied into buckets, "
        "buffers broadcast each forward), which weighs most on a step that waits on the host"
    )


def with_exposed(recs: list[RunRecord], exposed: float) -> list[RunRecord]:
    one = recs[1].results[0]
    ddp = {**one.extra["ddp"], "exposed_comm_s": exposed}
    return [recs[0], record(one.model_copy(update={"extra": {**one.extra, "ddp": ddp}}), 1)]


def test_an_overhead_rest_inside_the_noise_is_not_called_one() -> None:
    # exposed comm 5 ms = 15.8 points of the +21.1 %: the other 5.31 points' CI reaches 0
    (rungs,) = ladder(with_exposed(h100_ladder(), 0.005)).values()
    assert rungs[1].vs_plain is not None and rungs[1].vs_plain.verdict == "SLOWER"
    line = loss_lines(rungs)[0]
    assert ": exposed communication 5.00 ms is 15.8 points of it; the other +5.31 points (CI -" in (
        line
    )
    assert line.endswith(") can't be told from the noise")
    # the change itself inside the noise: not split at all
    noisy = [
        train(spread(64 / 2024, rel=0.3, n=8)),
        train(spread(64 / 1671, rel=0.3, n=8), world=1, ddp={"exposed_comm_s": 0.0006}),
    ]
    (rungs,) = ladder([record(noisy[0]), record(noisy[1], 1)]).values()
    assert loss_lines(rungs)[0] == (
        "DDP x1 vs no DDP (DDP's own overhead): step time +21.1 %, can't tell from the noise"
    )


def test_exposed_comm_beyond_the_overhead_covers_it_all() -> None:
    (rungs,) = ladder(with_exposed(h100_ladder(0.001, 0.001), 0.008)).values()
    assert loss_lines(rungs)[0].endswith(
        ": exposed communication 8.00 ms is 25.3 points, covering all of it (DDP's timers "
        "average sampled steps, warm-up included)"
    )


def test_the_ladder_says_each_rungs_comm_check_in_80_columns() -> None:
    recs = fake_ladder()
    two = recs[2].results[0]
    ddp = {**two.extra["ddp"], **ddp_extra(0.004, spread(0.0015, rel=0.01), exposed=0.0017)}
    recs[2] = record(two.model_copy(update={"extra": {**two.extra, "ddp": ddp}}), 2)
    out = text(recs)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    flat = " ".join(out.split())
    assert "DDP x2: DDP says backward comm 4.00 ms per step; all_reduce of its 5 buckets" in flat
    assert "timed alone: 1.50 ms (IQR 1.0 %): DDP's figure is 2.50 ms longer" in flat
    assert "exposed comm 1.70 ms is more than all the buckets take alone" in flat
    assert "timed alone: after the case, every bucket's all_reduce in turn" in flat


def test_an_exposed_share_above_the_step_is_marked_and_said_why() -> None:
    recs = fake_ladder()
    two = recs[2].results[0]
    ddp = {**two.extra["ddp"], "exposed_comm_s": 0.013, "exposed_comm_share": 0.013 / 0.0125}
    recs[2] = record(two.model_copy(update={"extra": {**two.extra, "ddp": ddp}}), 2)
    out = text(recs)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "104 %!" in out
    assert "!: exposed comm above the median step: DDP's timers average sampled" in out
    assert "!:" not in text(fake_ladder())
