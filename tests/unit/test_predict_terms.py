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
    launch_likeness,
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


def cpu_run(name: str, peak: float, results: list[Result], bw: float = 1e11) -> RunRecord:
    cs = [
        Ceiling(device="cpu", key="bandwidth", value=bw, unit="B/s", method="t"),
        Ceiling(device="cpu", key="matmul:float32", value=peak, unit="FLOP/s", method="t"),
        Ceiling(device="cpu", key="dispatch", value=2e-6, unit="s", method="t"),
    ]
    return RunRecord(tool_version="t", fingerprint="f", run_id=name, ceilings=cs,
                     results=results)  # fmt: skip


def cpu_model(workload: str, t: float) -> Result:
    return result(workload, t, variant="infer", key="matmul:float32", device="cpu",
                  params={"scenario": "infer", "precision": "fp32", "batch": 64})  # fmt: skip


def test_a_cpu_host_ratio_is_of_host_time_not_of_step_time() -> None:
    # the probe's GEMM takes 100 µs on both CPUs (equal peaks); its host part takes 300 µs
    # on the source and 150 µs on the target: the host is 2x faster, though the whole
    # step is only 1.6x faster. A step that is host time alone follows the 2x.
    g = Kernel("gemm", "float32", 1e8, 1e3)  # 100 µs at 1e12 FLOP/s
    tiny = Kernel("gemm", "float32", 1e3, 1e3)
    S = cpu_run("s", 1e12, [cpu_model("probe", 400e-6), cpu_model("m", 40e-6)])
    T = cpu_run("t", 1e12, [cpu_model("probe", 250e-6)])
    params = {"scenario": "infer", "precision": "fp32", "batch": "64"}
    works = {
        case_key("cpu", "probe", "infer", params): Work("p", "probe", "cpu", (g,), 1),
        case_key("cpu", "m", "infer", params): Work("m", "m", "cpu", (tiny,), 1),
    }
    src = calibrated(machine(S, "cpu"), works, exclude="m")  # type: ignore[arg-type]
    tgt = calibrated(machine(T, "cpu"), works, exclude="m")  # type: ignore[arg-type]
    key = case_key("cpu", "m", "infer", params)
    p = predict_anchored(src.cases[key], works[key], src, tgt, "B", works)
    assert p.dominant == "launch"
    assert p.seconds == pytest.approx(40e-6 / 2, rel=1e-3)


def test_a_host_ratio_leans_on_the_launch_bound_cases_of_like_length() -> None:
    # two GPU probes of the same op family: one launch, host 1.5x faster on the target;
    # 100 launches, 1.2x (its device kernels bind part of the time). A one-launch step
    # follows the first, a 100-launch step the second.
    k = Kernel("gemm", "float32", 1e3, 1e3)
    few_s, few_t = model("few", 30e-6), model("few", 20e-6)
    many_s, many_t = model("many", 3000e-6), model("many", 2500e-6)
    short, long = model("short", 60e-6), model("long", 6000e-6)
    S = run("s", 3e12, 5e13, 1e-5, [few_s, many_s, short, long])
    T = run("t", 3e12, 5e13, 1e-5, [few_t, many_t])
    key = {n: case_key("gpu", n, "infer", few_s.params)
           for n in ("few", "many", "short", "long")}  # fmt: skip
    n_launch = {"few": 1, "many": 100, "short": 1, "long": 100}
    works = {key[n]: Work(n, n, "gpu", (k,) * c, c) for n, c in n_launch.items()}
    for name, ratio in (("short", 1.5), ("long", 1.2)):
        src = calibrated(machine(S, "gpu"), works, exclude=name)  # type: ignore[arg-type]
        tgt = calibrated(machine(T, "gpu"), works, exclude=name)  # type: ignore[arg-type]
        c = src.cases[key[name]]
        p = predict_anchored(c, works[key[name]], src, tgt, "B", works)
        assert p.dominant == "launch"
        assert p.seconds == pytest.approx(c.median_s / ratio, rel=0.01)
    a, b = works[key["few"]], works[key["many"]]
    assert launch_likeness(a, a) == 1.0
    assert launch_likeness(a, b) == launch_likeness(b, a) < launch_likeness(a, works[key["short"]])


