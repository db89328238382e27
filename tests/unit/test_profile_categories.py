"""The breakdown as pure functions over hand-made trace events: categories sum to the
step's wall time and the stated priority decides every instant."""

from __future__ import annotations

import json
from typing import Any

import pytest

from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.ops import gemm_rows, top_ops, verdict
from torchmark.results import Ceiling
from torchmark.results.payloads import Launches, ProfileSummary


def x(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: Any = 1, **args: Any) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "tid": tid, "args": args}


def step(n: int, ts: float, dur: float, tid: Any = 1) -> dict:
    return x(f"ProfilerStep#{n}", ts, dur, "user_annotation", tid)


def total(bd: c.Breakdown) -> float:
    return sum(bd.categories.values())


# -- CPU ---------------------------------------------------------------------------------

CPU_STEP = [
    step(1, 0, 100),
    # linear (wrapper) 10..60 with t (view) and addmm (matmul, with a copy_ inside)
    x("aten::linear", 10, 50),
    x("aten::t", 12, 4),
    x("aten::addmm", 20, 30),
    x("aten::copy_", 40, 5, **{"Input Dims": [[4, 4], [4, 4], []], "Input type": ["float"] * 3}),
    x("aten::relu", 70, 10),
    x("aten::sum", 85, 5),
    x("my::custom", 92, 3),
    x("aten::mm", 200, 50),  # outside the step: not counted
    x("aten::mm", 20, 30, tid=2),  # another thread: not the step's
]


def test_cpu_categories_sum_to_the_step_and_follow_the_innermost_op() -> None:
    bd = c.cpu_breakdown(CPU_STEP)
    assert bd.kind == "cpu" and bd.steps == 1 and bd.wall_us == 100
    assert total(bd) == pytest.approx(100)
    cats = bd.categories
    assert cats[c.MATMUL] == pytest.approx(25)  # addmm's 30 less its child copy_'s 5
    assert cats[c.MEMORY] == pytest.approx(5)
    # linear's own time (50 - 4 - 30) plus the view t's 4
    assert cats[c.FRAMEWORK] == pytest.approx(20)
    assert cats[c.ELEMENTWISE] == pytest.approx(10)
    assert cats[c.REDUCTION] == pytest.approx(5)
    assert cats[c.OTHER] == pytest.approx(3)  # no rule names my::custom
    # 0-10, 60-70, 80-85, 90-92, 95-100 inside no op
    assert cats[c.PYTHON] == pytest.approx(10 + 10 + 5 + 2 + 5)
    assert bd.ops["aten::addmm"].self_us == pytest.approx(25)
    assert bd.ops["aten::copy_"].bytes_read == 2 * 16 * 4
    assert "aten::mm" not in bd.ops  # outside the step, or on another thread


def test_cpu_priority_first_rule_wins() -> None:
    # a DataLoader annotation is rule 1: it wins over anything else the name might match
    assert (
        c.cpu_category("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", True)
        == c.DATA
    )
    assert c.cpu_category("aten::addmm", True) == c.MATMUL  # its own time, despite children
    assert c.cpu_category("aten::linear", True) == c.FRAMEWORK
    assert c.cpu_category("aten::unknown_leaf", False) == c.OTHER
    assert c.cpu_category("aten::unknown_wrapper", True) == c.FRAMEWORK


def test_child_running_past_its_parent_is_clipped_and_nothing_counts_twice() -> None:
    events = [step(1, 0, 50), x("aten::linear", 10, 20), x("aten::addmm", 15, 20)]
    bd = c.cpu_breakdown(events)
    assert total(bd) == pytest.approx(50)
    assert bd.categories[c.MATMUL] == pytest.approx(15)  # clipped at linear's end, 30


def test_several_steps_add_up_each() -> None:
    events = [step(1, 0, 10), x("aten::mm", 2, 4), step(2, 20, 30), x("aten::mm", 25, 10)]
    bd = c.cpu_breakdown(events)
    assert bd.steps == 2 and bd.step_us == [10, 30]
    assert total(bd) == pytest.approx(40)
    assert bd.categories[c.MATMUL] == pytest.approx(14)
    assert bd.ops["aten::mm"].calls == 2


