"""The typer app, shared options and the one place user errors become one line + exit code.

Environment variables read by the CLI (and only here):
    TORCHMARK_DB     default results store URL (``--db`` overrides)
and one it sets where the user has not, for the commands that only read stored runs:
PYDANTIC_DISABLE_PLUGINS (``main``).
"""

from __future__ import annotations

import difflib
import gc
import importlib
import inspect
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_from_info, get_command_name

from torchmark.errors import InputError, TorchmarkError

try:  # newer typer vendors click; older ones use the click package
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import UsageError  # type: ignore[no-redef,assignment,unused-ignore]


# What each option's value is, named as the help describes it: typer 0.29 prints the
# Python type instead (``--workload <list[str]>``, ``--rate <float>``). One name per idea
# across commands: a time is a DURATION (90s, 2m), a batch list N[,N...]. An option not
# listed shows its own name (``--token TOKEN``); a typer.Option(metavar=...) wins.
METAVARS = {
    "--backend": "NAME",
    "--batch": "N[,N...]",
    "--budget": "DURATION",
    "--cache-dir": "DIR",
    "--db": "URL",
    "--device": "DEVICE",
    "--duration": "DURATION",
    "--endpoint": "URL",
    "--energy-price": "PRICE",
    "--format": "FORMAT",
    "--host": "ADDRESS",
    "--html": "FILE",
    "--input": "SHAPE",
    "--inputs": "FILE.py:FUNC",
    "--json": "FILE",
    "--limit": "N",
    "--loader": "FILE.py:FUNC",
    "--markdown": "FILE",
    "--max-latency-ms": "MS",
    "--max-procs": "N",
    "--max-wait-ms": "MS[,MS...]",
    "--min-duration": "DURATION",
    "--measured": "RUN",
    "--model-name": "NAME",
    "--min-requests": "N",
    "--nnodes": "N",
    "--node-rank": "N",
    "--nproc-per-node": "N",
    "--on": "RUN",
    "--output": "FILE",
    "--p99-ms": "MS",
    "--per-candidate": "DURATION",
    "--point": "DURATION",
    "--port": "PORT",
    "--precision": "NAME",
    "--price": "KIND=PRICE,...",
    "--public-url": "URL",
    "--rate": "REQ/S",
    "--rate-limit": "N",
    "--rdzv-endpoint": "HOST:PORT",
    "--rdzv-timeout": "SECONDS",
    "--reference": "NAME",
    "--scaling": "N[,N...]",
    "--scenario": "NAME",
    "--server": "URL",
    "--size": "N[,N...]",
    "--steps": "N",
    "--stopping": "PRESET",
    "--strategy": "NAME",
    "--suite": "NAME",
    "--threads": "N",
    "--timing": "MODE",
    "--token": "TOKEN",
    "--trace": "FILE",
    "--workers": "N",
    "--workload": "NAME",
}
# typer gives an option of type int or float its own placeholder (``--batch`` is an int
# in tune, a comma list elsewhere): a name that fits the single value.
SINGLE = {"--batch": "N"}


def prose(text: str | None) -> str | None:
    """A command's docstring with each paragraph on one line: typer keeps the line breaks of
    every paragraph after the first, and rich then wraps each source line on its own (a word
    left alone on a line of an 80-column help). A paragraph marked ``\\b`` keeps its lines."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else " ".join(p.split()) for p in paragraphs)


def _usage_name(arg: Any) -> str:
    """``SPEC``, ``[RUNS]...``: click's form (typer 0.29 writes ``{spec}``)."""
    name = arg.metavar if arg.required else f"[{arg.metavar}]"
    return name + ("..." if arg.nargs != 1 else "")


