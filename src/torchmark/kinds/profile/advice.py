"""What the profile suggests trying, as variants torchmark can measure, and the command
that measures each against the profiled case.

``advise`` is a pure function of the stored profile: each suggestion names the variant
(``amp-bf16+channels-last``), the profile's numbers that call for it, and the exact command
(built-in workloads: ``torchmark run`` with the case's own selectors and both variants; the
user's model: ``torchmark tune``, which measures every variant interleaved with the
baseline). ``torchmark profile --check`` measures them at once (``run.check``).
One suggestion is not a variant but a change to the model's shapes: a GEMM dimension that
misses tensor-core alignment (``shape_advice``), measured where a built-in workload has an
aligned twin (``gpt2`` -> ``gpt2-padded``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from torchmark.errors import UnknownNameError
from torchmark.format import round_up
from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.names import short_name

if TYPE_CHECKING:
    from torchmark.variants import Variant

# cuDNN converting NCHW tensors to NHWC and back around each convolution: channels-last
# stores them NHWC once. On an H100 resnet50 train amp-bf16 spent 6 % of its step here.
LAYOUT_KERNEL = re.compile(r"^(nchwToNhwc|nhwcToNchw)", re.I)
LAYOUT_SHARE = 3.0  # % of the step in layout conversions worth a channels-last check
# Memory-bound work that compile can fuse (elementwise chains, norms): worth a check when
# at least this share of the step.
FUSABLE_SHARE = 30.0
COMPUTE_SHARE = 30.0  # matmul/conv share above which a lower precision is worth a check
# 16-bit tensor cores want each GEMM dimension a multiple of 8 elements (16 bytes); past that,
# tiles of 64 divide it evenly. On an H100 GPT-2's LM-head GEMMs over its 50,257-token
# vocabulary ran on slow sm80 cutlass kernels, 30 ms of an 87 ms bf16 train step (35 %);
# nanoGPT pads the vocabulary to 50,304 for this.
ALIGN, ALIGN_IDEAL = 8, 64
HALF_DTYPES = ("c10::BFloat16", "c10::Half")  # as record_shapes names them
# Share of the step in misaligned 16-bit GEMMs worth a check: under 10 %, even kernels twice
# as fast would win under 5 % of the step, about the noise of a model measured on a busy
# machine.
MISALIGNED_SHARE = 10.0
# Only GEMMs with every matrix dimension >= ALIGN_IDEAL count: one with a smaller one (decode's
# single token per sequence: M = batch) is a matrix-vector product bound by memory, where
# tiles do not decide its speed, and padding it would multiply its work.
# Built-in workloads with an aligned twin: the same model padded, measured by `run`.
ALIGNED_TWIN = {"gpt2": "gpt2-padded"}


@dataclass(frozen=True)
class Advice:
    variant: str  # what to try: a variant name (``run --precision``), or a change in words
    why: str  # the profile's numbers that call for it
    command: str  # measures it against the profiled case ("": nothing torchmark can run)
    # another workload measuring the change (the same case on ``gpt2-padded``); with
    # ``variant`` not a variant name, ``--check`` measures this one or nothing
    workload: str | None = None
    kind: str = "variant"  # "variant" | "shape" (pad a dimension in the model)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _with(v: Variant, *opts: str, precision: str | None = None) -> str | None:
    """``v`` with ``opts`` added (and its precision changed), named as ``run`` and
    ``compare`` name it (``variants.parse(...).name``: ``amp-bf16+compile+channels-last``);
    None where that is no variant torchmark builds (int8-dynamic with an optimisation)."""
    from torchmark.variants import parse

    base = replace(v, precision=precision) if precision else v
    try:
        return parse("+".join([base.name, *opts])).name
    except UnknownNameError:
        return None


def candidates(p: Mapping[str, Any], params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(variant, why) for each change the profile calls for, most promising first."""
    # torchmark.variants imports torch: a profile run has it loaded already, and importing
    # this module (views of stored profiles) stays without it
    from torchmark.variants import parse

    v = parse(str(params.get("precision") or "fp32"))
    training = str(params.get("scenario", "")).startswith("train")
    shares = {cat["name"]: cat["share"] for cat in p.get("categories", [])}
    verdict = str(p.get("verdict", ""))
    gpu = p.get("kind") == "gpu"
    out: list[tuple[str, str]] = []

    def add(variant: str | None, why: str) -> None:
        if variant is not None and all(variant != seen for seen, _ in out):
            out.append((variant, why))

    if verdict.startswith(("launch-bound", "overhead-bound")):
        head = verdict.split(";")[0]
        if gpu and not v.cuda_graphs and not v.compile:
            add(_with(v, "cuda-graphs"), f"{head}: one graph replays every launch")
        if not v.compile and not v.cuda_graphs:
            add(_with(v, "compile"), f"{head}: compiled code makes fewer calls")
    layout = sum(o["share"] for o in p.get("ops", []) if LAYOUT_KERNEL.match(short_name(o["name"])))
    if gpu and layout >= LAYOUT_SHARE and not v.channels_last:
        add(
            _with(v, "channels-last"),
            f"{layout:.0f} % of the step converts tensors between NCHW and NHWC around "
            "convolutions; channels-last keeps them NHWC",
        )
    compute = shares.get(c.COMPUTE if gpu else c.MATMUL, 0.0)
    if v.precision in ("fp32", "tf32") and compute >= COMPUTE_SHARE:
        add(
            _with(v, precision="amp-bf16"),
            f"{compute:.0f} % of the step is {c.COMPUTE if gpu else c.MATMUL} in {v.precision}; "
            "bf16 autocast runs matmuls and convolutions at a lower precision "
            + ("(tensor cores)" if gpu else "(where the CPU has bf16 instructions)"),
        )
    fusable = (
        sum(o["share"] for o in p.get("ops", []) if o.get("bound") == "memory")
        if gpu
        else sum(shares.get(k, 0.0) for k in (c.ELEMENTWISE, c.REDUCTION))
    )
    if fusable >= FUSABLE_SHARE and not v.compile and not v.cuda_graphs:
        add(
            _with(v, "compile"),
            f"{fusable:.0f} % of the step is memory-bound "
            + ("kernels" if gpu else "elementwise and reduction ops")
            + "; compile fuses them into fewer passes over memory"
            + (" (training: it compiles the backward too)" if training else ""),
        )
    return out


