"""``matmul``: square GEMM throughput per dtype over sizes (2n^3 FLOPs per call).

Variants are the dtype names of the ``matmul:<dtype>`` ceilings: float32 (tf32 off), tf32,
float16, bfloat16, int8 (``torch._int_mm``, int8 x int8 -> int32).
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import torch

from torchmark.ceilings.matmul import flops, gemm, operands
from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped, OutOfMemory, WrongResultError
from torchmark.results import Work
from torchmark.variants import parse
from torchmark.variants.flags import matmul_precision
from torchmark.workloads.base import WORKLOADS, Case, PlanOptions, Prepared, Workload, table_suite
from torchmark.workloads.micro._common import fits, rule_for, sizes_or

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "tf32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int8": torch.int8,
}
# Max relative Frobenius error of 16 output rows against a float64 reference of the same
# (already rounded) inputs: fp32 differs in summation order only (~1e-6); tf32 rounds inputs
# to a 10-bit mantissa (~5e-4); fp16/bf16 round the output to 10/7 bits (~5e-4 / 4e-3).
TOLERANCE = {"float32": 1e-4, "tf32": 1e-2, "float16": 1e-2, "bfloat16": 2e-2, "int8": 0.0}
CHECK_ROWS = 16

# A 2-core CPU does ~100 GFLOP/s fp32: 1024^3 is ~20 ms, 2048^3 ~0.2 s, 4096^3 ~1.4 s.
CPU_SIZES = {
    "quick": [512, 1024],
    "standard": [256, 512, 1024, 2048],
    "full": [256, 512, 1024, 2048, 4096],
}
# GPUs reach their tensor-core plateau around 4096; 16384^3 fp32 is ~0.2 s on an H100.
GPU_SIZES = {
    "quick": [4096, 8192],
    "standard": [1024, 2048, 4096, 8192, 16384],
    "full": [512, 1024, 2048, 4096, 8192, 16384],
}


def variants(device: Device, opts: PlanOptions) -> list[str]:
    """The dtypes to plan: --precision if given; else fp32 everywhere, bf16 on CPUs beyond
    quick (fp16 GEMM on a CPU runs at ~1 GFLOP/s), every dtype on accelerators (those the
    device lacks are skipped with the reason)."""
    if opts.precisions:
        # the variants vocabulary: an unknown name fails with the valid list; a matmul has
        # no optimisations, so "amp-bf16+compile" times its ceiling's bfloat16 GEMM
        wanted = [parse(p).ceiling.removeprefix("matmul:") for p in opts.precisions]
        return list(dict.fromkeys(wanted))
    if device.is_accelerator:
        return list(DTYPES)
    return ["float32"] if opts.suite == "quick" else ["float32", "bfloat16"]


@WORKLOADS.register("matmul")
class Matmul(Workload):
    name: ClassVar[str] = "matmul"
    summary: ClassVar[str] = (
        "square GEMM n x n x n per dtype (fp32, tf32, fp16, bf16, int8) over sizes; TFLOP/s "
        "(2n^3 per call); --size sets n"
    )
    in_quick: ClassVar[bool] = True

    def describe(self) -> dict[str, Any]:
        return {"variants": list(DTYPES), "flops_per_call": "2n^3"}

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        rule = rule_for(opts.suite)
        default = (GPU_SIZES if device.is_accelerator else CPU_SIZES)[table_suite(opts.suite)]
        return [
            Case(self.name, v, device, (("n", n),), f"{self.name}/{v}/{device.name}", rule)
            for v in variants(device, opts)
            for n in sizes_or(opts, default)
        ]

    def memory_bytes(self, case: Case) -> int | None:
        dtype, n = DTYPES.get(case.variant), int(case.param_dict["n"])
        if dtype is None:
            return None
        return n * n * (2 * dtype.itemsize + (4 if dtype == torch.int8 else dtype.itemsize))

    def prepare(self, case: Case) -> Prepared:
        variant, device = case.variant, case.device
        n = int(case.param_dict["n"])
        dtype = DTYPES[variant]
        reason = device.supports(dtype) or (device.supports_tf32() if variant == "tf32" else None)
        if reason:
            raise CaseSkipped(f"{variant} not available on {device.name}: {reason}")
        out_size = 4 if dtype == torch.int8 else dtype.itemsize
        if not fits(device, n * n * (2 * dtype.itemsize + out_size), 1):
            raise OutOfMemory(f"out of memory at n={n}: three {n}x{n} matrices do not fit")
        try:
            a, b, out = operands(n, dtype, device)
        except RuntimeError as e:
            if device.is_out_of_memory(e):
                raise
            raise CaseSkipped(f"{variant} operands cannot be made here: {e}") from e
        # fp32 runs with tf32 off and tf32 with it on, whatever the user's setting; restored
        # in teardown.
        flags = contextlib.ExitStack()
        flags.enter_context(matmul_precision(variant == "tf32"))
        fn = gemm(a, b, out)

        def check() -> list[str]:
            try:
                got = fn()
            except RuntimeError as e:  # e.g. _int_mm missing for this backend or shape
                raise CaseSkipped(f"{variant} matmul does not run here: {e}") from e
            assert isinstance(got, torch.Tensor)
            # float64 for int8 too: CUDA has no integer matmul, and |sum| <= 2^14 * n stays
            # far below 2^53, so the float64 product is exact
            ref_dtype = torch.float64
            want = a[:CHECK_ROWS].to(ref_dtype) @ b.to(ref_dtype)
            diff = (got[:CHECK_ROWS].to(ref_dtype) - want).double().norm()
            rel = float(diff / max(float(want.double().norm()), 1e-30))
            if rel > TOLERANCE[variant]:
                raise WrongResultError(
                    f"{variant} {n}^3 matmul is off by {rel:.2g} (relative) from a float64 "
                    f"reference; tolerance {TOLERANCE[variant]}"
                )
            return []

        return Prepared(
            fn=fn,
            work=Work(
                flops=flops(n),
                bytes=n * n * (2 * dtype.itemsize + out_size),
                items=1,
                item_unit="matmul",
            ),
            headline="flops",
            ceiling=f"matmul:{variant}",
            check=check,
            timing="device",
            rule=case.rule or "micro",
            notes=["int8 counts operations like FLOPs (2 per multiply-add)"]
            if dtype == torch.int8
            else [],
            extra={"dtype": str(dtype), "allow_tf32": variant == "tf32"},
            teardown=flags.close,
        )