def _named_values(params: list[Any]) -> list[Any]:
    """Help that names each value. typer 0.29 writes a ``<bool>`` type after every flag
    (``--json <bool>``), which reads as if the flag took a value: a flag shows its form
    alone. An option's value gets its name from METAVARS; an argument shows its name in
    capitals, without the Python type beside it (``spec <str>``) nor typer's ``{spec}``
    in the usage line."""
    PlainValues.install(params)
    for p in params:
        if p.metavar is not None:
            pass
        elif getattr(p, "is_flag", False):
            p.metavar = ""
        elif p.param_type_name == "argument":
            p.metavar = p.name.upper()
        else:
            long = max(p.opts, key=len)
            single = getattr(p, "bare_type", lambda: "")() in ("int", "float")
            p.metavar = (SINGLE.get(long) if single else None) or METAVARS.get(
                long, long.lstrip("-").upper()
            )
        if p.param_type_name == "argument":
            # instance attributes: these typer methods have no setting to turn them off
            p.display_type_rich = lambda ctx: None
            p.get_usage_pieces = lambda ctx, p=p: [_usage_name(p)]
    return params


# A Path parameter with these settings asks typer for no check beyond the type.
PATH_AS_TYPED = {"exists": False, "file_okay": True, "dir_okay": True, "writable": False,
                 "readable": True, "resolve_path": False, "allow_dash": False,
                 "path_type": None}  # fmt: skip
NOT_PLAIN = object()


class PlainValues:
    """A parameter's coercion, without a pydantic TypeAdapter where its value needs none.

    typer 0.29 builds a TypeAdapter for every parameter of the command that runs before it
    coerces the value, given or not: importing pydantic's adapter machinery and building
    them was ~0.08 s of `torchmark list`'s start (0.28 s). A value that is absent, or
    already of the parameter's plain type (a default; words for a str or a list of str; a
    path to write that is not there yet), comes back as that adapter returns it; every
    other value goes to typer's own coercion, built then. Typers without this hook
    (``_runtime_param``) are left as they are."""

    def __init__(self, param: Any) -> None:
        self._param = param
        self._typer: Any = None

    @classmethod
    def install(cls, params: list[Any]) -> None:
        """On each of a command's parameters, the help option included."""
        for p in params:
            if getattr(p, "_runtime_param", False) is None and hasattr(p, "type_descriptor"):
                p._runtime_param = cls(p)

    def plain(self, value: Any) -> Any:
        """``value`` as typer's adapter returns it where no check applies (the parameter's
        own plain type, a bool not counted as an int; no parser, range or clamp), else
        ``NOT_PLAIN``."""
        d = self._param.type_descriptor
        info = d.parameter_info
        if d.file_annotation is not None or info.parser is not None or info.clamp:
            return NOT_PLAIN
        if info.min is not None or info.max is not None:
            return NOT_PLAIN
        kind = d.annotation
        if kind in (str, int, float, bool):
            return value if type(value) is kind else NOT_PLAIN
        if kind == list[str]:
            words = isinstance(value, list | tuple) and all(type(v) is str for v in value)
            return list(value) if words else NOT_PLAIN
        as_typed = all(getattr(info, k, None) == v for k, v in PATH_AS_TYPED.items())
        if kind is Path and type(value) is str and value and as_typed:
            try:
                os.stat(value)  # typer's own check: a path that is there goes to typer
            except OSError:
                return Path(value)  # a file to write, not there yet: typer's Path(value)
            except ValueError:
                pass
        return NOT_PLAIN

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:  # typer's RuntimeParam.coerce: nothing given, nothing to build
            return () if param.multiple or param.nargs == -1 else None
        plain = self.plain(value)
        if plain is not NOT_PLAIN:
            return plain
        if self._typer is None:
            from typer._coercion import build_runtime_param

            self._typer = build_runtime_param(self._param.type_descriptor)
        return self._typer.coerce(value, param=param, ctx=ctx)


