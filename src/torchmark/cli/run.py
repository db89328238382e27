"""`torchmark run`: measure the planned cases (``--dry-run`` lists them, ``--resume``
finishes a stopped run; ranks: ``cli.ranks``, a scaling ladder: ``cli.scaling``)."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from torchmark.cli import selectors as sel
from torchmark.cli.app import (
    CeilingsOption,
    DbOption,
    DevicesOption,
    JsonOutOption,
    NoCeilingsOption,
    TelemetryOption,
    app,
    console,
    open_store,
)
from torchmark.cli.output import check_json_path, finish, show_plan, shown_even_if_interrupted
from torchmark.cli.printers import show_run as show
from torchmark.cli.progress import ProgressEvents
from torchmark.cli.ranks import check_ranks, distributed
from torchmark.errors import InputError
from torchmark.run.config import RunConfig
from torchmark.workloads import Case

# Options `--resume` takes with it: where the run is, how to show it. Every other option
# would change the plan, which is the stored run's.
RESUME_WITH = frozenset({"resume", "db", "json_path", "verbose", "dry_run"})


@app.command()
def run(
    ctx: typer.Context,
    device: DevicesOption = None,
    workload: sel.WorkloadsOption = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Small suite (<= 45 s on a quiet 2-core CPU).")
    ] = False,
    suite: Annotated[
        str,
        typer.Option(
            help="quick, standard, extended (standard untrimmed: on a GPU, standard fits 8 "
            "minutes) or full."
        ),
    ] = "standard",
    scenario: sel.ScenariosOption = None,
    precision: sel.PrecisionsOption = None,
    batch: sel.BatchesOption = None,
    size: sel.SizesOption = None,
    threads: Annotated[
        str | None,
        typer.Option(
            help="CPU threads: a number, or auto (the cores other processes leave free, "
            "sampled for 1 s); default: torch's."
        ),
    ] = None,
    timing: Annotated[
        str,
        typer.Option(help="device: GPU events (launch overhead hidden); e2e: host clock + sync."),
    ] = "device",
    stopping: sel.StoppingOption = None,
    ceilings: CeilingsOption = None,
    no_ceilings: NoCeilingsOption = False,
    remeasure_ceilings: Annotated[
        bool,
        typer.Option(
            "--remeasure-ceilings", help="Measure ceilings again instead of using the cached ones."
        ),
    ] = False,
    telemetry: TelemetryOption = True,
    cache_dir: Annotated[
        str | None,
        typer.Option(help="Folder for data sets workloads write (input: JPEG images)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the planned cases and exit.")
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Also say how each ceiling was measured."),
    ] = False,
    json_path: JsonOutOption = None,
    db: DbOption = None,
    nproc_per_node: Annotated[
        int | None,
        typer.Option(help="Ranks to start on this machine through torchrun's launcher (DDP)."),
    ] = None,
    nnodes: Annotated[int, typer.Option(help="Machines in the run (as torchrun's).")] = 1,
    node_rank: Annotated[
        int | None, typer.Option(help="This machine's rank among --nnodes (as torchrun's).")
    ] = None,
    rdzv_endpoint: Annotated[
        str | None,
        typer.Option(help="HOST:PORT of the c10d rendezvous, the same on every machine."),
    ] = None,
    rdzv_timeout: Annotated[int, typer.Option(help="Seconds to wait for every rank to join.")] = 60,
    backend: Annotated[
        str | None,
        typer.Option(help="Process-group backend: gloo (CPU default) or nccl (CUDA default)."),
    ] = None,
    scaling: Annotated[
        str | None,
        typer.Option(help="DDP scaling ladder, e.g. 1,2,4: no DDP, then DDP on each world size."),
    ] = None,
    strategy: Annotated[
        str | None,
        typer.Option(help="Training under ranks: ddp (default) or fsdp; --scaling: ddp,fsdp,dp."),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            metavar="RUN",
            help="Finish a stopped run: measure only its cases without a result (run id, or "
            "latest: the newest incomplete run), in the same run, with its stored options and "
            "ceilings.",
        ),
    ] = None,
) -> None:
    """Measure every workload on every device, against the machine's measured ceilings."""
    if resume is not None:
        refuse_beside_resume(ctx)
        resume_run(resume, db, json_path, verbose, dry_run)
        return
    from torchmark.launch import env as launch_env
    from torchmark.launch import torchrun

    cfg = sel.selected(
        ctx.params,
        suite="quick" if quick else suite,
        threads=threads_of(threads, dry_run),
        timing=timing,
        remeasure_ceilings=remeasure_ceilings,
        telemetry=telemetry,
        cache_dir=cache_dir,
    )
    world = launch_env.joined()  # this process is a rank of a job (torchrun, Slurm)
    opts = torchrun.validate(
        torchrun.Launch(nproc_per_node, nnodes, node_rank, rdzv_endpoint, rdzv_timeout)
    )
    if scaling is not None:
        from torchmark.cli.scaling import scaling_ladder

        scaling_ladder(cfg, scaling, opts, world, strategy, db, json_path, verbose, dry_run)
    elif dry_run:
        list_plan(cfg, opts, world, strategy, db)
    elif world is None and opts.wanted:
        launch_ranks(cfg, opts, json_path)
    elif world is not None:
        distributed(cfg, world, backend, json_path, db, verbose, strategy or "ddp")
    else:
        measure(cfg, strategy, json_path, db, verbose)


