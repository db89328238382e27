"""The CLI run in-process, as the tests of every command call it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from torchmark.cli import main


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``torchmark ARGS``: (exit code, stdout, stderr) of this call alone."""
    capsys.readouterr()
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def spawn(args: list[str], env: dict[str, str], cwd: Path, **kw: Any) -> subprocess.Popen[str]:
    """`python -m torchmark ARGS` in its own process, its output piped as text (for tests
    that signal or watch a real run)."""
    return subprocess.Popen(
        [sys.executable, "-m", "torchmark", *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )
