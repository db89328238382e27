"""`torchmark serving MODEL --p99-ms L [--rate R]`: load-test a model as a service (not the
leaderboard server, which is `torchmark board`). MODEL is a built-in model or the user's
SPEC, whose file is run (as for `torchmark model`)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from torchmark.cli import RUNS_CODE
from torchmark.cli.app import (
    DbOption,
    DevicesOption,
    EnergyOption,
    JsonOutOption,
    PriceOption,
    app,
    console,
)
from torchmark.cli.output import check_json_path, finish
from torchmark.cli.printers import show_serving
from torchmark.cli.target import InputOption, InputsOption, load_target, recording
from torchmark.errors import InputError, TorchmarkError
from torchmark.run.config import parse_duration, parse_float_list, parse_int_list

if TYPE_CHECKING:
    from torchmark.kinds.serving.model import Recipe, Served
    from torchmark.kinds.serving.point import LoadPoint
    from torchmark.results.serving import FleetDoc

MODEL_HELP = (
    "A built-in model (simplenet, resnet50, bert-base, ...: see `torchmark list`) or your "
    "own SPEC with --input / --inputs, as for `torchmark model`."
)


def _sizes(text: str | None) -> tuple[tuple[str, int], ...]:
    """``image=64,layers=1`` -> (("image", 64), ("layers", 1))."""
    if not text:
        return ()
    out = []
    for part in (p.strip() for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=")
        if not sep or not value.strip().isdigit():
            raise InputError(f"--size {text!r}: write key=value pairs, e.g. image=64,layers=1")
        out.append((key.strip(), int(value)))
    return tuple(out)


def user_recipe(spec: str, shapes: tuple[str, ...], inputs: str | None) -> Served:
    """The user's model and inputs from SPEC, as `torchmark model` loads them (each worker
    process calls this again: the recipe, not the model, crosses to it)."""
    from torchmark.kinds.serving.model import Served

    user = load_target(spec, list(shapes) or None, inputs)
    return Served(user.model, user.factory, user.name)


def _spec_problem(model: str) -> str | None:
    """``model spec 'nope': ...; `` where MODEL is neither a built-in model nor a file or
    module:factory that could exist (checked without running it), else None."""
    from pathlib import Path

    from torchmark.workloads import WORKLOADS, load_builtins

    load_builtins()
    name = model.strip()
    if name in WORKLOADS.names() or ":" in name or Path(name).is_file():
        return None
    return (
        f"model spec {name!r}: not a built-in model and no such file (write a built-in "
        "model, module:factory, file.py:factory or a saved model); "
    )


def _recipe(
    model: str,
    shapes: list[str] | None,
    inputs: str | None,
    sizes: tuple[tuple[str, int], ...],
) -> tuple[Recipe, str, str]:
    """(recipe, name, inputs described): a built-in model, or the user's SPEC."""
    from torchmark.kinds.serving.model import builtin
    from torchmark.workloads import WORKLOADS, load_builtins
    from torchmark.workloads.models.base import ModelWorkload

    load_builtins()
    name = model.strip()
    if name in WORKLOADS.names() and issubclass(WORKLOADS.get(name), ModelWorkload):
        if shapes or inputs:
            raise InputError(f"{name} is a built-in model: it makes its own inputs (no --input)")
        recipe: Recipe = builtin(name, dict(sizes))
    else:
        if sizes:
            raise InputError("--size is for built-in models; give your model's --input shapes")
        from torchmark.cli.target import input_factory, short_name

        input_factory(shapes, inputs)  # bad input options fail before SPEC's file is run
        recipe = functools.partial(user_recipe, name, tuple(shapes or ()), inputs)
        name = short_name(name)
    served = recipe()  # built once here: a bad SPEC or a model that fails says so now
    return recipe, name, served.factory(1).describe()


