"""`torchmark model SPEC`: batch sweep, CPU/GPU break-even, energy, cost (``kinds.model``;
with ``--loader``, ``cli.loader``). Loading a model file runs the user's code."""

from __future__ import annotations

from typing import Annotated

import typer

from torchmark.cli import COMMANDS
from torchmark.cli.app import (
    CeilingsOption,
    DbOption,
    DevicesOption,
    EnergyOption,
    JsonOutOption,
    NoCeilingsOption,
    PriceOption,
    TelemetryOption,
    app,
    ceilings_choice,
)
from torchmark.cli.output import check_json_path
from torchmark.cli.printers import show_model
from torchmark.cli.target import (
    InputOption,
    InputsOption,
    SpecArgument,
    load_target,
    measure_target,
)
from torchmark.run.config import parse_int_list
from torchmark.timing import preset

LOADER_HELP = (
    "file.py:make_loader or module:make_loader: make_loader() returns a DataLoader or any "
    "iterable of batches; your model is fed them and the input pipeline's breakdown and "
    "advice are shown (a tuple batch: its first item is the model's input). Runs that "
    "file's code."
)


@app.command(help=COMMANDS["model"].help)  # the table's line, which warns it runs code
def model(
    spec: SpecArgument,
    input: InputOption = None,
    inputs: InputsOption = None,
    loader: Annotated[str | None, typer.Option("--loader", help=LOADER_HELP)] = None,
    device: DevicesOption = None,
    batch: Annotated[str, typer.Option(help="Batch sizes to sweep.")] = "1,2,4,8,16",
    price: PriceOption = None,
    stopping: Annotated[
        str,
        typer.Option(
            help="Stopping preset per case: quick (1 % target, <= 2 s), model (1.5 %, <= 20 s: "
            "a 5-batch sweep can take 100 s on a loaded machine), test."
        ),
    ] = "quick",
    energy: EnergyOption = True,
    telemetry: TelemetryOption = True,
    ceilings: CeilingsOption = None,
    no_ceilings: NoCeilingsOption = False,
    json_path: JsonOutOption = None,
    db: DbOption = None,
) -> None:
    from torchmark.kinds.model.kind import benchmark_model
    from torchmark.user.cost import parse_price

    preset(stopping)  # an unknown name fails here, naming the valid presets
    check_json_path(json_path)
    batches = parse_int_list(batch, "--batch")
    prices = parse_price(price)  # bad text fails before anything is loaded or measured
    if loader:
        from torchmark.cli.loader import model_with_loader

        model_with_loader(spec, loader, input or inputs, device, stopping, telemetry, json_path, db)
        return
    measure_target(
        load_target(spec, input, inputs),
        benchmark_model,
        show_model,
        json_path,
        db,
        devices=device or None,
        batches=batches or None,
        rule=stopping,
        price=prices,
        measure_energy=energy,
        telemetry=telemetry,
        **ceilings_choice(ceilings, no_ceilings),
    )
