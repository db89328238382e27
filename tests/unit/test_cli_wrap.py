"""Messages (errors, a gate's verdicts) in an 80-column terminal are word-wrapped; piped they
stay one line each. A new user's walk of the README found, at 80 columns under TERM=dumb,
`error: cannot reach http://127.0.0.1:8001 ([Errno 111] Connection refused); chec` /
`k the URL and that the server runs`, and every `cannot judge:` line of
`compare --fail-on-regression` cut the same way ("clu" / "sters")."""

from __future__ import annotations

import importlib
import io
from pathlib import Path

import pytest
from rich.console import Console

from clitest import cli

# the modules (``torchmark.cli.app`` is also the name of the typer app in the package)
app = importlib.import_module("torchmark.cli.app")
report = importlib.import_module("torchmark.cli.report")

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"


def terminal(monkeypatch: pytest.MonkeyPatch, *where: object) -> io.StringIO:
    """A terminal 80 columns wide, standing in for stderr in each module of ``where``."""
    out = io.StringIO()
    term = Console(file=out, width=80, force_terminal=True, color_system=None, markup=False)
    for module in where:
        monkeypatch.setattr(module, "err_console", term)
    return out


def words(text: str) -> list[str]:
    return text.split()


def test_an_error_is_word_wrapped_in_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    piped = cli(capsys, "compare", str(RUNS / "cpu-only.json"), str(RUNS / "tune-cpu.json"))
    assert piped[0] == 2
    (line,) = piped[2].splitlines()  # a log keeps it whole: one line
    assert len(line) > 80 and line.startswith("error: runs ")
    out = terminal(monkeypatch, app)
    code, _, _ = cli(capsys, "compare", str(RUNS / "cpu-only.json"), str(RUNS / "tune-cpu.json"))
    assert code == 2
    shown = out.getvalue().splitlines()
    assert len(shown) > 1 and all(len(x) <= 80 for x in shown)
    assert words(out.getvalue()) == words(line)  # no word cut in two


def test_the_gates_lines_are_word_wrapped_in_a_terminal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = (str(RUNS / "verdicts-a.json"), str(RUNS / "verdicts-b.json"))
    code, _, piped = cli(capsys, "compare", *runs, "--fail-on-regression", "5")
    assert code == 3
    judged = [x for x in piped.splitlines() if x.startswith("cannot judge: ")]
    assert judged and max(len(x) for x in judged) > 80
    out = terminal(monkeypatch, app, report)
    assert cli(capsys, "compare", *runs, "--fail-on-regression", "5")[0] == 3
    shown = out.getvalue()
    assert all(len(x) <= 80 for x in shown.splitlines())
    assert words(shown) == words(piped)
