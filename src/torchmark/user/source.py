"""The user's own source files, and error lines that name them.

``spec`` runs a ``file.py:factory`` under a generated module name (two files called
``model.py`` must not collide); that name means nothing to the user, so an error line says
the file's own name instead, with the line of the user's code the error came through:
``ValueError: hidden size must be even, got 7 (at models/broken.py:8)``.
"""

from __future__ import annotations

import os
import traceback
from pathlib import Path

GENERATED_PREFIX = "torchmark_user_"

_files: dict[str, str] = {}  # resolved path of a user file -> the name to show
_generated: dict[str, str] = {}  # generated module name -> what to say instead (file stem)
_paths: dict[str, str] = {}  # generated module name -> the file as shown


def register(path: str | os.PathLike[str], module_name: str | None = None) -> None:
    """Remember ``path`` as the user's code; ``module_name`` is the generated name it runs
    under, if any."""
    p = Path(path)
    _files[_key(p)] = _shown(p)
    if module_name is not None:
        _generated[module_name] = p.stem
        _paths[module_name] = _shown(p)


def module_label(module_name: str) -> str:
    """What to call a module in an error: the user's file for a generated name."""
    return _paths.get(module_name, module_name)


def user_text(text: str) -> str:
    """``text`` with every generated module name replaced by the user's file name."""
    for name, stem in _generated.items():
        text = text.replace(name, stem)
    return text


def location(e: BaseException) -> str:
    """``" (at file.py:LINE)"``: the deepest line of the user's code the error went through,
    or "" when none did (an error raised by torchmark itself)."""
    if isinstance(e, SyntaxError) and e.filename and _key(Path(e.filename)) in _files:
        return f" (at {_files[_key(Path(e.filename))]}:{e.lineno})"
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        shown = _files.get(_key(Path(frame.filename)))
        if shown is not None:
            return f" (at {shown}:{frame.lineno})"
    return ""


def one_line(e: BaseException) -> str:
    """``Type: first line of the message (at file.py:LINE)``: user code errors can run to
    pages, and must never show a generated module name."""
    msg = (e.msg if isinstance(e, SyntaxError) and e.msg else str(e)).strip().splitlines()
    text = f"{type(e).__name__}: {msg[0]}" if msg else type(e).__name__
    return user_text(text) + location(e)


def _key(p: Path) -> str:
    try:
        return str(p.resolve())
    except OSError:
        return str(p)


def _shown(p: Path) -> str:
    """The path as the user wrote it when relative; else relative to the working directory
    when it lies under it."""
    if not p.is_absolute():
        return str(p)
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)
