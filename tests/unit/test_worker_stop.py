"""A DataLoader worker stopped with its run (`stop_quietly`): what it prints on the way out.
Each case runs in its own interpreter (the hook and the signals are process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

# A real resource sharer (the thread that hands a batch's shared-memory handle to the main
# process), and a peer that leaves mid-handshake, as a main process stopped by SIGTERM does.
# The script waits until the sharer's thread has handed its error to the hook (whichever is
# installed), not for a fixed time: on a loaded 2-core CI machine 0.5 s was not always
# enough for that thread to run, and the unhooked case then saw no traceback.
SHARER_HANGUP = """
    import os, socket, sys, threading
    from multiprocessing import resource_sharer
    hook, handed = sys.excepthook, threading.Event()
    def passed_on(*exc_info):
        hook(*exc_info)
        handed.set()
    sys.excepthook = passed_on
    r, w = os.pipe()
    resource_sharer.DupFd(r)
    s = socket.socket(socket.AF_UNIX)
    s.connect(resource_sharer._resource_sharer._address)
    s.close()
    assert handed.wait(60), "the sharer's thread never reported the hangup"
"""
OTHER_ERROR = """
    import sys
    try:
        raise ValueError("corrupt image 5")
    except ValueError:
        sys.excepthook(*sys.exc_info())
"""


def stderr_of(body: str, hooked: bool) -> str:
    head = "from torchmark.workloads.pipeline.feed import stop_quietly\nstop_quietly(0)\n"
    code = (head if hooked else "") + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_the_sharer_hangup_prints_a_traceback_unhooked() -> None:
    """The reproduction itself: without the hook, the sharer's thread prints the hangup."""
    err = stderr_of(SHARER_HANGUP, hooked=False)
    assert "resource_sharer.py" in err and "Traceback" in err, err


def test_a_stopped_worker_keeps_the_sharer_hangup_quiet() -> None:
    """CI saw it under the run's "interrupted by SIGTERM" line (threading.excepthook missed
    it: the sharer's thread catches its error and hands it to sys.excepthook)."""
    assert stderr_of(SHARER_HANGUP, hooked=True) == ""


@pytest.mark.parametrize("hooked", [False, True])
def test_any_other_error_is_still_printed(hooked: bool) -> None:
    err = stderr_of(OTHER_ERROR, hooked)
    assert "ValueError: corrupt image 5" in err and "Traceback" in err, err
