"""Every command's parameters: a plain value (absent, a default, words) passes without
typer's pydantic TypeAdapter and comes out exactly as typer's own coercion gives it; any
other value goes to typer's coercion, its errors included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

coercion = pytest.importorskip("typer._coercion", reason="a typer without coercion hooks")

from typer._click import Context  # noqa: E402
from typer._click.exceptions import BadParameter  # noqa: E402

from torchmark.cli import COMMANDS  # noqa: E402
from torchmark.cli.app import PlainValues, app  # noqa: E402


def every_param() -> Iterator[tuple[str, Any, Context]]:
    group: Any = typer.main.get_command(app)  # the LazyGroup
    top = Context(group)
    yield "torchmark", next(p for p in group.get_params(top) if p.name == "help"), top
    for name in COMMANDS:
        cmd = group.get_command(top, name)
        ctx = Context(cmd, parent=top, info_name=name)
        for p in cmd.get_params(ctx):
            yield name, p, ctx


PARAMS = list(every_param())


def values(p: Any) -> list[Any]:
    """What a command line gives the parameter: nothing, its default, typical words."""
    annotation = p.type_descriptor.annotation
    tried: list[Any] = [None, p.default]
    if annotation is str:
        tried += ["latest", "", " two words ", "ünïcode"]
    if annotation is int:
        tried += [0, 7, "7", " 8 "]
    if annotation is float:
        tried += [0.5, "0.5", 3]
    if annotation == list[str]:
        tried += [("cpu",), ("cpu", "cuda:0"), []]
    if annotation is Path:  # to write (not there: "-" too), a file and a folder that are
        tried += ["-", "out/report.md", "", __file__, str(Path(__file__).parent)]
    return tried


def typers_own(p: Any, value: Any, ctx: Context) -> tuple[str, Any]:
    try:
        out = coercion.build_runtime_param(p.type_descriptor).coerce(value, param=p, ctx=ctx)
    except BadParameter as e:
        return "error", e.format_message()
    return type(out).__name__, out


def ours(p: Any, value: Any, ctx: Context) -> tuple[str, Any]:
    try:
        out = p.get_runtime_param().coerce(value, param=p, ctx=ctx)
    except BadParameter as e:
        return "error", e.format_message()
    return type(out).__name__, out


def test_every_parameter_coerces_through_plain_values() -> None:
    assert len(PARAMS) > 100  # every command's parameters were found
    other = [f"{name} {p.name}" for name, p, _ in PARAMS]
    assert all(isinstance(p.get_runtime_param(), PlainValues) for _, p, _ in PARAMS), other


@pytest.mark.parametrize(
    ("command", "p", "ctx"), PARAMS, ids=[f"{c} {p.name}" for c, p, _ in PARAMS]
)
def test_each_value_comes_out_as_typers_own_coercion_gives_it(
    command: str, p: Any, ctx: Context
) -> None:
    for value in values(p):
        assert ours(p, value, ctx) == typers_own(p, value, ctx), (command, p.name, value)


def test_plain_values_build_no_adapter_and_others_build_typers_own() -> None:
    plain = [(p, v, ctx) for _, p, ctx in PARAMS for v in values(p)[:2]]  # nothing, default
    fresh = {id(p): PlainValues(p) for p, _, _ in plain}
    for p, value, ctx in plain:
        fresh[id(p)].coerce(value, param=p, ctx=ctx)
    assert all(pv._typer is None for pv in fresh.values())

    limit = next(p for c, p, _ in PARAMS if c == "history" and p.name == "limit")
    pv = PlainValues(limit)
    ctx = next(ctx for c, p, ctx in PARAMS if p is limit)
    assert pv.coerce(5, param=limit, ctx=ctx) == 5 and pv._typer is None
    assert pv.coerce("5", param=limit, ctx=ctx) == 5 and pv._typer is not None
    with pytest.raises(BadParameter, match="valid integer"):
        pv.coerce("five", param=limit, ctx=ctx)
