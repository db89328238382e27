"""A pytest plugin (tests/conftest.py loads it): a run the watchdog abandons ends the process
with exit 124 (``Session._abandon``), and pytest's report and the captured error line end
with it; CI then showed a log that simply stopped. Here the line, and every thread's stack,
go to the real stderr first: the copy pytest's faulthandler writes its own dumps to."""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True, scope="session")
def _abandon_said_past_the_capture(pytestconfig: pytest.Config) -> Iterator[None]:
    try:
        from _pytest.faulthandler import fault_handler_stderr_fd_key

        fd = pytestconfig.stash[fault_handler_stderr_fd_key]
    except (ImportError, KeyError):  # another pytest: the run still ends, unexplained
        yield
        return
    from torchmark.run.session import Session

    original = Session._abandon

    def said(self: Any, reason: str) -> None:
        with_test = os.environ.get("PYTEST_CURRENT_TEST", "?")
        os.write(fd, f"\n{with_test}: the watchdog abandons the run: {reason}\n".encode())
        faulthandler.dump_traceback(file=fd, all_threads=True)
        original(self, reason)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Session, "_abandon", said)
        yield
