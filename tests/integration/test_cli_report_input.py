"""``torchmark compare`` and ``report`` on runs with input cases, through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from clitest import cli
from inputruns import run, slowed

HERE = Path(__file__).parents[1]
GOLDEN = HERE / "fixtures" / "runs" / "golden"


def _pair(tmp_path: Path) -> tuple[str, str]:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(run().model_dump_json())
    b.write_text(slowed(1.4).model_dump_json())
    return str(a), str(b)


def test_compare_piped_prints_the_input_breakdown_as_the_golden_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # piped: rich's 80 columns
    code, out, _ = cli(capsys, "compare", *_pair(tmp_path))
    assert code == 0
    text = "\n".join(line.rstrip() for line in out.splitlines()) + "\n"
    assert text == (GOLDEN / "compare-input-80.txt").read_text()


def test_compare_gate_fails_on_the_slowed_loader_configuration(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = cli(capsys, "compare", *_pair(tmp_path), "--fail-on-regression", "10")
    assert code != 0 and "persistent" in err


def test_report_markdown_has_the_breakdown(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    a, _ = _pair(tmp_path)
    code, out, _ = cli(capsys, "report", a, "--markdown", "-")
    assert code == 0
    assert "| w=16 persistent | cuda:0 | 688 | 92.4 ms | 52 % | 8 % | 40 % | 41 % |" in out
