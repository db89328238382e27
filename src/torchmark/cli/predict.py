"""`torchmark predict MODEL --on TARGET`: your model on a machine you don't have, predicted
from its op profile here and a measured run of that machine (``kinds.predict``); with
``--here``, this CPU measured beside it (``kinds.model``) and the break-even batch."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from torchmark.cli import COMMANDS
from torchmark.cli.app import (
    CeilingsOption,
    DbOption,
    JsonOutOption,
    NoCeilingsOption,
    app,
    ceilings_choice,
    console,
    open_store,
)
from torchmark.cli.output import check_json_path
from torchmark.cli.target import InputOption, InputsOption
from torchmark.errors import InputError, TorchmarkError
from torchmark.run.config import parse_int_list

if TYPE_CHECKING:
    from torchmark.results import RunRecord
    from torchmark.store.base import ResultStore

MODEL_HELP = (
    "A built-in model workload (simplenet, linear10, resnet50, ...; `torchmark list`) or your "
    "model as `torchmark model` takes it: file.py:make_model or module:factory, with --input "
    "or --inputs. Loading a file runs its code."
)
ON_HELP = (
    "The machine to predict: a committed reference run (h100-quick, h200-quick), a stored run "
    "id or `latest`, an exported run's JSON file, or with --server a run id on that board."
)


def resolve_target(target: str, server: str | None, db: str | None) -> tuple[RunRecord, str]:
    """The run that describes TARGET's machine, and where it came from, in words."""
    from torchmark import reference
    from torchmark.store.exchange import import_run, is_file_spec, parse_document

    if server:
        from torchmark.cli.submit import get

        doc = get(server, None, f"/api/v1/runs/{target}")
        if not doc:
            raise InputError(f"--server {server}: no run {target!r} could be read there")
        return parse_document(doc, f"run {target} of {server}"), f"run on {server}"
    if target in reference.names():
        ref = reference.load(target)
        if ref.run is None:
            raise InputError(f"{target} is a published table, not a run: give a reference run "
                             f"({', '.join(s.name for s in reference.runs())})")  # fmt: skip
        record = ref.run.model_copy(deep=True)
        record.run_id = record.run_id or target
        return record, "committed reference run"
    if is_file_spec(target):
        path = Path(target)
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise InputError(f"--on {target}: cannot read it ({e})") from None
        if isinstance(doc, dict) and isinstance(doc.get("run"), dict) and "title" in doc:
            doc = doc["run"]  # a reference file's wrapping (kind, name, title, run)
        record = parse_document(doc, str(path)) if isinstance(doc, dict) else import_run(path)
        record.run_id = record.run_id or path.stem
        return record, "run from a file"
    with contextlib.closing(open_store(db)) as store:
        return store.load(target), "stored run"


def same_device_runs(
    store: ResultStore, model: str, limit: int = 30
) -> list[tuple[str, RunRecord]]:
    """Stored runs that measured a device of this model (newest first, ``limit`` of them):
    where a prediction for that device meets what was measured."""
    from torchmark.judge.verdicts import is_prediction

    out = []
    for summary in store.list_runs(limit=limit):
        if is_prediction(summary.kind) or not summary.n_ok or summary.status == "running":
            continue
        try:
            run = store.load(summary.run_id)
        except TorchmarkError:  # a damaged run, or one a newer torchmark wrote: not ours
            continue
        devices = run.environment.get("devices", {})
        if any(isinstance(d, dict) and d.get("model") == model for d in devices.values()):
            out.append((f"stored run {run.run_id}", run))
    return out


