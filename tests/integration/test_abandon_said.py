"""The watchdog's abandon ends the test process with exit 124; the plugin tests/abandonsaid.py
makes it say so past pytest's capture (CI twice showed only a log that stopped)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

INNER = """
from types import SimpleNamespace

from boardtest import make_run
from torchmark.run.session import Session


def test_abandoned(tmp_path):
    run = make_run()
    me = SimpleNamespace(record=run, finish=lambda: None, json_path=tmp_path / "r.json")
    Session._abandon(me, "timed out: a call of x did not return within 1 s; stuck at m.py:3")
"""


def test_an_abandoned_run_is_said_in_the_log_before_the_process_ends(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    tests = Path(__file__).parents[1]
    p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "abandonsaid", "-p", "no:cacheprovider",
         str(tmp_path / "test_inner.py"), "--rootdir", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(tests)},
    )  # fmt: skip
    assert p.returncode == 124, p.stdout + p.stderr
    assert "test_inner.py::test_abandoned (call): the watchdog abandons the run: timed out" in (
        p.stderr
    ), p.stderr
    assert "Current thread" in p.stderr or "Thread 0x" in p.stderr  # every thread's stack
