"""`torchmark profile`."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from torchmark.cli import RUNS_CODE
from torchmark.cli import selectors as sel
from torchmark.cli.app import (
    CeilingsOption,
    DbOption,
    DevicesOption,
    JsonOutOption,
    NoCeilingsOption,
    app,
    console,
)
from torchmark.cli.output import check_json_path, finish
from torchmark.cli.printers import show_profile as show
from torchmark.cli.target import InputOption, InputsOption, load_target, recording
from torchmark.errors import InputError


@app.command()
def profile(
    ctx: typer.Context,
    spec: Annotated[
        str | None,
        typer.Argument(
            help="Your model instead of a built-in workload, as for `torchmark model` "
            "(file.py:factory or module:factory). " + RUNS_CODE,
            show_default=False,
        ),
    ] = None,
    workload: sel.WorkloadsOption = None,
    input: InputOption = None,
    inputs: InputsOption = None,
    device: DevicesOption = None,
    scenario: sel.ScenariosOption = None,
    precision: sel.PrecisionsOption = None,
    batch: sel.BatchesOption = None,
    size: sel.SizesOption = None,
    steps: Annotated[int, typer.Option(help="Active (recorded) steps, 1 to 20.")] = 5,
    trace: Annotated[
        Path | None,
        typer.Option("--trace", help="Also save the raw Chrome/Perfetto trace here, gzipped."),
    ] = None,
    memory: Annotated[
        bool,
        typer.Option(
            "--memory/--no-memory",
            help="Also memory by category at the step's peak (one more profiled step).",
        ),
    ] = True,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Also measure each variant the profile suggests against the profiled case.",
        ),
    ] = False,
    stopping: sel.StoppingOption = None,
    ceilings: CeilingsOption = None,
    no_ceilings: NoCeilingsOption = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also print every categorisation rule.")
    ] = False,
    json_path: JsonOutOption = None,
    db: DbOption = None,
) -> None:
    """Where one case's step time goes: categories that add up, top ops against the ceilings."""
    from torchmark.kinds.profile.capture import check_active
    from torchmark.kinds.profile.kind import profile as run_profile

    check_active(steps)
    if (spec is None) == (not workload):
        raise InputError("give a built-in --workload NAME or your model's SPEC (not both)")
    if spec is None and (input or inputs):
        raise InputError("--input/--inputs go with a SPEC (your model); drop them for --workload")
    if spec is not None and (scenario or precision or size):
        raise InputError(
            "--scenario/--precision/--size select built-in cases; your model is profiled in "
            "inference at --batch (try variants with `torchmark tune SPEC`)"
        )
    cfg = sel.selected(ctx.params)
    check_json_path(json_path)
    check_json_path(trace, "--trace")  # written after minutes of profiling: checked first
    target, user_spec = None, None
    if spec is not None:
        from torchmark.kinds.profile.kind import user_target

        user = load_target(spec, input, inputs)
        target = user_target(user.model, user.factory, user.name, cfg)
        user_spec = user.command_line
    render = functools.partial(show, verbose=verbose)
    with recording(render, json_path, db, lines=False) as (store, events):
        record, _ = run_profile(
            cfg,
            store,
            events,
            active=steps,
            trace_path=trace,
            target=target,
            memory=memory,
            check=check,
            user_spec=user_spec,
            say=lambda line: console.print(Text(line)),
        )
    finish(record, render, json_path, store.url)
