"""Text that is no UTF-8 (a lone surrogate) or a NUL, locally: `import` refuses such a
document in one line; `report` of a run stored with one (a model named by a file name
decoded with surrogateescape, an import before the refusal) writes the page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from boardtest import doc, make_run
from clitest import cli
from torchmark.store import open_store


@pytest.mark.parametrize("text", ["\udfff", "\x00"], ids=["surrogate", "nul"])
def test_import_refuses_unstorable_text_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    path = tmp_path / "run.json"
    bad = doc(make_run())
    bad["environment"]["devices"]["cpu"]["model"] = f"CPU{text}"
    path.write_text(json.dumps(bad), encoding="utf-8")  # escaped: valid JSON and UTF-8
    db = f"sqlite:///{tmp_path / 'r.db'}"
    code, _, err = cli(capsys, "import", str(path), "--db", db)
    assert code != 0 and len(err.strip().splitlines()) == 1, err
    assert "environment.devices.cpu.model" in err
    assert ("lone surrogate" if text != "\x00" else "NUL") in err
    store = open_store(db)
    try:
        assert store.list_runs() == []
    finally:
        store.close()


@pytest.mark.parametrize("flag", ["--html", "--markdown"])
def test_report_of_a_stored_run_with_a_lone_surrogate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    db = f"sqlite:///{tmp_path / 'r.db'}"
    store = open_store(db)
    try:
        run_id = store.save(make_run(note="made by net\udfff.py"))
    finally:
        store.close()
    out = tmp_path / "r.out"
    code, _, err = cli(capsys, "report", run_id, flag, str(out), "--db", db)
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    assert "net\\udfff.py" in text if flag == "--html" else text.startswith("### torchmark run")
