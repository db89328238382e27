"""What every model workload shares: scenarios, batch sweeps, variants, FLOP accounting.

A model workload only says how to build its network, inputs and labels; this module turns
that into cases (scenario x precision x batch, a sweep per device) and into a timed step:

    model  = make_model(sizes) on the device, seeded       inputs = make_inputs(sizes) there
    ref    = fp32 output (variants.reference)              built  = variants.build(...)
    check  = variants.check(built output, ref)             -> WrongResultError past tolerance
    work   = FLOPs per call from FlopCounterMode (on the meta device, cached), items = batch
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from torchmark import variants
from torchmark.devices.base import Device
from torchmark.errors import CaseSkipped, UnknownNameError, WrongResultError
from torchmark.results import Work
from torchmark.stats.measurement import Measurement
from torchmark.workloads.base import (
    Case,
    PlanOptions,
    Prepared,
    Workload,
    swept,
    table_suite,
    trimmed,
)
from torchmark.workloads.models.meta import _count_flops, _meta_model, _MetaDevice

# Every scenario any model offers; a name outside this set is a user's typo.
SCENARIOS = ("infer", "infer-e2e", "train", "prefill", "decode")
SCENARIO_HELP = {
    "infer": "forward under inference_mode, inputs already on the device; items/s per batch",
    "infer-e2e": "host inputs moved to the device, forward, output back to the host",
    "train": "forward, loss, backward, optimizer step, zero_grad; synthetic labels",
    "prefill": "the prompt's forward pass that fills the KV cache",
    "decode": "autoregressive generation, one token per step, with a KV cache",
}


@dataclass(frozen=True)
class Sizes:
    """The shape knobs of one case (all case params except scenario and precision)."""

    batch: int = 1
    seq: int = 0  # tokens per sequence (bert, gpt2)
    new_tokens: int = 0  # decode: tokens generated per call
    layers: int = 0  # 0: the reference depth; tests use 1-2
    vocab: int = 0  # 0: the reference vocabulary; tests use a small one
    image: int = 224  # resnet input side

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> Sizes:
        names = {f.name for f in fields(cls)}
        return cls(**{k: int(v) for k, v in p.items() if k in names})

    def params(self) -> tuple[tuple[str, int], ...]:
        """The non-default knobs after ``batch``, for Case.params."""
        default = Sizes()
        return tuple(
            (f.name, getattr(self, f.name))
            for f in fields(self)
            if f.name != "batch" and getattr(self, f.name) != getattr(default, f.name)
        )


@dataclass(frozen=True)
class Plan:
    """One suite's cases for a model: scenario -> precisions, and the batch sweep caps."""

    scenarios: dict[str, tuple[str, ...]]
    cpu_cap: int = 1
    gpu_cap: int = 1
    only: int | None = None  # a single batch size instead of a sweep
    cpu_sizes: dict[str, int] = field(default_factory=dict)  # e.g. {"seq": 128}
    gpu_sizes: dict[str, int] = field(default_factory=dict)
    # The CPU's own list where it differs: AMP fp16 has no CPU hardware path (simplenet's
    # fp16 train step ran 20x slower than fp32 here), and 2 cores must finish in minutes.
    cpu_scenarios: dict[str, tuple[str, ...]] | None = None

    def scenarios_for(self, device: Device) -> dict[str, tuple[str, ...]]:
        if not device.is_accelerator and self.cpu_scenarios is not None:
            return self.cpu_scenarios
        return self.scenarios