def test_no_steps_no_time() -> None:
    bd = c.cpu_breakdown([x("aten::mm", 0, 5)])
    assert bd.steps == 0 and bd.wall_us == 0 and total(bd) == 0


# -- GPU ---------------------------------------------------------------------------------


def k(
    name: str,
    ts: float,
    dur: float,
    corr: int | None,
    stream: int = 7,
    cat: str = "kernel",
    **extra: Any,
) -> dict:
    args = {"correlation": corr, **extra} if corr is not None else extra
    return {
        "ph": "X",
        "name": name,
        "cat": cat,
        "ts": ts,
        "dur": dur,
        "tid": stream,
        "pid": 0,
        "args": args,
    }


def launch(ts: float, corr: int, name: str = "cudaLaunchKernel") -> dict:
    return x(name, ts, 2, "cuda_runtime", 1, correlation=corr)


GPU_STEP = [
    step(1, 0, 100),
    launch(1, 1),
    k("gemm", 5, 20, 1),  # compute 5-25
    launch(3, 2),
    k("vectorized_add", 28, 4, 2),  # queued before 25: 25-28 kernel-wait
    # 32-40 idle; kernel 3 launched at 36, after the GPU went idle: host-wait
    launch(36, 3),
    k("Memcpy HtoD (Pageable -> Device)", 40, 10, 3, cat="gpu_memcpy"),
    # overlap on two streams: compute wins over memcpy and communication
    launch(41, 4),
    k("gemm2", 45, 10, 4, stream=8),
    launch(42, 5),
    k("ncclDevKernel_AllReduce", 48, 12, 5, stream=9),
    # memset 62-64, launched long before the GPU went idle at 60: 60-62 kernel-wait
    launch(43, 6),
    k("Memset (Device)", 62, 2, 6, cat="gpu_memset"),
    # a sync event on the GPU timeline: never compute (HTA's miscount)
    k("cudaStreamSynchronize", 64, 20, None, cat="kernel"),
    k("gemm3", 84, 4, None),  # no launch in the trace: 64-84 idle, launch unknown
    # 88-100: nothing more this step: host-wait
]


def test_gpu_categories_sum_to_the_step_and_follow_the_priority() -> None:
    bd = c.gpu_breakdown(GPU_STEP)
    assert bd.kind == "gpu" and bd.wall_us == 100
    assert total(bd) == pytest.approx(100)
    cats = bd.categories
    # 5-25, 28-32, 45-55 (over memcpy and nccl), 84-88
    assert cats[c.COMPUTE] == pytest.approx(20 + 4 + 10 + 4)
    assert cats[c.MEMCPY] == pytest.approx(5)  # 40-45 only: gemm2 covers 45-50
    assert cats[c.COMM] == pytest.approx(5)  # 55-60: overlapped part is compute
    assert cats[c.MEMSET] == pytest.approx(2)
    assert cats[c.KERNEL_WAIT] == pytest.approx(3 + 2)  # 25-28, 60-62
    assert cats[c.HOST_WAIT] == pytest.approx(5 + 8 + 12)  # 0-5, 32-40, 88-100
    assert cats[c.IDLE_UNKNOWN] == pytest.approx(20)  # 64-84: the sync is not activity
    assert bd.ops["ncclDevKernel_AllReduce"].category == c.COMM
    assert "cudaStreamSynchronize" not in bd.ops


def test_gpu_activity_outside_the_step_is_clipped() -> None:
    events = [step(1, 10, 20), launch(0, 1), k("gemm", 5, 10, 1), launch(25, 2), k("g", 28, 10, 2)]
    bd = c.gpu_breakdown(events)
    assert total(bd) == pytest.approx(20)
    assert bd.categories[c.COMPUTE] == pytest.approx(5 + 2)  # 10-15 and 28-30
    assert bd.categories[c.HOST_WAIT] == pytest.approx(13)  # 15-28, launched at 25 > 15


