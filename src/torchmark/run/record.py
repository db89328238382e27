"""A run's record as it begins: self-describing (tool version, command, UTC time,
environment, machine fingerprint)."""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any

from torchmark import __version__
from torchmark.devices import Device
from torchmark.results import RunRecord
from torchmark.run import environment

__all__ = ["command_line", "new_record"]


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
