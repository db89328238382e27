"""A profile's top ops on the roofline chart of the HTML report."""

from __future__ import annotations

import re
from typing import Any

from torchmark.report import html
from torchmark.report.charts import ops_roofline
from torchmark.results import Ceiling, RunRecord


def op(name: str, flops: float | None, nbytes: float | None, us: float, share: float) -> dict:
    t = us / 1e6
    return {
        "name": name, "category": "matmul/conv", "calls": 1.0, "self_us": us, "share": share,
        "flops": flops, "bytes": nbytes,
        "flop_rate": flops / t if flops else None, "byte_rate": nbytes / t if nbytes else None,
        "pct_ceiling": None, "ceiling_key": "matmul:float32", "bound": "compute",
    }  # fmt: skip


def run(ops: list[dict], ceilings: bool = True) -> RunRecord:
    cs = [
        Ceiling(device="cpu", key="bandwidth", value=2e10, unit="B/s", method="t"),
        Ceiling(device="cpu", key="matmul:float32", value=1e11, unit="FLOP/s", method="t"),
        Ceiling(device="cpu", key="matmul:bfloat16", value=3e11, unit="FLOP/s", method="t"),
    ]
    p: dict[str, Any] = {
        "case": "simplenet/train fp32 b=64", "device": "cpu", "kind": "cpu", "steps": 1,
        "schedule": {"wait": 1, "warmup": 2, "active": 1}, "profiled_step_s": 1e-3,
        "unprofiled_median_s": 1e-3, "overhead_pct": 0.0, "categories": [], "ops": ops,
        "verdict": "v", "rules": [],
    }  # fmt: skip
    return RunRecord(
        tool_version="t", kind="profile", command="t", environment={}, fingerprint="f",
        ceilings=cs if ceilings else [], payload={"kind": "profile", "profile": p},
    )  # fmt: skip


OPS = [
    op("aten::addmm", 2 * 64 * 1000 * 512, 4 * (64 * 1000 + 1000 * 512), 900.0, 40.0),
    op("aten::mm", 2 * 64 * 512 * 256, 4 * (64 * 512 + 512 * 256), 300.0, 12.0),
    op("aten::relu", None, 4 * 64 * 512, 50.0, 3.0),
]


def test_each_op_with_flops_and_bytes_is_a_point_under_the_measured_roofs() -> None:
    chart = ops_roofline(run(OPS))
    assert chart.svg is not None
    # labels: the op, its share; the roof drawn from the ceiling its rows name (fp32)
    assert "aten::addmm (40.0 %)" in chart.svg and "aten::mm (12.0 %)" in chart.svg
    assert "fp32 peak 100 GFLOP/s" in chart.svg and "bf16 peak" not in chart.svg
    assert "bw 20.0 GB/s" in chart.svg
    assert "Not drawn, no FLOP or byte count: aten::relu" in chart.note
    page = html.render([run(OPS)])
    assert 'id="chart-ops-roofline"' in page and "aten::addmm (40.0 %)" in page


def test_no_chart_says_why() -> None:
    assert "no ceiling was measured" in ops_roofline(run(OPS, ceilings=False)).note
    only_relu = ops_roofline(run(OPS[2:]))
    assert only_relu.svg is None and "no top op has both a FLOP count and bytes" in only_relu.note
    page = html.render([run(OPS[2:])])
    assert re.search(r'<p class="nochart">no top op has both', page)


def test_flops_that_put_a_kernel_above_the_matmul_peak_are_not_its_own() -> None:
    """An H100 GPT-2 profile gave a cuBLAS GEMM 1.38 PFLOP/s, 174 % of the 794 TFLOP/s bf16
    ceiling: the launching op's FLOPs were not all this kernel's. No rate, not a ceiling
    beaten."""
    from torchmark.kinds.profile import ops
    from torchmark.results import Ceiling

    peak = Ceiling(device="cuda:0", key="matmul:bfloat16", value=794e12, unit="FLOP/s", method="m")
    bw = Ceiling(device="cuda:0", key="bandwidth", value=3.05e12, unit="B/s", method="m")
    bound, pct, key = ops._bound(2470.0, 36, 1.38e15, None, peak, bw, None)
    assert (bound, pct, key) == ("", None, None)
    bound, pct, key = ops._bound(2470.0, 36, 705e12, None, peak, bw, None)
    assert bound == "compute" and pct is not None and 88 < pct < 89