def test_rules_are_stated_for_both_kinds() -> None:
    cpu, gpu = "\n".join(c.rules_text("cpu")), "\n".join(c.rules_text("gpu"))
    assert all(cat in cpu for cat, _ in c.CPU_RULES) and "addmm" in cpu
    assert " > ".join(c.GPU_PRIORITY) in gpu and "Synchronize" in gpu


# -- top ops and verdicts ------------------------------------------------------------------


def ceiling(key: str, value: float, unit: str) -> Ceiling:
    return Ceiling(device="cpu", key=key, value=value, unit=unit, method="test")  # type: ignore[arg-type]


CEILINGS = {
    "matmul:float32": ceiling("matmul:float32", 1e11, "FLOP/s"),
    "bandwidth": ceiling("bandwidth", 1e10, "B/s"),
    "dispatch": ceiling("dispatch", 1e-6, "s"),
}


def test_top_ops_rate_ceiling_and_bound() -> None:
    events = [
        step(1, 0, 1000),
        # 1e6 FLOPs over 200 µs: 5 GFLOP/s = 5 % of the 100 GFLOP/s ceiling; intensity
        # 1e6 / 4096 B ~ 244 FLOP/B > the ridge 10: compute-bound
        x("aten::mm", 0, 200, **{"Input Dims": [[16, 16], [16, 16]], "Input type": ["float"] * 2}),
        # 4096 B over 100 µs = 41 MB/s: memory-bound at 0.4 % of bandwidth
        x("aten::add", 300, 100, **{"Input Dims": [[32, 32]], "Input type": ["float"]}),
        x("aten::relu", 500, 2),  # 2 µs < 3 dispatch floors: overhead
        x("aten::view", 600, 50),  # a view touches no data: overhead whatever its shapes
    ]
    bd = c.cpu_breakdown(events)
    rows = {r.name: r for r in top_ops(bd, {"aten::mm": 1e6}, CEILINGS, "matmul:float32")}
    mm = rows["aten::mm"]
    assert mm.bound == "compute" and mm.pct_ceiling == pytest.approx(5)
    assert mm.share == pytest.approx(20) and mm.calls == 1
    add = rows["aten::add"]
    assert add.bound == "memory" and add.pct_ceiling == pytest.approx(100 * 4096 / 1e-4 / 1e10)
    assert rows["aten::relu"].bound == "overhead"
    assert rows["aten::view"].bound == "overhead" and rows["aten::view"].byte_rate is None


def test_verdicts_follow_the_numbers() -> None:
    bd = c.cpu_breakdown([step(1, 0, 100), x("aten::linear", 10, 40), x("aten::addmm", 20, 10)])
    assert verdict(bd).startswith("overhead-bound: 90 %")
    bd = c.cpu_breakdown([step(1, 0, 100), x("aten::mm", 0, 90)])
    assert verdict(bd).startswith("compute-heavy: 90 % of the step is matmul/conv")
    gpu = c.gpu_breakdown([step(1, 0, 100), launch(70, 1), k("gemm", 80, 10, 1)])
    assert verdict(gpu).startswith("launch-bound: 90 % of the step is host-wait")


def test_host_wait_the_profiler_caused_is_not_called_launch_bound() -> None:
    from torchmark.kinds.profile.ops import device_busy_us

    # 100 µs profiled: kernels 10-40 and 70-80 (40 µs busy), 60 µs host-wait
    events = [step(1, 0, 100), launch(5, 1), k("a", 10, 30, 1), launch(65, 2), k("b", 70, 10, 2)]
    bd = c.gpu_breakdown(events)
    assert device_busy_us(bd) == pytest.approx(40)
    assert bd.shares()[c.HOST_WAIT] == pytest.approx(60)
    # unprofiled 45 µs: the GPU's 40 µs fill 89 % of it: the wait was the profiler's
    v = verdict(bd, 45e-6)
    assert v.startswith("GPU-busy: its work takes 40.0 µs per step, 89 % of the unprofiled")
    assert "60 % host-wait seen here is the profiler's own cost" in v
    # unprofiled 100 µs: the GPU fills 40 % of it: launch-bound without the profiler too
    assert verdict(bd, 100e-6).startswith("launch-bound: 60 % of the step is host-wait")
    assert verdict(bd).startswith("launch-bound")