def doubling(cap: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``cap`` (``cap`` itself included when it is not a power of 2)."""
    out = [1 << i for i in range(max(cap, 1).bit_length()) if 1 << i <= cap]
    return tuple(out + ([cap] if cap not in out else []))


class EndToEnd(nn.Module):
    """Seed 03, example 3: host tensors in, moved to the device, the output back on the host.

    Pageable host memory and blocking copies: what a plain ``x.to(device)`` user gets.
    """

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        super().__init__()
        self.model, self.target = model, device

    def forward(self, *host: torch.Tensor) -> Any:
        out = self.model(*(t.to(self.target) for t in host))
        return _to_host(out)


def _to_host(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (tuple, list)):
        return type(x)(_to_host(i) for i in x)
    return x


# Tail quantiles need samples that are single calls and enough of them: a sample averaging k
# calls hides any one slow call (p99 of means is not p99 of calls), and below 20 samples
# p90 and p99 are just the largest sample or an interpolation towards it.
TAIL_MIN_SAMPLES = 20


def latency_quantiles(m: Measurement) -> dict[str, Any]:
    """Per-call latency median, and p90 / p99 when each sample is one call and n >= 20."""
    if not m.n:
        return {}
    out: dict[str, Any] = {"latency_p50_s": m.median}
    if m.calls_per_sample == 1 and m.n >= TAIL_MIN_SAMPLES:
        out["latency_p90_s"] = m.quantile(0.90)
        out["latency_p99_s"] = m.quantile(0.99)
        out["latency_note"] = f"per-call latency quantiles over {m.n} single-call samples"
    else:
        out["latency_note"] = (
            f"latency median over {m.n} samples of {m.calls_per_sample} call(s) each; no "
            f"p90/p99: they need single-call samples and >= {TAIL_MIN_SAMPLES} of them"
        )
    return out


# A GPU's standard suite (``trimmed``) leaves to ``extended`` amp-fp16 (bf16's tensor cores:
# 769 vs 794 TFLOP/s on an H100) and fp32 past a quarter of the batch cap (1/15 of bf16's
# rate: GPT-2 train b=32 alone ~35 s, benchmarks/gpu_standard_estimate.py).
EXTENDED_PRECISIONS = ("amp-fp16",)


class ModelWorkload(Workload):
    """Base of the standard models. Subclasses set ``plans`` and build model/inputs/labels."""

    group: ClassVar[str] = "model"
    item_unit: ClassVar[str] = "samples"
    scenarios: ClassVar[tuple[str, ...]] = ("infer", "infer-e2e", "train")
    optimizer: ClassVar[str] = "sgd"
    plans: ClassVar[dict[str, Plan]]

    # --- what a subclass provides ---------------------------------------------------------
    def make_model(self, sizes: Sizes) -> nn.Module:
        raise NotImplementedError

    def make_inputs(self, sizes: Sizes, g: torch.Generator) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def make_labels(self, sizes: Sizes, g: torch.Generator) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, output: Any, labels: torch.Tensor) -> torch.Tensor:
        logits = output[0] if isinstance(output, (tuple, list)) else output
        return F.cross_entropy(logits.float().flatten(0, -2), labels.flatten())

    def train_module(self, model: nn.Module) -> nn.Module:
        """The module trained (a task head may be added); defaults to the model itself."""
        return model

    def items(self, scenario: str, sizes: Sizes) -> float:
        return float(sizes.batch)

    def train_extra(self, sizes: Sizes) -> dict[str, Any]:
        return {}

    def runnable(
        self, model: nn.Module, scenario: str, sizes: Sizes, device: Device, g: torch.Generator
    ) -> tuple[nn.Module, tuple[Any, ...], Callable[[Any], torch.Tensor] | None]:
        """(module, inputs, loss_fn) for one scenario; inputs live where the module wants."""
        dev = device.torch_device
        inputs = self.make_inputs(sizes, g)
        if scenario == "train":
            from torchmark.workloads.models.ddp import data_parallel

            labels = self.make_labels(sizes, g).to(dev)
            return (
                data_parallel(self.train_module(model), device),
                tuple(t.to(dev) for t in inputs),
                lambda out: self.loss(out, labels),
            )
        if scenario == "infer-e2e":
            return EndToEnd(model, dev), inputs, None
        if scenario == "infer":
            return model, tuple(t.to(dev) for t in inputs), None
        raise UnknownNameError("scenario", scenario, self.scenarios)

    # --- planning ------------------------------------------------------------------------
    def plan_sizes(self, plan: Plan, device: Device, scenario: str) -> Sizes:
        return Sizes(**(plan.gpu_sizes if device.is_accelerator else plan.cpu_sizes))

    def batches(self, plan: Plan, device: Device, scenario: str) -> tuple[int, ...]:
        if plan.only is not None:
            return (plan.only,)
        return doubling(plan.gpu_cap if device.is_accelerator else plan.cpu_cap)

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        rule = "quick" if opts.suite == "quick" else "model"
        for s in opts.scenarios:
            if s not in SCENARIOS:
                raise UnknownNameError("scenario", s, SCENARIOS)
        asked_precisions = tuple(variants.parse(p).name for p in opts.precisions)
        plan = self.plans[table_suite(opts.suite)]
        wanted = [s for s in opts.scenarios if s in self.scenarios] if opts.scenarios else None
        out: list[Case] = []
        planned = plan.scenarios_for(device)
        for scenario in wanted if wanted is not None else list(planned):
            precisions = asked_precisions or planned.get(scenario, ("fp32",))
            sizes = self.plan_sizes(plan, device, scenario)
            batches = opts.batches or self.batches(plan, device, scenario)
            trim = trimmed(opts.suite, device)
            if not opts.batches:
                batches = swept(batches, opts.suite, device)
            if trim and not asked_precisions:
                precisions = tuple(p for p in precisions if p not in EXTENDED_PRECISIONS)
            for precision in precisions:
                # A variant that cannot run here is planned once, to report its reason.
                runs = self._applies(precision, device, scenario, sizes) is None
                sweep = f"{self.name}/{scenario}/{precision}/{device.name}/{sizes.params()}"
                mine = batches
                if trim and not opts.batches and precision == "fp32" and plan.only is None:
                    mine = tuple(b for b in batches if b <= plan.gpu_cap // 4) or batches[:1]
                for b in mine if runs else mine[:1]:
                    params = (
                        ("scenario", scenario),
                        ("precision", precision),
                        ("batch", b),
                        *sizes.params(),
                    )
                    out.append(Case(self.name, scenario, device, params, sweep, rule))
        return out

    def _applies(self, precision: str, device: Device, scenario: str, sizes: Sizes) -> str | None:
        v = variants.parse(precision)
        if scenario == "infer-e2e" and v.cuda_graphs:
            return "CUDA graphs replay device work only; infer-e2e copies from host memory"
        if scenario == "decode" and v.compile:
            return "torch.compile of the decode loop is not offered (it would unroll every step)"
        mode = "train" if scenario == "train" else "infer"
        meta = self.meta_model(sizes)
        return variants.applies(
            v, device, self.train_module(meta) if mode == "train" else meta, mode
        )

    def meta_model(self, sizes: Sizes) -> nn.Module:
        return _meta_model(type(self), replace(sizes, batch=1))

    # --- one case ------------------------------------------------------------------------
    def prepare(self, case: Case) -> Prepared:
        p = case.param_dict
        scenario, precision = str(p.get("scenario", case.variant)), str(p.get("precision", "fp32"))
        if scenario not in self.scenarios:
            raise UnknownNameError("scenario", scenario, self.scenarios)
        sizes = Sizes.from_params(p)
        device = case.device
        v = variants.parse(precision)
        reason = self._applies(precision, device, scenario, sizes)
        if reason:
            raise CaseSkipped(reason)
        mode = "train" if scenario == "train" else "infer"

        torch.manual_seed(0)
        with torch.device(device.torch_device):
            model = self.make_model(sizes)
        g = torch.Generator().manual_seed(1)
        module, inputs, loss_fn = self.runnable(model, scenario, sizes, device, g)
        ref = variants.reference(module, inputs, device, mode)
        built = variants.build(
            v,
            module,
            inputs,
            device,
            mode,
            loss_fn=loss_fn or variants.default_loss,
            optimizer=self.optimizer,
        )
        try:
            prepared = self._prepared(built, scenario, sizes, device, v, mode, ref, loss_fn)
            prepared.rule = case.rule or prepared.rule
            return prepared
        except BaseException:
            built.teardown()  # build left the variant's TF32 flags set
            raise

    def _prepared(
        self,
        built: variants.Built,
        scenario: str,
        sizes: Sizes,
        device: Device,
        v: variants.Variant,
        mode: str,
        ref: Any,
        loss_fn: Callable[[Any], torch.Tensor] | None,
    ) -> Prepared:
        extra: dict[str, Any] = {
            "compile_s": built.compile_s,
            "cold_call_s": built.first_call_s,  # the very first call: lazy init, compile
            "tolerance": v.tolerance,
            "flops_counted": "forward+backward" if mode == "train" else "forward",
        }
        if mode == "train":
            extra["optimizer"] = self.optimizer
            extra.update(self.train_extra(sizes))
            from torchmark.workloads.models.ddp import describe

            extra.update(describe())  # DDP, FSDP or DataParallel: the ladder's rows
        state = {"ref": ref}

        def check() -> list[str]:
            out = built.output if mode == "train" else built.step()
            err = variants.check(out, state.pop("ref"), v)
            extra["max_error"] = err
            if loss_fn is not None and not bool(torch.isfinite(loss_fn(out)).all()):
                raise WrongResultError("loss is NaN or inf")
            if mode == "infer" and not v.cuda_graphs and built.step() is out:
                raise WrongResultError("two calls returned the same object: nothing recomputed")
            return [f"max error vs fp32 {err:.2g} (tolerance {v.tolerance:g}, output scale)"]

        flops = self.flops_per_call(scenario, sizes)
        work = Work(
            flops=flops,
            bytes=self.bytes_per_call(scenario, sizes, v),
            items=self.items(scenario, sizes),
            item_unit=self.unit(scenario),
        )
        notes = [f"{scenario}: {SCENARIO_HELP[scenario]}", *built.notes, *self.notes(scenario)]
        if scenario == "infer-e2e" and not device.is_accelerator:
            # Not "equals infer": linear10 read 15.3 µs here against infer's 12.0 µs
            notes.append(
                "on the CPU infer-e2e moves nothing: it is infer plus the wrapper's own calls "
                "(.to() and .cpu() on tensors already in host memory), a few µs a call that "
                "a tiny model's time shows"
            )
        return Prepared(
            fn=built.step,
            work=work,
            headline="items",
            ceiling=self.ceiling(scenario, sizes, v),
            check=check,
            timing="e2e" if scenario == "infer-e2e" else "device",
            rule="model",
            notes=notes,
            extra=extra,
            summarize=latency_quantiles,
            teardown=built.teardown,  # restores the TF32 flags build set for the variant
        )

    # --- work accounting -----------------------------------------------------------------
    def unit(self, scenario: str) -> str:
        return self.item_unit

    def notes(self, scenario: str) -> list[str]:
        return []

    def ceiling(self, scenario: str, sizes: Sizes, v: variants.Variant) -> str:
        return v.ceiling

    def bytes_per_call(self, scenario: str, sizes: Sizes, v: variants.Variant) -> float:
        return 0.0

    def flops_per_call(self, scenario: str, sizes: Sizes) -> float:
        """FlopCounterMode's count for one call; linear in batch, so counted at batch 1."""
        counted = "infer" if scenario == "infer-e2e" else scenario  # copies are not FLOPs
        per_batch1 = _count_flops(type(self), counted, replace(sizes, batch=1))
        return per_batch1 * sizes.batch

    def describe(self) -> dict[str, Any]:
        sizes = self.plan_sizes(self.plans["standard"], _MetaDevice(), "infer")
        model = self.meta_model(sizes)
        n = sum(p.numel() for p in model.parameters())
        fwd = self.flops_per_call("infer", replace(sizes, batch=1)) / self.items(
            "infer", replace(sizes, batch=1)
        )
        out: dict[str, Any] = {
            "parameters": n,
            "flops_per_item": fwd,
            "item": self.item_unit,
            "scenarios": list(self.scenarios),
        }
        return out | {k: v for k, v in sizes.params()}
