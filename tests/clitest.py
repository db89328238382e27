"""The CLI run in-process, as the tests of every command call it."""

from __future__ import annotations

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
