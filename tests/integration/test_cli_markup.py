"""Text from users, models and stores reaches the terminal as written: rich markup in it
("[/layer]", "[bold red]pwn[/]") neither crashes the CLI nor changes what is printed, and
an emoji code (":cd:" in a path) stays as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clitest import cli
from torchmark.errors import InputError
from torchmark.results import RunRecord
from torchmark.store.exchange import export_run

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
PWN = "[bold red]pwn[/] in /data/:cd:/x"
# A run id may not contain "/" (ids and file paths are never ambiguous): markup without one.
PWN_ID = "[bold red]pwn[red]"


def test_the_error_line_prints_markup_as_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.cli import history as history_mod

    def boom(db: str | None) -> None:
        raise InputError("model failed in [/layer] block " + PWN)

    monkeypatch.setattr(history_mod, "read_store", boom)
    code, _, err = cli(capsys, "history")
    assert code == 2, err
    assert err.strip() == "error: model failed in [/layer] block " + PWN


def test_an_imported_run_id_with_markup_is_echoed_as_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    record = RunRecord.model_validate_json((RUNS / "cpu-only.json").read_text())
    doc = json.loads(export_run(record, "json"))
    doc["run_id"] = PWN_ID
    exported = tmp_path / "run.json"
    exported.write_text(json.dumps(doc))
    db = f"sqlite:///{tmp_path / 'x[/x].db'}"  # a path with markup: no crash either
    code, out, err = cli(capsys, "import", str(exported), "--db", db)
    assert code == 0, err
    assert out.strip() == PWN_ID
    code, out, err = cli(capsys, "history", "--db", db)
    assert code == 0, err
    assert PWN_ID in out and "x[/x].db" in out
    code, out, err = cli(capsys, "history", "--db", db, "--json")
    assert code == 0 and json.loads(out)[0]["id"] == PWN_ID


def test_an_empty_store_with_markup_in_its_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / '[/x]:cd:' / 'a.db'}"
    (tmp_path / "[/x]:cd:").mkdir(parents=True)
    code, out, err = cli(capsys, "history", "--db", db)
    assert code == 0, err
    assert "No runs stored" in out and "[/x]:cd:" in out


def test_doctor_prints_details_as_written(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark import doctor

    checks = [
        doctor.Check("gpu", "warn", f"driver says {PWN} [/layer]", fix="run [/x] again"),
        doctor.Check("torch", "ok", "2.13.0"),
    ]
    monkeypatch.setattr(doctor, "gather", lambda: {})
    monkeypatch.setattr(doctor, "run_checks", lambda facts: checks)
    code, out, err = cli(capsys, "doctor")
    assert code == 0, err
    assert f"driver says {PWN} [/layer]" in out and "fix: run [/x] again" in out


def test_the_consoles_print_emoji_codes_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    """A plain string the CLI prints (a path, a model's name) is not searched for emoji
    codes: "/data/:cd:/x" stays a path."""
    from torchmark.cli.app import console, err_console

    console.print("saved to /data/:cd:/x")
    err_console.print("read /data/:smile:/y")
    out, err = capsys.readouterr()
    assert out.strip() == "saved to /data/:cd:/x" and err.strip() == "read /data/:smile:/y"
