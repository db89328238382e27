"""`torchmark run`, `torchmark list`, `torchmark env`."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from torchmark.cli import selectors as sel
from torchmark.cli.app import (
    AsJsonOption,
    CeilingsOption,
    DbOption,
    DevicesOption,
    JsonOutOption,
    TelemetryOption,
    app,
    console,
    open_store,
)
from torchmark.cli.printers import show_distributed
from torchmark.cli.printers import show_run as show
from torchmark.cli.progress import ProgressEvents
from torchmark.config import RunConfig
from torchmark.errors import InputError, RunInterrupted, RunNotStored
from torchmark.results import RunRecord
from torchmark.workloads import Case


def check_json_path(path: Path | None, option: str = "--json") -> None:
    """``--json PATH`` (or another output ``option``) must be writable before anything is
    measured, not after."""
    if path is None:
        return
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise InputError(f"{option} {path} is a directory: give a file name")
    if not folder.is_dir():
        raise InputError(f"{option} {path}: folder {folder} does not exist (create it first)")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise InputError(f"{option} {path}: not writable here (choose another path)")


def write_json(record: RunRecord, path: Path) -> None:
    try:
        path.write_text(record.model_dump_json(indent=2))
    except OSError as e:
        raise InputError(f"cannot write --json file {path}: {e.strerror}") from None
    from torchmark.launch.env import RUNG_ENV

    if not os.environ.get(RUNG_ENV):
        console.print(f"JSON written to {path}")


@contextlib.contextmanager
def shown_even_if_interrupted(
    render: Callable[[RunRecord], None],
    json_path: Path | None,
    resumable: bool = False,
    db: str | None = None,
) -> Iterator[None]:
    """Ctrl-C / SIGTERM / SIGHUP mid-run, or a store that failed: the run measured so far is
    still shown and written (to --json, or to a rescue file when the store has not got it).
    ``resumable``: also say the command that finishes it (``db``: the store it is in)."""
    try:
        yield
    except (RunInterrupted, RunNotStored) as e:
        partial: RunRecord = e.record  # type: ignore[assignment]
        render(partial)
        if json_path:
            write_json(partial, json_path)
        elif partial.payload.not_stored:
            from torchmark.session import rescue_path

            write_json(partial, rescue_path(partial))
        if resumable and isinstance(e, RunInterrupted) and partial.run_id:
            from torchmark.report.parts import resume_hint

            console.print(
                Text(resume_hint(partial.run_id, db)),
                soft_wrap=not console.is_terminal,
            )
        raise


def finish(
    record: RunRecord, render: Callable[[RunRecord], None], json_path: Path | None, store_url: str
) -> None:
    render(record)
    console.print(Text.assemble("Run ", (str(record.run_id), "bold"), f" stored in {store_url}"))
    if json_path:
        write_json(record, json_path)


# Options `--resume` takes with it: where the run is, how to show it. Every other option
# would change the plan, which is the stored run's.
RESUME_WITH = frozenset({"resume", "db", "json_path", "verbose", "dry_run"})


@app.command()
def run(
    ctx: typer.Context,
    device: DevicesOption = None,
    workload: sel.WorkloadsOption = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Small suite (about 30 s on a quiet 2-core CPU).")
    ] = False,
    suite: Annotated[str, typer.Option(help="quick, standard or full.")] = "standard",
    scenario: sel.ScenariosOption = None,
    precision: sel.PrecisionsOption = None,
    batch: sel.BatchesOption = None,
    size: sel.SizesOption = None,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: torch's).")] = None,
    timing: Annotated[
        str,
        typer.Option(help="device: GPU events (launch overhead hidden); e2e: host clock + sync."),
    ] = "device",
    stopping: sel.StoppingOption = None,
    ceilings: CeilingsOption = True,
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
    from torchmark import runner

    if resume is not None:
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
        resume_run(resume, db, json_path, verbose, dry_run)
        return
    from torchmark.launch import env as launch_env
    from torchmark.launch import torchrun

    cfg = sel.selected(
        device,
        workload,
        scenario,
        precision,
        batch,
        size,
        stopping,
        suite="quick" if quick else suite,
        threads=threads,
        timing=timing,
        ceilings=ceilings,
        remeasure_ceilings=remeasure_ceilings,
        telemetry=telemetry,
        cache_dir=cache_dir,
    )
    world = launch_env.joined()
    opts = torchrun.validate(
        torchrun.Launch(nproc_per_node, nnodes, node_rank, rdzv_endpoint, rdzv_timeout)
    )
    if scaling is not None:
        from torchmark.cli.scaling import scaling_ladder

        scaling_ladder(cfg, scaling, opts, world, strategy, db, json_path, verbose, dry_run)
        return
    if world is None and opts.wanted and not dry_run:
        check_json_path(json_path)
        check_ranks(cfg, opts)
        # each worker runs this same command line, sees torchrun's RANK and joins
        torchrun.launch(opts, sys.argv[1:])
        return
    if world is not None and not dry_run:
        distributed(cfg, world, backend, json_path, db, verbose, strategy or "ddp")
        return
    if strategy is not None and world is None and not opts.wanted:  # a dry run refuses it too
        raise InputError("--strategy applies to ranks: add --nproc-per-node N or --scaling 1,2")
    # a dry run under ranks plans as each rank will, not as this launching process
    ranks = opts.nproc * opts.nnodes if dry_run and world is None and opts.wanted else None
    with contextlib.nullcontext() if ranks is None else _planned_world(ranks):
        the_plan = runner.make_plan(cfg)
        unused(cfg, the_plan.cases_for)
    if dry_run:
        if ranks is not None:
            where = f" ({opts.nproc} on each of {opts.nnodes} machines)" if opts.nnodes > 1 else ""
            console.print(f"world size {ranks}{where}: every rank measures these cases together")
        show_plan(the_plan.cases)
        return
    check_json_path(json_path)
    store = open_store(db)
    events = ProgressEvents(console)
    render = functools.partial(show, verbose=verbose)
    with shown_even_if_interrupted(render, json_path, resumable=True, db=db), events.shown():
        record = runner.run(cfg, store, events, json_path=json_path, suite=the_plan)
    finish(record, render, json_path, store.url)


def resume_run(
    spec: str, db: str | None, json_path: Path | None, verbose: bool, dry_run: bool
) -> None:
    """`torchmark run --resume RUN`: refusals before anything stored is touched, then the
    cases left through the same session and loop as every run."""
    from torchmark import resume

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


def check_ranks(cfg: RunConfig, opts: Any) -> None:
    """More GPU ranks than GPUs is an error; more CPU ranks than cores only a warning (they
    share the cores, and the figures say so)."""
    import torch

    from torchmark.config import available_cores

    gpus = torch.cuda.device_count()
    on_gpu = any(d.startswith("cuda") for d in cfg.devices) or (
        cfg.devices == ("all",) and gpus > 0
    )
    n = opts.nproc
    if on_gpu and n > gpus:
        raise InputError(f"--nproc-per-node {n} is more than the {gpus} GPUs here: pass {gpus}")
    cores = available_cores()
    if not on_gpu and n > cores:
        console.print(
            f"warning: --nproc-per-node {n} is more than the {cores} cores here: "
            "the ranks share cores and each is slower"
        )


def distributed(
    cfg: RunConfig,
    world: Any,
    backend: str | None,
    json_path: Path | None,
    db: str | None,
    verbose: bool,
    strategy: str = "ddp",
) -> None:
    """This process is one rank of a job (torchrun, Slurm): rank 0 stores and prints."""
    from torchmark.launch import rank

    if not world.is_main:
        rank.run(cfg, None, None, world, backend, strategy=strategy)
        # A worker rank stores and prints nothing, and its group is destroyed: it leaves
        # without the interpreter's teardown, where a finished rank 1 twice died of SIGABRT
        # ("terminate called without an active exception", a C++ thread still joinable),
        # failing a complete ladder rung.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    check_json_path(json_path)
    store = open_store(db)
    events = ProgressEvents(console)
    render = functools.partial(show_distributed, verbose=verbose)
    with shown_even_if_interrupted(render, json_path), events.shown():

        def say(line: str) -> None:
            console.print(Text(line), soft_wrap=not console.is_terminal)

        record = rank.run(
            cfg, store, events, world, backend, json_path=json_path, say=say, strategy=strategy
        )
    finish(record, render, json_path, store.url)


def _planned_world(ranks: int) -> contextlib.AbstractContextManager[None]:
    from torchmark.workloads.micro.collectives import planned_world

    return planned_world(ranks)


def unused(cfg: RunConfig, plan: Callable[[RunConfig], Sequence[Case]]) -> None:
    """An option no planned workload uses is an error (it would be silently ignored); one that
    only some ignore is said before anything is measured."""
    from torchmark.config import OPTIONAL_AXES, ignored_options

    if not any(getattr(cfg, name) for _, name in OPTIONAL_AXES):
        return  # each given option costs one more plan() of the built workloads
    for line in ignored_options(cfg, plan):
        if "not used by any planned workload" in line:
            # collectives on one process plan the one row that says they need ranks
            alone = any(c.workload == "collectives" and c.variant == "all" for c in plan(cfg))
            fix = "collectives measure across ranks: add --nproc-per-node N" if alone else ""
            raise InputError(f"{line}: {fix or 'drop it, or choose a --workload that uses it'}")
        console.print(f"note: {line}")


def show_plan(cases: Sequence[Case]) -> None:
    from torchmark import format as fmt
    from torchmark.report.layout import Col, FitTable

    devices = list(dict.fromkeys(c.device.name for c in cases))
    title = f"{fmt.plural(len(cases), 'planned case')}"
    t = FitTable(
        Col("workload"),
        Col("case", wrap=12),
        Col("device", show=len(devices) > 1),
        title=title + (f" on {devices[0]}" if len(devices) == 1 else ""),
    )
    for c in cases:
        t.row(c.workload, fmt.case_label(c.variant, c.params), c.device.name)
    console.print(t)
    # what a run would say with its plan (the data it writes, how long a case takes)
    from torchmark.workloads.base import plan_notes

    for line in plan_notes(cases):
        console.print(Text(line), soft_wrap=not console.is_terminal)


@app.command(name="list")
def list_(
    as_json: AsJsonOption = False,
) -> None:
    """Workloads (with their facts) and the devices found on this machine."""
    from torchmark.devices import available
    from torchmark.workloads import WORKLOADS, load_builtins

    load_builtins()
    workloads: list[dict[str, Any]] = []
    for name in WORKLOADS.names():
        cls = WORKLOADS.get(name)
        workloads.append(
            {
                "name": name,
                "group": cls.group,
                "summary": cls.summary,
                "quick": cls.in_quick,
                **cls().describe(),
            }
        )
    devices: list[dict[str, str | bool]] = [
        {"name": d.name, "label": d.label(), "accelerator": d.is_accelerator} for d in available()
    ]
    if as_json:
        console.print_json(json.dumps({"workloads": workloads, "devices": devices}))
        return
    from torchmark.report.layout import Col, FitTable

    t = FitTable(
        Col("name"),
        Col("group"),
        Col("quick"),
        Col("summary", wrap=24),
        Col("facts", wrap=18, drop=1),
        title="Workloads",
    )
    for w in workloads:
        facts = {k: v for k, v in w.items() if k not in ("name", "group", "summary", "quick")}
        t.row(
            w["name"],
            w["group"],
            "yes" if w["quick"] else "",
            w["summary"],
            ", ".join(f"{k}={_fmt(v)}" for k, v in facts.items()),
        )
    console.print(t)
    d = FitTable(Col("name"), Col("device", wrap=16), Col("accelerator"), title="Devices")
    for dev in devices:
        d.row(str(dev["name"]), str(dev["label"]), "yes" if dev["accelerator"] else "no")
    console.print(d)


def _fmt(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "/".join(map(str, v))
    return f"{v:,}" if isinstance(v, int) else (f"{v:.4g}" if isinstance(v, float) else str(v))


@app.command()
def env(
    as_json: AsJsonOption = False,
) -> None:
    """The environment record stored with every run: versions, devices, threads, flags, load."""
    from torchmark import environment
    from torchmark.devices import available

    record = environment.collect(available())
    record["fingerprint"] = environment.machine_fingerprint(record)
    if as_json:
        console.print_json(json.dumps(record, default=str))
        return
    from torchmark.report.layout import Col, FitTable

    for section, value in record.items():
        if isinstance(value, dict):
            t = FitTable(Col("key", style="bold"), Col("value", wrap=20), title=section)
            t.show_header = False
            for k, v in value.items():
                t.row(str(k), json.dumps(v, default=str) if isinstance(v, dict | list) else str(v))
            console.print(t)
        else:
            console.print(Text.assemble((section, "bold"), f": {value}"))
