"""Kernel names as CUPTI reports them on an H100 (resnet50 train amp-bf16, torch 2.11+cu130)
and the short names the tables print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from torchmark.kinds.profile.names import short_name

BN_BACKWARD = (
    "void at::native::batch_norm_backward_kernel<c10::BFloat16, float, float, int>("
    "torch::headeronly::detail::GenericPackedTensorAccessor<c10::BFloat16 const, 3ul, "
    "at::RestrictPtrTraits, int>, torch::headeronly::detail::GenericPackedTensorAccessor<"
    "c10::BFloat16 const, 3ul, at::RestrictPtrTraits, int>, torch::headeronly::detail::"
    "GenericPackedTensorAccessor<c10::BFloat16, 3ul, at::RestrictPtrTraits, int>, "
    "torch::headeronly::detail::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, "
    "int>, bool, bool, float)"
)
CUTLASS = (
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nn_align2>("
    "cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_nn_align2::Params)"
)
XMMA_FPROP = (
    "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x64_"
    "warpgroupsize1x1x1_g1_execute_segment_k_off_kernel__5x_cudnn"
)
NCHW_TO_NHWC = (
    "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, __nv_bfloat16, float, "
    "false, true, (cudnnKernelDataType_t)0>(cudnn::engines_precompiled::nchw2nhwc_params_t"
    "<float>, __nv_bfloat16 const*, __nv_bfloat16*)"
)
ADD = (
    "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<"
    "c10::BFloat16>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "std::array<char*, 3ul>)"
)
_CLAMP_LAMBDA = (
    "at::native::(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, "
    "c10::Scalar, c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() "
    "const::{lambda()#9}::operator()() const::{lambda(c10::BFloat16)#1}"
)
CLAMP = (
    f"void at::native::vectorized_elementwise_kernel<4, {_CLAMP_LAMBDA}, std::array<char*, 2ul> "
    f">(int, {_CLAMP_LAMBDA}, std::array<char*, 2ul>)"
)
MUL = (
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<"
    "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<"
    "float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, "
    "at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, "
    "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<"
    "float> > const&)::{lambda(int)#1})"
)
MEAN = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<"
    "float, float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, "
    "at::native::MeanOps<float, float, float, float>, unsigned int, float, 4>)"
)
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
    "namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
    "<float, 4, (at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, "
    "bool, float*, float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, "
    "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1"
    ", false>, float*, float, float, float, float, float, bool, float*, float*)"
)
CUDNN_BN = (
    "void cudnn::bn_bw_1C11_kernel_new<__nv_bfloat16, float, float2, 512, true, 1>(float, "
    "float, float, float, cudnnTensorStruct, __nv_bfloat16 const*, cudnnTensorStruct, "
    "__nv_bfloat16 const*, cudnnTensorStruct, __nv_bfloat16*, cudnnTensorStruct, float const*, "
    "float*, float*, float const*, float const*, float)"
)
CUBLAS = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
    "execute_segment_k_off_kernel__5x_cublas"
)
CUTLASS3 = (
    "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x256x64_2x1x1_0_tnn_align8_"
    "warpspecialized_cooperative_epi_tma"
)


@pytest.mark.parametrize(
    ("full", "short"),
    [
        (BN_BACKWARD, "batch_norm_backward_kernel"),
        (CUTLASS, "cutlass gemm bf16 256x128 nn"),
        (XMMA_FPROP, "cudnn conv fprop bf16 128x128x64"),
        (NCHW_TO_NHWC, "nchwToNhwcKernel"),
        (ADD, "vectorized_elementwise_kernel<CUDAFunctor_add>"),
        (CLAMP, "vectorized_elementwise_kernel<launch_clamp_scalar lambda>"),
        (MUL, "elementwise_kernel<MulFunctor>"),
        (MEAN, "reduce_kernel<MeanOps>"),
        (ADAM, "multi_tensor_apply_kernel<FusedAdamMathFunctor>"),
        (CUDNN_BN, "bn_bw_1C11_kernel_new"),
        (CUBLAS, "cublas gemm bf16 128x256x64"),
        (CUTLASS3, "cutlass gemm bf16 128x256x64"),
        ("nvjet_tst_128x256_64x4_2x1_v_bz_coopB_NNT", "nvjet gemm 128x256 NNT"),
    ],
)
def test_a_kernel_gets_a_short_readable_name(full: str, short: str) -> None:
    assert short_name(full) == short


@pytest.mark.parametrize(
    "name",
    [
        "aten::addmm",
        "aten::convolution_backward",
        "Memcpy HtoD (Pageable -> Device)",
        "Memset (Device)",
        "ampere_sgemm_128x64_tn",
        "ProfilerStep#3",
    ],
)
def test_op_and_short_kernel_names_are_kept_as_they_are(name: str) -> None:
    assert short_name(name) == name


KERNELS_H100 = Path(__file__).parent.parent / "fixtures/profile/h100_resnet50_train_kernels.json"


def h100_kernels() -> list[dict[str, Any]]:
    return json.loads(KERNELS_H100.read_text())["kernels"]


def test_every_kernel_of_a_real_h100_trace_gets_a_short_readable_name() -> None:
    names = [k["name"] for k in h100_kernels()]
    assert len(names) == 75 and max(len(n) for n in names) > 1_000
    shorts = [short_name(n) for n in names]
    assert max(len(s) for s in shorts) <= 90
    for s in shorts:
        assert not s.startswith(("void ", "_Z")) and "::" not in s, s
        assert "(" not in s or s == "Memset (Device)", s
    assert "vectorized_elementwise_kernel<threshold_kernel_impl lambda>" in shorts  # relu bwd
    assert "nvjet gemm 320x128 NTT" in shorts  # cuBLAS's Hopper GEMMs: tile, layouts
    assert "cutlass gemm bf16 256x128 nt" in shorts and "cutlass gemm bf16 256x128 nn" in shorts


def test_a_name_cupti_left_mangled_is_read_from_its_length_prefixes() -> None:
    mangled = next(k["name"] for k in h100_kernels() if k["name"].startswith("_ZN17cutlass"))
    assert short_name(mangled) == "cudnn conv wgrad bf16 64x128x32"
    assert short_name("_Z10add_kernelPfS_i") == "add_kernel"


def test_ops_that_share_a_short_name_are_numbered() -> None:
    from torchmark.report.profile import op_labels

    fill = "void at::native::vectorized_elementwise_kernel<{}, at::native::FillFunctor<{}>>(int)"
    names = [fill.format(4, "float"), "aten::mm", fill.format(8, "c10::BFloat16")]
    assert op_labels(names) == [
        "vectorized_elementwise_kernel<FillFunctor>",
        "aten::mm",
        "vectorized_elementwise_kernel<FillFunctor> #2",
    ]
