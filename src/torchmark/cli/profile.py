"""`torchmark profile`."""

from __future__ import annotations

import functools
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from torchmark.cli import RUNS_CODE
from torchmark.cli.app import (
    CeilingsOption,
    DbOption,
    DevicesOption,
    JsonOutOption,
    app,
    console,
    open_store,
)
from torchmark.cli.progress import ProgressEvents
from torchmark.cli.run import check_json_path, shown_even_if_interrupted, write_json
from torchmark.config import RunConfig, parse_int_list
from torchmark.errors import InputError
from torchmark.results import RunRecord


def show(record: RunRecord, verbose: bool = False) -> None:
    from torchmark.report.profile import profile_tables
    from torchmark.report.table import run_tables

    for renderable in run_tables(record):
        console.print(renderable)
    for renderable in profile_tables(record, verbose):
        # a command line (no_wrap) prints whole: the terminal folds it, a copy stays one line
        whole = isinstance(renderable, Text) and bool(renderable.no_wrap)
        console.print(renderable, soft_wrap=whole)


@app.command()
def profile(
    spec: Annotated[
        str | None,
        typer.Argument(
            help="Your model instead of a built-in workload, as for `torchmark model` "
            "(file.py:factory or module:factory). " + RUNS_CODE,
            show_default=False,
        ),
    ] = None,
    workload: Annotated[
        str | None,
        typer.Option(
            "--workload", "-w", help="Built-in workload to profile; see `torchmark list`."
        ),
    ] = None,
    input: Annotated[
        list[str] | None, typer.Option("--input", help="With SPEC: input shape, e.g. 3x224x224.")
    ] = None,
    inputs: Annotated[
        str | None, typer.Option("--inputs", help="With SPEC: file.py:make_inputs.")
    ] = None,
    device: DevicesOption = None,
    scenario: Annotated[
        str | None, typer.Option(help="Model scenario: infer, infer-e2e, train, prefill, decode.")
    ] = None,
    precision: Annotated[str | None, typer.Option(help="Precision variant, e.g. fp32.")] = None,
    batch: Annotated[str | None, typer.Option(help="Batch size.")] = None,
    size: Annotated[str | None, typer.Option(help="Problem size for micro workloads.")] = None,
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
    stopping: Annotated[
        str | None,
        typer.Option(help="Stopping preset of the unprofiled measurement (default: its own)."),
    ] = None,
    ceilings: CeilingsOption = True,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also print every categorisation rule.")
    ] = False,
    json_path: JsonOutOption = None,
    db: DbOption = None,
) -> None:
    """Where one case's step time goes: categories that add up, top ops against the ceilings."""
    from torchmark.profile.capture import check_active
    from torchmark.profile.run import profile as run_profile

    check_active(steps)
    if (spec is None) == (workload is None):
        raise InputError("give a built-in --workload NAME or your model's SPEC (not both)")
    if spec is None and (input or inputs):
        raise InputError("--input/--inputs go with a SPEC (your model); drop them for --workload")
    cfg = RunConfig(
        devices=tuple(device or ("all",)),
        workloads=(workload,) if workload else (),
        scenarios=(scenario,) if scenario else (),
        precisions=(precision,) if precision else (),
        batches=parse_int_list(batch, "--batch"),
        sizes=parse_int_list(size, "--size"),
        rule=stopping,
        ceilings=ceilings,
    )
    check_json_path(json_path)
    target, user_spec = None, None
    if spec is not None:
        from torchmark.cli.model import input_factory, short_name
        from torchmark.profile.run import user_target
        from torchmark.user import spec as spec_mod

        factory = input_factory(input, inputs)
        loaded = spec_mod.load(spec)
        target = user_target(loaded.model, factory, short_name(spec), cfg)
        user_spec = shlex.join(
            [spec, *(w for i in input or [] for w in ("--input", i))]
            + (["--inputs", inputs] if inputs else [])
        )
    store = open_store(db)
    events = ProgressEvents(console)
    with (
        shown_even_if_interrupted(functools.partial(show, verbose=verbose), json_path),
        events.shown(),
    ):
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
    show(record, verbose)
    console.print(Text.assemble("Run ", (str(record.run_id), "bold"), f" stored in {store.url}"))
    if json_path:
        write_json(record, json_path)
