"""docs/ARCHITECTURE.md's worked example of a new kind of run is real code: run here as the
doc shows it, on the CPU at a tiny size (the ceilings faked: measuring them takes seconds)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from torchmark.devices import Device
from torchmark.results import Ceiling
from torchmark.testing import MemoryStore

DOC = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"


def example(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """The first Python block under "A new kind of run", as a module (registered while the
    test runs: a dataclass looks its module up)."""
    section = DOC.read_text(encoding="utf-8").split("## A new kind of run", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    module = types.ModuleType("kinds_op_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code.group(1), str(DOC), "exec"), module.__dict__)
    return module


def test_the_example_kind_runs_through_the_one_run_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark import ceilings

    def fake_measure(device: Device, *, quick: bool) -> list[Ceiling]:
        bw = Ceiling(device=device.name, key="bandwidth", value=1e13, unit="B/s", method="fake")
        return [bw]

    monkeypatch.setattr(ceilings, "measure", fake_measure)
    kind = example(monkeypatch)
    store = MemoryStore()
    record = kind.op(kind.OpConfig(n=4096, devices=("cpu",)), store)
    assert record.kind == "run" and record.status == "complete"
    assert record.config == {"op": "relu", "n": 4096, "devices": ("cpu",)}
    (r,) = record.results
    assert r.ok and r.workload == "op" and r.variant == "relu" and r.params == {"n": 4096}
    assert r.ceiling is not None and r.ceiling.key == "bandwidth"
    assert r.work is not None and r.work.bytes == 8 * 4096
    assert store.runs[str(record.run_id)].results == record.results  # stored as it landed
