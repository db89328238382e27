"""A run's payload is validated by its own kind's class: reading a run builds that class's
validator and no other kind's, errors name the payload's field, and a strict parse (the
leaderboard's) reaches the payload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from torchmark.results import RunRecord
from torchmark.results.payloads import TunePayload

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"

READ_ONE = """
import json, sys
from torchmark.results import RunRecord
from torchmark.results.payloads import PAYLOADS
run = RunRecord.model_validate_json(open(sys.argv[1]).read())
print(json.dumps({k: c.__pydantic_complete__ for k, c in PAYLOADS.items()}))
"""


@pytest.mark.parametrize(("file", "kind"), [("cpu-only.json", "run"), ("tune-cpu.json", "tune")])
def test_reading_a_run_builds_its_own_kinds_validator_only(file: str, kind: str) -> None:
    p = subprocess.run(
        [sys.executable, "-c", READ_ONE, str(RUNS / file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    built = json.loads(p.stdout)
    assert built[kind] and not any(v for k, v in built.items() if k != kind), built


def _tune_doc() -> dict:
    """A real tune run as schema 2 writes it."""
    run = RunRecord.model_validate_json((RUNS / "tune-cpu.json").read_text())
    return json.loads(run.model_dump_json())


def test_a_payloads_error_names_its_field_under_payload() -> None:
    doc = _tune_doc()
    doc["payload"]["candidates"][0]["speedup"] = "fast"
    with pytest.raises(ValidationError) as e:
        RunRecord.model_validate(doc)
    (err,) = e.value.errors()
    assert err["loc"] == ("payload", "candidates", 0, "speedup"), err


@pytest.mark.parametrize("payload", [5, {"kind": "training"}, {"notes": []}])
def test_a_payload_that_names_no_kind_this_torchmark_knows_is_refused(payload: object) -> None:
    with pytest.raises(ValidationError, match="a payload is an object whose kind is one of run"):
        RunRecord(kind="tune", payload=payload)  # type: ignore[arg-type]


def test_a_payload_given_as_an_object_or_a_dict_is_of_its_kind() -> None:
    as_object = RunRecord(kind="tune", payload=TunePayload(notes=["a"]))
    as_dict = RunRecord(kind="tune", payload={"kind": "tune", "notes": ["a"]})  # type: ignore[arg-type]
    assert isinstance(as_dict.payload, TunePayload) and as_dict.payload == as_object.payload
    dumped = json.loads(as_dict.model_dump_json())["payload"]
    assert dumped["candidates"] == [] and dumped["notes"] == ["a"]  # the kind's own fields


def test_a_strict_parse_reaches_the_payload() -> None:
    doc = _tune_doc()
    doc["payload"]["candidates"][0]["speedup"] = "1.5"  # a number as text: lax takes it
    text = json.dumps(doc)
    assert RunRecord.model_validate_json(text).payload.candidates[0].speedup == 1.5  # type: ignore[attr-defined]
    with pytest.raises(ValidationError) as e:
        RunRecord.model_validate_json(text, strict=True)
    locs = [err["loc"] for err in e.value.errors()]
    assert ("payload", "candidates", 0, "speedup") in locs, locs
