"""`torchmark tune SPEC`: the settings that make the user's model faster on each device
(``kinds.tune``). Loading a model file runs the user's code."""

from __future__ import annotations

from typing import Annotated

import typer

from torchmark.cli import COMMANDS
from torchmark.cli.app import DbOption, DevicesOption, JsonOutOption, app
from torchmark.cli.output import check_json_path
from torchmark.cli.printers import show_tune
from torchmark.cli.target import (
    InputOption,
    InputsOption,
    SpecArgument,
    load_target,
    measure_target,
)

__all__ = ["show_tune", "tune"]


@app.command(help=COMMANDS["tune"].help)  # the table's line, which warns it runs code
def tune(
    spec: SpecArgument,
    input: InputOption = None,
    inputs: InputsOption = None,
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
    from torchmark.kinds.tune.kind import tune as run_tune

    check_json_path(json_path)
    measure_target(
        load_target(spec, input, inputs),
        run_tune,
        show_tune,
        json_path,
        db,
        devices=device or None,
        batch=batch,
        max_latency_ms=max_latency_ms,
        budget_s=budget_s,
        per_candidate_s=per_candidate_s,
        try_compile=compile,
    )
