"""The predictor's pure parts on hand-made runs (no torch, no timing): a one-term case is
exactly the naive ceiling ratio, a launch-bound case follows the host, not the GPU, a model
with no host probe on the target is refused, and an interval never goes below the roofline
floor."""

from __future__ import annotations

import pytest

from torchmark.kinds.predict import loo
from torchmark.kinds.predict.machine import case_key, machine
from torchmark.kinds.predict.terms import (
    Residual,
    Terms,
    calibrate,
    calibrated,
    interval,
    predict_anchored,
    predict_unanchored,
    terms,
)
from torchmark.kinds.predict.work import Kernel, Work
from torchmark.results import Ceiling, Result, RunRecord
from torchmark.results import Work as Declared


def result(
    workload: str,
    t: float,
    *,
    flops: float = 0.0,
    nbytes: float = 0.0,
    key: str | None = None,
    variant: str = "float32",
    params: dict | None = None,
    device: str = "cuda:0",
) -> Result:
    ceiling = (
        Ceiling(device=device, key=key, value=1.0, unit="B/s" if key == "bandwidth" else "FLOP/s",
                method="t")
        if key else None
    )  # fmt: skip
    return Result(
        workload=workload, variant=variant, device=device, params=params or {"n": 1},
        samples_s=[t] * 10, work=Declared(flops=flops, bytes=nbytes, items=1.0),
        ceiling=ceiling,
    )  # fmt: skip


def run(name: str, bw: float, peak: float, dispatch: float, results: list[Result]) -> RunRecord:
    cs = [
        Ceiling(device="cuda:0", key="bandwidth", value=bw, unit="B/s", method="t"),
        Ceiling(device="cuda:0", key="matmul:float32", value=peak, unit="FLOP/s", method="t"),
        Ceiling(device="cuda:0", key="dispatch", value=dispatch, unit="s", method="t"),
    ]
    return RunRecord(tool_version="t", fingerprint="f", run_id=name, ceilings=cs,
                     results=results)  # fmt: skip


def model(workload: str, t: float, batch: int = 64) -> Result:
    return result(workload, t, variant="infer", key="matmul:float32",
                  params={"scenario": "infer", "precision": "fp32", "batch": batch})  # fmt: skip


def test_one_term_case_is_exactly_the_ceiling_ratio() -> None:
    add = result("add", 1.0, nbytes=3e12, key="bandwidth")
    S, T = run("s", 3e12, 5e13, 1e-5, [add]), run("t", 4.5e12, 5e13, 1e-5, [add])
    src, tgt = machine(S, "gpu"), machine(T, "gpu")
    assert src is not None and tgt is not None
    (c,) = src.cases.values()
    w = Work("add", "add", "gpu", (Kernel("elementwise", "float32", 0.0, 3e12),), 1, bare=True)
    p = predict_anchored(c, w, calibrated(src, {}), calibrated(tgt, {}), "A", {})
    assert p.seconds == pytest.approx(loo.naive(c, src, tgt), rel=1e-9)
    assert p.seconds == pytest.approx(3e12 / 4.5e12, rel=1e-9) and p.dominant == "memory"


def test_a_launch_bound_case_follows_the_host_not_the_gpu() -> None:
    # a 5-op model whose device work is nothing: the target's faster GPU does not help, its
    # host (measured by another launch-bound model case on both machines) does
    m, probe_s, probe_t = (
        model("simplenet", 100e-6),
        model("linear10", 30e-6),
        model("linear10", 20e-6),
    )
    S = run("s", 3e12, 5e13, 1e-5, [m, probe_s])
    T = run("t", 4.5e12, 5e13, 1e-5, [probe_t])
    k = Kernel("gemm", "float32", 1e6, 1e5)
    key = case_key("gpu", "simplenet", "infer", m.params)
    probe = case_key("gpu", "linear10", "infer", probe_s.params)
    works = {
        key: Work("m", "simplenet", "gpu", (k,) * 5, 5),
        probe: Work("p", "linear10", "gpu", (k,), 1),
    }
    src = calibrated(machine(S, "gpu"), works, exclude="simplenet")  # type: ignore[arg-type]
    tgt = calibrated(machine(T, "gpu"), works)  # type: ignore[arg-type]
    c = src.cases[key]
    p = predict_anchored(c, works[key], src, tgt, "B", works)
    assert p.dominant == "launch"
    assert p.seconds == pytest.approx(100e-6 * 20 / 30, rel=1e-9)
    # with the ceilings alone (equal dispatch floors) nothing says the host is faster
    assert predict_anchored(c, works[key], src, tgt, "A", works).seconds == pytest.approx(100e-6)