def test_a_compute_term_moves_by_the_measured_matmul_rates_not_the_peaks() -> None:
    # equal peaks, but the target's own matmul case runs at half the source's rate: a
    # compute-bound model takes twice as long there; the matmul case itself, predicted
    # without its own workload, is still the ratio of the peaks (it never sees itself)
    mm_s = result("matmul", 2e-3, flops=2e9, key="matmul:float32", device="cpu")
    mm_t = result("matmul", 4e-3, flops=2e9, key="matmul:float32", device="cpu")
    S = cpu_run("s", 1e12, [mm_s, cpu_model("m", 1.1e-3)])
    T = cpu_run("t", 1e12, [mm_t])
    params = {"scenario": "infer", "precision": "fp32", "batch": "64"}
    mkey = case_key("cpu", "m", "infer", params)
    works = loo.works_for(machine(S, "cpu"), {  # type: ignore[arg-type]
        mkey: Work("m", "m", "cpu", (Kernel("gemm", "float32", 1e9, 1e3),), 1)
    })  # fmt: skip
    src = calibrated(machine(S, "cpu"), works, exclude="m")  # type: ignore[arg-type]
    tgt = calibrated(machine(T, "cpu"), works, exclude="m")  # type: ignore[arg-type]
    p = predict_anchored(src.cases[mkey], works[mkey], src, tgt, "B", works)
    assert p.dominant == "compute" and p.seconds == pytest.approx(2.2e-3, rel=1e-6)
    src = calibrated(machine(S, "cpu"), works, exclude="matmul")  # type: ignore[arg-type]
    tgt = calibrated(machine(T, "cpu"), works, exclude="matmul")  # type: ignore[arg-type]
    (c,) = (c for c in src.cases.values() if c.workload == "matmul")
    p = predict_anchored(c, works[c.key], src, tgt, "B", works)
    assert p.seconds == pytest.approx(2e-3, rel=1e-6)


def test_leave_one_out_never_reads_the_held_out_measurement() -> None:
    # each case of the target is predicted the same whatever the target measured for it
    k = Kernel("gemm", "float32", 1e3, 1e3)
    names = {"a": 1, "b": 5, "c": 50}
    src_results = [model(n, 40e-6 * c) for n, c in names.items()]
    src_results.append(result("matmul", 2e-3, flops=2e9, key="matmul:float32"))
    params = src_results[0].params
    works = {case_key("gpu", n, "infer", params): Work(n, n, "gpu", (k,) * c, c)
             for n, c in names.items()}  # fmt: skip

    def target(times: dict[str, float]) -> RunRecord:
        rs = [model(n, t) for n, t in times.items()]
        rs.append(result("matmul", 2.2e-3, flops=2e9, key="matmul:float32"))
        return run("t", 4e12, 6e13, 1e-5, rs)

    S = run("s", 3e12, 5e13, 1e-5, src_results)
    base = {"a": 30e-6, "b": 150e-6, "c": 1500e-6}
    before = {r.case: r.predicted_s for r in loo.predict_pair(S, target(base), works, "d")}
    for n in names:
        moved = loo.predict_pair(S, target({**base, n: base[n] * 3}), works, "d")
        row = next(r for r in moved if r.workload == n)
        assert row.measured_s == pytest.approx(base[n] * 3)
        assert row.predicted_s == pytest.approx(before[row.case])


def link_run(name: str, dev_bw: float, link: float, host_bw: float, host_dispatch: float,
             rs: list[Result]) -> RunRecord:  # fmt: skip
    cs = [
        Ceiling(device="cuda:0", key="bandwidth", value=dev_bw, unit="B/s", method="t"),
        Ceiling(device="cuda:0", key="h2d:pageable", value=link, unit="B/s", method="t"),
        Ceiling(device="cuda:0", key="dispatch", value=1e-5, unit="s", method="t"),
        Ceiling(device="cpu", key="bandwidth", value=host_bw, unit="B/s", method="t"),
        Ceiling(device="cpu", key="dispatch", value=host_dispatch, unit="s", method="t"),
    ]
    return RunRecord(tool_version="t", fingerprint="f", run_id=name, ceilings=cs,
                     results=rs)  # fmt: skip


def test_a_copy_bound_case_moves_with_the_link_not_the_device() -> None:
    # a GPU step bound by its copy over the link (1 GB at 10 GB/s: 0.1 s) that took 0.15 s
    # (the copy ran under its ceiling) and adds on the device (1 ms). The target's link is
    # 2x faster, its device the same: the copy's unexplained 49 ms is the copy's, so the
    # step halves; it does not land on the device's 1 ms, scaled 50x
    case = result("e2e", 0.15, nbytes=1e9, key="h2d:pageable", params={"n": 1})
    S = link_run("s", 3e12, 1e10, 1e11, 2e-6, [case])
    T = link_run("t", 3e12, 2e10, 1e11, 2e-6, [])
    src, tgt = calibrated(machine(S, "gpu"), {}), calibrated(machine(T, "gpu"), {})  # type: ignore[arg-type]
    (c,) = src.cases.values()
    w = Work("e", "e2e", "gpu", (Kernel("elementwise", "float32", 0.0, 3e9),), 1, h2d_bytes=1e9,
             bare=True)  # fmt: skip
    p = predict_anchored(c, w, src, tgt, "A", {})
    assert p.dominant == "transfer"
    assert p.seconds == pytest.approx(0.149 / 2 + 0.001, rel=1e-6)
    assert p.floor_s == pytest.approx(0.001)


