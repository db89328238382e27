"""`torchmark model SPEC` (batch sweep, CPU/GPU break-even, energy, cost) and
`torchmark tune SPEC` (optimisation advisor). Loading a model file runs the user's code."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from torchmark.cli.app import (
    DbOption,
    DevicesOption,
    JsonOutOption,
    TelemetryOption,
    app,
    console,
    open_store,
)
from torchmark.cli.progress import ProgressEvents
from torchmark.cli.run import check_json_path, finish, shown_even_if_interrupted
from torchmark.config import parse_int_list
from torchmark.errors import InputError
from torchmark.results import RunRecord
from torchmark.timing import preset
from torchmark.user.inputs import InputFactory, from_specs, parse_input

RUNS_CODE = (
    "WARNING: loading SPEC imports or runs the named Python file and calls its factory; "
    "only load models you trust."
)
SPEC_ARG = typer.Argument(
    help="package.module:factory, path/to/file.py:factory, an exported program (.pt2) or a "
    "TorchScript file. factory is a callable returning the nn.Module, or the module itself. "
    + RUNS_CODE
)
INPUT_HELP = (
    "Input shape without the batch dimension, dtype optional: 3x224x224, 128:int64 "
    "(integers are random ids in 0..99). Repeat for several inputs."
)
INPUTS_HELP = (
    "file.py:make_inputs or module:make_inputs: make_inputs(batch) returns a tensor, a "
    "tuple (positional) or a dict (keyword inputs). Runs that file's code."
)


LOADER_HELP = (
    "file.py:make_loader or module:make_loader: make_loader() returns a DataLoader or any "
    "iterable of batches; your model is fed them and the input pipeline's breakdown and "
    "advice are shown (a tuple batch: its first item is the model's input). Runs that "
    "file's code."
)


def input_factory(shapes: list[str] | None, inputs: str | None) -> InputFactory:
    from torchmark.user import spec
    from torchmark.user.inputs import from_callable

    if shapes and inputs:
        raise InputError("give either --input shapes or --inputs file.py:make_inputs, not both")
    if inputs:
        fn = spec.attribute(inputs)
        if not callable(fn):
            raise InputError(f"--inputs {inputs}: not callable (write a make_inputs(batch))")
        factory, _ = from_callable(fn, f"--inputs {inputs}")
        return factory
    if not shapes:
        raise InputError(
            "the model needs inputs: give --input SHAPE (e.g. --input 3x224x224) or "
            "--inputs file.py:make_inputs"
        )
    return from_specs([parse_input(s) for s in shapes])


def show_model(record: RunRecord) -> None:
    from torchmark.report.model import model_view

    for part in model_view(record):
        console.print(part)


@app.command(
    help="Benchmark your own model over a batch sweep on every device: latency, "
    "throughput, CPU/GPU break-even, energy and cost per item. " + RUNS_CODE
)
def model(
    spec: Annotated[str, SPEC_ARG],
    input: Annotated[list[str] | None, typer.Option("--input", help=INPUT_HELP)] = None,
    inputs: Annotated[str | None, typer.Option("--inputs", help=INPUTS_HELP)] = None,
    loader: Annotated[str | None, typer.Option("--loader", help=LOADER_HELP)] = None,
    device: DevicesOption = None,
    batch: Annotated[str, typer.Option(help="Batch sizes to sweep.")] = "1,2,4,8,16",
    price: Annotated[
        str | None,
        typer.Option(help="Currency per device-hour by kind or name, e.g. cpu=0.10,cuda=2.50."),
    ] = None,
    stopping: Annotated[
        str,
        typer.Option(
            help="Stopping preset per case: quick (1 % target, <= 2 s), model (1.5 %, <= 20 s: "
            "a 5-batch sweep can take 100 s on a loaded machine), test."
        ),
    ] = "quick",
    energy: Annotated[bool, typer.Option(help="Read RAPL / NVML energy counters.")] = True,
    telemetry: TelemetryOption = True,
    json_path: JsonOutOption = None,
    db: DbOption = None,
) -> None:
    from torchmark.user import spec as spec_mod
    from torchmark.user.bench import benchmark_model
    from torchmark.user.cost import parse_price

    preset(stopping)  # an unknown name fails here, naming the valid presets
    check_json_path(json_path)
    batches = parse_int_list(batch, "--batch")
    prices = parse_price(price)  # bad text fails before anything is loaded or measured
    if loader:
        model_with_loader(spec, loader, input or inputs, device, stopping, telemetry, json_path, db)
        return
    factory = input_factory(input, inputs)
    loaded = spec_mod.load(spec)
    store = open_store(db)
    events = ProgressEvents(console, lines=True)
    with shown_even_if_interrupted(show_model, json_path), events.shown():
        record = benchmark_model(
            loaded.model,
            factory,
            devices=device or None,
            batches=batches or None,
            rule=stopping,
            price=prices,
            store=store,
            events=events,
            name=short_name(spec),
            measure_energy=energy,
            telemetry=telemetry,
            config={"spec": spec, "source": loaded.source, "inputs": input or inputs},
        )
    finish(record, show_model, json_path, store.url)


def model_with_loader(
    spec: str,
    loader: str,
    inputs: object,
    device: list[str] | None,
    stopping: str,
    telemetry: bool,
    json_path: Path | None,
    db: str | None,
) -> None:
    """``--loader``: the model fed the user's batches; the input pipeline's view."""
    from torchmark.cli.run import show
    from torchmark.user import spec as spec_mod
    from torchmark.user.bench import benchmark_model

    if inputs:
        raise InputError("give either --loader or --input / --inputs, not both")
    make = spec_mod.attribute(loader)
    if not callable(make):
        raise InputError(f"--loader {loader}: not callable (write a make_loader())")
    loaded = spec_mod.load(spec)
    store = open_store(db)
    events = ProgressEvents(console, lines=True)
    with shown_even_if_interrupted(show, json_path), events.shown():
        record = benchmark_model(
            loaded.model,
            loader=make,
            devices=device or None,
            rule=stopping,
            store=store,
            events=events,
            name=f"--loader {loader}",
            telemetry=telemetry,
            config={"spec": spec, "source": loaded.source},
        )
    finish(record, show, json_path, store.url)


def short_name(spec: str) -> str:
    """The model's name in tables and progress lines: ``cnn.py:make_model`` for
    ``/long/path/to/cnn.py:make_model`` (the full spec is kept in the run's config)."""
    path, colon, factory = spec.rpartition(":")
    if not colon:  # an exported program or TorchScript file: no factory
        path = spec
    if "/" not in path and "\\" not in path:
        return spec  # package.module:factory or a file in the current folder
    return Path(path).name + (f":{factory}" if colon else "")


def show_tune(record: RunRecord) -> None:
    from torchmark.report.model import tune_view

    for part in tune_view(record):
        console.print(part)


@app.command(
    help="Find the settings that make your model faster on each device, each one "
    "checked against the fp32 output, and print the code that applies the best. " + RUNS_CODE
)
def tune(
    spec: Annotated[str, SPEC_ARG],
    input: Annotated[list[str] | None, typer.Option("--input", help=INPUT_HELP)] = None,
    inputs: Annotated[str | None, typer.Option("--inputs", help=INPUTS_HELP)] = None,
    device: DevicesOption = None,
    batch: Annotated[int, typer.Option(help="The batch size you run at.")] = 1,
    max_latency_ms: Annotated[
        float | None,
        typer.Option(help="Latency budget: also find the largest batch that stays within it."),
    ] = None,
    budget_s: Annotated[
        float, typer.Option(help="Time budget for the whole search, in seconds.")
    ] = 150.0,
    per_candidate_s: Annotated[
        float,
        typer.Option(help="Seconds of interleaved baseline/candidate rounds per candidate."),
    ] = 3.0,
    compile: Annotated[
        bool, typer.Option(help="Try torch.compile (its compile takes ~1 min on small CPUs).")
    ] = True,
    json_path: JsonOutOption = None,
    db: DbOption = None,
) -> None:
    from torchmark.user import spec as spec_mod
    from torchmark.user.tune import tune as run_tune

    check_json_path(json_path)
    factory = input_factory(input, inputs)
    loaded = spec_mod.load(spec)
    store = open_store(db)
    events = ProgressEvents(console, lines=True)
    with shown_even_if_interrupted(show_tune, json_path), events.shown():
        record = run_tune(
            loaded.model,
            factory,
            devices=device or None,
            batch=batch,
            max_latency_ms=max_latency_ms,
            budget_s=budget_s,
            per_candidate_s=per_candidate_s,
            try_compile=compile,
            store=store,
            events=events,
            name=short_name(spec),
            config={"spec": spec, "source": loaded.source, "inputs": input or inputs},
        )
    finish(record, show_tune, json_path, store.url)