def test_a_convolution_takes_the_flops_torch_counted_on_its_wrapper() -> None:
    conv = {"Input Dims": [[1, 3, 8, 8], [4, 3, 3, 3]], "Input type": ["float"] * 2}
    events = [
        step(1, 0, 1000),
        x("aten::conv2d", 0, 500, **conv),
        x("aten::convolution", 1, 498),
        x("aten::mkldnn_convolution", 2, 496, **conv),
        x("aten::conv2d", 600, 300),  # a second call: every call of each has the wrapper
        x("aten::mkldnn_convolution", 601, 298),
    ]
    bd = c.cpu_breakdown(events)
    assert bd.ops["aten::mkldnn_convolution"].ancestors == {
        "aten::conv2d": 2,
        "aten::convolution": 1,
    }
    rows = {r.name: r for r in top_ops(bd, {"aten::conv2d": 8e6}, CEILINGS, "matmul:float32")}
    mm = rows["aten::mkldnn_convolution"]
    assert mm.flops == 8e6 and mm.bound == "compute"
    assert mm.pct_ceiling == pytest.approx(100 * 8e6 / (794e-6) / 1e11)
    assert rows["aten::conv2d"].flops is None  # counted once, on the op doing the work
    # no FLOPs known: a convolution is never called memory-bound from its inputs' bytes
    rows = {r.name: r for r in top_ops(bd, {}, CEILINGS, "matmul:float32")}
    assert rows["aten::mkldnn_convolution"].bound == ""


def test_an_op_above_its_ceiling_is_marked_and_explained() -> None:
    from tests.unit.test_profile_report import record, render

    from torchmark.report.profile import html_context

    events = [
        step(1, 0, 100),
        # 4 MB read in 10 µs: 400 GB/s, 40x the 10 GB/s ceiling (data in cache, or a low one)
        x("aten::add", 0, 10, **{"Input Dims": [[1024, 1024]], "Input type": ["float"]}),
    ]
    bd = c.cpu_breakdown(events)
    ops = [r.as_dict() for r in top_ops(bd, {}, CEILINGS, "matmul:float32")]
    p = {
        "case": "t",
        "kind": "cpu",
        "steps": 1,
        "schedule": {"wait": 1, "warmup": 2, "active": 1},
        "profiled_step_s": 1e-4,
        "unprofiled_median_s": 5e-5,
        "overhead_pct": 100.0,
        "categories": [
            {"name": k, "us_per_step": v, "share": bd.shares()[k]} for k, v in bd.categories.items()
        ],
        "ops": ops,
        "verdict": verdict(bd),
        "rules": c.rules_text("cpu"),
        "notes": [],
    }
    rec = record(p)
    text = " ".join(render(p, 80).split())
    assert "4,194 % !" in text
    assert "1 op(s) above 100 % of the measured ceiling" in text
    assert "profiler overhead +100 %" in text
    assert html_context(rec)["above"].startswith("1 op(s) above 100 %")  # type: ignore[index]


def test_the_profiler_overhead_is_said_only_beyond_the_noise() -> None:
    from torchmark.report.profile import overhead_line

    p = {"steps": 5, "profiled_step_s": 37e-6, "unprofiled_median_s": 43e-6, "overhead_pct": -14.0}
    p |= {"case": "linear10", "kind": "cpu", "schedule": {"active": 5}}
    # a profile stored before the two spreads were kept apart
    line = overhead_line(ProfileSummary.model_validate({**p, "spread_pct": 130}))
    assert "can't tell (-14 %, within the 130 % spread (IQR / median) of the step" in line
    p = {**p, "profiled_step_s": 51e-6, "unprofiled_median_s": 9e-6, "overhead_pct": 467.0}
    line = overhead_line(ProfileSummary.model_validate({**p, "spread_pct": 10}))
    assert "profiler overhead +467 %" in line and "inflated" in line


