"""`torchmark model SPEC --loader file.py:make_loader`: the model fed the user's batches,
the input pipeline's view (``kinds.loader``). Loading the files runs the user's code."""

from __future__ import annotations

from pathlib import Path

from torchmark.cli.output import finish
from torchmark.cli.printers import show_run as show
from torchmark.cli.target import recording, user_callable
from torchmark.errors import InputError

__all__ = ["model_with_loader", "show"]


def model_with_loader(
    spec: str,
    loader: str,
    inputs: object,
    device: list[str] | None,
    stopping: str,
    telemetry: bool,
    json_path: Path | None,
    db: str | None,
) -> None:
    """``--loader``: the model fed the user's batches; the input pipeline's view."""
    from torchmark.kinds.model.kind import benchmark_model
    from torchmark.user import spec as spec_mod

    if inputs:
        raise InputError("give either --loader or --input / --inputs, not both")
    make = user_callable("--loader", loader, "make_loader()")
    loaded = spec_mod.load(spec)
    with recording(show, json_path, db, lines=True) as (store, events):
        record = benchmark_model(
            loaded.model,
            loader=make,
            devices=device or None,
            rule=stopping,
            store=store,
            events=events,
            name=f"--loader {loader}",
            telemetry=telemetry,
            config={"spec": spec, "source": loaded.source},
        )
    finish(record, show, json_path, store.url)
