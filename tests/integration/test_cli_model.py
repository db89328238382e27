"""`torchmark model` / `torchmark tune` end to end on the CPU (tiny sizes, short presets)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchmark.cli import main

FIX = Path(__file__).parents[1] / "fixtures" / "user_models"
CNN = f"{FIX}/cnn.py:make_model"


def run(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def test_model_command_writes_json_and_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    db = f"sqlite:///{tmp_path / 'r.db'}"
    code = run(
        [
            "model",
            CNN,
            "--input",
            "3x16x16",
            "--batch",
            "1,2",
            "--stopping",
            "test",
            "--no-ceilings",
            "--price",
            "cpu=0.1",
            "--device",
            "cpu",
            "--json",
            str(out),
            "--db",
            db,
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    # The way to a break-even, not a dead end (the line wraps at the console's width).
    said = " ".join(text.split())
    assert "no GPU on this machine, so no break-even here" in said
    assert "on a machine with a GPU" in said and "torchmark import" in said
    doc = json.loads(out.read_text())
    assert doc["kind"] == "model" and doc["status"] == "complete"
    assert doc["payload"]["break_even"] == {} and len(doc["results"]) == 2
    from torchmark.store import open_store

    stored = open_store(db).load(doc["run_id"])
    assert stored.kind == "model" and len(stored.results) == 2


def test_two_inputs_through_inputs_factory(capsys: pytest.CaptureFixture[str]) -> None:
    code = run(
        [
            "model",
            f"{FIX}/two_inputs.py:make_model",
            "--inputs",
            f"{FIX}/two_inputs.py:make_inputs",
            "--batch",
            "2",
            "--stopping",
            "test",
            "--no-ceilings",
            "--device",
            "cpu",
        ]
    )
    assert code == 0, capsys.readouterr()


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["model", f"{FIX}/nope.py:make", "--input", "8"], "file not found"),
        (["model", "no_such_pkg_q:make", "--input", "8"], "no module named 'no_such_pkg_q'"),
        (["model", f"{FIX}/cnn.py:missing", "--input", "8"], "has no 'missing'"),
        (["model", f"{FIX}/broken.py:make_model", "--input", "8"], "hidden size must be even"),
        (["model", CNN, "--input", "4x16x16", "--device", "cpu"], "float32[1, 4, 16, 16]"),
        (["model", CNN, "--input", "3x16x16", "--price", "cpu:0.1"], "--price cpu=0.10"),
        (["model", CNN], "give --input SHAPE"),
        (["tune", CNN, "--input", "3x8x8", "--batch", "0"], "--batch must be >= 1"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(
    argv: list[str], match: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(argv)
    err = capsys.readouterr().err
    assert code == 2
    assert match in err.replace("\n", " ")
    assert err.strip().startswith("error:") and "Traceback" not in err


def test_help_says_loading_runs_code(capsys: pytest.CaptureFixture[str]) -> None:
    run(["model", "--help"])
    assert "runs the named Python file" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("old", "new"), [("--budget-s", "--budget DURATION"), ("--per-candidate-s", "--per-candidate")]
)
def test_an_old_option_name_still_works_and_names_the_new_one(
    old: str, new: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # a value the new option refuses: the old name reached it, and nothing was measured
    code = run(["tune", CNN, "--input", "3x8x8", "-d", "cpu", old, "0"])
    err = capsys.readouterr().err
    assert code == 2
    note, error = err.strip().splitlines()
    assert note.startswith(f"note: {old} SECONDS is now {new}")
    assert error.startswith(f"error: {new.split()[0]} takes a positive time") and "'0.0'" in error


@pytest.mark.parametrize("value", ["0", "-1m", "soon", "5 minutes"])
def test_a_duration_that_is_not_positive_time_is_one_line_exit_2(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(["tune", CNN, "--input", "3x8x8", "-d", "cpu", "--budget", value])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        f"error: --budget takes a positive time such as 90s, 10m or 1h; got {value!r}"
    )


def test_tune_command_prints_ranked_table_and_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.kinds.tune import search

    # the table and code, not the noisy-baseline stop (tests/unit/test_tune_verdicts.py)
    monkeypatch.setattr(search, "BASELINE_MAX_REL_IQR", float("inf"))
    out = tmp_path / "tune.json"
    code = run(
        [
            "tune",
            CNN,
            "--input",
            "3x8x8",
            "--device",
            "cpu",
            "--no-compile",
            "--budget",
            "60s",
            "--per-candidate",
            "0.1s",
            "--json",
            str(out),
        ]
    )
    text = capsys.readouterr().out
    assert code == 0, text
    assert "Recommended on cpu" in text and "model.eval()" in text
    doc = json.loads(out.read_text())
    assert doc["kind"] == "tune"
    cands = doc["payload"]["candidates"]
    assert {"speedup", "max_error", "status"} <= set(cands[0])
    assert any(c["status"] == "skipped" and "CUDA" in (c["reason"] or "") for c in cands)
    assert "cpu" in doc["payload"]["recommendation"]


def test_sweep_table_notes_show_the_verdict() -> None:
    import torch
    from rich.console import Console

    from torchmark.kinds.model.kind import benchmark_model
    from torchmark.report.model import sweep_table
    from torchmark.results import Verdict

    rec = benchmark_model(
        torch.nn.Linear(8, 2),
        torch.randn(2, 8),
        devices="cpu",
        rule="test",
        ceilings=False,
        measure_energy=False,
    )
    assert rec.results[0].ok
    rec.results[0].verdict = Verdict(level="invalid", reasons=["clock throttled"])
    console = Console(record=True, width=200)
    console.print(sweep_table(rec))
    assert "invalid" in console.export_text()


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("/long/path/to/cnn.py:make_model", "cnn.py:make_model"),
        ("models/net.pt2", "net.pt2"),
        ("cnn.py:make_model", "cnn.py:make_model"),
        ("package.module:factory", "package.module:factory"),
    ],
)
def test_tables_name_the_model_without_its_folders(spec: str, name: str) -> None:
    from torchmark.cli.target import short_name

    assert short_name(spec) == name
