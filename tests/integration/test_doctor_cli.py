"""A real `torchmark doctor --json` on this machine: valid JSON, exit code matches the facts."""

from __future__ import annotations

import json

import pytest

from torchmark.cli import main


def test_doctor_json_on_this_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code = 0
    try:
        main(["doctor", "--json"])
    except SystemExit as e:  # raised only when a check fails
        code = int(e.code or 0)
    out = json.loads(capsys.readouterr().out)
    statuses = {c["name"]: c["status"] for c in out["checks"]}
    assert set(statuses.values()) <= {"ok", "warn", "fail", "skip"}
    assert code == (1 if "fail" in statuses.values() else 0)
    assert out["ok"] is (code == 0)
    for name in ("torch build", "devices", "tiny op on cpu", "threads", "host memory"):
        assert name in statuses
    assert statuses["tiny op on cpu"] == "ok"
    assert all(c["fix"] for c in out["checks"] if c["status"] == "fail")