def test_a_kernel_takes_the_flops_and_bytes_of_the_op_call_that_launched_it() -> None:
    mm_in = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}
    small = {"Input Dims": [[8, 64], [64, 64]], "Input type": ["float", "float"]}
    conv_in = {"Input Dims": [[1, 8, 8, 8]], "Input type": ["float"]}
    events = [
        step(1, 0, 300),
        x("aten::matmul", 1, 40, **mm_in),  # counted by torch one level up, as conv2d is
        x("aten::mm", 2, 30, **{"External id": 10}, **mm_in),
        launch(3, 1),
        k("gemm", 10, 50, 1, **{"External id": 10}),
        launch(4, 2),
        k("tiny_fill", 61, 2, 2, **{"External id": 10}),  # same launch, shorter: not its work
        x("aten::cudnn_convolution", 50, 20, **{"External id": 11}, **conv_in),
        launch(51, 3),
        k("conv_kernel", 100, 40, 3, **{"External id": 11}),  # no FLOPs counted anywhere
        x("aten::add", 80, 5, **{"External id": 12}, **mm_in),
        launch(81, 4),
        k("add_kernel", 150, 4, 4, **{"External id": 12}),
        # a second matmul of other shapes: the same kernel, its own FLOPs (not an average)
        x("aten::matmul", 160, 20, **small),
        x("aten::mm", 161, 10, **{"External id": 13}, **small),
        launch(162, 5),
        k("gemm", 170, 10, 5, **{"External id": 13}),
    ]
    bd = c.gpu_breakdown(events)
    by_call = {
        c.call_key("aten::matmul", [[64, 64], [64, 64]]): 2 * 64**3,
        c.call_key("aten::matmul", [[8, 64], [64, 64]]): 2 * 8 * 64 * 64,
    }
    rows = {r.name: r for r in top_ops(bd, {}, CEILINGS, "matmul:float32", flops_by_call=by_call)}
    gemm = rows["gemm"]
    assert gemm.flops == 2 * 64**3 + 2 * 8 * 64 * 64
    assert gemm.bytes == 2 * 64 * 64 * 4 + (8 * 64 + 64 * 64) * 4
    assert gemm.bound == "compute" and gemm.flop_rate == pytest.approx(gemm.flops / 60e-6)
    assert rows["tiny_fill"].flops is None and rows["tiny_fill"].bound == ""
    # a convolution's kernel with no FLOPs is never called memory-bound from its inputs
    assert rows["conv_kernel"].bytes is None and rows["conv_kernel"].bound == ""
    # an elementwise kernel: its op's input bytes over its time, against the bandwidth
    add = rows["add_kernel"]
    assert add.bytes == 2 * 64 * 64 * 4 and add.bound == "memory"
    assert add.pct_ceiling == pytest.approx(100 * (2 * 64 * 64 * 4 / 4e-6) / 1e10)


def test_the_gpu_timeline_copy_of_a_step_is_not_a_second_step() -> None:
    # Kineto writes each ProfilerStep#N again on the GPU's timeline (first to last kernel of
    # the step); counted as a step, an H100 profile of 5 steps read "of 10"
    gpu_copy = x("ProfilerStep#1", 5, 83, "gpu_user_annotation", tid=7)
    bd = c.gpu_breakdown([*GPU_STEP, gpu_copy])
    assert bd.steps == 1 and bd.wall_us == 100 and bd.step_us == [100]
    assert bd.categories == c.gpu_breakdown(GPU_STEP).categories


def test_the_step_spread_is_robust_to_one_slow_step() -> None:
    from torchmark.kinds.profile.kind import rel_iqr_pct

    # the first profiled step 10x the others: IQR / median barely moves
    steps_us = [290.0, 28.9, 28.5, 28.7, 29.1, 28.8, 28.6, 29.0, 28.9, 28.4]
    assert rel_iqr_pct(steps_us) == pytest.approx(100 * (28.975 - 28.625) / 28.85)
    assert rel_iqr_pct(steps_us[:3]) is None  # quartiles of 3 values say nothing


