"""Theoretical peaks of common NVIDIA GPUs, from the vendor's datasheets and whitepapers.

Dense figures only: NVIDIA quotes tensor-core peaks "with sparsity" (2x) in most datasheets;
those are halved here because torchmark's matmuls are dense. GeForce tensor peaks are the
"FP32 accumulate" rows of the architecture whitepapers, since PyTorch's fp16/bf16 GEMMs
accumulate in fp32 (GeForce runs fp16-accumulate at twice that rate).

A figure that a source does not give is left out (None): no guesses. Units: B/s and FLOP/s
(int8 in OP/s, counted like FLOPs: 2 per multiply-add).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GB = 1e9
T = 1e12

# Sources, named once.
A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (2021)"
H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (2023)"
H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (2024)"
L4_DS = "NVIDIA L4 Tensor Core GPU datasheet (2023)"
L40S_DS = "NVIDIA L40S GPU datasheet (2023)"
A10_DS = "NVIDIA A10 Tensor Core GPU datasheet (2021)"
T4_DS = "NVIDIA T4 Tensor Core GPU datasheet (2019)"
V100_DS = "NVIDIA V100 Tensor Core GPU datasheet (2020)"
GA102_WP = "NVIDIA Ampere GA102 GPU Architecture whitepaper (2021), appendix tables"
GA10X_DERIVED = (
    "derived: GA10x per-SM rates from the NVIDIA Ampere GA102 whitepaper x SM count x boost "
    "clock from NVIDIA's product page"
)
ADA_WP = "NVIDIA Ada GPU Architecture whitepaper (2023), appendix table"
PASCAL_DS = "NVIDIA GeForce GTX 1080 Ti product page (2017)"


@dataclass(frozen=True)
class Spec:
    """One GPU model's theoretical peaks (None: the source gives no figure)."""

    model: str
    pattern: str  # regex searched (case-insensitive) in torch's device name
    source: str
    bandwidth: float  # B/s, memory
    float32: float  # FLOP/s on CUDA cores: what an fp32 GEMM gets without tf32
    tf32: float | None = None
    float16: float | None = None
    bfloat16: float | None = None
    int8: float | None = None
    memory_gib: tuple[float, float] | None = None

    def peak(self, key: str) -> float | None:
        """The theoretical figure for a ceiling key, e.g. 'bandwidth:copy' or 'matmul:tf32'."""
        kind, _, sub = key.partition(":")
        if kind == "bandwidth":
            return self.bandwidth
        if kind == "matmul" and sub in ("float32", "tf32", "float16", "bfloat16", "int8"):
            value: float | None = getattr(self, sub)
            return value
        return None


