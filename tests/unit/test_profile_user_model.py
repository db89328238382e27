"""`profile` of a user model: each op against the peak of its own dtype, FLOPs
inherited by matmuls and convolutions only, and no op above the physical peak drawn as a
plain point. Each test fails on the code before: a user model's result names no ceiling, so
its GEMMs were called memory-bound and a copy_ inside addmm took addmm's FLOPs (9x the
machine's fp32 peak, drawn above the roofline)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.ops import top_ops
from torchmark.report.charts import ops_roofline
from torchmark.results import Ceiling, RunRecord

TRACE = Path(__file__).parent.parent / "fixtures/profile/cpu_linear10_infer_loaded.json"
CPU = {
    "matmul:float32": Ceiling(device="cpu", key="matmul:float32", value=2.26e11,
                              unit="FLOP/s", method="t"),
    "matmul:bfloat16": Ceiling(device="cpu", key="matmul:bfloat16", value=4.4e11,
                               unit="FLOP/s", method="t"),
    "bandwidth": Ceiling(device="cpu", key="bandwidth", value=4.47e10, unit="B/s", method="t"),
}  # fmt: skip


def test_a_gemm_with_no_case_peak_is_placed_against_its_dtypes_and_copy_takes_no_flops() -> None:
    # a recorded CPU trace: aten::linear -> aten::addmm -> aten::copy_ (the bias broadcast);
    # addmm credited with a 256 x 1024 x 1024 GEMM's FLOPs by torch's counter
    bd = c.cpu_breakdown(json.loads(TRACE.read_text())["traceEvents"])
    flops = {"aten::addmm": 2.0 * 256 * 1024 * 1024}
    rows = {r.name: r for r in top_ops(bd, flops, CPU, matmul_key=None)}
    addmm, copy = rows["aten::addmm"], rows["aten::copy_"]
    assert (addmm.bound, addmm.ceiling_key, addmm.peak_key) == (
        "compute", "matmul:float32", "matmul:float32"
    )  # fmt: skip
    assert addmm.pct_ceiling is not None and 0 < addmm.pct_ceiling < 100
    # the copy runs inside addmm on every call, but runs none of its FLOPs
    assert copy.flops is None and copy.flop_rate is None and copy.bound == "memory"


def test_a_gpu_kernel_takes_the_peak_of_its_launching_ops_dtype_and_tf32_rule() -> None:
    def kernel(op: str, dims: str, dtype: str) -> c.OpTime:
        return c.OpTime(c.COMPUTE, calls=1, self_us=100.0, bytes_read=4e6,
                        work_of={(f"{op}|{dims}",): 1}, dtype=dtype)  # fmt: skip

    bd = c.Breakdown(
        "gpu", 1, 1000.0, {}, {
            "sm90_gemm_bf16": kernel("aten::mm", "[[4096,4096],[4096,4096]]", "c10::BFloat16"),
            "cudnn_conv_fp32": kernel("aten::cudnn_convolution", "[[8,64,56,56]]", "float"),
            "cutlass_sgemm": kernel("aten::addmm", "[[64,512],[512,512]]", "float"),
        }, [1000.0],
    )  # fmt: skip
    flops = {
        "aten::mm|[[4096,4096],[4096,4096]]": 2 * 4096.0**3 / 10,
        "aten::cudnn_convolution|[[8,64,56,56]]": 1e10,
        "aten::addmm|[[64,512],[512,512]]": 2 * 64.0 * 512 * 512,
    }
    peaks = {
        k: Ceiling(device="cuda:0", key=k, value=v, unit="FLOP/s", method="t")
        for k, v in {"matmul:float32": 5e13, "matmul:tf32": 4e14, "matmul:bfloat16": 7.9e14}.items()
    }
    bw = {"bandwidth": Ceiling(device="cuda:0", key="bandwidth", value=3e12, unit="B/s",
                               method="t")}  # fmt: skip
    torch_default = {"cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": True}
    rows = {
        r.name: r
        for r in top_ops(
            bd, {}, peaks | bw, "matmul:float32", flops_by_call=flops, precision=torch_default
        )
    }
    assert rows["sm90_gemm_bf16"].peak_key == "matmul:bfloat16"
    assert rows["cudnn_conv_fp32"].peak_key == "matmul:tf32"  # cuDNN's default
    assert rows["cutlass_sgemm"].peak_key == "matmul:float32"  # cuBLAS's default: no TF32


def _profile_run(ops: list[dict[str, Any]]) -> RunRecord:
    p = {
        "case": "cnn.py:make_model/e2e b=256", "device": "cpu", "kind": "cpu", "steps": 1,
        "schedule": {"active": 1}, "profiled_step_s": 1e-2, "categories": [], "ops": ops,
        "verdict": "v",
    }  # fmt: skip
    return RunRecord(
        tool_version="t", kind="profile", command="t", fingerprint="f",
        environment={"devices": {"cpu": {"kind": "cpu", "logical_cores": 2,
                                         "physical_cores": 2}}},
        ceilings=list(CPU.values()), payload={"kind": "profile", "profile": p},
    )  # fmt: skip


def _op(name: str, flop_rate: float, share: float) -> dict[str, Any]:
    us = 1000.0
    return {
        "name": name, "category": "matmul/conv", "calls": 1.0, "self_us": us, "share": share,
        "flops": flop_rate * us / 1e6, "bytes": 1e5, "flop_rate": flop_rate,
        "byte_rate": 1e5 / (us / 1e6), "ceiling_key": "matmul:float32",
        "peak_key": "matmul:float32", "bound": "compute",
    }  # fmt: skip


def test_roofline_leaves_out_an_op_above_the_physical_peak_and_marks_one_above_the_measured() -> (
    None
):
    # 2 cores x 6 GHz x 64 fp32 FLOP a cycle = 768 GFLOP/s: nothing runs faster there
    ops = [
        _op("aten::addmm", 1.2e11, 50.0),  # 53 % of the measured 226 GFLOP/s
        _op("aten::mm", 2.5e11, 20.0),  # above the measured peak, below the physical
        _op("aten::copy_", 2.91e12, 5.0),  # addmm's FLOPs on a copy: impossible here
    ]
    chart = ops_roofline(_profile_run(ops))
    assert chart.svg is not None
    assert "aten::addmm (50.0 %)" in chart.svg and "aten::copy_" not in chart.svg
    assert "aten::mm (20.0 %) ! above the fp32 peak" in chart.svg
    note = " ".join(chart.note.split())
    assert "Not drawn, above the device's physical peak" in note and "aten::copy_" in note
    assert "marked '!': above the measured peak" in note


def test_the_ops_table_marks_a_rate_above_its_dtypes_measured_peak() -> None:
    from rich.console import Console

    from torchmark.report.profile import profile_tables

    run = _profile_run([_op("aten::addmm", 1.2e11, 50.0), _op("aten::mm", 2.5e11, 20.0)])
    console = Console(record=True, width=160)
    for part in profile_tables(run):
        console.print(part)
    text = console.export_text()
    assert "250 GFLOP/s !" in text and "120 GFLOP/s !" not in text
    assert "1 op(s) with a FLOP rate above the measured peak of its dtype" in " ".join(text.split())
