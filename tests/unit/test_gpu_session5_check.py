"""benchmarks/gpu_session5_check.py: what it reads from a GPU session's returned files."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gpu_session5_check", ROOT / "benchmarks" / "gpu_session5_check.py"
    )
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


check = _load()

LOG = """\
100.0\t=== standard suite: starting (--suite standard -d cuda), for at most 480 s
104.0\tPlanned 5 cases on cuda:0 (2 workloads: add, simplenet)
104.1\tmeasuring ceilings on cuda:0
120.0\t[1/5] add/fp32 n=65536 on cuda:0: 1.2 TB/s ±1 %
121.5\t[2/5] add/fp32 n=262k on cuda:0: 2.0 TB/s ±1 %
125.5\t[3/5] simplenet/infer fp32 b=1 on cuda:0: 9,000 samples/s ±2 %
126.0\t  a table line that is not a case
131.5\t[4/5] simplenet/train fp32 b=1 on cuda:0: 3,000 samples/s ±2 %
140.0\texit 124 (124: stopped by the time bound; the run is stored incomplete)
"""


def test_parts_timed_from_the_stamped_log(tmp_path: Path) -> None:
    log = tmp_path / "standard.log"
    log.write_text(LOG)
    parts, said = check.measured_parts(log, lambda w: "models" if w == "simplenet" else "micro")
    assert parts[check.START] == [pytest.approx(4.0)]
    # the first case after the ceilings carries them; its count stays in its part
    assert parts[check.CEILINGS] == [pytest.approx(16.0)]
    assert parts["micro"] == [0.0, pytest.approx(1.5)]
    assert parts["models"] == [pytest.approx(4.0), pytest.approx(6.0)]
    assert parts[check.END] == [pytest.approx(8.5)]  # the fifth case, cut, and the rest
    assert sum(map(sum, parts.values())) == pytest.approx(40.0)  # the whole run, once
    assert said[0].startswith("standard suite: starting") and said[1].startswith("Planned 5")


def test_a_resumed_part_starts_its_own_clock(tmp_path: Path) -> None:
    log = tmp_path / "standard.log"
    log.write_text(
        LOG + "500.0\t=== standard suite: resuming run X for at most 480 s\n"
        "503.0\tPlanned 1 case on cuda:0 (1 workload: simplenet)\n"
        "509.0\t[5/5] simplenet/infer fp32 b=8 on cuda:0: 20,000 samples/s ±2 %\n"
        "510.0\texit 0 (124: stopped by the time bound; the run is stored incomplete)\n"
    )
    parts, _ = check.measured_parts(log, lambda w: w)
    assert parts["simplenet"][-1] == pytest.approx(6.0)  # not 509 - 140
    assert sum(map(sum, parts.values())) == pytest.approx(40.0 + 10.0)


def test_payload_of_either_schema() -> None:
    tune = {"candidates": [], "recommendation": {"cuda:0": {"name": "cuda-graphs"}}}
    assert check.payload({"schema_version": 1, "extra": tune}, "tune") is tune
    assert (
        check.payload({"schema_version": 2, "payload": {"kind": "tune", **tune}}, "tune")[
            "recommendation"
        ]
        == tune["recommendation"]
    )
    serving = {"verdict": "at 1,000 req/s within 50 ms: cuda x 1"}
    assert check.payload({"extra": {"serving": serving}}, "serving") is serving
    assert check.payload({"payload": {"kind": "serving", **serving}}, "serving")["verdict"]


def test_a_wrong_baseline_is_said_to_fail(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    doc = {
        "run_id": "r",
        "kind": "tune",
        "status": "complete",
        "schema_version": 1,
        "extra": {
            "candidates": [
                {
                    "device": "cuda:0",
                    "name": "baseline (fp32, no_grad)",
                    "stage": "baseline",
                    "status": "rejected",
                    "reason": "max error 0.000149 > tolerance 0.0001",
                }
            ],
            "recommendation": {"cuda:0": {"name": "no recommendation", "reason": "no baseline"}},
        },
    }
    f = tmp_path / "tune.json"
    f.write_text(json.dumps(doc))
    check.tune(f)
    out = capsys.readouterr().out
    assert "cuda:0: FAIL: the fp32 baseline is rejected: max error 0.000149" in out
    assert "not WRONG" not in out