NA = None
Peak = float | None
# Most specific first: the first row whose pattern (and memory range) matches wins.
# Dense peaks: GB/s; fp32, tf32, fp16, bf16 in TFLOP/s; int8 in TOPS. "/ 2": a datasheet
# figure quoted with sparsity. torch names look like "NVIDIA A100-SXM4-80GB",
# "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 3090", "Tesla V100-SXM2-16GB".
# fmt: off
_ROWS: tuple[tuple[str, str, str, float, float, Peak, Peak, Peak, Peak], ...] = (
    # model, pattern, source, GB/s, fp32, tf32, fp16, bf16, int8
    ("H200 NVL", r"\bH200 NVL\b", H200_DS, 4800, 60, 835 / 2, 1671 / 2, 1671 / 2, 3341 / 2),
    ("H200 SXM", r"\bH200\b", H200_DS, 4800, 67, 989 / 2, 1979 / 2, 1979 / 2, 3958 / 2),
    ("H100 NVL", r"\bH100 NVL\b", H100_DS, 3900, 60, 835 / 2, 1671 / 2, 1671 / 2, 3341 / 2),
    ("H100 PCIe", r"\bH100 PCIe\b", H100_DS, 2000, 51, 756 / 2, 1513 / 2, 1513 / 2, 3026 / 2),
    ("H100 SXM", r"\bH100\b", H100_DS, 3350, 67, 989 / 2, 1979 / 2, 1979 / 2, 3958 / 2),
    ("A100 80GB PCIe", r"\bA100\b.*80GB PCIe", A100_DS, 1935, 19.5, 156, 312, 312, 624),
    ("A100 80GB SXM", r"\bA100\b.*80GB", A100_DS, 2039, 19.5, 156, 312, 312, 624),
    ("A100 40GB", r"\bA100\b", A100_DS, 1555, 19.5, 156, 312, 312, 624),
    ("A10", r"\bA10\b", A10_DS, 600, 31.2, 62.5, 125, 125, 250),
    ("L40S", r"\bL40S\b", L40S_DS, 864, 91.6, 183, 362.05, 362.05, 733),
    ("L4", r"\bL4\b", L4_DS, 300, 30.3, 120 / 2, 242 / 2, 242 / 2, 485 / 2),
    # Turing / Volta: no tf32 or bf16 in hardware; V100 int8 is not a tensor-core path.
    ("T4", r"\bT4\b", T4_DS, 320, 8.1, NA, 65, NA, 130),
    ("V100S PCIe", r"\bV100S\b", V100_DS, 1134, 16.4, NA, 130, NA, NA),
    ("V100 PCIe", r"\bV100[- ]PCIe\b", V100_DS, 900, 14, NA, 112, NA, NA),
    ("V100 SXM2", r"\bV100\b", V100_DS, 900, 15.7, NA, 125, NA, NA),
    # GeForce (tensor peaks with fp32 accumulate); 3080 12GB and 3060 8GB differ in
    # bandwidth and are not in these sources, so they are left unmatched.
    ("RTX 4090", r"\bRTX 4090\b", ADA_WP, 1008, 82.6, 82.6, 165.2, 165.2, 660.6),
    ("RTX 3090", r"\bRTX 3090\b(?! Ti)", GA102_WP, 936, 35.6, 35.6, 71, 71, 284),
    ("RTX 3080", r"\bRTX 3080\b(?! Ti)", GA102_WP, 760, 29.8, 29.8, 59.5, 59.5, 238),
    ("RTX 3060 Ti", r"\bRTX 3060 Ti\b", GA10X_DERIVED, 448, 16.2, 16.2, 32.4, 32.4, 129.6),
    ("RTX 3060", r"\bRTX 3060\b(?! Ti)", GA10X_DERIVED, 360, 12.7, 12.7, 25.5, 25.5, 101.9),
    # Pascal: no tensor cores; fp16 runs at 1/64 of fp32, so no useful fp16 peak is listed.
    ("GTX 1080 Ti", r"\bGTX 1080 Ti\b", PASCAL_DS, 484, 11.3, NA, NA, NA, NA),
)
# fmt: on


def _tera(x: float | None) -> float | None:
    return None if x is None else x * T


# Where one name covers variants with different memory bandwidth, the GiB range (as torch
# reports it, a little under the label) the row is for; the other variants stay unmatched.
_MEMORY_GIB: dict[str, tuple[float, float]] = {"RTX 3080": (9, 11), "RTX 3060": (11, 13)}

# L2 cache (MiB) per row, from the same whitepapers; H100 and H200 as torch reported them on
# the reference runs' machines. The board decides from it whether a case's working set is
# read from memory, never from the l2_bytes a submitter wrote.
L2_MIB: dict[str, float] = {
    "H200 NVL": 60, "H200 SXM": 60, "H100 NVL": 50, "H100 PCIe": 50, "H100 SXM": 50,
    "A100 80GB PCIe": 40, "A100 80GB SXM": 40, "A100 40GB": 40, "A10": 6, "L40S": 96,
    "L4": 48, "T4": 4, "V100S PCIe": 6, "V100 PCIe": 6, "V100 SXM2": 6, "RTX 4090": 72,
    "RTX 3090": 6, "RTX 3080": 5, "RTX 3060 Ti": 4, "RTX 3060": 3, "GTX 1080 Ti": 2.75,
}  # fmt: skip

SPECS: tuple[Spec, ...] = tuple(
    Spec(
        model,
        pattern,
        src,
        bandwidth=bw * GB,
        float32=fp32 * T,
        tf32=_tera(tf32),
        float16=_tera(fp16),
        bfloat16=_tera(bf16),
        int8=_tera(i8),
        memory_gib=_MEMORY_GIB.get(model),
    )
    for model, pattern, src, bw, fp32, tf32, fp16, bf16, i8 in _ROWS
)


def lookup(name: str | None, memory_bytes: int | None = None) -> Spec | None:
    """The datasheet row for a device name as torch reports it, or None when not listed."""
    if not name:
        return None
    gib = memory_bytes / 2**30 if memory_bytes else None
    for spec in SPECS:
        if not re.search(spec.pattern, name, flags=re.IGNORECASE):
            continue
        if spec.memory_gib is not None:
            lo, hi = spec.memory_gib
            if gib is None or not lo <= gib < hi:
                continue
        return spec
    return None