@app.command(help=COMMANDS["predict"].help)
def predict(
    model: Annotated[str, typer.Argument(help=MODEL_HELP)],
    on: Annotated[str, typer.Option("--on", help=ON_HELP)],
    device: Annotated[
        str,
        typer.Option(
            "--device",
            "-d",
            help="gpu: the target's accelerator; cpu: its host CPU; auto: gpu where it has one.",
        ),
    ] = "auto",
    batch: Annotated[
        str,
        typer.Option(
            help="Batch sizes (default: a built-in's batches in the target run, else 1,8,64)."
        ),
    ] = "",
    scenario: Annotated[str, typer.Option(help="infer or train (built-in models).")] = "infer",
    precision: Annotated[
        str, typer.Option(help="fp32, or what this CPU runs (amp-bf16).")
    ] = "fp32",
    input: InputOption = None,
    inputs: InputsOption = None,
    here: Annotated[
        bool,
        typer.Option(
            "--here",
            help="Also measure the model on this CPU (`torchmark model`'s path) and "
            "print CPU (measured) vs target (predicted) and the break-even batch.",
        ),
    ] = False,
    measured: Annotated[
        list[str] | None,
        typer.Option(
            "--measured",
            help="A run (id or JSON file) measured on the target's "
            "device: predicted vs measured per case. Repeat for several.",
        ),
    ] = None,
    server: Annotated[
        str | None, typer.Option(help="Read TARGET as a run id on this board (torchmark board).")
    ] = None,
    threads: Annotated[
        int | None, typer.Option(help="A CPU target at this many threads (refused unless its own).")
    ] = None,
    stopping: Annotated[str, typer.Option(help="Stopping preset for --here.")] = "quick",
    ceilings: CeilingsOption = None,
    no_ceilings: NoCeilingsOption = False,
    json_path: JsonOutOption = None,
    db: DbOption = None,
) -> None:
    from torchmark.cli.printers import show_model, show_predict, show_run
    from torchmark.cli.report import load_runs
    from torchmark.cli.target import load_target, recording
    from torchmark.kinds.predict.kind import PredictConfig, YourModel, builtin_models
    from torchmark.kinds.predict.kind import predict as run_predict
    from torchmark.timing import preset

    check_json_path(json_path)
    preset(stopping)  # an unknown preset fails now, naming the valid ones
    batches = parse_int_list(batch, "--batch") if batch else []
    if any(b < 1 for b in batches):
        raise InputError("--batch sizes must be >= 1")
    side = {"cuda": "gpu", "gpu": "gpu", "cpu": "cpu", "auto": "auto"}.get(device.lower())
    if side is None:
        raise InputError(f"--device {device!r}: write gpu, cpu or auto")
    target, source = resolve_target(on, server, db)
    extra = load_runs(measured or [], db)
    builtins = builtin_models()
    user = None
    given: dict[str, object] = {}
    if model in builtins:
        if input or inputs:
            raise InputError(
                f"{model} is a built-in workload: it makes its own inputs (drop --input)"
            )
        name = model
    elif ":" in model or Path(model).suffix:
        loaded = load_target(model, input, inputs)
        user = YourModel(loaded.model, loaded.factory, loaded.name)
        name, given = loaded.name, loaded.config
    else:
        from torchmark.errors import UnknownNameError

        raise UnknownNameError("model (a built-in model workload, or file.py:make_model)",
                               model, builtins)  # fmt: skip
    cfg = PredictConfig(
        model=name, target=on, side=side, batches=tuple(batches), scenario=scenario,
        precision=precision, threads=threads, given=given,
    )  # fmt: skip
    with recording(show_predict, json_path, db, lines=True) as (store, events):
        cpu_run = None
        if here:
            cpu_run = _measure_here(
                cfg, user, batches, stopping, ceilings_choice(ceilings, no_ceilings), store, events
            )
            (show_model if user is not None else show_run)(cpu_run)
        from torchmark.kinds.predict.kind import choose_side
        from torchmark.kinds.predict.machine import machine

        m = machine(target, choose_side(target, side))
        auto = same_device_runs(store, m.model) if m is not None else []
        ids = {r.run_id for _, r in auto}
        found = [(f"run {r.run_id}", r) for r in extra if r.run_id not in ids] + auto
        record = run_predict(
            cfg, target, source, user=user, measured=found, here=cpu_run, store=store,
            events=events, name=Path(on).name if on.endswith(".json") else on,
        )  # fmt: skip
    show_predict(record)
    console.print(f"Prediction {record.run_id} stored in {store.url}")
    if json_path:
        from torchmark.cli.output import write_json

        write_json(record, json_path)


def _measure_here(cfg, user, batches, stopping, ceilings, store, events):  # type: ignore[no-untyped-def]
    """This CPU measured through the normal path: your model as `torchmark model` measures
    it; a built-in as `torchmark run` does."""
    from torchmark.kinds.predict.kind import DEFAULT_BATCHES

    sizes = tuple(batches) or DEFAULT_BATCHES
    if user is not None:
        from torchmark.kinds.model.kind import benchmark_model

        return benchmark_model(
            user.module, user.factory, devices="cpu", batches=list(sizes), rule=stopping,
            store=store, events=events, name=user.name, config=dict(cfg.given),
            measure_energy=False, **ceilings,
        )  # fmt: skip
    from torchmark.run.config import RunConfig
    from torchmark.run.runner import run

    rc = RunConfig(
        devices=("cpu",), workloads=(cfg.model,), scenarios=(cfg.scenario,),
        precisions=(cfg.precision,), batches=sizes, rule=stopping, **ceilings,
    )  # fmt: skip
    return run(rc, store, events)