class Command(TyperCommand):
    """Every command's class (LazyGroup sets it): help that names each value, its paragraphs
    wrapped as wholes, values coerced without pydantic where they need none."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help = prose(self.help)

    def get_params(self, ctx: Any) -> list[Any]:
        return _named_values(super().get_params(ctx))


class LazyGroup(TyperGroup):
    """The top-level group: a command's module is imported only when that command runs.

    Names and one-line help come from ``torchmark.cli.COMMANDS``, so ``--help`` lists every
    command without importing any (importing them all cost 4-10 s: torch, scipy, SQLAlchemy).
    """

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        from torchmark.cli import COMMANDS

        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        from torchmark.cli import COMMANDS

        entry = COMMANDS.get(cmd_name)
        # a module imported before the group was built (`torchmark show` imports the
        # measuring commands' printers) gave it plain TyperCommands: made again below
        if entry is None or isinstance(self.commands.get(cmd_name), Command):
            return self.commands.get(cmd_name)
        if self._listing:  # the help page needs the name and the line, not the command
            return TyperCommand(name=cmd_name, help=entry.help, callback=None)
        importlib.import_module(f"torchmark.cli.{entry.module}")
        # What importing left (torch alone: ~170k objects) lives as long as the process; a
        # full collection walked it again after every case of a run (0.1-0.2 s CPU each,
        # 2.2 s of a quick run on a loaded 2-core machine). Frozen, collections skip it.
        gc.freeze()
        if _held_collection:  # the entry held it off for the start: on again from here
            gc.enable()
        # The one command asked for: building a command reads its function's signature
        # and evaluates its annotations (~3 ms each; `show` registers four beside it).
        for info in app.registered_commands:
            named = info.name or (info.callback and get_command_name(info.callback.__name__))
            if named != cmd_name:
                continue
            if info.cls in (None, TyperCommand):
                info.cls = Command
            cmd = get_command_from_info(
                info,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
            )
            self.add_command(cmd, cmd_name)
        return self.commands.get(cmd_name)

    def get_params(self, ctx: Any) -> list[Any]:
        return _named_values(super().get_params(ctx))

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        from torchmark.cli import COMMANDS

        try:
            return super().resolve_command(ctx, args)
        except UsageError as e:
            matches = difflib.get_close_matches(args[0], list(COMMANDS)) if args else []
            if matches and "Did you mean" not in e.message:
                e.message = f"{e.message.rstrip('.')}. Did you mean {matches[0]!r}?"
            raise


app = typer.Typer(
    name="torchmark",
    help="How fast is deep learning on this machine, CPU or GPU, and why.",
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# True where the process's entry (``torchmark.__main__``) holds the collector off while a
# command starts; a caller running the CLI in its own process keeps its own setting.
_held_collection = False
# markup=False, emoji=False: run ids, paths, model errors and reasons reach the terminal as
# written (rich markup in them, "[/layer]" or "[bold red]pwn[/]", would crash or be
# swallowed, and ":cd:" in a path would print a disc; rich's emoji table is also ~5 ms of
# a command's start); styled text is built with rich.text.Text instead.
console = Console(highlight=False, markup=False, emoji=False)
err_console = Console(stderr=True, highlight=False, markup=False, emoji=False)


def one_line(c: Console) -> bool:
    """``soft_wrap`` for a message (an error, a gate's verdict, a placement): one line where
    the output is kept (a CI log, a pipe, a file: grep finds it whole), word-wrapped at the
    width of a terminal, where a person reads it (at 80 columns an unwrapped error broke
    mid-word: "...; chec" / "k the URL and that the server runs")."""
    return not c.is_terminal


DB_HELP = (
    "Results store URL (sqlite:///path.db or postgresql://...); default: $TORCHMARK_DB or "
    "a SQLite file in the user data directory."
)


# Options shared by several commands, declared once.
DbOption = Annotated[str | None, typer.Option(help=DB_HELP)]
DevicesOption = Annotated[
    list[str] | None,
    typer.Option("--device", "-d", help="cpu, cuda, cuda:N, mps, xpu or all (default: all)."),
]
JsonOutOption = Annotated[Path | None, typer.Option("--json", help="Also write the run as JSON.")]
AsJsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
TelemetryOption = Annotated[
    bool, typer.Option(help="Sample clocks, heat and load while measuring.")
]
PriceOption = Annotated[
    str | None,
    typer.Option(help="Currency per device-hour by kind or name, e.g. cpu=0.10,cuda=2.50."),
]
EnergyOption = Annotated[bool, typer.Option(help="Read RAPL / NVML energy counters.")]
CeilingsOption = Annotated[
    str | None,
    typer.Option(
        "--ceilings",
        metavar="RUN|quiet",
        help="Reuse a stored quiet ceiling set instead of measuring: quiet (this machine's "
        "cache) or a run id. Default: the cached quiet set, else measured.",
    ),
]
NoCeilingsOption = Annotated[
    bool,
    typer.Option("--no-ceilings", help="Measure no ceilings (then no % of ceiling)."),
]


def ceilings_choice(source: str | None, off: bool) -> dict[str, Any]:
    """``--ceilings RUN|quiet`` and ``--no-ceilings`` as RunConfig fields; a bad pair is
    one line naming the fix."""
    if source is not None and not source.strip():
        raise InputError("--ceilings takes quiet or a run id from `torchmark history`")
    if source is not None and off:
        raise InputError("give --ceilings RUN|quiet or --no-ceilings, not both")
    return {"ceilings": not off, "ceilings_from": source.strip() if source else None}


def renamed(old: str, new: str) -> None:
    """One line for an option kept, hidden, under its old name: the name to use instead."""
    err_console.print(f"note: {old} is now {new}", soft_wrap=one_line(err_console))


def db_url(option: str | None) -> str | None:
    return option or os.environ.get("TORCHMARK_DB") or None


def open_store(option: str | None):  # type: ignore[no-untyped-def]
    from torchmark.store import open_store as _open

    return _open(db_url(option))


def read_store(option: str | None):  # type: ignore[no-untyped-def]
    """The store to read runs from (``load``, ``list_runs``): a local SQLite file read as it
    is without SQLAlchemy where it can be (``store.open_reader``), else the full store."""
    from torchmark.store import open_reader

    url = db_url(option)
    return open_reader(url) or open_store(url)


def _show_version(value: bool) -> None:
    if value:
        from torchmark import __version__

        console.print(f"torchmark {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """How fast is deep learning on this machine, CPU or GPU, and why."""


def main(argv: list[str] | None = None, *, collection_held: bool = False) -> None:
    """Entry point: user errors print one line and exit non-zero; bugs keep the traceback.
    ``collection_held``: the caller turned the cyclic collector off for the start, to be
    turned on once the command is imported (``LazyGroup.get_command``)."""
    global _held_collection
    _held_collection = collection_held
    from torchmark.cli import COMMANDS
    from torchmark.run import torchfacts

    named = [a for a in (argv if argv is not None else sys.argv[1:]) if a in COMMANDS][:1]
    torchfacts.KEEP_BY = " ".join(["torchmark", *named])  # who keeps torch's facts
    # pydantic looks for plugins (observability hooks) in every installed package's entry
    # points when it builds its first validator: 0.01-0.03 s of `show`'s start with 73
    # packages, more in a full environment, for documents torchmark wrote itself. Off for
    # the commands that only read stored runs; left as it is for those that run a user's
    # code or start processes (which inherit the environment), and wherever the user set it.
    if named and COMMANDS[named[0]].reads_runs:
        os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    try:
        # Outside standalone mode click returns the code of a `typer.Exit` (a failing
        # doctor's 1, an interrupted soak's 130) instead of exiting: pass it on.
        code = app(args=argv, prog_name="torchmark", standalone_mode=False)
    except TorchmarkError as e:
        err_console.print(
            Text.assemble(("error:", "bold red"), f" {e}"), soft_wrap=one_line(err_console)
        )
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted: results measured so far are saved (run incomplete)")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(130)
    except UsageError as e:
        # click prints a usage line, a hint and the error on four lines: one line here
        where = e.ctx.command_path if e.ctx is not None else "torchmark"
        if where == "torchmark" and named:  # `run -w` fails while the group still parses
            where = f"torchmark {named[0]}"
        line = f" {e.format_message().rstrip('.')} (see `{where} --help`)"
        err_console.print(
            Text.assemble(("error:", "bold red"), line), soft_wrap=one_line(err_console)
        )
        sys.exit(e.exit_code)
    except Exception as e:
        # Other errors of the (possibly vendored) click arrive here in non-standalone mode.
        show = getattr(e, "show", None)
        if callable(show) and isinstance(getattr(e, "exit_code", None), int):
            show()
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        raise
    if type(code) is int and code != 0:
        sys.exit(code)