def refuse_beside_resume(ctx: typer.Context) -> None:
    """``--resume`` re-makes the stored run's plan: an option that would change it is an
    error, not silently dropped."""
    given = [
        p
        for p in ctx.command.params
        if p.name not in RESUME_WITH
        # by name: typer may bring its own copy of click's ParameterSource
        and getattr(ctx.get_parameter_source(p.name or ""), "name", "") == "COMMANDLINE"
    ]
    if given:
        flags = ", ".join(p.opts[0] for p in given)
        raise InputError(
            f"--resume re-makes the stored run's plan: drop {flags} (or start a new run)"
        )


def no_strategy_alone(strategy: str | None) -> None:
    if strategy is not None:
        raise InputError("--strategy applies to ranks: add --nproc-per-node N or --scaling 1,2")


def list_plan(
    cfg: RunConfig, opts: Any, world: Any, strategy: str | None, db: str | None = None
) -> None:
    """``--dry-run``: the planned cases; under ranks, planned as each rank will plan them,
    not as this launching process."""
    if world is None and not opts.wanted:
        no_strategy_alone(strategy)
    from torchmark.run import plan
    from torchmark.workloads.micro.collectives import planned_world

    ranks = opts.nproc * opts.nnodes if world is None and opts.wanted else None
    with contextlib.nullcontext() if ranks is None else planned_world(ranks):
        the_plan = plan.make_plan(cfg)
        unused(cfg, the_plan.cases_for)
    if ranks is not None:
        where = f" ({opts.nproc} on each of {opts.nnodes} machines)" if opts.nnodes > 1 else ""
        console.print(f"world size {ranks}{where}: every rank measures these cases together")
    show_plan(the_plan.cases, cfg, cached=cached_devices(cfg, the_plan, db))


def cached_devices(cfg: RunConfig, the_plan: Any, db: str | None) -> frozenset[str]:
    """The planned devices whose ceilings the run would not measure: a quiet set cached
    for this machine (or ``--ceilings RUN|quiet``), so the estimate leaves them out."""
    if not cfg.ceilings or cfg.remeasure_ceilings:
        return frozenset()
    if cfg.ceilings_from:
        return frozenset(d.name for d in the_plan.devices)
    from torchmark.errors import StoreError
    from torchmark.run import environment, runner

    try:
        store = open_store(db)
    except StoreError:
        return frozenset()  # no store: nothing cached, the estimate counts them
    the_plan.set_threads()  # the thread count is part of the ceilings' key
    env = environment.collect(the_plan.devices)
    return frozenset(d.name for d in the_plan.devices if runner.quiet_cached(store, d, env))


def launch_ranks(cfg: RunConfig, opts: Any, json_path: Path | None) -> None:
    """``--nproc-per-node N``: start the ranks; each runs this same command line, sees
    torchrun's RANK and joins."""
    from torchmark.launch import torchrun

    check_json_path(json_path)
    check_ranks(cfg, opts)
    torchrun.launch(opts, sys.argv[1:])


