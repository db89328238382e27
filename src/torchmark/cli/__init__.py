"""Command-line interface: thin commands (parse -> config -> library call -> render).

Each module below adds its commands to ``app``; ``load_commands`` imports them all.
"""

from __future__ import annotations

import importlib

from torchmark.cli.app import app, main

__all__ = ["app", "main"]

COMMAND_MODULES = ("run", "history", "doctor", "report", "model")


def load_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"torchmark.cli.{name}")