def test_a_launch_bound_case_pays_its_copy_once() -> None:
    # ten bare launches (0.1 ms of host time) and a copy over the link (0.05 ms): the
    # source measured 0.15 ms. On a target with the same host and a 2x faster link the
    # host part stays 0.1 ms and the copy halves; the copy is not counted in the host part
    case = result("e2e", 1.5e-4, nbytes=5e5, key="h2d:pageable", params={"n": 1})
    S = link_run("s", 3e12, 1e10, 1e11, 2e-6, [case])
    T = link_run("t", 3e12, 2e10, 1e11, 2e-6, [])
    src, tgt = calibrated(machine(S, "gpu"), {}), calibrated(machine(T, "gpu"), {})  # type: ignore[arg-type]
    (c,) = src.cases.values()
    w = Work("e", "e2e", "gpu", (Kernel("elementwise", "float32", 0.0, 1e3),) * 10, 10,
             h2d_bytes=5e5, bare=True)  # fmt: skip
    p = predict_anchored(c, w, src, tgt, "A", {})
    assert p.dominant == "launch"
    assert p.seconds == pytest.approx(1e-4 + 2.5e-5, rel=1e-6)


def test_fresh_host_memory_no_ceiling_prices_moves_with_the_term_that_binds_the_case() -> None:
    # a GPU step that fills fresh host memory (0.2 s on the source, what the copy and the
    # add leave), copies it over the pageable link (0.1 s) and adds on the device (1 ms).
    # The target's link is 1.5x faster, its host CPU streams 2x faster and dispatches 3x
    # slower: no ceiling prices the fill, so it moves with the copy that binds the step,
    # as the naive ceiling ratio moves it, and the prediction says so
    bd = {"add_read_write": 3e9, "h2d_copy": 1e9, "host_fill_write": 2e9}
    case = result("seed-add", 0.301, nbytes=1e9, key="h2d:pageable", variant="intended",
                  params={"size": 12288})  # fmt: skip
    case = case.model_copy(update={"extra": {"bytes_breakdown": bd}})
    S = link_run("s", 3e12, 1e10, 1e11, 2e-6, [case])
    T = link_run("t", 3e12, 1.5e10, 2e11, 6e-6, [])
    src, tgt = machine(S, "gpu"), machine(T, "gpu")
    assert src is not None and tgt is not None
    (c,) = src.cases.values()
    w = loo.micro_work(c.result)
    assert w is not None and w.host_fill_bytes == 2e9
    for proto in ("A", "B"):
        p = predict_anchored(c, w, calibrated(src, {}), calibrated(tgt, {}), proto, {})
        assert p.seconds == pytest.approx(0.3 / 1.5 + 0.001, rel=1e-3)
        assert p.seconds == pytest.approx(loo.naive(c, src, tgt), rel=5e-3)
        assert p.dominant == "transfer"
        assert "priced by no ceiling" in p.basis and "transfer term" in p.basis
    # on a CPU the fill moves with the memory term that binds it: the bandwidth ratio
    cpu = result("seed-add", 0.22, nbytes=5e9, key="bandwidth", variant="intended",
                 params={"size": 12288}, device="cpu")  # fmt: skip
    cpu = cpu.model_copy(update={"extra": {"bytes_breakdown": {**bd, "h2d_copy": 0}}})
    src = calibrated(machine(link_run("s", 3e12, 1e10, 1e11, 2e-6, [cpu]), "cpu"), {})  # type: ignore[arg-type]
    tgt = calibrated(machine(link_run("t", 3e12, 1e10, 2e11, 6e-6, []), "cpu"), {})  # type: ignore[arg-type]
    (c,) = src.cases.values()
    w = loo.micro_work(c.result)
    assert w is not None
    p = predict_anchored(c, w, src, tgt, "A", {})
    assert p.dominant == "memory" and "memory term" in p.basis
    assert p.seconds == pytest.approx(loo.naive(c, src, tgt), rel=1e-3)
