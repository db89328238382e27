"""The typer app, shared options and the one place user errors become one line + exit code.

Environment variables read by the CLI (and only here):
    TORCHMARK_DB     default results store URL (``--db`` overrides)
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from torchmark.errors import TorchmarkError

app = typer.Typer(
    name="torchmark",
    help="How fast is deep learning on this machine, CPU or GPU, and why.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# markup=False: run ids, paths, model errors and reasons reach the terminal as written
# (rich markup in them, "[/layer]" or "[bold red]pwn[/]", would crash or be swallowed);
# styled text is built with rich.text.Text instead.
console = Console(highlight=False, markup=False)
err_console = Console(stderr=True, highlight=False, markup=False)

F = TypeVar("F", bound=Callable[..., Any])

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


def db_url(option: str | None) -> str | None:
    return option or os.environ.get("TORCHMARK_DB") or None


def open_store(option: str | None):  # type: ignore[no-untyped-def]
    from torchmark.store import open_store as _open

    return _open(db_url(option))


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors print one line and exit non-zero; bugs keep the traceback."""
    from torchmark.cli import load_commands

    load_commands()
    try:
        app(args=argv, standalone_mode=False)
    except TorchmarkError as e:
        err_console.print(Text.assemble(("error:", "bold red"), f" {e}"), soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err_console.print("interrupted: results measured so far are saved (run incomplete)")
        sys.exit(130)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        sys.exit(130)
    except Exception as e:
        # Usage errors of the (possibly vendored) click arrive here in non-standalone mode.
        show = getattr(e, "show", None)
        if callable(show) and isinstance(getattr(e, "exit_code", None), int):
            show()
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        raise
