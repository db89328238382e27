"""What a shared run document must not carry: who ran it and on which host.

Used twice: by ``torchmark submit`` before anything leaves the machine (``--dry-run`` shows
the result), and again by the server, which never trusts the client. Kept: CPU/GPU model,
core counts, memory sizes, driver and library versions, the measurements themselves.
"""

from __future__ import annotations

import re
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
# The documented allow-list of environment variables sent: those that change what PyTorch
# does, the same list every run records.
ENV_ALLOW = frozenset(RELEVANT_ENV)
# /home/alice/x -> ~/x; /Users/alice, C:\Users\alice, /root likewise.
_HOME = re.compile(r"(?:/home/|/Users/|[A-Za-z]:\\Users\\)[^/\\\s'\"]+|/root(?=[/\s'\"]|$)")


def _scrub_text(text: str, words: tuple[str, ...]) -> str:
    text = _HOME.sub("~", text)
    for w in words:
        if len(w) >= 3:  # a 1-2 letter user name would eat unrelated text
            text = re.sub(rf"\b{re.escape(w)}\b", "<redacted>", text)
    return text


def strip_document(
    doc: dict[str, Any], words: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[str]]:
    """A copy of the run document ``doc`` without host and user identifiers, and the list of
    what was removed (``environment.host``, ``environment.env_vars.HOME``...).

    ``words``: further strings to blank out of every text (the client passes its own host
    and user name: they may appear inside a command line or a path)."""
    removed: list[str] = []

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                where = f"{path}.{k}" if path else str(k)
                low = str(k).lower()
                if low in DROPPED_KEYS or "uuid" in low or "serial" in low:
                    removed.append(where)
                    continue
                if path == "" and k in DROPPED_TOP:
                    removed.append(where)
                    continue
                if path == "environment" and k == "env_vars" and isinstance(v, dict):
                    kept = {}
                    for name, val in v.items():
                        if name in ENV_ALLOW:
                            kept[name] = walk(val, f"{where}.{name}")
                        else:
                            removed.append(f"{where}.{name}")
                    out[k] = kept
                    continue
                out[k] = walk(v, where)
            return out
        if isinstance(value, list):
            return [walk(v, path) for v in value]
        if isinstance(value, str):
            new = _scrub_text(value, words)
            if new != value and path not in removed:
                removed.append(f"{path} (home path or name replaced)")
            return new
        return value

    return walk(doc, ""), list(dict.fromkeys(removed))
