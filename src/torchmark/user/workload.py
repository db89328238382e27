"""The user's model as a workload: what it is given (a module or a SPEC, example inputs or
a factory), its placement on each device, one preflight call per device (who runs it, the
reference output, FLOPs per item) and ``UserModel``, its cases over batch x view of time.

``kinds.model`` measures it over a batch sweep; ``kinds.profile`` and ``kinds.tune`` take
its pieces; the input pipeline feeds it the user's batches (``place``).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn

from torchmark import variants
from torchmark.devices import Device
from torchmark.errors import CaseSkipped, InputError, WrongResultError
from torchmark.hardware import kernels
from torchmark.results import Work
from torchmark.run.watchdog import CallTimedOut, Watchdog
from torchmark.telemetry import energy
from torchmark.user.inputs import (
    InputFactory,
    describe_tree,
    from_callable,
    from_examples,
    one_line,
    tensors_in,
    to_device,
)
from torchmark.workloads.base import Case, PlanOptions, Prepared, Workload

# A GPU may run fp32 convolutions in TF32 (cuDNN's default): compare devices at its tolerance.
CROSS_DEVICE_TOLERANCE = variants.TOLERANCE["tf32"]


@dataclass
class Preflight:
    placed: dict[str, nn.Module] = field(default_factory=dict)  # device name -> model there
    failed: dict[str, str] = field(default_factory=dict)  # device name -> reason
    reference: Any = None  # host output at the smallest batch
    reference_device: str | None = None
    flops_per_item: float = 0.0
    inputs: str = ""
    # (family, dtype, FLOPs) of each op that counted FLOPs at the smallest batch: the peak
    # the model's MFU reads against (``hardware.kernels.dominant_key``)
    dense: list[tuple[str, str | None, float]] = field(default_factory=list)

    def peak_key(self, device: Device) -> str | None:
        """The ``matmul:<dtype>`` ceiling most of the model's FLOPs run against on
        ``device`` (TF32 on an accelerator as torch's switches now say); None without FLOPs."""
        from torchmark.run.environment import precision_flags

        flags = precision_flags() if device.is_accelerator else None
        return kernels.dominant_key(self.dense, device.is_accelerator, flags)[0]


def _eval(model: nn.Module) -> nn.Module:
    # exported programs refuse train/eval switches: they are already traced for inference
    with contextlib.suppress(NotImplementedError, RuntimeError):
        model.eval()
    return model


def place(model: nn.Module, device: Device) -> nn.Module:
    """The model on ``device``: itself when already there, else a copy moved there (the
    user's object is left where it was)."""
    tensors = [*model.parameters(), *model.buffers()]
    if all(t.device == device.torch_device for t in tensors):
        return model
    try:
        moved = copy.deepcopy(model)
    except Exception:  # not copyable (some scripted modules): move the original
        moved = model
    return _eval(moved.to(device.torch_device))


def count_flops(call: Callable[[], Any]) -> tuple[Any, float]:
    """Run ``call`` once under torch's FLOP counter; (output, FLOPs) (0 when it cannot count)."""
    out, flops, _ = count_dense(call)
    return out, flops


def count_dense(call: Callable[[], Any]) -> tuple[Any, float, list[tuple[str, str | None, float]]]:
    """Run ``call`` once, its ops recorded (``workloads.oplist``: torch's FLOP formulas, the
    total FlopCounterMode gives); (output, FLOPs, (family, dtype, FLOPs) per counted op).
    Nothing counted where the dispatch mode fails (some custom ops): then run plainly."""
    from torchmark.workloads.oplist import dense_flops, record

    try:
        out, ops = record(call)
    except Exception:
        return call(), 0.0, []
    dense = dense_flops(ops)
    return out, sum(f for _, _, f in dense), dense


def start_flop_counter() -> None:
    """Pay the FLOP counter's one-time start-up now: its first use imports ~1 s of torch
    (torch._dynamo, measured here on 2 cores), which inside the watchdog's bound counted
    as the model's own first call (a 1 s bound timed out a fast model run alone)."""
    from torchmark.workloads.oplist import record

    with contextlib.suppress(Exception):
        record(lambda: torch.nn.functional.linear(torch.zeros(1, 2), torch.zeros(3, 2)))


def preflight(
    model: nn.Module,
    factory: InputFactory,
    devices: Sequence[Device],
    batch: int,
    bound_s: float | None = None,
    dog: Watchdog | None = None,
) -> Preflight:
    """One call per device at ``batch``: who runs the model, its reference output, FLOPs.
    A call running past ``bound_s`` (the watchdog's bound) fails that device."""
    pf = Preflight()
    host = factory(batch)
    pf.inputs = host.describe()
    errors: list[str] = []
    start_flop_counter()  # outside the bound below
    with contextlib.ExitStack() as stack:
        if dog is None:  # a watchdog made here is closed here, whatever the calls raise
            dog = stack.enter_context(contextlib.closing(Watchdog()))
        for d in devices:
            try:
                m = place(model, d)
                x = host.to(d.torch_device)
                with dog.armed(bound_s or math.inf, f"the model's first call on {d.name}"):
                    with torch.no_grad():
                        if pf.reference is None:
                            out, flops, pf.dense = count_dense(partial(x.call, m))
                            pf.flops_per_item = flops / batch
                        else:
                            out = x.call(m)
                    d.synchronize()
            except CallTimedOut as e:
                pf.failed[d.name] = str(e)
                errors.append(str(e))
                continue
            except Exception as e:
                if d.is_out_of_memory(e) or _host_alloc_failed(e):
                    pf.failed[d.name] = f"out of memory at batch {batch}"
                else:
                    pf.failed[d.name] = f"the model does not run on {d.name}: {one_line(e)}"
                    errors.append(one_line(e))
                d.empty_cache()
                continue
            if not tensors_in(out):
                raise InputError(
                    f"the model returned {describe_tree(out)}: no tensor in it (torchmark needs "
                    "tensors, possibly nested in tuples/lists/dicts, to wait on and check)"
                )
            pf.placed[d.name] = m
            if pf.reference is None:
                pf.reference = to_device(out, torch.device("cpu"))
                pf.reference_device = d.name
    if not pf.placed and errors:
        raise InputError(f"the model failed on inputs {pf.inputs}: {errors[0]}")
    return pf


def _host_alloc_failed(e: BaseException) -> bool:
    # PyTorch's CPU allocator says "DefaultCPUAllocator: can't allocate memory", which
    # Device.is_out_of_memory (looking for "out of memory") does not recognise.
    return isinstance(e, RuntimeError) and "can't allocate memory" in str(e)


class UserModel(Workload):
    """The user's model as a workload: cases over batch x view of time, per device."""

    name = "user-model"
    summary = "your own model"
    group = "user"

    def __init__(
        self,
        label: str,
        factory: InputFactory,
        batches: Sequence[int],
        pf: Preflight,
        rule: str,
        measure_energy: bool = True,
    ) -> None:
        self.label, self.factory, self.batches, self.pf = label, factory, tuple(batches), pf
        self.rule, self.measure_energy = rule, measure_energy

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        # On the CPU the inputs already live in host memory: one view of time covers both.
        modes = ("device", "e2e") if device.is_accelerator else ("e2e",)
        return [
            Case(self.label, mode, device, (("batch", b),), sweep=device.name)
            for b in self.batches
            for mode in modes
        ]

    def prepare(self, case: Case) -> Prepared:
        device, b = case.device, int(case.param_dict["batch"])
        model = self.pf.placed.get(device.name)
        if model is None:
            raise CaseSkipped(self.pf.failed.get(device.name, f"the model is not on {device}"))
        host = self.factory(b)
        cpu = torch.device("cpu")
        if case.variant == "device":
            resident = host.to(device.torch_device)

            def step() -> Any:
                return resident.call(model)
        else:

            def step() -> Any:
                return to_device(host.to(device.torch_device).call(model), cpu)

        # RAPL for the host CPU here; a GPU's energy comes from its telemetry trace (NVML,
        # one handle per run), see _trace_energy
        on_host = not device.is_accelerator
        region = (
            energy.Region(energy.counter_for(device)) if self.measure_energy and on_host else None
        )
        calls = [0]

        def timed() -> Any:
            if calls[0] == 0 and region is not None:
                region.start()
            calls[0] += 1
            return step()

        prepared = Prepared(
            fn=timed,
            work=Work(flops=self.pf.flops_per_item * b, items=b, item_unit="item"),
            headline="items",
            # MFU: against the peak of the dtype most of its FLOPs run in on this device
            ceiling=self.pf.peak_key(device),
            check=partial(self._check, step, device, b),
            timing="device" if case.variant == "device" else "e2e",
            rule=self.rule,
            notes=self._notes(case),
            extra={"inputs": host.describe()},
        )

        def teardown() -> None:
            if region is not None:
                device.synchronize()
                region.stop()
                prepared.extra["energy"] = region.summary(calls[0], calls[0] * b)

        prepared.teardown = teardown
        return prepared

    def _notes(self, case: Case) -> list[str]:
        if not case.device.is_accelerator:
            return ["CPU: inputs already in host memory, so device-only = end-to-end"]
        if case.variant == "e2e":
            return ["end-to-end: pageable host inputs copied in, outputs copied back, per call"]
        return ["device-only: inputs resident on the device, outputs left there"]

    def _check(self, step: Callable[[], Any], device: Device, batch: int) -> list[str]:
        """The device's output matches the reference device's (same inputs, same batch)."""
        out = step()
        bad = nonfinite(out)
        if bad:
            raise WrongResultError(f"{bad} on {device.name} at batch {batch}")
        notes: list[str] = []
        ref, ref_dev = self.pf.reference, self.pf.reference_device
        if batch == min(self.batches) and ref is not None and ref_dev != device.name:
            err = variants.max_error(out, ref)
            if err > CROSS_DEVICE_TOLERANCE:
                raise WrongResultError(
                    f"output differs from {ref_dev}'s by {err:.3g} (relative to the output "
                    f"scale) > tolerance {CROSS_DEVICE_TOLERANCE:g}"
                )
            notes.append(f"output matches {ref_dev}'s within {err:.2g} (relative)")
        if step() is out:
            notes.append("every call returns the same output object (a cached result?)")
        return notes


def nonfinite(out: Any) -> str | None:
    """None when every floating tensor in ``out`` is finite, else what is not: a model that
    returns NaN or inf is wrong on every device, the CPU included."""
    for t in tensors_in(out):
        if t.is_floating_point() or t.is_complex():
            bad = int((~torch.isfinite(t)).sum().item())
            if bad:
                return f"the output holds {bad} non-finite value(s) (NaN or inf) of {t.numel()}"
    return None


def _factory(example_inputs: Any) -> tuple[InputFactory, int | None]:
    if callable(example_inputs) and not isinstance(example_inputs, torch.Tensor):
        return from_callable(example_inputs, "the inputs factory")
    return from_examples(example_inputs)


def _as_model(model: Any) -> tuple[nn.Module, str]:
    if isinstance(model, str):
        from torchmark.user import spec

        loaded = spec.load(model)
        return loaded.model, model
    if isinstance(model, torch.export.ExportedProgram):
        return model.module(), "exported program"
    if not isinstance(model, nn.Module):
        raise InputError(f"expected a torch.nn.Module or a model spec, got {type(model).__name__}")
    return model, type(model).__name__
