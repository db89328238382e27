"""Which measured peak an op runs against: its family (from the op's name), its dtype, and on
an accelerator the TF32 switches that make an fp32 GEMM or convolution a TF32 one.

``model`` reads its MFU against the peak of the dtype most of a model's FLOPs run in;
``profile`` places each op against the peak of its own dtype; ``predict`` prices each kernel
at it. The rule, with the switches as the run's environment records them
(``environment.precision``):

    fp32 convolution on an accelerator   matmul:tf32 when cudnn_allow_tf32 (torch's default)
    fp32 GEMM on an accelerator          matmul:tf32 when cuda_matmul_allow_tf32 (or
                                         float32_matmul_precision is not "highest")
    anything else                        matmul:<its dtype>; on a CPU always its dtype

Pure names and arithmetic: no torch (``show``, ``report`` and the board read it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

_FAMILY_NAMES = {
    "gemm": "mm addmm bmm baddbmm matmul _int_mm addmv mv linear dot vdot _addmm_activation "
    "mkldnn_linear _scaled_mm",
    "conv": "convolution convolution_backward _convolution cudnn_convolution "
    "mkldnn_convolution _mkldnn_convolution conv1d conv2d conv3d _slow_conv2d_forward "
    "_slow_conv2d_backward cudnn_convolution_transpose _nnpack_spatial_convolution "
    "conv_transpose2d",
    "attention": "scaled_dot_product_attention _scaled_dot_product_flash_attention "
    "_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention "
    "_flash_attention_forward _efficient_attention_forward "
    "_scaled_dot_product_flash_attention_for_cpu "
    "_scaled_dot_product_fused_attention_overrideable",
    "norm": "native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_no_training "
    "native_batch_norm_backward batch_norm native_layer_norm native_layer_norm_backward "
    "_batch_norm_impl_index cudnn_batch_norm cudnn_batch_norm_backward "
    "_native_batch_norm_legit_functional native_group_norm native_group_norm_backward "
    "_fused_rms_norm",
    "pool": "max_pool2d_with_indices max_pool2d_with_indices_backward adaptive_avg_pool2d "
    "_adaptive_avg_pool2d _adaptive_avg_pool2d_backward avg_pool2d avg_pool2d_backward mean "
    "max_pool2d",
    "softmax": "_log_softmax _log_softmax_backward_data _softmax _softmax_backward_data "
    "nll_loss_forward nll_loss_backward nll_loss nll_loss2d_forward mse_loss "
    "mse_loss_backward",
    "copy": "copy_ _to_copy clone contiguous cat stack",
    "reduce": "sum amax amin max min norm linalg_vector_norm var_mean argmax argmin cumsum "
    "topk sort logsumexp",
}
# Op families, by aten op name (the overload packet's name, no "aten::"). A family tells a
# predictor which ceiling a kernel meets and a reader which ops do dense math.
FAMILIES: dict[str, frozenset[str]] = {k: frozenset(v.split()) for k, v in _FAMILY_NAMES.items()}
# Families whose FLOPs are dense math: the only ones a matmul peak prices, and the only
# ones a kernel may inherit an enclosing op's FLOPs into (profile).
DENSE = frozenset({"gemm", "conv", "attention"})
# Families a run's cases teach a predictor to price: a gemm by the matmul cases, the rest
# by the memory-bound cases (elementwise, copy, reduce ...) and the models.
KNOWN = frozenset(
    {"gemm", "conv", "norm", "pool", "softmax", "copy", "reduce", "elementwise", "foreach"}
)

# Names a dtype goes by: torch's (``torch.float32``, ``float32``) and the profiler's
# record_shapes "Input type" (``float``, ``c10::Half``).
DTYPE_NAMES = {
    "float": "float32",
    "float32": "float32",
    "torch.float32": "float32",
    "double": "float64",
    "float64": "float64",
    "torch.float64": "float64",
    "c10::Half": "float16",
    "half": "float16",
    "float16": "float16",
    "torch.float16": "float16",
    "c10::BFloat16": "bfloat16",
    "bfloat16": "bfloat16",
    "torch.bfloat16": "bfloat16",
    "signed char": "int8",
    "int8": "int8",
    "torch.int8": "int8",
    "unsigned char": "uint8",
    "uint8": "uint8",
    "tf32": "tf32",
}


def family(op: str) -> str:
    """An op's family from its name (``aten::addmm``, ``addmm`` or ``_foreach_add_``)."""
    name = op.removeprefix("aten::")
    if name.startswith("_foreach_"):
        return "foreach"
    for fam, names in FAMILIES.items():
        if name in names:
            return fam
    if "conv" in name and "convert" not in name:
        return "conv"
    return "elementwise"


def dtype_name(dtype: Any) -> str | None:
    """``float32`` for ``torch.float32``, ``"float"``, ``"c10::Half"`` -> ``float16``; None
    for None or a name not known here."""
    if dtype is None:
        return None
    return DTYPE_NAMES.get(str(dtype))


def tf32_flags(precision: Mapping[str, Any] | None) -> tuple[bool, bool]:
    """(fp32 GEMMs run as TF32, fp32 convolutions run as TF32) on an accelerator, from the
    precision record (torch's defaults where a switch is not recorded: GEMMs off, cuDNN on)."""
    p = precision or {}
    gemm = bool(p.get("cuda_matmul_allow_tf32", False)) or p.get(
        "float32_matmul_precision", "highest"
    ) not in ("highest", None)
    return gemm, bool(p.get("cudnn_allow_tf32", True))


def peak_key(
    fam: str, dtype: Any, accelerator: bool, precision: Mapping[str, Any] | None = None
) -> str | None:
    """The ``matmul:<dtype>`` ceiling a dense op of family ``fam`` runs against on a device
    (module docstring); None for a dtype that has no name here."""
    d = dtype_name(dtype)
    if d is None:
        return None
    if accelerator and d == "float32":
        gemm, conv = tf32_flags(precision)
        if (fam == "conv" and conv) or (fam in ("gemm", "attention") and gemm):
            d = "tf32"
    return f"matmul:{d}"


def dominant_key(
    flops: Iterable[tuple[str, Any, float]],
    accelerator: bool,
    precision: Mapping[str, Any] | None = None,
) -> tuple[str | None, float]:
    """The peak most of the dense FLOPs run against, and its share of them, from
    ``(family, dtype, flops)`` triples: (None, 0.0) when there are no dense FLOPs."""
    by: dict[str, float] = {}
    for fam, dtype, f in flops:
        key = peak_key(fam, dtype, accelerator, precision) if fam in DENSE else None
        if key is not None and f > 0:
            by[key] = by.get(key, 0.0) + f
    total = sum(by.values())
    if not total:
        return None, 0.0
    key = max(by, key=lambda k: by[k])
    return key, by[key] / total