@app.command(
    help="Load-test a model as a service: the most requests/s each device answers within a "
    "p99 bound, the devices your traffic needs, the cost (`board` is the leaderboard server). "
    + RUNS_CODE
)
def serving(
    model: Annotated[str, typer.Argument(help=MODEL_HELP, show_default=False)],
    p99_ms: Annotated[
        float | None,
        typer.Option(
            "--p99-ms",
            help="The latency bound: each request answered within it at "
            "the 99th percentile, in ms (required).",
            show_default=False,
        ),
    ] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            help="Your traffic in requests/s: how many devices it needs, which is cheaper."
        ),
    ] = None,
    input: InputOption = None,
    inputs: InputsOption = None,
    device: DevicesOption = None,
    price: PriceOption = None,
    energy_price: Annotated[
        float | None,
        typer.Option(
            "--energy-price",
            help="Currency per kWh: the energy each request used (where a counter reads "
            "it) is added to the cost.",
        ),
    ] = None,
    budget: Annotated[str, typer.Option(help="Search time per device: 30s, 2m, 1h.")] = "2m",
    point: Annotated[
        str,
        typer.Option(
            help="Longest load point (>= --min-duration): a point short of the requests "
            "its p99 needs by then is INVALID."
        ),
    ] = "30s",
    min_duration: Annotated[
        str,
        typer.Option(
            "--min-duration",
            help="Shortest load point judged within: 5s shows a 1 % overload as 50 ms of "
            "queue; the answer is re-confirmed for 3x it.",
        ),
    ] = "5s",
    batch: Annotated[
        str | None,
        typer.Option(help="Max batch sizes to try (default: CPU 1,8,32; GPU 1,16,64,256)."),
    ] = None,
    max_wait_ms: Annotated[
        str | None,
        typer.Option(
            "--max-wait-ms",
            help="Batching windows to try in ms (default: 0 and a tenth of the bound).",
        ),
    ] = None,
    split: Annotated[
        bool, typer.Option(help="On the CPU also try worker processes x threads (1xN .. Nx1).")
    ] = True,
    max_procs: Annotated[
        int | None, typer.Option(help="Most worker processes to try on the CPU.")
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(help="With --no-split: the CPU process's threads (default: every core)."),
    ] = None,
    size: Annotated[
        str | None,
        typer.Option(
            metavar="NAME=N,...",
            help="A built-in model's sizes, e.g. image=64 or layers=1,seq=16.",
        ),
    ] = None,
    min_requests: Annotated[
        int,
        typer.Option(
            help="Requests a load point needs for its p99 (0: enough for a 95 % "
            "interval within p98.5-p99.5)."
        ),
    ] = 0,
    as_served: Annotated[
        bool,
        typer.Option(
            help="Also serve the model behind torchmark's Open Inference Protocol server "
            "and drive it over HTTP: the answer as deployed (its verdict and cost are used)."
        ),
    ] = True,
    endpoint: Annotated[
        str | None,
        typer.Option(
            help="Drive your own running Open Inference Protocol (KServe v2) server instead, "
            "e.g. http://127.0.0.1:8000 (Triton, KServe, TorchServe, MLServer, torchmark)."
        ),
    ] = None,
    model_name: Annotated[
        str | None,
        typer.Option(help="With --endpoint: the model's name on it (default: MODEL)."),
    ] = None,
    energy: EnergyOption = True,
    json_path: JsonOutOption = None,
    db: DbOption = None,
) -> None:
    from torchmark.kinds.serving.kind import ServingConfig, serve, validate
    from torchmark.results.serving import FAILED_ALL, read
    from torchmark.user.cost import parse_price

    if p99_ms is None:
        # the model first: `serving nope` said only "Missing option --p99-ms", and the
        # same command with the bound then failed on the model
        problem = _spec_problem(model)
        raise InputError(
            (problem or "")
            + "serving needs --p99-ms MS, the latency bound each request must meet at "
            f"the 99th percentile (e.g. torchmark serving {'MODEL' if problem else model} "
            "--p99-ms 50)"
        )
    check_json_path(json_path)
    prices = parse_price(price)
    cfg = ServingConfig(
        model=model,
        p99_ms=p99_ms,
        rate=rate,
        devices=tuple(device or ()),
        batches=parse_int_list(batch, "--batch"),
        max_wait_ms=parse_float_list(max_wait_ms, "--max-wait-ms"),
        budget_s=parse_duration(budget, "--budget"),
        point_s=parse_duration(point, "--point"),
        min_duration_s=parse_duration(min_duration, "--min-duration"),
        split=split,
        max_procs=max_procs,
        threads=threads,
        prices=tuple(prices.items()),
        energy_price=energy_price,
        energy=energy,
        min_requests=min_requests,
        inputs=tuple(input) if input else inputs,
        sizes=_sizes(size),
        as_served=as_served,
        endpoint=endpoint,
        model_name=model_name,
    )
    validate(cfg)  # every option checked before the model is built
    recipe: Recipe | None
    if endpoint:  # the user's server has the model: nothing is built here
        if input or inputs or cfg.sizes:
            raise InputError("--endpoint serves its own model: drop --input/--inputs/--size")
        recipe, name, described = None, model_name or model, ""
    else:
        recipe, name, described = _recipe(model, input, inputs, cfg.sizes)

    def said(fleet: FleetDoc, p: LoadPoint) -> None:
        split = f" {fleet.processes}x{fleet.threads}" if fleet.threads else ""
        if fleet.served:
            split = " " + fleet.served_as
        lat = p.latencies
        console.print(
            Text(
                f"[{fleet.device}{split}] {p.rate:,.0f} req/s, {p.batching.label}: "
                f"{p.outcome} ({p.why}; n={lat.n})"
            ),
            soft_wrap=not console.is_terminal,
        )

    with recording(show_serving, json_path, db, lines=True) as (store, events):
        record = serve(
            cfg, recipe, store=store, events=events, on_point=said, name=name, inputs=described
        )
    finish(record, show_serving, json_path, store.url)
    p = read(record)
    reasons = [f.stop_reason for f in p.fleets] if p is not None else []
    # every request failed: nothing was served, which a script must not read as an answer
    if reasons and all(r.startswith(FAILED_ALL) for r in reasons):
        raise TorchmarkError(
            f"no request was answered: {reasons[0]} (the run is kept: torchmark show "
            f"{record.run_id}); fix the {'endpoint' if endpoint else 'model'} and run again"
        )
