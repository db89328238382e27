"""`torchmark tune SPEC`: the settings that make the user's model faster on each device
(``kinds.tune``). Loading a model file runs the user's code."""

from __future__ import annotations

from typing import Annotated

import typer

from torchmark.cli import COMMANDS
from torchmark.cli.app import DbOption, DevicesOption, JsonOutOption, app, renamed
from torchmark.cli.output import check_json_path
from torchmark.cli.printers import show_tune
from torchmark.cli.target import (
    InputOption,
    InputsOption,
    SpecArgument,
    load_target,
    measure_target,
)
from torchmark.run.config import parse_duration

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
    budget: Annotated[
        str, typer.Option(help="Time for the whole search: 90s, 2m, 1h (plain numbers: s).")
    ] = "150s",
    per_candidate: Annotated[
        str, typer.Option(help="Interleaved baseline/candidate rounds per candidate: 3s.")
    ] = "3s",
    compile: Annotated[
        bool, typer.Option(help="Try torch.compile (its compile takes ~1 min on small CPUs).")
    ] = True,
    json_path: JsonOutOption = None,
    db: DbOption = None,
    budget_s: Annotated[float | None, typer.Option("--budget-s", hidden=True)] = None,
    per_candidate_s: Annotated[float | None, typer.Option("--per-candidate-s", hidden=True)] = None,
) -> None:
    from torchmark.kinds.tune.kind import tune as run_tune

    if budget_s is not None:
        renamed("--budget-s SECONDS", "--budget DURATION (e.g. --budget 90s)")
        budget = str(budget_s)
    if per_candidate_s is not None:
        renamed("--per-candidate-s SECONDS", "--per-candidate DURATION (e.g. 3s)")
        per_candidate = str(per_candidate_s)
    budget_seconds = parse_duration(budget, "--budget")
    per_candidate_seconds = parse_duration(per_candidate, "--per-candidate")
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
        budget_s=budget_seconds,
        per_candidate_s=per_candidate_seconds,
        try_compile=compile,
    )