def measure(
    cfg: RunConfig, strategy: str | None, json_path: Path | None, db: str | None, verbose: bool
) -> None:
    """The plain run: plan, measure every case through the runner, show and store."""
    from torchmark.run import plan, runner

    no_strategy_alone(strategy)
    the_plan = plan.make_plan(cfg)
    unused(cfg, the_plan.cases_for)
    check_json_path(json_path)
    store = open_store(db)
    if cfg.ceilings and cfg.ceilings_from:
        say_reused(cfg.ceilings_from, the_plan, store)
    events = ProgressEvents(console)
    render = functools.partial(show, verbose=verbose)
    with shown_even_if_interrupted(render, json_path, resumable=True, db=db), events.shown():
        record = runner.run(cfg, store, events, json_path=json_path, suite=the_plan)
    finish(record, render, json_path, store.url)


def say_reused(source: str, the_plan: Any, store: Any) -> None:
    """``--ceilings RUN|quiet``: find each device's stored quiet set before anything is
    measured (a bad value: one line, exit 2) and say, in one line each, which is reused."""
    from torchmark.run import runner

    the_plan.set_threads()  # the thread count is part of the ceilings' key
    for name, found in runner.check_reuse(the_plan.cfg, the_plan.devices, store).items():
        console.print(Text(reused_line(source, name, found)), soft_wrap=not console.is_terminal)


def reused_line(source: str, device: str, found: Sequence[Any]) -> str:
    """``ceilings of cpu: the quiet set measured 2026-12-06 20:10 UTC by run 12 (--ceilings
    quiet), not measured again``."""
    src = next((c.provenance for c in found if c.provenance is not None), None)
    when = f" measured {src.measured_utc:%Y-%m-%d %H:%M} UTC" if src is not None else ""
    by = f" by run {src.run_id}" if src is not None and src.run_id else ""
    return (
        f"ceilings of {device}: the quiet set{when}{by} (--ceilings {source}), not measured again"
    )


# Long enough that CPU times (10 ms ticks) and a burst of other work both show.
AUTO_THREADS_SAMPLE_S = 1.0


def threads_of(value: str | None, dry_run: bool = False) -> int | None:
    """``--threads``: a count, or ``auto``: the cores other processes leave free now,
    said in one line (a dry run plans with none sampled)."""
    if value is None:
        return None
    if value.strip().lower() == "auto":
        if dry_run:
            return None
        import time

        from torchmark.judge.load import free_cores
        from torchmark.telemetry.host import OtherLoad

        with OtherLoad() as load:
            time.sleep(AUTO_THREADS_SAMPLE_S)
        other = load.cores or 0.0
        free = free_cores(other, load.logical_cores)
        console.print(
            f"--threads auto: {free} thread{'s' if free > 1 else ''}, the cores other "
            f"processes leave free (they used {other:.1f} of {load.logical_cores} over "
            f"{AUTO_THREADS_SAMPLE_S:g} s)"
        )
        return free
    try:
        return int(value)  # its range is RunConfig's to check
    except ValueError:
        raise InputError(f"--threads takes a count >= 1 or auto, got {value!r}") from None


def resume_run(
    spec: str, db: str | None, json_path: Path | None, verbose: bool, dry_run: bool
) -> None:
    """`torchmark run --resume RUN`: refusals before anything stored is touched, then the
    cases left through the same session and loop as every run."""
    from torchmark.run import resume

    check_json_path(json_path)
    store = open_store(db)
    plan = resume.prepare(resume.target(store, spec))
    console.print(Text(plan.line()), soft_wrap=not console.is_terminal)
    if dry_run:
        show_plan(plan.todo)
        return
    events = ProgressEvents(console)
    render = functools.partial(show, verbose=verbose)
    with shown_even_if_interrupted(render, json_path, resumable=True, db=db), events.shown():
        record = resume.run(plan, store, events, json_path=json_path)
    finish(record, render, json_path, store.url)


def unused(cfg: RunConfig, plan: Callable[[RunConfig], Sequence[Case]]) -> None:
    """An option no planned workload uses is an error (it would be silently ignored); one that
    only some ignore is said before anything is measured."""
    from torchmark.run.config import OPTIONAL_AXES, ignored_options

    if not any(getattr(cfg, name) for _, name in OPTIONAL_AXES):
        return  # each given option costs one more plan() of the built workloads
    for line in ignored_options(cfg, plan):
        if "not used by any planned workload" in line:
            # collectives on one process plan the one row that says they need ranks
            alone = any(c.workload == "collectives" and c.variant == "all" for c in plan(cfg))
            fix = "collectives measure across ranks: add --nproc-per-node N" if alone else ""
            raise InputError(f"{line}: {fix or 'drop it, or choose a --workload that uses it'}")
        console.print(f"note: {line}")
