"""What the profile suggests checking, and the exact command that checks it."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from torchmark import variants
from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.advice import advise, candidates
from torchmark.report.profile import advice_lines, checked_words
from torchmark.results.payloads import Advice, Checked

R50 = {"scenario": "train", "precision": "amp-bf16", "batch": 64}
NCHW = "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16, float>(int)"
NHWC = "void cudnn::engines_precompiled::nhwcToNchwKernel<__nv_bfloat16, float>(int)"


def profile(kind: str, verdict: str, shares: dict[str, float], ops: Any = ()) -> dict:
    return {
        "kind": kind,
        "verdict": verdict,
        "categories": [{"name": k, "share": v} for k, v in shares.items()],
        "ops": [{"name": n, "share": s, "bound": b} for n, s, b in ops],
    }


def test_layout_conversions_on_gpu_suggest_channels_last_with_the_command() -> None:
    # the H100 resnet50 train trace: 2.5 + 1.0 ms of 57 ms converting layouts
    p = profile(
        "gpu",
        "52 % of the step is compute kernels (largest category)",
        {c.COMPUTE: 52.0, c.HOST_WAIT: 45.0},
        [(NCHW, 4.4, "memory"), (NHWC, 1.8, "memory"), ("gemm", 10.0, "compute")],
    )
    got = advise(p, R50, "resnet50", "cuda:0")
    assert [a.variant for a in got] == ["amp-bf16+channels-last"]
    assert got[0].why.startswith("6 % of the step converts tensors between NCHW and NHWC")
    assert got[0].command == (
        "torchmark run -w resnet50 --scenario train --batch 64 -d cuda:0 "
        "--precision amp-bf16 --precision amp-bf16+channels-last"
    )


def test_launch_bound_suggests_cuda_graphs_then_compile() -> None:
    p = profile("gpu", "launch-bound: 70 % of the step is host-wait (...); try", {c.HOST_WAIT: 70})
    params = {"scenario": "decode", "precision": "fp32", "batch": 1}
    got = advise(p, params, "gpt2", "cuda:0")
    assert [a.variant for a in got] == ["cuda-graphs", "compile"]
    assert (
        got[0].why
        == "launch-bound: 70 % of the step is host-wait (...): one graph replays every launch"
    )
    assert got[1].command.endswith("--precision fp32 --precision compile")
    # already captured in a graph: nothing more of that kind to suggest
    assert candidates(p, {**params, "precision": "cuda-graphs"}) == []


def test_cpu_compute_heavy_in_fp32_suggests_bf16_and_fusable_work_compile() -> None:
    p = profile(
        "cpu", "compute-heavy: 55 % ...", {c.MATMUL: 55.0, c.ELEMENTWISE: 25.0, c.REDUCTION: 10.0}
    )
    params = {"scenario": "train", "precision": "fp32", "batch": 64}
    assert [v for v, _ in candidates(p, params)] == ["amp-bf16", "compile"]
    assert [v for v, _ in candidates(p, {**params, "precision": "amp-bf16"})] == [
        "amp-bf16+compile"
    ]
    # the user's model: tune, which tries every variant itself
    got = advise(p, params, "mine", "cpu", user_spec="m.py:make --input 3x224x224")
    assert got[0].command == "torchmark tune m.py:make --input 3x224x224 -d cpu --batch 64"
    # a micro-benchmark has no variants to try
    assert advise(p, {"size": 10}, "seed_add", "cpu") == []


def test_a_checked_variant_says_its_outcome_in_the_words_of_compare() -> None:
    assert checked_words(
        Checked.model_validate({"status": "ok", "verdict": "FASTER", "speed": 1.32})
    ) == ("measured: 1.32× (faster, FASTER)")
    assert checked_words(
        Checked.model_validate({"status": "ok", "verdict": "SAME", "speed": 1.004})
    ) == ("measured: no change that matters (1.00×)")
    assert checked_words(
        Checked.model_validate({"status": "ok", "verdict": "UNCLEAR", "speed": 1.1, "why": "noisy"})
    ) == ("measured: can't tell (1.10×; noisy)")
    assert checked_words(
        Checked.model_validate({"status": "skipped", "reason": "no bf16 here"})
    ) == ("not measured: skipped (no bf16 here)")
    lines = advice_lines(
        [Advice.model_validate({"variant": "compile", "why": "w", "command": "torchmark run x",
                                "checked": {"status": "skipped", "reason": "r"}})]
    )  # fmt: skip
    assert lines == ["- compile: w", "    $ torchmark run x", "    not measured: skipped (r)"]


def gemms(*rows: tuple[list[list[int]], float], dtype: str = "c10::BFloat16") -> list[dict]:
    return [{"op": "aten::mm", "dims": d, "dtype": dtype, "share": s} for d, s in rows]


# the H100 GPT-2 small bf16 train b=16 profile: the LM head's forward and two backward GEMMs
# over the 50,257-token vocabulary, 30 ms of the 87 ms step; the rest are aligned
GPT2_TRAIN = {"scenario": "train", "precision": "amp-bf16", "batch": 16}
HEAD = gemms(
    ([[16384, 768], [768, 50257]], 11.0),
    ([[16384, 50257], [50257, 768]], 12.0),
    ([[50257, 16384], [16384, 768]], 12.0),
    ([[16384, 768], [768, 3072]], 9.0),
)


def test_a_misaligned_gemm_dimension_taking_much_of_the_step_says_pad_it() -> None:
    p = {**profile("gpu", "80 % of the step is compute kernels", {c.COMPUTE: 80.0}), "gemms": HEAD}
    got = advise(p, GPT2_TRAIN, "gpt2", "cuda:0")
    pad = got[0]
    assert (pad.variant, pad.kind, pad.workload) == ("pad 50,257 to 50,304", "shape", "gpt2-padded")
    assert pad.why.startswith(
        "35 % of the step is 3 bf16 GEMM shape(s) with a dimension of 50,257, not a multiple "
        "of 8 (largest: aten::mm [16384x50257] x [50257x768], 12 %)"
    )
    assert "e.g. 50,257 -> 50,304" in pad.why
    # the same case on the padded twin, measured side by side
    assert pad.command == (
        "torchmark run -w gpt2 -w gpt2-padded --scenario train --batch 16 -d cuda:0 "
        "--precision amp-bf16"
    )
    lines = advice_lines([Advice.model_validate(a.as_dict()) for a in got])
    assert lines[0].startswith("- pad 50,257 to 50,304: 35 % of the step")


def test_aligned_small_fp32_or_cpu_gemms_say_nothing_of_padding() -> None:
    base = profile("gpu", "80 % of the step is compute kernels", {c.COMPUTE: 80.0})
    aligned = gemms(([[16384, 768], [768, 50304]], 35.0), ([[16384, 768], [768, 3072]], 9.0))
    assert advise({**base, "gemms": aligned}, GPT2_TRAIN, "gpt2-padded", "cuda:0") == []
    # under 10 % of the step: not worth a check
    small = gemms(([[16384, 768], [768, 50257]], 9.5))
    assert advise({**base, "gemms": small}, GPT2_TRAIN, "gpt2", "cuda:0") == []
    # fp32 GEMMs do not run on the 16-bit tensor cores this is about
    fp32 = [{**g, "dtype": "float"} for g in HEAD]
    assert advise({**base, "gemms": fp32}, GPT2_TRAIN, "gpt2", "cuda:0") == []
    # the CPU's GEMMs are not tensor-core kernels
    cpu = {**profile("cpu", "compute-heavy", {c.MATMUL: 20.0}), "gemms": HEAD}
    assert all(a.kind != "shape" for a in advise(cpu, GPT2_TRAIN, "gpt2", "cpu"))
    # decode at batch 1: the LM head is a matrix-vector product; padding 1 or 50,257 would
    # not make it a tensor-core GEMM
    decode = gemms(([[1, 768], [768, 50257]], 40.0), ([[16, 768], [768, 50257]], 30.0))
    assert advise({**base, "gemms": decode}, GPT2_TRAIN, "gpt2", "cuda:0") == []
    # a batched GEMM's batch dimension is not a matrix dimension
    batched = gemms(([[12, 1024, 64], [12, 64, 1024]], 40.0))
    assert advise({**base, "gemms": batched}, GPT2_TRAIN, "gpt2", "cuda:0") == []


def test_padding_advice_for_a_model_without_a_padded_twin_has_no_command() -> None:
    p = {**profile("gpu", "80 % compute", {c.COMPUTE: 80.0}), "gemms": HEAD}
    got = advise(p, GPT2_TRAIN, "mine", "cuda:0", user_spec="m.py:make --input 128")
    assert got[0].kind == "shape" and got[0].command == "" and got[0].workload is None
    lines = advice_lines([Advice.model_validate(got[0].as_dict())])
    assert len(lines) == 1  # no "$" line: the change is in the user's model


def test_suggested_variants_are_named_as_run_names_them() -> None:
    fusable = profile(
        "gpu", "55 % of the step is compute kernels", {c.COMPUTE: 55.0}, [("k", 40.0, "memory")]
    )
    got = advise(fusable, {**R50, "precision": "amp-bf16+channels-last"}, "resnet50", "cuda:0")
    # the order `run` stores and `compare` matches (variants.parse), not the order added in
    assert [a.variant for a in got] == ["amp-bf16+compile+channels-last"]
    assert variants.parse("amp-bf16+channels-last+compile").name == got[0].variant
    assert got[0].command.endswith(
        "--precision amp-bf16+channels-last --precision amp-bf16+compile+channels-last"
    )
    # int8-dynamic takes no optimisation: compile is no variant to suggest for it
    cpu = profile("cpu", "overhead-bound: ...; try", {c.ELEMENTWISE: 40.0, c.REDUCTION: 20.0})
    assert candidates(cpu, {"scenario": "infer", "precision": "int8-dynamic"}) == []
    assert [v for v, _ in candidates(cpu, {"scenario": "infer", "precision": "fp32"})] == [
        "compile"
    ]


def test_importing_advice_loads_no_torch() -> None:
    code = "import sys, torchmark.kinds.profile.advice; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
