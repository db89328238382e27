"""`torchmark model SPEC` (batch sweep, CPU/GPU break-even, energy, cost) and
`torchmark tune SPEC` (optimisation advisor). Loading a model file runs the user's code."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from torchmark.cli.app import (
    DbOption,
    DevicesOption,
    JsonOutOption,
    app,
    console,
    open_store,
)
from torchmark.cli.run import (
    ProgressEvents,
    check_json_path,
    finish,
    shown_even_if_interrupted,
)
from torchmark.config import parse_int_list
from torchmark.errors import InputError
from torchmark.report.table import flag_words
from torchmark.results import RunRecord
from torchmark.timing import preset
from torchmark.user import breakeven
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


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
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


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3g}"


def sweep_table(record: RunRecord) -> Table:
    cost_rows = {
        (row["device"], row["batch"]): row for row in record.extra.get("cost", {}).get("rows", [])
    }
    t = Table(
        title="Batch sweep: median time per call (e2e = host tensors in and out, "
        "device = inputs resident)",
        title_justify="left",
    )
    for col in ("device", "view", "batch", "ms", "±IQR", "items/s", "J/item"):
        t.add_column(col, justify="right" if col not in ("device", "view") else "left")
    if cost_rows:
        t.add_column("cost/M items", justify="right")
    t.add_column("notes")
    for r in record.results:
        b = r.params.get("batch")
        view = r.variant  # e2e: host in, host out; device: inputs resident
        if not r.ok:
            row = [r.device, view, str(b), "-", "-", "-", "-"]
            if cost_rows:
                row.append("-")
            t.add_row(*row, f"[yellow]{r.status}[/]: {r.reason}")
            continue
        energy = r.extra.get("energy") or {}
        jpi = energy.get("j_per_item") if energy.get("available") else None
        rate = r.rate("items")
        row = [
            r.device,
            view,
            str(b),
            _ms(r.median_s),
            _ms(r.iqr_s),
            "-" if rate is None else f"{rate:,.0f}",
            "n/a" if jpi is None else f"{jpi:.3g}",
        ]
        if cost_rows:
            c = cost_rows.get((r.device, b))
            row.append("no price" if c is None else f"{c['cost_per_million']:.4g}")
        t.add_row(*row, ", ".join(flag_words(r)))  # flags and a warn/invalid verdict
    return t


def show_model(record: RunRecord) -> None:
    console.print(sweep_table(record))
    energy_reasons = {
        r.device: (r.extra.get("energy") or {}).get("reason")
        for r in record.results
        if r.ok and not (r.extra.get("energy") or {}).get("available", True)
    }
    for dev, why in energy_reasons.items():
        if why:
            console.print(f"energy on {dev}: not available ({why})")
    be = record.extra.get("break_even") or {}
    if not be:
        console.print(record.extra.get("break_even_note", breakeven.NO_GPU))
    else:
        t = Table(title="Break-even: batch from which the GPU beats the CPU", title_justify="left")
        for col in ("GPU", "end-to-end", "device-only", "batches tried", "notes"):
            t.add_column(col)
        for gpu, e in be.items():
            rng = e.get("range")
            t.add_row(
                f"{gpu} ({e.get('label', gpu)})",
                breakeven.describe(e["e2e"]),
                breakeven.describe(e["device"]),
                f"{rng[0]}..{rng[1]}" if rng else "-",
                "; ".join(e.get("notes", [])),
            )
        console.print(t)
    cost = record.extra.get("cost")
    if cost:
        if cost["cheaper"]:
            console.print(
                "Cheaper per item: "
                + ", ".join(f"batch {b}: {d}" for b, d in cost["cheaper"].items())
            )
        else:
            console.print("Cost: only one priced device measured; nothing to compare")


@app.command(
    help="Benchmark your own model over a batch sweep on every device: latency, "
    "throughput, CPU/GPU break-even, energy and cost per item. " + RUNS_CODE
)
def model(
    spec: Annotated[str, SPEC_ARG],
    input: Annotated[list[str] | None, typer.Option("--input", help=INPUT_HELP)] = None,
    inputs: Annotated[str | None, typer.Option("--inputs", help=INPUTS_HELP)] = None,
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
    telemetry: Annotated[bool, typer.Option(help="Sample clocks/heat/load.")] = True,
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
    factory = input_factory(input, inputs)
    loaded = spec_mod.load(spec)
    store = open_store(db)
    progress = _progress()
    with shown_even_if_interrupted(show_model, json_path), progress:
        record = benchmark_model(
            loaded.model,
            factory,
            devices=device or None,
            batches=batches or None,
            rule=stopping,
            price=prices,
            store=store,
            events=ProgressEvents(progress),
            name=spec,
            measure_energy=energy,
            telemetry=telemetry,
            config={"spec": spec, "source": loaded.source, "inputs": input or inputs},
        )
    finish(record, show_model, json_path, store.url)


def tune_table(record: RunRecord) -> Table:
    t = Table(title="Candidates, ranked (speedup over the baseline)", title_justify="left")
    for col in ("device", "candidate", "status", "speedup", "latency ms", "max error", "notes"):
        t.add_column(col, justify="right" if col in ("speedup", "latency ms") else "left")
    style = {"faster": "green", "rejected": "red", "slower": "yellow"}
    for c in record.extra.get("candidates", []):
        s = c["status"]
        err = c.get("max_error")
        note = c.get("reason") or ""
        if c.get("compile_s"):
            note = (note + f" compile {c['compile_s']:.1f} s").strip()
        t.add_row(
            c["device"],
            c["name"],
            f"[{style[s]}]{s}[/]" if s in style else s,
            "-" if c.get("speedup") is None else f"{c['speedup']:.2f}x",
            "-" if c.get("latency_ms") is None else f"{c['latency_ms']:.3g}",
            "-" if err is None else f"{err:.2g} (tol {c.get('tolerance') or 0:g})",
            note,
        )
    return t


def show_tune(record: RunRecord) -> None:
    console.print(tune_table(record))
    for note in record.extra.get("notes", []):
        console.print(f"note: {note}")
    for dev, rec in record.extra.get("recommendation", {}).items():
        sp = rec.get("speedup")
        why = f" ({rec['reason']})" if rec.get("reason") else ""
        console.print(
            f"\n[bold]Recommended on {dev}:[/] {rec['name']}"
            + (f", {sp:.2f}x the baseline" if sp else "")
            + why
        )
        console.print("\n".join(rec.get("code", [])), markup=False, highlight=False)


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
    progress = _progress()
    with shown_even_if_interrupted(show_tune, json_path), progress:
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
            events=ProgressEvents(progress),
            name=spec,
            config={"spec": spec, "source": loaded.source, "inputs": input or inputs},
        )
    finish(record, show_tune, json_path, store.url)
