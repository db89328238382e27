"""``torchmark board``: the shared leaderboard server, and its tokens (``serve``: its old
name, which says so and runs it; it read like the load test ``serving``)."""

from __future__ import annotations

import functools
import ipaddress
import json
import os
from typing import Annotated, Any

import typer

from torchmark.cli import COMMANDS
from torchmark.cli.app import app, console, err_console, one_line
from torchmark.errors import InputError

TOKEN_USAGE = "token create NAME | token list | token revoke NAME"
BoardDbOption = Annotated[
    str | None,
    typer.Option(
        help="The board's store: sqlite:///PATH or postgresql://USER@HOST/DB. Default: "
        "board.db in your data directory, beside (never in) your results store; "
        "TORCHMARK_DB names your results, not the board."
    ),
]


def board_url(option: str | None) -> str:
    """The board's store URL: ``--db``, else its own SQLite file (never TORCHMARK_DB's)."""
    from torchmark.store import default_board_path

    return option or f"sqlite:///{default_board_path()}"


def _need_server() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise InputError(f"the server needs {e.name}: pip install 'torchmark[server]'") from None


@app.command()
def board(
    action: Annotated[
        list[str] | None,
        typer.Argument(
            help=f"Manage tokens instead of serving: {TOKEN_USAGE}.", show_default=False
        ),
    ] = None,
    db: BoardDbOption = None,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    public_url: Annotated[
        str, typer.Option(help="The URL users reach the server at (for links it returns).")
    ] = "",
    rate_limit: Annotated[
        int, typer.Option(help="Submissions per token per hour; more are answered 429.")
    ] = 60,
    private: Annotated[
        bool, typer.Option("--private", help="Require a token for reads too.")
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            help="Server processes. More than 1 needs a PostgreSQL store: SQLite takes one "
            "writer at a time."
        ),
    ] = 1,
) -> None:
    """Serve a shared leaderboard of submitted runs (JSON API, HTML pages, raw data).

    Tokens: `board token create NAME` (shown once; only its hash is kept).

    `board token list` and `board token revoke NAME` manage them.

    `--workers N` serves a PostgreSQL store from N processes; SQLite is served by one.
    """
    if action:
        _token(action, db)
        return
    _need_server()
    if port < 0 or port > 65535:
        raise InputError(f"--port {port} is not a port (0-65535)")
    if rate_limit < 1:
        raise InputError(f"--rate-limit {rate_limit}: allow at least 1 submission an hour")
    url = board_url(db)
    if workers < 1:
        raise InputError(f"--workers {workers}: serve with at least 1 process")
    from torchmark.store import is_postgres

    if workers > 1 and not is_postgres(url):
        raise InputError(
            f"--workers {workers} needs a PostgreSQL store (--db postgresql://USER@HOST/DB): "
            "SQLite takes one writer at a time, so serve it with --workers 1"
        )
    import uvicorn

    from torchmark.web.app import SERVE_SETTINGS, create_app

    # Opened here first in any case: a bad store is one clear line before uvicorn starts,
    # and the tables and ranking index exist before any worker opens the store.
    application = create_app(url, rate_limit=rate_limit, private=private, public_url=public_url)
    console.print(
        f"board store: {application.state.store.where} (its own: your results store is "
        "untouched); open http://"
        f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/ once it runs",
        soft_wrap=one_line(console),
    )
    if not _loopback(host):
        console.print(
            f"serving on {host}: reachable from other machines; put it behind HTTPS "
            "(a reverse proxy) before sending tokens over a network"
        )
    if workers == 1:
        uvicorn.run(application, host=host, port=port, log_level="info")
        return
    application.state.store.close()
    # uvicorn starts each worker process from an import string: the settings go with them
    # in the environment, where the factory reads them
    settings = {"db": url, "rate_limit": rate_limit, "private": private, "public_url": public_url}
    os.environ[SERVE_SETTINGS] = json.dumps(settings)
    uvicorn.run(
        "torchmark.web.app:from_settings",
        factory=True,
        workers=workers,
        http="torchmark.web.nodelay:NoDelayHTTP",  # see there: ~45 ms a request without
        host=host,
        port=port,
        log_level="info",
    )


def _serve(*args: Any, **kwargs: Any) -> None:
    err_console.print(
        "`torchmark serve` is now `torchmark board` (`serving` is the load test); running it",
        soft_wrap=one_line(err_console),
    )
    board(*args, **kwargs)


# the old name: board's options (its signature, through __wrapped__), one line, then board
app.command("serve", help=COMMANDS["serve"].help)(functools.wraps(board)(_serve))


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _token(action: list[str], db: str | None) -> None:
    from torchmark.store import SQLStore, open_store
    from torchmark.web.accounts import Accounts

    verb, args = (action[1] if len(action) > 1 else ""), action[2:]
    wants = {"create": 1, "revoke": 1, "list": 0}
    if action[0] != "token" or verb not in wants:
        raise InputError(f"board takes no arguments, or one of: {TOKEN_USAGE}")
    if len(args) != wants[verb]:
        form = f"torchmark board token {verb}" + " NAME" * wants[verb]
        said = "Missing argument 'NAME'" if len(args) < wants[verb] else "Too many arguments"
        hint = "; names: `torchmark board token list`" if verb == "revoke" else ""
        raise InputError(f"{said}: `{form}`{hint}")
    store = open_store(board_url(db))
    accounts = Accounts(store)  # refuses a store that is not SQL
    assert isinstance(store, SQLStore)
    if verb == "create":
        token = accounts.create_token(args[0])
        console.print(
            f"token for {args[0]}, kept (its hash only) in the board store {store.where}; "
            "shown once: give it to `torchmark submit` as --token or TORCHMARK_TOKEN",
            soft_wrap=one_line(console),
        )
        console.print(token, soft_wrap=True)
    elif verb == "revoke":
        accounts.revoke_token(args[0])
        console.print(f"token {args[0]} revoked")
    else:
        tokens = accounts.list_tokens()
        if not tokens:
            console.print("no tokens; make one with: torchmark board token create NAME")
        for t in tokens:
            state = f"revoked {t.revoked_utc[:19]}" if t.revoked_utc else "active"
            console.print(f"{t.name}  created {t.created_utc[:19]}  {state}")