def misaligned(p: Mapping[str, Any]) -> tuple[int, float, list[Mapping[str, Any]]] | None:
    """The GEMM dimension not a multiple of ``ALIGN`` that the most step time goes through,
    in 16-bit GEMMs: (the dimension, its share of the step, its GEMMs); None when none."""
    shares: dict[int, float] = {}
    calls: dict[int, list[Mapping[str, Any]]] = {}
    for g in p.get("gemms") or []:
        # a batched GEMM's leading dims are its batch; its matrices are the last two
        dims = {x for d in g["dims"] for x in d[-2:]}
        if g.get("dtype") not in HALF_DTYPES or min(dims) < ALIGN_IDEAL:
            continue
        for dim in (x for x in dims if x % ALIGN):
            shares[dim] = shares.get(dim, 0.0) + g["share"]
            calls.setdefault(dim, []).append(g)
    if not shares:
        return None
    dim = max(shares, key=lambda d: shares[d])
    return dim, shares[dim], calls[dim]


def shape_advice(
    p: Mapping[str, Any],
    params: Mapping[str, Any],
    workload: str,
    device: str,
    min_share: float = MISALIGNED_SHARE,
) -> Advice | None:
    """Pad a GEMM dimension that misses tensor-core alignment, when its GEMMs take at least
    ``min_share`` % of a GPU step; with the command that measures the padded twin where a
    built-in workload has one."""
    found = misaligned(p) if p.get("kind") == "gpu" else None
    if found is None or found[1] < min_share:
        return None
    dim, share, gemms = found
    to = round_up(dim, ALIGN_IDEAL)
    top = max(gemms, key=lambda g: g["share"])
    shape = " x ".join("[" + "x".join(str(x) for x in d) + "]" for d in top["dims"])
    dtype = "bf16" if top["dtype"] == "c10::BFloat16" else "fp16"
    why = (
        f"{share:.0f} % of the step is {len(gemms)} {dtype} GEMM shape(s) with a dimension of "
        f"{dim:,}, not a multiple of {ALIGN} (largest: {short_name(top['op'])} {shape}, "
        f"{top['share']:.0f} %): tensor cores need multiples of {ALIGN}, ideally "
        f"{ALIGN_IDEAL}. Pad the size it comes from (vocabulary, hidden size, batch x tokens) "
        f"to a multiple of {ALIGN_IDEAL}: e.g. {dim:,} -> {to:,} (a padded vocabulary's "
        "extra logits are never targets)"
    )
    twin = ALIGNED_TWIN.get(workload)
    cmd = ""
    if twin is not None:
        cmd = command(params, workload, device, [], also=twin)
    return Advice(f"pad {dim:,} to {to:,}", why, cmd, twin, "shape")


def command(
    params: Mapping[str, Any],
    workload: str,
    device: str,
    variants: list[str],
    also: str | None = None,
) -> str:
    """``torchmark run`` of the profiled case with its own variant and the candidates;
    ``also``: a second workload run with the same selectors (an aligned twin)."""
    words = ["torchmark", "run", "-w", workload, *(["-w", also] if also else [])]
    for key, flag in (("scenario", "--scenario"), ("batch", "--batch")):
        if params.get(key) is not None:
            words += [flag, str(params[key])]
    words += ["-d", device]
    for v in [str(params.get("precision") or "fp32"), *variants]:
        words += ["--precision", v]
    return shlex.join(words)


def advise(
    p: Mapping[str, Any],
    params: Mapping[str, Any],
    workload: str,
    device: str,
    user_spec: str | None = None,
) -> list[Advice]:
    """Each candidate with the command that checks it. ``user_spec``: the user's model as
    its SPEC and input options (``tune`` then, which tries every variant itself)."""
    if user_spec is None and "precision" not in params:
        return []  # a micro-benchmark: no variants to try
    if p.get("under_load"):
        return []  # the shares are the scheduler's: nothing in them to act on
    shape = shape_advice(p, params, workload if user_spec is None else "", device)
    out = [shape] if shape is not None else []
    for variant, why in candidates(p, params):
        if user_spec is not None:
            batch = params.get("batch")
            cmd = f"torchmark tune {user_spec} -d {shlex.quote(device)}" + (
                f" --batch {batch}" if batch else ""
            )
        else:
            cmd = command(params, workload, device, [variant])
        out.append(Advice(variant, why, cmd))
    return out
