"""Reference sets: the seed blog's 2023 table (derived figures computed) and reference runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchmark import reference
from torchmark.errors import InputError, UnknownNameError
from torchmark.results import RunRecord

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"


def test_seed_table_has_the_eleven_published_rows() -> None:
    ref = reference.load("seed-2023")
    assert ref.kind == "table"
    assert len(ref.rows) == 11
    assert {r.hardware: r.value for r in ref.rows}["Nvidia 3090 GPU"] == 670
    assert "Z. Cao" in ref.provenance and "2023-04-10" in ref.provenance


def test_derived_bandwidth_comes_from_the_byte_count() -> None:
    ref = reference.load("seed-2023")
    # 12288² float32 = 603,979,776 B, read + written once per iteration (METHOD.md §1).
    assert ref.bytes_per_iteration == 2 * 12288 * 12288 * 4
    rows = {r.hardware: r for r in ref.rows}
    r3090 = rows["Nvidia 3090 GPU"]
    assert r3090.implied_bytes_per_s == pytest.approx(670 * 1.207959552e9)
    assert r3090.pct_of_datasheet == pytest.approx(86.5, abs=0.1)  # of 936 GB/s
    assert rows["Tencent VENUS V100 GPU"].pct_of_datasheet == pytest.approx(90.9, abs=0.1)


def test_rtx3060_row_is_flagged_implausible_by_computation() -> None:
    rows = {r.hardware: r for r in reference.load("seed-2023").rows}
    r = rows["Nvidia RTX3060 GPU"]
    assert r.pct_of_datasheet == pytest.approx(107, abs=0.5)
    assert r.implausible == "107 % of its datasheet bandwidth"
    assert rows["Server GPU (Overheat)"].implausible  # a thermal case
    plausible = [x for x in rows.values() if x.implausible is None and x.pct_of_datasheet]
    assert all(x.pct_of_datasheet <= 100 for x in plausible)


def test_neighbours_rank_a_rate_among_the_rows() -> None:
    rows = reference.load("seed-2023").rows
    slower, faster, rank = reference.neighbours(rows, 61.0)
    # Faster: 677, 670, 402, 320, 300, 75, 74 -> rank 8, between 55 and 74 it/s.
    assert slower is not None and faster is not None
    assert (slower.hardware, faster.hardware, rank) == ("Server GPU (Overheat)", "Server CPU", 8)
    assert reference.neighbours(rows, 5000.0)[1] is None
    assert reference.neighbours(rows, 1.0)[0] is None


def test_unknown_reference_names_the_valid_sets() -> None:
    with pytest.raises(UnknownNameError, match="seed-2023"):
        reference.load("seed-2024")


def test_reference_runs_join_through_the_same_loader(tmp_path: Path) -> None:
    """A committed reference run ({"command", "run"}) lists and ranks like the table."""
    (tmp_path / "seed-2023.json").write_text(
        (Path(reference.__file__).parent / "seed-2023.json").read_text()
    )
    run = json.loads((RUNS / "cpu-gpu.json").read_text())
    doc = {
        "name": "h100-fixture",
        "kind": "run",
        "title": "H100 measured by torchmark (fixture)",
        "command": "torchmark run --workload seed-add --json h100.json",
        "run": run,
    }
    (tmp_path / "h100-fixture.json").write_text(json.dumps(doc))
    assert reference.names(tmp_path) == ["h100-fixture", "seed-2023"]
    (ref_run,) = reference.runs(tmp_path)
    assert ref_run.command == "torchmark run --workload seed-add --json h100.json"
    assert isinstance(ref_run.run, RunRecord)
    values = sorted(r.value for r in ref_run.rows)
    assert values == pytest.approx([50.0, 1 / 0.00042])
    assert not any(r.this_machine for r in ref_run.rows)


def test_broken_reference_file_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"kind": "table", "rows": []}')
    with pytest.raises(InputError, match=r"reference set 'bad'.*not usable"):
        reference.load("bad", tmp_path)
