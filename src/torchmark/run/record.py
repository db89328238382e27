"""How every run begins: ``open_run`` builds its self-describing record (tool version,
command, UTC time, environment, machine fingerprint, the kind's config) and its Session.

    session = open_run("soak", SoakConfig(...), [device], store, events)
    with session:                       # begin: the header stored, signals now stop it
        ...                             # the kind's loop: run_planned, or its own
    session.record                      # judged and finished, complete or not

A kind's config is a frozen dataclass; the record keeps its ``as_dict()``.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from torchmark import __version__
from torchmark.devices import Device
from torchmark.results import RunRecord
from torchmark.run import environment
from torchmark.run.session import Session

if TYPE_CHECKING:
    from torchmark.judge.validity import Level
    from torchmark.run.session import Events
    from torchmark.store.base import ResultStore

__all__ = ["KindConfig", "command_line", "new_record", "open_run"]


class KindConfig(Protocol):
    """A kind's options: frozen data whose ``as_dict()`` the run's record stores."""

    def as_dict(self) -> dict[str, Any]: ...


def open_run(
    kind: str,
    config: KindConfig,
    devices: Sequence[Device],
    store: ResultStore | None,
    events: Events | None = None,
    *,
    json_path: Path | None = None,
    analyse: Callable[[RunRecord], None] | None = None,
    reasons: Callable[[RunRecord], list[tuple[Level, str]]] | None = None,
    session: Callable[..., Session] = Session,
    **options: Any,
) -> Session:
    """A new run of ``kind``: its record and the Session that will store it (entered by
    the caller). ``analyse``, ``reasons``, ``json_path`` and ``options`` (``host_clock``)
    are the Session's; ``session``: its class or a factory taking the same arguments (a
    distributed rank's ``RankSession``)."""
    record = new_record(kind, config.as_dict(), list(devices))
    return session(
        record, store, events, json_path=json_path, analyse=analyse, reasons=reasons, **options
    )


def command_line(argv: list[str]) -> str:
    """The command as the user would type it: ``python -m torchmark`` and the installed
    script both read ``torchmark ...`` (argv[0] is then a path to __main__.py or the script)."""
    name = os.path.basename(argv[0]) if argv else ""
    if name in ("__main__.py", "torchmark", "torchmark.exe"):
        argv = ["torchmark", *argv[1:]]
    return shlex.join(argv)


def new_record(
    kind: str, config: dict[str, Any], devices: list[Device], **fields: Any
) -> RunRecord:
    """A self-describing run: tool version, command, UTC time, environment, fingerprint."""
    env = environment.collect(devices)
    return RunRecord(
        tool_version=__version__,
        kind=kind,
        command=command_line(sys.argv),
        config=config,
        environment=env,
        fingerprint=environment.machine_fingerprint(env),
        **fields,
    )
