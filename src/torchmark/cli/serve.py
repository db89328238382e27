"""``torchmark serve``: the shared leaderboard server, and its tokens."""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

from torchmark.cli.app import DbOption, app, console, db_url
from torchmark.errors import InputError

TOKEN_USAGE = "token create NAME | token list | token revoke NAME"


def _need_server() -> None:
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        raise InputError(f"the server needs {e.name}: pip install 'torchmark[server]'") from None


@app.command()
def serve(
    action: Annotated[
        list[str] | None,
        typer.Argument(
            help=f"Manage tokens instead of serving: {TOKEN_USAGE}.", show_default=False
        ),
    ] = None,
    db: DbOption = None,
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
) -> None:
    """Serve a shared leaderboard of submitted runs (JSON API, HTML pages, raw data).

    Tokens: `serve token create NAME` (shown once; only its hash is kept).

    `serve token list` and `serve token revoke NAME` manage them.
    """
    if action:
        _token(action, db)
        return
    _need_server()
    if port < 0 or port > 65535:
        raise InputError(f"--port {port} is not a port (0-65535)")
    if rate_limit < 1:
        raise InputError(f"--rate-limit {rate_limit}: allow at least 1 submission an hour")
    import uvicorn

    from torchmark.web.app import create_app

    application = create_app(
        db_url(db), rate_limit=rate_limit, private=private, public_url=public_url
    )
    if not _loopback(host):
        console.print(
            f"serving on {host}: reachable from other machines; put it behind HTTPS "
            "(a reverse proxy) before sending tokens over a network"
        )
    uvicorn.run(application, host=host, port=port, log_level="info")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _token(action: list[str], db: str | None) -> None:
    from torchmark.store import open_store
    from torchmark.web.accounts import Accounts

    verb, args = (action[1] if len(action) > 1 else ""), action[2:]
    wants = {"create": 1, "revoke": 1, "list": 0}
    if action[0] != "token" or verb not in wants or len(args) != wants[verb]:
        raise InputError(f"serve takes no arguments, or one of: {TOKEN_USAGE}")
    accounts = Accounts(open_store(db_url(db)))
    if verb == "create":
        token = accounts.create_token(args[0])
        console.print(f"token for {args[0]} (shown once; only its hash is stored):")
        console.print(token)
    elif verb == "revoke":
        accounts.revoke_token(args[0])
        console.print(f"token {args[0]} revoked")
    else:
        tokens = accounts.list_tokens()
        if not tokens:
            console.print("no tokens; make one with: torchmark serve token create NAME")
        for t in tokens:
            state = f"revoked {t.revoked_utc[:19]}" if t.revoked_utc else "active"
            console.print(f"{t.name}  created {t.created_utc[:19]}  {state}")
