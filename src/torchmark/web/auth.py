"""Who may do what, as FastAPI dependencies: ``Writer`` (a valid token: its name) and
``Reader`` (anyone, or a token holder on a ``--private`` board)."""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Header, HTTPException, Request

from torchmark.web.state import Board

NEED_TOKEN = (
    "a valid token is needed: send 'Authorization: Bearer <token>' "
    "(made by `torchmark board token create NAME`)"
)


def board(request: Request) -> Board:
    return cast(Board, request.app.state)


def bearer(state: Board, authorization: str | None) -> str | None:
    """The name of the active token in an ``Authorization`` header, else None. The scheme
    is case-insensitive (RFC 9110 §11.1): ``bearer tm_...`` was refused."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return state.accounts.check_token(token.strip())


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


def caller(state: Board, request: Request) -> str:
    """Whom a request counts against: its token's name, else its address."""
    name = bearer(state, request.headers.get("authorization"))
    if name is not None:
        return f"token:{name}"
    return f"address:{request.client.host if request.client else '?'}"
