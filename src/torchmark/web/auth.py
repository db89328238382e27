"""Who may do what, as FastAPI dependencies: ``Writer`` (a valid token: its name) and
``Reader`` (anyone, or a token holder on a ``--private`` board)."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Header, HTTPException, Request

from torchmark.web.state import Board

NEED_TOKEN = (
    "a valid token is needed: send 'Authorization: Bearer <token>' "
    "(made by `torchmark serve token create NAME`)"
)


def board(request: Request) -> Board:
    return cast(Board, request.app.state)


def bearer(state: Board, authorization: str | None) -> str | None:
    """The name of the active token in an ``Authorization`` header, else None."""
    if not authorization or not authorization.startswith("Bearer "):
        return None
    return state.accounts.check_token(authorization.removeprefix("Bearer ").strip())


def writer(
    state: Annotated[Board, Depends(board)],
    authorization: Annotated[str | None, Header()] = None,
) -> str:
    name = bearer(state, authorization)
    if name is None:
        raise HTTPException(401, NEED_TOKEN, headers={"WWW-Authenticate": "Bearer"})
    return name


def reader(
    state: Annotated[Board, Depends(board)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    if state.private:
        writer(state, authorization)


BoardDep = Annotated[Board, Depends(board)]
Writer = Annotated[str, Depends(writer)]
Reader = Depends(reader)
