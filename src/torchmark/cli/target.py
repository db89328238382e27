"""Your own model on the command line, for `model`, `tune` and `profile` alike: SPEC with
``--input`` shapes or ``--inputs file.py:make_inputs``, loaded once (same options, same help,
same errors), and the store + progress + interrupt handling a command measures under."""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from torchmark.cli import RUNS_CODE
from torchmark.cli.app import console, open_store
from torchmark.errors import InputError

if TYPE_CHECKING:
    from torch import nn

    from torchmark.cli.progress import ProgressEvents
    from torchmark.results import RunRecord
    from torchmark.store.base import ResultStore
    from torchmark.user.inputs import InputFactory

SPEC_HELP = (
    "package.module:factory, path/to/file.py:factory, an exported program (.pt2) or a "
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

SpecArgument = Annotated[str, typer.Argument(help=SPEC_HELP)]
InputOption = Annotated[list[str] | None, typer.Option("--input", help=INPUT_HELP)]
InputsOption = Annotated[str | None, typer.Option("--inputs", help=INPUTS_HELP)]


@dataclass(frozen=True)
class UserTarget:
    """The user's model loaded from SPEC, and the factory that makes its inputs."""

    spec: str
    model: nn.Module
    source: str  # how SPEC was loaded (file, module, exported program, TorchScript)
    factory: InputFactory
    shapes: tuple[str, ...] = ()
    inputs: str | None = None

    @property
    def name(self) -> str:
        return short_name(self.spec)

    @property
    def config(self) -> dict[str, Any]:
        """What the stored run says about the model: the full SPEC and its input options."""
        return {"spec": self.spec, "source": self.source, "inputs": self.given_inputs}

    @property
    def given_inputs(self) -> list[str] | str | None:
        return list(self.shapes) or self.inputs

    @property
    def command_line(self) -> str:
        """SPEC and its input options, as the user would type them again."""
        words = [self.spec, *(w for s in self.shapes for w in ("--input", s))]
        return shlex.join(words + (["--inputs", self.inputs] if self.inputs else []))


def load_target(spec: str, shapes: list[str] | None, inputs: str | None) -> UserTarget:
    """The input options are checked before SPEC's file is run."""
    from torchmark.user import spec as spec_mod

    factory = input_factory(shapes, inputs)
    loaded = spec_mod.load(spec)
    return UserTarget(spec, loaded.model, loaded.source, factory, tuple(shapes or ()), inputs)


def input_factory(shapes: list[str] | None, inputs: str | None) -> InputFactory:
    from torchmark.user.inputs import from_callable, from_specs, parse_input

    if shapes and inputs:
        raise InputError("give either --input shapes or --inputs file.py:make_inputs, not both")
    if inputs:
        make = user_callable("--inputs", inputs, "make_inputs(batch)")
        factory, _ = from_callable(make, f"--inputs {inputs}")
        return factory
    if not shapes:
        raise InputError(
            "the model needs inputs: give --input SHAPE (e.g. --input 3x224x224) or "
            "--inputs file.py:make_inputs"
        )
    return from_specs([parse_input(s) for s in shapes])


def user_callable(option: str, value: str, write: str) -> Callable[..., Any]:
    """``--inputs file.py:make_inputs`` / ``--loader file.py:make_loader``: the function
    named (importing its file runs the user's code)."""
    from torchmark.user import spec

    fn = spec.attribute(value)
    if not callable(fn):
        raise InputError(f"{option} {value}: not callable (write a {write})")
    return fn


def short_name(spec: str) -> str:
    """The model's name in tables and progress lines: ``cnn.py:make_model`` for
    ``/long/path/to/cnn.py:make_model`` (the full spec is kept in the run's config)."""
    path, colon, factory = spec.rpartition(":")
    if not colon:  # an exported program or TorchScript file: no factory
        path = spec
    if "/" not in path and "\\" not in path:
        return spec  # package.module:factory or a file in the current folder
    return Path(path).name + (f":{factory}" if colon else "")


@contextlib.contextmanager
def recording(
    render: Callable[[RunRecord], None], json_path: Path | None, db: str | None, lines: bool
) -> Iterator[tuple[ResultStore, ProgressEvents]]:
    """The store and progress a command measures with; interrupted, what was measured is
    shown and written (``shown_even_if_interrupted``). ``lines``: progress as plain lines."""
    from torchmark.cli.output import shown_even_if_interrupted
    from torchmark.cli.progress import ProgressEvents

    store = open_store(db)
    events = ProgressEvents(console, lines=lines)
    with shown_even_if_interrupted(render, json_path), events.shown():
        yield store, events


def measure_target(
    user: UserTarget,
    run: Callable[..., RunRecord],
    render: Callable[[RunRecord], None],
    json_path: Path | None,
    db: str | None,
    **options: Any,
) -> None:
    """``run(model, factory, **options)`` (``kinds.model``, ``kinds.tune``) on the user's
    model, named and described as given, with a store and progress lines; then its record
    is shown, stored and written."""
    from torchmark.cli.output import finish

    with recording(render, json_path, db, lines=True) as (store, events):
        record = run(
            user.model,
            user.factory,
            store=store,
            events=events,
            name=user.name,
            config=user.config,
            **options,
        )
    finish(record, render, json_path, store.url)
