"""Benchmark the user's own model over a batch sweep on every device.

    preflight: one call per device at the smallest batch -> which devices run it, the
               reference output, FLOPs per item (an input the model rejects everywhere is
               a user error: one line with the shapes tried and the model's error)
    for device, batch, view (device-only / end-to-end):
        prepare (inputs made outside the timed region) -> guard -> measure -> energy
        -> store the result as it lands
    analyse: break-even per GPU, cost per million items (pure functions of the results)

The baseline is how most people run inference: ``model.eval()`` under ``torch.no_grad()``
in fp32; ``torchmark tune`` measures what beats it.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from torchmark import variants
from torchmark.config import RunConfig, validate
from torchmark.devices import Device, resolve
from torchmark.errors import CaseSkipped, InputError, TorchmarkError, WrongResultError
from torchmark.results import Result, RunRecord, Work
from torchmark.results.payloads import BreakEven, CostTable, ModelInfo, ModelPayload
from torchmark.runner import new_record, run_case
from torchmark.session import (
    OUT_OF_MEMORY,
    CallTimedOut,
    Events,
    Session,
    Watchdog,
    call_bound,
    skipped,
)
from torchmark.store.base import ResultStore
from torchmark.telemetry import energy
from torchmark.timing import preset
from torchmark.user import breakeven, cost
from torchmark.user.inputs import (
    InputFactory,
    Inputs,
    describe_tree,
    from_callable,
    from_examples,
    one_line,
    per_batch,
    tensors_in,
    to_device,
)
from torchmark.workloads.base import Case, PlanOptions, Prepared, Workload

if TYPE_CHECKING:
    from torchmark.results.extra import Energy

DEFAULT_BATCHES = (1, 2, 4, 8, 16)
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
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    try:
        with counter:
            out = call()
    except Exception:  # the counter's dispatch mode fails on some custom ops: run plainly
        return call(), 0.0
    return out, float(counter.get_total_flops())


def start_flop_counter() -> None:
    """Pay the FLOP counter's one-time start-up now: its first use imports ~1 s of torch
    (torch._dynamo, measured here on 2 cores), which inside the watchdog's bound counted
    as the model's own first call (a 1 s bound timed out a fast model run alone)."""
    from torch.utils.flop_counter import FlopCounterMode

    with contextlib.suppress(Exception), FlopCounterMode(display=False):
        torch.zeros(1) + 1