def test_a_model_is_refused_where_the_target_has_no_case_to_learn_its_host_from() -> None:
    tgt = calibrated(machine(run("t", 4.5e12, 5e13, 1e-5, [result("add", 1.0)]), "gpu"), {})  # type: ignore[arg-type]
    w = Work("m", "user", "gpu", (Kernel("gemm", "float32", 1e6, 1e5),), 3)
    p = predict_unanchored(w, tgt)
    assert p.refused is not None and "host time per launch" in p.refused


def test_the_host_time_per_launch_is_learned_from_launch_bound_cases_only() -> None:
    # linear10: 1 launch in 20 µs, nothing on the device: 20 µs a launch; a large GEMM whose
    # roofline takes most of its time teaches nothing about the host
    lin = model("linear10", 20e-6)
    big = model("big", 1.1e-3)
    T = run("t", 4.5e12, 5e13, 1e-5, [lin, big])
    works = {
        case_key("gpu", "linear10", "infer", lin.params):
            Work("l", "linear10", "gpu", (Kernel("gemm", "float32", 2e4, 4e4),), 1),
        case_key("gpu", "big", "infer", big.params):
            Work("b", "big", "gpu", (Kernel("gemm", "float32", 5e10, 1e8),), 1),
    }  # fmt: skip
    cal = calibrate(machine(T, "gpu"), works)  # type: ignore[arg-type]
    assert cal.h == pytest.approx(20e-6) and len(cal.h_cases) == 1
    # a user model of 10 launches and a large GEMM: the slower side sets the pace
    tgt = calibrated(machine(T, "gpu"), works)  # type: ignore[arg-type]
    w = Work(
        "u",
        "user",
        "gpu",
        (Kernel("gemm", "float32", 5e11, 1e8),) + (Kernel("elementwise", "float32", 0, 4e3),) * 9,
        10,
    )
    p = predict_unanchored(w, tgt)
    assert p.dominant == "compute" and p.seconds == pytest.approx(5e11 / 5e13, rel=1e-3)
    assert p.floor_s == pytest.approx(p.seconds, rel=1e-3)


def test_terms_combine_as_the_side_runs_them() -> None:
    gpu = Terms(compute=3.0, memory=1.0, launch=5.0, transfer=2.0, side="gpu")
    cpu = Terms(compute=3.0, memory=1.0, launch=5.0, transfer=2.0, side="cpu")
    assert (gpu.total, gpu.dominant) == (7.0, "launch")  # the host queues ahead of the device
    assert (cpu.total, cpu.dominant) == (11.0, "launch")  # one thread does it all in turn
    assert Terms(3.0, 1.0, 2.0, 0.0, "gpu").dominant == "compute"


def test_the_interval_comes_from_held_out_cases_and_never_goes_below_the_floor() -> None:
    tgt = calibrated(machine(run("t", 1e12, 1e13, 1e-5, [result("add", 1.0)]), "gpu"), {})  # type: ignore[arg-type]
    w = Work("u", "user", "gpu", (Kernel("gemm", "float32", 1e9, 1e6),), 1)
    t = terms(w, tgt, 1e-3)
    from torchmark.kinds.predict.terms import Prediction

    p = Prediction(1e-3, "launch", t, "b", floor_s=t.busy)
    held = [
        Residual("a", "launch", 0.5),
        Residual("b", "launch", 1.5),
        Residual("c", "compute", 3.0),
    ]
    iv = interval(p, held)
    assert iv is not None and (iv.low, iv.high) == pytest.approx((max(5e-4, t.busy), 1.5e-3))
    assert "2 are launch-bound" not in iv.basis and "3 held-out" in iv.basis
    # fewer than two share its term: every held-out case's ratio
    q = Prediction(1e-3, "compute", t, "b", floor_s=2e-3)
    iv = interval(q, held)
    assert iv is not None and iv.low == pytest.approx(2e-3) and iv.high == pytest.approx(3e-3)
    assert interval(p, []) is None