def test_gpu_launch_cost_and_queue_wait_per_kernel() -> None:
    from torchmark.kinds.profile.kind import launch_summary
    from torchmark.report.profile import launch_line

    bd = c.gpu_breakdown(GPU_STEP)
    assert bd.launch_us == [2] * 6  # every launch call in the fixture lasts 2 µs
    assert sorted(bd.queue_us) == [2, 2, 2, 4, 17, 23]
    lx = launch_summary(bd)
    assert lx == {"per_step": 6, "launch_us_median": 2, "queue_us_median": 3}
    assert launch_line(Launches.model_validate(lx)) == (
        "launches: 6 per step; each launch call takes 2.00 µs on the host and the GPU starts "
        "it 3.00 µs after the call returns (medians)"
    )
    assert launch_summary(c.cpu_breakdown(CPU_STEP)) is None


def test_kineto_chatter_is_dropped_and_everything_else_on_stderr_kept(
    capfd: pytest.CaptureFixture[str],
) -> None:
    import os

    from torchmark.kinds.profile.capture import kineto_chatter_filtered

    with kineto_chatter_filtered():
        os.write(
            2, b"USDT:2026-11-23 00:48:04 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        )
        os.write(2, b"a real warning\n")
        os.write(
            2, b"USDT:2026-11-23 00:48:04 1:1 SyncActivityProfilerHandler.cpp:59] profiler_stop\n"
        )
    err = capfd.readouterr().err
    assert err == "a real warning\n"


def bf16(*dims: list[int], bias: bool = False) -> dict[str, Any]:
    shapes = [[dims[1][-1]], *dims] if bias else list(dims)
    return {"Input Dims": shapes, "Input type": ["c10::BFloat16"] * len(shapes)}


def test_gemm_time_is_kept_by_operand_shapes_and_dtype() -> None:
    """The H100 GPT-2 case in miniature: the LM head's GEMM over 50,257 launches a GEMM and a
    split-K reduction (both its time); an addmm's shapes skip its bias; a GEMM launched
    from inside a wrapper is found by the enclosing GEMM op."""
    head = bf16([16384, 768], [768, 50257])
    qkv = bf16([16384, 768], [768, 2304], bias=True)
    events = [
        step(1, 0, 300),
        x("aten::linear", 1, 30),
        x("aten::mm", 2, 20, **{"External id": 10}, **head),
        launch(3, 1),
        k("sm80_xmma_gemm_bf16", 10, 100, 1, **{"External id": 10}),
        launch(4, 2),
        k("splitKreduce_kernel", 111, 9, 2, **{"External id": 10}),
        x("aten::addmm", 40, 20, **{"External id": 11}, **qkv),
        x("cudaMemsetAsync", 41, 1, **{"External id": 12}),  # an inner call launches it
        launch(42, 3),
        k("sm90_gemm_bf16", 130, 30, 3, **{"External id": 11}),
        launch(43, 4),
        k("Memset (Device)", 125, 2, 4, cat="gpu_memset", **{"External id": 12}),
    ]
    bd = c.gpu_breakdown(events)
    got = {(g.op, json.dumps(g.dims), g.dtype): (g.calls, g.us) for g in bd.gemms.values()}
    assert got == {
        ("aten::mm", "[[16384, 768], [768, 50257]]", "c10::BFloat16"): (1, 109.0),
        ("aten::addmm", "[[16384, 768], [768, 2304]]", "c10::BFloat16"): (1, 32.0),
    }
    rows = gemm_rows(bd)
    assert [r["op"] for r in rows] == ["aten::mm", "aten::addmm"]
    assert rows[0]["share"] == pytest.approx(100 * 109 / 300) and rows[0]["calls"] == 1


def test_cpu_gemm_time_is_its_self_time() -> None:
    head = {"Input Dims": [[64, 32], [32, 500]], "Input type": ["float", "float"]}
    bd = c.cpu_breakdown([step(1, 0, 100), x("aten::mm", 10, 40, **head), x("aten::copy_", 20, 10)])
    (g,) = bd.gemms.values()
    assert (g.op, g.dims, g.dtype, g.calls, g.us) == (
        "aten::mm",
        [[64, 32], [32, 500]],
        "float",
        1,
        30,
    )
    # shapes not recorded: nothing to key it by
    assert c.gemm_key("aten::mm", {}) is None and c.gemm_key("aten::add", head) is None