def preflight(
    model: nn.Module,
    factory: InputFactory,
    devices: Sequence[Device],
    batch: int,
    bound_s: float | None = None,
) -> Preflight:
    """One call per device at ``batch``: who runs the model, its reference output, FLOPs.
    A call running past ``bound_s`` (the watchdog's bound) fails that device."""
    pf = Preflight()
    host = factory(batch)
    pf.inputs = host.describe()
    errors: list[str] = []
    dog = Watchdog()
    start_flop_counter()  # outside the bound below
    for d in devices:
        try:
            m = place(model, d)
            x = host.to(d.torch_device)
            with dog.armed(bound_s or math.inf, f"the model's first call on {d.name}"):
                with torch.no_grad():
                    if pf.reference is None:
                        out, flops = count_flops(partial(x.call, m))
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
    dog.close()
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

    def host_inputs(self, batch: int) -> Inputs:
        return self.factory(batch)

    def prepare(self, case: Case) -> Prepared:
        device, b = case.device, int(case.param_dict["batch"])
        model = self.pf.placed.get(device.name)
        if model is None:
            raise CaseSkipped(self.pf.failed.get(device.name, f"the model is not on {device}"))
        host = self.host_inputs(b)
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

        def check() -> list[str]:
            return self._check(step, device, b)

        prepared = Prepared(
            fn=timed,
            work=Work(flops=self.pf.flops_per_item * b, items=b, item_unit="item"),
            headline="items",
            check=check,
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


def _trace_energy(result: Result, batch: int) -> dict[str, Any]:
    """Energy per item from the NVML total-energy readings of the case's telemetry trace,
    over the timed samples (first sample's start to the last one's end)."""
    tel = result.telemetry
    if tel is None:
        return {"available": False, "reason": "telemetry off: GPU energy is read through it"}
    joules = tel.get("energy_j")
    if joules is None:
        return {"available": False, "reason": "no NVML energy counter in the telemetry"}
    calls = len(result.samples_s) * result.calls_per_sample
    region_s = sum(result.samples_s) * result.calls_per_sample
    source = "NVML total energy of the board (telemetry readings around the samples)"
    return energy.per_item(source, joules, region_s, calls, calls * batch, [])


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


def benchmark_model(
    model: nn.Module | str,
    example_inputs: Any = None,
    *,
    devices: Sequence[str] | str | None = None,
    batches: Sequence[int] | None = None,
    rule: str = "model",
    price: Mapping[str, float] | str | None = None,
    store: ResultStore | None = None,
    events: Events | None = None,
    name: str | None = None,
    measure_energy: bool = True,
    telemetry: bool = True,
    config: Mapping[str, Any] | None = None,
    loader: Callable[[], Any] | None = None,
) -> RunRecord:
    """Measure ``model`` over a batch sweep on each device; break-even, energy and cost.

    ``loader``: a function returning a DataLoader or any iterable of batches: the model is
    fed your batches instead, and the run holds the input pipeline's breakdown and advice
    (``torchmark.workloads.pipeline.user``); ``example_inputs`` is then not needed.

    ``example_inputs``: a tensor, tuple (positional) or dict (keyword) of tensors whose first
    dimension is the batch (rows are resampled for other batch sizes), or a callable
    ``batch -> inputs``. ``devices``: names as for ``--device`` (default: all).
    ``price``: currency per device-hour by device kind or name, e.g. ``{"cpu": 0.1}``.
    Returns the RunRecord; ``extra`` holds ``break_even``, ``cost`` and the ``model`` facts.
    """
    module, label = _as_model(model)
    label = name or label
    _eval(module)
    if loader is not None:
        from torchmark.workloads.pipeline.user import benchmark_loader

        return benchmark_loader(
            module, loader, devices=devices, what=label, rule=rule, telemetry=telemetry,
            store=store, events=events, config=dict(config or {}),
        )  # fmt: skip
    if example_inputs is None:
        raise InputError("give the model's example_inputs, or a loader")
    preset(rule)  # an unknown rule fails here, naming the valid ones, before any work
    factory, example_batch = _factory(example_inputs)
    batch_list = sorted(set(batches or ((example_batch,) if example_batch else DEFAULT_BATCHES)))
    # the reference is computed once, on the first device: every device must get the same
    # inputs at each batch, which an unseeded user factory does not give on its own
    factory = per_batch(factory)
    prices = cost.parse_price(price) if isinstance(price, str) or price is None else dict(price)
    devs = resolve(devices)
    cfg = RunConfig(
        devices=tuple(d.name for d in devs),
        batches=tuple(batch_list),
        rule=rule,
        ceilings=False,
        telemetry=telemetry,
    )
    validate(cfg)  # batch sizes >= 1, as for `torchmark run`: before the preflight's calls

    bound = call_bound(preset(rule).max_time_s)
    pf = preflight(module, factory, devs, batch_list[0], bound)
    workload = UserModel(label, factory, batch_list, pf, rule, measure_energy)
    cases = [c for d in devs for c in workload.cases(d, PlanOptions())]
    record = new_record(
        "model",
        {
            "model": label,
            "batches": batch_list,
            "devices": [d.name for d in devs],
            "rule": rule,
            "price": prices,
            "energy": measure_energy,
            **dict(config or {}),
        },
        devs,
    )
    record.payload = ModelPayload(
        model=ModelInfo(
            name=label,
            parameters=sum(p.numel() for p in module.parameters()),
            flops_per_item=pf.flops_per_item or None,
            inputs_at_smallest_batch=pf.inputs,
            mode="eval, torch.no_grad(), fp32 (the usual baseline)",
        )
    )
    # break-even and cost are analysed from what was measured, complete or not
    session = Session(record, store, events, analyse=lambda r: analyse(r, devs, prices))
    session.planned(cases)
    with session:
        stopped: dict[str, str] = {}  # sweep -> why its larger batches are skipped
        for case in cases:
            session.case_started(case)
            if case.sweep in stopped:
                result = skipped(case, stopped[case.sweep])
            else:
                result = _run_one(workload, case, cfg, session)
                if case.sweep and OUT_OF_MEMORY in result.flags:
                    stopped[case.sweep] = f"larger batches skipped: {result.reason}"
            session.add(case, result)
    return session.record


def _run_one(workload: UserModel, case: Case, cfg: RunConfig, session: Session) -> Result:
    b = case.param_dict["batch"]
    try:
        with torch.no_grad():
            result = run_case(workload, case, {}, cfg, session)
    except CaseSkipped as e:
        return skipped(case, str(e))
    except WrongResultError as e:
        return skipped(case, str(e), status="wrong")
    except InputError as e:  # the user's inputs factory failing at this batch: it says so
        return skipped(case, str(e))
    except TorchmarkError:
        raise  # torchmark's own failure (a bad rule, a store error): not the model's fault
    except Exception as e:  # the user's code failing at one batch: recorded, the sweep goes on
        case.device.empty_cache()
        if _host_alloc_failed(e):
            return skipped(case, f"out of memory at batch {b} on {case.device.name}", oom=True)
        return skipped(case, f"the model raised {one_line(e)} at batch {b}")
    if result.ok and workload.measure_energy and case.device.is_accelerator:
        result.extra["energy"] = cast("Energy", _trace_energy(result, int(b)))
    return result


def analyse(record: RunRecord, devices: Sequence[Device], prices: Mapping[str, float]) -> None:
    """Break-even per accelerator and cost per million items, into the run's payload."""
    p = record.payload
    assert isinstance(p, ModelPayload)
    cpus = [d for d in devices if not d.is_accelerator]
    gpus = [d for d in devices if d.is_accelerator]
    if not gpus:
        p.break_even, p.break_even_note = {}, breakeven.NO_GPU
    elif not cpus:
        p.break_even = {}
        p.break_even_note = "the CPU was not measured: break-even not available"
    else:
        found = breakeven.break_even(
            record.results, cpus[0].name, [g.name for g in gpus], {g.name: g.label() for g in gpus}
        )
        p.break_even = {gpu: BreakEven.model_validate(e) for gpu, e in found.items()}
    if prices:
        priced = cost.device_prices(prices, devices)
        p.cost = CostTable.model_validate(cost.cost_table(record.results, priced))
