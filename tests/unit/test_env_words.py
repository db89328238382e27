"""`torchmark env` prints stored values in words, not as Python prints them."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_env_says_values_in_words_not_as_python_prints_them() -> None:
    from torchmark.cli.machine import in_words

    assert in_words(None) == "none"  # was "None"
    assert in_words([2.1484375, 1.5, 0.25]) == "2.15, 1.5, 0.25"  # was "[2.1484375, ...]"
    assert in_words(False) == "no" and in_words(True) == "yes"
    assert in_words(33554432, "llc_bytes") == "32 MiB"
    assert in_words({"model": "EPYC", "max_mhz": None}) == "model EPYC; max_mhz none"


def test_list_names_no_seed_a_user_never_saw() -> None:
    # `list` said "Seed 02's MLP": the project's own reading notes, not the user's words
    from torchmark.workloads import WORKLOADS, load_builtins

    load_builtins()
    said = [WORKLOADS.get(name).summary for name in WORKLOADS.names()]
    assert said and not [s for s in said if "Seed 0" in s]


def test_a_db_that_cannot_be_written_is_bad_input_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: exit 1, which `compare --fail-on-regression` reads as "a case got slower"
    from clitest import cli

    run = _exported_run(tmp_path)
    code, _, err = cli(capsys, "import", str(run), "--db", "/proc/torchmark-x.db")
    assert code == 2, err
    assert "cannot write the results store /proc/torchmark-x.db" in err
    assert err.count("\n") == 1 and "--db" in err


def test_serving_of_a_model_that_is_not_there_says_so_first(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: `serving nope` said only "Missing option '--p99-ms'"
    from clitest import cli

    code, _, err = cli(capsys, "serving", "nope")
    assert code == 2
    assert err.startswith("error: model spec 'nope': not a built-in model and no such file")
    assert "serving needs --p99-ms MS" in err and "torchmark serving MODEL --p99-ms 50" in err
    code, _, err = cli(capsys, "serving", "simplenet")
    assert code == 2 and "model spec" not in err and "serving simplenet --p99-ms 50" in err


def test_importing_the_same_file_again_keeps_one_copy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: each import of the same file stored a new copy under a new id
    from clitest import cli
    from torchmark.store import open_store

    run = _exported_run(tmp_path)
    db = f"sqlite:///{tmp_path / 'r.db'}"
    first = cli(capsys, "import", str(run), "--db", db)
    again = cli(capsys, "import", str(run), "--db", db)
    assert first[0] == again[0] == 0
    assert first[1].strip() == again[1].strip() == RUN_ID
    assert "already in" in again[2] and "nothing imported" in again[2]
    store = open_store(db)
    try:
        assert [s.run_id for s in store.list_runs()] == [RUN_ID]
    finally:
        store.close()


RUN_ID = "20260101-000000-abcd"


def _exported_run(tmp_path: Path) -> Path:
    """A small complete run written as torchmark's JSON export."""
    from torchmark.results import Result, RunRecord
    from torchmark.store.exchange import export_run

    rec = RunRecord(
        run_id=RUN_ID,
        status="complete",
        results=[Result(workload="add", variant="fp32", device="cpu", samples_s=[1e-3] * 5)],
    )
    run = tmp_path / "run.json"
    run.write_text(export_run(rec, "json"))
    return run
