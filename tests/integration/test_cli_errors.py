"""A typical bad input to each command is one line on stderr, `error: ...` naming the fix,
with a non-zero exit and no traceback; `run` and `profile` check their shared selectors
with the same words."""

from __future__ import annotations

from pathlib import Path

import pytest

from clitest import cli

FIX = Path(__file__).parents[1] / "fixtures" / "user_models"
CNN = f"{FIX}/cnn.py:make_model"


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["run", "-w", "nope", "--dry-run"], 2, "valid workloads: add,"),
        (["run", "--batch", "x", "--dry-run"], 2, "--batch takes comma-separated integers"),
        (["run", "--batch", "0", "--dry-run"], 2, "--batch: batch sizes must be >= 1, got 0"),
        (["run", "--dry-rn"], 2, "Possible options: --dry-run"),
        (["run", "-d", "cpu", "-w", "add", "--json", "/no/such/dir/x.json"], 2, "create it"),
        (["profile"], 2, "give a built-in --workload NAME or your model's SPEC"),
        (["profile", "--steps", "x", "-w", "add"], 2, "(see `torchmark profile --help`)"),
        (["profile", "-w", "add", "--trace", "/no/such/dir/t.gz"], 2, "/no/such/dir does not"),
        (["profile", CNN, "--input", "3x8x8", "--precision", "bf16"], 2, "`torchmark tune SPEC`"),
        (["run", "-w"], 2, "Option '-w' requires an argument (see `torchmark run --help`)"),
        (["export"], 2, "Missing argument 'RUN' (see `torchmark export --help`)"),
        (["export", "nope"], 2, "`torchmark history` lists the stored run ids"),
        # a run that is not there is bad input, exit 2 as the rest: `show` said 1, which
        # `compare --fail-on-regression` reads as "a case got slower"
        (["show", "nosuchrun"], 2, "no run 'nosuchrun'"),
        (["report", "nosuchrun"], 2, "no run 'nosuchrun'"),
        (["compare", "nosuchrun", "nope", "--fail-on-regression", "5"], 2, "no run 'nosuchrun'"),
        (["import", "/no/such/run.json"], 2, "no such file"),
        (["compare"], 2, "compare needs two or more runs"),
        (["model", CNN], 2, "give --input SHAPE"),
        (["model", CNN, "--input", "3xfoo"], 2, "e.g. --input 3x224x224"),
        (["tune", CNN, "--input", "3x8x8", "--batch", "0"], 2, "--batch must be >= 1"),
        (["histroy"], 2, "Did you mean 'history'?"),
    ],
)
def test_a_bad_input_is_one_line_naming_the_fix(
    argv: list[str], code: int, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    got, _, err = cli(capsys, *argv)
    assert got == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and says in lines[0]


def test_a_file_that_is_no_model_is_one_short_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "notes.pt"
    f.write_text("not a model\n")
    code, _, err = cli(capsys, "model", str(f), "--input", "3")
    assert code == 2
    assert err.strip() == (
        f"error: model file '{f}' is not a zip archive, so neither torch.jit.load nor "
        "torch.export.load reads it: give a TorchScript file, an exported program (.pt2), "
        "or module:factory / file.py:factory for Python code"
    )


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--batch", "1,x", "error: --batch takes comma-separated integers, e.g. 1,32,256; got"),
        ("--batch", "-2", "error: --batch: batch sizes must be >= 1, got -2"),
        ("--size", "0", "error: --size takes sizes >= 1, got 0"),
        ("--stopping", "nah", "error: unknown stopping preset 'nah'; valid stopping presets"),
    ],
)
def test_run_and_profile_check_their_selectors_alike(
    option: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    errors = set()
    for command in ("run", "profile"):
        code, _, err = cli(capsys, command, "-w", "add", "-d", "cpu", f"{option}={value}")
        assert code == 2, err
        errors.add(err.strip())
    (line,) = errors
    assert line.startswith(says)
