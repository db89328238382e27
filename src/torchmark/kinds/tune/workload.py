"""The workload tune measures: builds each candidate (untimed) and guards its output."""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from torchmark import variants
from torchmark.devices import Device
from torchmark.errors import WrongResultError
from torchmark.kinds.tune.candidates import Candidate
from torchmark.results import Work
from torchmark.user.inputs import InputFactory, Inputs
from torchmark.user.workload import _eval, count_flops
from torchmark.variants.flags import matmul_precision
from torchmark.workloads.base import Case, PlanOptions, Prepared, Workload


class TuneWorkload(Workload):
    """Builds each candidate (untimed: quantize, compile, capture) and guards its output."""

    name = "tune"
    summary = "optimisation advisor for your model"
    group = "user"

    def __init__(self, label: str, model: nn.Module, factory: InputFactory, rule: str) -> None:
        self.label, self.model, self.factory, self.rule = label, model, factory, rule
        self.candidates: dict[str, Candidate] = {}
        self.errors: dict[tuple[str, str], float] = {}  # (device, candidate) -> max error
        self.build_s: dict[tuple[str, str], float] = {}
        self._refs: dict[tuple[str, int], tuple[tuple[Any, ...], Any]] = {}
        self.flops_per_item = 0.0

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        return []  # tune plans stage by stage, see tune()

    def case(self, cand: Candidate, device: Device) -> Case:
        self.candidates[cand.name] = cand
        params = (("batch", cand.batch), ("threads", cand.threads or torch.get_num_threads()))
        return Case(self.label, cand.name, device, params)

    def args_and_reference(self, device: Device, batch: int) -> tuple[tuple[Any, ...], Any]:
        """Positional inputs on the device and the fp32 (IEEE) reference output for them."""
        key = (device.name, batch)
        if key not in self._refs:
            self._refs.clear()  # one batch at a time: the stages move forward
            args = positional(self.factory(batch)).to(device.torch_device).args
            model = _eval(copy.deepcopy(self.model).to(device.torch_device))
            ref, flops = count_flops(lambda: variants.reference(model, args, device, "infer"))
            self.flops_per_item = self.flops_per_item or flops / batch
            self._refs[key] = (args, ref)
        return self._refs[key]

    def prepare(self, case: Case) -> Prepared:
        cand, device = self.candidates[case.variant], case.device
        args, ref = self.args_and_reference(device, cand.batch)
        model = _eval(copy.deepcopy(self.model).to(device.torch_device))
        notes: list[str] = []
        extra: dict[str, Any] = {"config": cand.config()}
        t0 = time.perf_counter()
        if cand.grad == "no_grad":
            # The reference's numerics (IEEE fp32: cuBLAS and cuDNN TF32 off): torch's own
            # default lets cuDNN use TF32, and on an H200 a conv + BatchNorm baseline read
            # 1.49e-4 from its fp32 reference, over the 1e-4 tolerance: WRONG against itself.
            def step() -> Any:
                with torch.no_grad():
                    return model(*args)

            with matmul_precision(False):
                output = step()
            tolerance, tf32 = variants.TOLERANCE["fp32"], False
        else:
            built = variants.build(
                cand.variant, model, args, device, "infer", compile_mode=cand.compile_mode
            )
            built.teardown()  # its TF32 flags are set per sample (``tf32``), not left set
            step, output, tolerance = built.step, built.output, built.variant.tolerance
            tf32 = built.variant.precision == "tf32"
            notes += built.notes
            extra["compile_s"] = built.compile_s
            extra["first_call_s"] = built.first_call_s
        # the TF32 flags each sample of this candidate runs under: the rounds interleave it
        # with the baseline, and a flag one build left set would reach the other's samples
        extra["tf32"] = tf32
        self.build_s[(device.name, cand.name)] = time.perf_counter() - t0

        def check() -> list[str]:
            err = variants.max_error(output, ref)
            self.errors[(device.name, cand.name)] = err
            if err > tolerance:
                raise WrongResultError(
                    f"max error {err:.3g} > tolerance {tolerance:.3g} (relative to the fp32 "
                    "output scale)"
                )
            return [f"max error {err:.2g} vs fp32 reference (tolerance {tolerance:g})"]

        return Prepared(
            fn=step,
            work=Work(flops=self.flops_per_item * cand.batch, items=cand.batch, item_unit="item"),
            check=check,
            timing="device",
            rule=self.rule,
            notes=notes,
            extra=extra,
        )


class _Keywords(nn.Module):
    """Calls a keyword-argument model positionally (variants build and call positionally)."""

    def __init__(self, model: nn.Module, n_args: int, names: Sequence[str]) -> None:
        super().__init__()
        self.model, self.n_args, self.names = model, n_args, tuple(names)

    def forward(self, *args: Any) -> Any:
        kw = dict(zip(self.names, args[self.n_args :], strict=True))
        return self.model(*args[: self.n_args], **kw)


def positional(inputs: Inputs) -> Inputs:
    return Inputs(inputs.args + tuple(inputs.kwargs.values()))
