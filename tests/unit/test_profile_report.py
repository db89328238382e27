"""The profile's terminal tables and overhead line on a GPU-shaped stored profile: kernel
names as an H100 reports them, in 80 columns and piped."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.console import Console
from tests.unit.test_profile_names import (
    ADD,
    BN_BACKWARD,
    CLAMP,
    CUTLASS,
    NCHW_TO_NHWC,
    XMMA_FPROP,
)

from torchmark.kinds.profile import categories as c
from torchmark.report.profile import html_context, overhead_line, profile_tables
from torchmark.results import RunRecord
from torchmark.results.payloads import ProfileSummary

typed = ProfileSummary.model_validate

# self time per step (µs), calls, % of the ceiling named: the shape of resnet50 train
# amp-bf16 b=64 on an H100 (figures made up to the same scale; nothing here is measured)
KERNELS = [
    (BN_BACKWARD, 4480.0, 53, 61.2, "bandwidth", "memory"),
    (XMMA_FPROP, 3961.5, 20, 42.7, "matmul:bfloat16", "compute"),
    (CUTLASS, 2210.25, 16, 55.1, "matmul:bfloat16", "compute"),
    (NCHW_TO_NHWC, 1480.0, 161, 38.0, "bandwidth", "memory"),
    (ADD, 1210.0, 161, 72.4, "bandwidth", "memory"),
    (CLAMP, 388.0, 3, 12.5, "bandwidth", "memory"),
    ("Memcpy HtoD (Pageable -> Device)", 250.0, 2, None, None, ""),
]


def gpu_profile(**over: Any) -> dict[str, Any]:
    ops = [
        {
            "name": name,
            "category": c.MEMCPY if name.startswith("Memcpy") else c.COMPUTE,
            "calls": float(calls),
            "self_us": us,
            "share": 100 * us / 28_500,
            "flops": None,
            "bytes": None,
            "flop_rate": 1.2e14 if bound == "compute" else None,
            "byte_rate": 1.9e12 if bound == "memory" else None,
            "pct_ceiling": pct,
            "ceiling_key": key,
            "bound": bound,
        }
        for name, us, calls, pct, key, bound in KERNELS
    ]
    p = {
        "case": "resnet50 train amp-bf16 b=64 cuda",
        "kind": "gpu",
        "steps": 5,
        "schedule": {"wait": 1, "warmup": 2, "active": 5},
        "profiled_step_s": 28.9e-3,
        "profiled_mean_s": 28.5e-3,
        "unprofiled_median_s": 31.4e-3,
        "overhead_pct": 100 * (28.9 / 31.4 - 1),
        "spread_pct": 3.1,
        "profiled_spread_pct": 1.2,
        "unprofiled_spread_pct": 3.1,
        "categories": [
            {"name": k, "us_per_step": 28_500 / len(c.GPU_ORDER), "share": 100 / len(c.GPU_ORDER)}
            for k in c.GPU_ORDER
        ],
        "rules": c.rules_text("gpu"),
        "ops": ops,
        "verdict": "v",
        "notes": [],
    }
    return {**p, **over}


def record(p: dict[str, Any]) -> RunRecord:
    return RunRecord(
        tool_version="t", kind="profile", command="t", environment={}, fingerprint="f",
        payload={"kind": "profile", "profile": p},
    )  # fmt: skip


def render(p: dict[str, Any], width: int, verbose: bool = False) -> str:
    console = Console(width=width, record=True, color_system=None)
    for r in profile_tables(record(p), verbose):
        console.print(r)
    return console.export_text()


def ops_table(text: str) -> list[str]:
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("Top ops"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith("verdict"))
    return lines[start:end]


@pytest.mark.parametrize("width", [80, 100, 200])
def test_kernel_names_are_short_and_the_numbers_whole(width: int) -> None:
    text = render(gpu_profile(), width)
    table = ops_table(text)
    assert max(len(ln) for ln in text.splitlines()) <= width
    body = "\n".join(table)
    # every self time, share and % of ceiling printed whole (80 columns cut them to "4.48…")
    for cell in ("4.48 ms", "3.96 ms", "2.21 ms", "1.48 ms", "1.21 ms", "388 µs", "250 µs"):
        assert cell in body
    for pct in ("61.2 %", "42.7 %", "55.1 %", "38.0 %", "72.4 %", "12.5 %", "15.7 %"):
        assert pct in body
    assert "…" not in body
    assert "void" not in body and "GenericPackedTensorAccessor" not in body
    flat = " ".join(body.split())
    for short in ("batch_norm_backward_kernel", "cutlass gemm bf16 256x128 nn", "nchwToNhwcKernel"):
        assert short in flat
    assert "<CUDAFunctor_add>" in flat and "<launch_clamp_scalar lambda>" in flat
    # no op row is longer than two lines
    assert len(table) <= 4 + 2 * len(KERNELS)


def test_wide_table_gives_each_kernel_one_line() -> None:
    body = "\n".join(ops_table(render(gpu_profile(), 200)))
    assert "vectorized_elementwise_kernel<CUDAFunctor_add>" in body
    assert "cudnn conv fprop bf16 128x128x64" in body


def test_verbose_and_the_stored_data_keep_the_full_names() -> None:
    p = gpu_profile()
    assert p["ops"][0]["name"] == BN_BACKWARD
    text = " ".join(render(p, 80, verbose=True).split())
    assert "ops in full:" in text
    assert f"batch_norm_backward_kernel: {' '.join(BN_BACKWARD.split())}" in text
    assert "Memcpy HtoD (Pageable -> Device): " not in text  # not renamed, not repeated
    assert "full names" in " ".join(render(p, 80).split())  # the plain view says where
    html = html_context(record(p))
    assert html is not None
    assert html["ops"][0]["name"] == "batch_norm_backward_kernel"
    assert html["ops"][0]["full"] == BN_BACKWARD


def test_overhead_names_both_robust_spreads() -> None:
    line = overhead_line(
        typed(gpu_profile(spread_pct=9.0, profiled_spread_pct=2.0, unprofiled_spread_pct=9.0))
    )
    assert "can't tell (-8 %, within the step times' spread, IQR / median: 2 % profiled, " in line
    assert "9 % unprofiled" in line
    line = overhead_line(typed(gpu_profile()))
    assert "profiler overhead -8 %" in line and "can't tell" not in line
    line = overhead_line(
        typed(gpu_profile(spread_pct=None, profiled_spread_pct=None, unprofiled_spread_pct=None))
    )
    assert line.endswith("-8 % (its noise is not known: give 4 or more --steps)")


def test_the_top_ten_kernels_of_a_real_h100_trace_fit_80_columns() -> None:
    from tests.unit.test_profile_names import h100_kernels

    top = h100_kernels()[:10]
    ops = [
        {
            **gpu_profile()["ops"][0],
            "name": k["name"],
            "calls": k["calls"],
            "self_us": k["self_us"],
            "share": 100 * k["self_us"] / 57_000,
        }
        for k in top
    ]
    text = render(gpu_profile(ops=ops), 80)
    assert max(len(ln) for ln in text.splitlines()) <= 80
    body = "\n".join(ops_table(text))
    assert "void" not in body and "9.05 ms" in body and "batch_norm_backward_kernel" in body
    # every row's self time, share and % of the ceiling are there, whole; only a name is cut
    assert body.count("61.2 %") == 10
    assert len(re.findall(r" \d+(\.\d+)? (ms|µs) ", body)) == 10
    assert "batch_norm_collect_statistics_ker…" in body


def test_a_large_overhead_on_gpu_says_host_wait_is_inflated() -> None:
    # the H100 trace: profiled steps ~57 ms, unprofiled 31.9 ms, kernels 29.8 ms per step
    p = gpu_profile(
        profiled_step_s=57.2e-3, unprofiled_median_s=31.9e-3, overhead_pct=79.0,
        spread_pct=4.0, device_busy_s=29.8e-3,
    )  # fmt: skip
    line = overhead_line(typed(p))
    assert "profiler overhead +79 %; the profiler slows the host" in line
    assert "host-wait is inflated: the GPU's work, 29.8 ms per step, fills 93 % of the" in line


def test_padding_advice_without_a_command_prints_no_empty_command() -> None:
    """The user's model has no padded twin to run: the advice says what to change, and no
    empty `$` line or <code> follows it."""
    from torchmark.report import html

    advice = {"variant": "pad 50,257 to 50,304", "why": "35 % of the step ...", "command": ""}
    p = gpu_profile(advice=[{**advice, "workload": None, "kind": "shape"}])
    text = render(p, 80)
    assert "- pad 50,257 to 50,304: 35 % of the step ..." in text
    assert "    $ \n" not in text and not any(ln.strip() == "$" for ln in text.splitlines())
    page = html.render([record(p)])
    assert "<b>pad 50,257 to 50,304</b>: 35 % of the step ..." in page
    assert "<code></code>" not in page
