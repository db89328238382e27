"""A forward that holds the GIL is still bounded: the user's calls run in a child process
(run/isolation.py), which the parent kills at the bound, storing how long the call ran."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from torchmark.run import isolation
from torchmark.run.watchdog import CallTimedOut

# A fresh interpreter: the OpenMP pool of this test process is started, so no child forked
# from it could run a parallel op (isolation.refusal says so, and `model` measures in-process).
DRIVER = """
import json, re, sys
import torch
from torchmark.run import watchdog
from torchmark.kinds.model.kind import benchmark_model

watchdog.MIN_CALL_BOUND_S = 0.0  # the bound: 2x the "test" rule's 0.5 s time-out

class HoldsTheGIL(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[0] >= 2:  # catastrophic backtracking in C, the GIL held for hours
            re.match(r"(a+)+$", "a" * 40 + "b")
        return self.lin(x)

torch.set_num_threads(2)
rec = benchmark_model(HoldsTheGIL(), torch.randn(1, 4), devices="cpu", batches=[1, 2, 4],
                      rule="test", ceilings=False, telemetry=False, measure_energy=False)
print(json.dumps([[r.params["batch"], r.status, r.flags, r.reason] for r in rec.results]))
"""


def test_a_forward_holding_the_gil_ends_its_case_as_timed_out_with_its_real_time() -> None:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout.strip().splitlines()[-1])
    assert [(b, s) for b, s, _, _ in rows] == [(1, "ok"), (2, "skipped"), (4, "skipped")]
    for _, _, flags, reason in rows[1:]:
        assert "call_timed_out" in flags
        # the check's bound (3x the call's 1 s), then how long the call had really run
        assert reason.startswith("timed out: the correctness check of ")
        assert "did not return within 3 s" in reason
        ran = float(reason.rsplit("stopped after ", 1)[1].split(" s")[0])
        assert 3 <= ran < took
    assert took < 240  # each hang ended at its bound, not after hours


@pytest.mark.usefixtures("one_thread")  # one thread: a fork is safe whatever ran before
def test_a_worker_keeps_state_and_a_timed_out_one_is_replaced() -> None:
    assert isolation.refusal([]) is None
    calls: list[int] = []

    def serve(request: object, dog: isolation.Watchdog) -> object:
        calls.append(1)
        if request == "hang":
            with dog.armed(0.3, "a hanging call"):
                time.sleep(60)
        if request == "boom":
            raise ValueError("boom")
        return len(calls)  # the child's own count: state kept between requests

    w = isolation.Worker(serve)
    try:
        assert [w.ask("x"), w.ask("x")] == [1, 2] and w.forks == 1
        with pytest.raises(ValueError, match="boom"):
            w.ask("boom")
        t0 = time.monotonic()
        with pytest.raises(CallTimedOut, match=r"a hanging call did not return within 0\.3 s"):
            w.ask("hang")
        assert time.monotonic() - t0 < 30
        assert w.ask("x") == 1 and w.forks == 2  # a fresh child, its state started over
        assert calls == []  # nothing ran in this process
    finally:
        w.close()


@pytest.mark.usefixtures("one_thread")
def test_a_child_silent_outside_the_calls_is_killed_naming_where_it_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outside an armed call the parent waited on its child for ever: a child stuck in
    torchmark's own code (a lock another thread held at the fork) hung the command."""
    monkeypatch.setattr(isolation, "SILENT_S", 0.5)

    def stuck_in_bookkeeping(request: object, dog: isolation.Watchdog) -> object:
        # another thread alive beside it (the telemetry sampler's, in a real child): the
        # place named is the main thread's, not the newest thread's
        threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
        time.sleep(60)  # no heartbeat, not armed
        return None

    w = isolation.Worker(stuck_in_bookkeeping)
    try:
        t0 = time.monotonic()
        with pytest.raises(isolation.ChildDied) as e:
            w.ask("x")
        assert time.monotonic() - t0 < 30
    finally:
        w.close()
    said = str(e.value)
    assert "sent nothing for 0.5 s outside the model's calls" in said
    assert "(making inputs, placing the model, torchmark's own work) at test_isolation.py:" in (
        said
    ), said
    assert said.endswith(": it was killed") and "\n" not in said
    assert said.split(" at ", 1)[1].startswith("test_isolation.py:"), said  # innermost first
    assert "in stuck_in_bookkeeping" in said and "threading.py" not in said
