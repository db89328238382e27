"""What a shared run document must not carry: who ran it and on which host.

Used twice: by ``torchmark submit`` before anything leaves the machine (``--dry-run`` shows
the result), and again by the server, which never trusts the client. Kept: CPU/GPU model,
core counts, memory sizes, driver and library versions, the measurements themselves.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from torchmark.envvars import RELEVANT_ENV

# Keys dropped wherever they occur in the document (device records, extra, config).
DROPPED_KEYS = frozenset(
    {
        "host",
        "hostname",
        "node",
        "user",
        "username",
        "login",
        "home",
        "pid",
        "writer",
        "uuid",
        "serial",
        "serial_number",
        "python_executable",
        "mac",
        "ip",
    }
)
# The run's fingerprint digests the host name: a stable id of the host, so it goes too (the
# server pools by its own hardware+software fingerprint, which leaves the host out).
DROPPED_TOP = ("fingerprint",)
_TOP = {("", name) for name in DROPPED_TOP}
# The documented allow-list of environment variables sent: those that change what PyTorch
# does, the same list every run records.
ENV_ALLOW = frozenset(RELEVANT_ENV)
# /home/alice/x -> ~/x; /Users/alice, C:\Users\alice, /root likewise.
_HOME = re.compile(r"(?:/home/|/Users/|[A-Za-z]:\\Users\\)[^/\\\s'\"]+|/root(?=[/\s'\"]|$)")


# A URL, with whatever credentials it carries (`postgresql://tm:S3cret@host/db`).
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]*")
# Where a 1-2 letter host or user name is a name and not a word: beside a path or host
# separator (`/scratch/jd/x`, `jd@vm`, `vm:8000`). As a plain word it is left alone: a
# user named `a` must not blank every "a" of a note.
_HARD = "/\\@:"


def _short(text: str, w: str) -> str:
    pattern = rf"(?<![^\s{re.escape(_HARD)}'\"=]){re.escape(w)}(?![^\s{re.escape(_HARD)}'\"])"

    def named(m: re.Match[str]) -> str:
        before = text[m.start() - 1] if m.start() else ""
        after = text[m.end()] if m.end() < len(text) else ""
        hard = any(c and c in _HARD for c in (before, after))
        return "<redacted>" if hard or text == w else w

    return re.sub(pattern, named, text)


def _scrub_text(text: str, words: tuple[str, ...]) -> str:
    text = _HOME.sub("~", text)
    for w in words:
        if len(w) >= 3:
            text = re.sub(rf"\b{re.escape(w)}\b", "<redacted>", text)
        elif w:
            text = _short(text, w)
    return text


# What a hook returns for an object member that is to go.
_DROP = object()


def _walk(
    doc: Any,
    member: Callable[[Any, str, str, Any], Any],
    text: Callable[[str, str], str] | None = None,
    only: Mapping[tuple[str, str], Collection[str]] | None = None,
    removed: list[str] | None = None,
) -> Any:
    """A copy of the JSON tree ``doc``: ``member(key, where, path, v)`` returns each object
    member's new value or ``_DROP``; the object at ``only``'s (path, key) keeps only the
    members it allows (the others' paths go to ``removed``); ``text(path, s)`` makes each
    string's new value."""

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                where = f"{path}.{k}" if path else str(k)
                v = member(k, where, path, v)
                if v is _DROP:
                    continue
                allowed = (only or {}).get((path, k))
                if allowed is not None and isinstance(v, dict):
                    assert removed is not None
                    removed.extend(f"{where}.{name}" for name in v if name not in allowed)
                    v = {name: x for name, x in v.items() if name in allowed}
                out[k] = walk(v, where)
            return out
        if isinstance(value, list):
            return [walk(v, path) for v in value]
        if isinstance(value, str) and text is not None:
            return text(path, value)
        return value

    return walk(doc, "")


def strip_document(
    doc: dict[str, Any], words: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[str]]:
    """A copy of the run document ``doc`` without host and user identifiers, and the list of
    what was removed (``environment.host``, ``environment.env_vars.HOME``...).

    ``words``: further strings to blank out of every text (the client passes its own host
    and user name: they may appear inside a command line or a path)."""
    removed: list[str] = []

    def member(k: Any, where: str, path: str, v: Any) -> Any:
        low = str(k).lower()
        if low in DROPPED_KEYS or "uuid" in low or "serial" in low or (path, k) in _TOP:
            removed.append(where)
            return _DROP
        return v

    def text(path: str, value: str) -> str:
        new = _scrub_text(value, words)
        if new != value and path not in removed:
            removed.append(f"{path} (home path or name replaced)")
        return new

    # (no allowed variable's name is a dropped key: the kept ones pass `member` unchanged)
    only = {("environment", "env_vars"): ENV_ALLOW}
    return _walk(doc, member, text, only, removed), list(dict.fromkeys(removed))


# Of a run's config, what a shared document keeps: the options that define its cases (as
# data: the board classes a run by them, see ranking.STANDARD_CONFIG). The rest (the data
# set folder, a model's source path, where the run was written) stays on the machine.
CASE_OPTIONS = (
    "devices",
    "workloads",
    "suite",
    "scenarios",
    "precisions",
    "batches",
    "sizes",
    "threads",
    "timing",
    "rule",
    "extra",
)
# Keys that hold a command line wherever they occur (a resumed run keeps the one it resumed).
COMMAND_KEYS = frozenset({"command", "argv"})


def shareable(doc: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``doc`` (already through ``strip_document``) as it may be published: no command line
    (as typed it can carry a password: ``--db postgresql://tm:S3cret@host/db``), of the
    config only ``CASE_OPTIONS``, and no URL in any text. Returns it and what was removed."""
    removed: list[str] = []

    def member(k: Any, where: str, path: str, v: Any) -> Any:
        if str(k).lower() not in COMMAND_KEYS:
            return v
        if v:
            removed.append(where)
        return _DROP

    urls: list[str] = []  # listed after the rest of what was removed

    def no_url(path: str, value: str) -> str:
        if not _URL.search(value):
            return value
        urls.append(f"{path} (URL replaced)")
        return _URL.sub("<url>", value)

    # one walk: the texts of the members kept, as a second walk over the cut tree saw them
    out = _walk(doc, member, no_url, only={("", "config"): CASE_OPTIONS}, removed=removed)
    return out, list(dict.fromkeys(r.lstrip(".") for r in removed + urls))


def prepare(doc: dict[str, Any], words: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[str]]:
    """Both steps: what ``torchmark submit`` sends and what the server keeps of a submission."""
    stripped, removed = strip_document(doc, words)
    shared, more = shareable(stripped)
    return shared, list(dict.fromkeys(removed + more))
