"""Export (JSON, CSV) and import of runs: lossless round trip, clear errors on bad files."""

from __future__ import annotations

import csv
import io
import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pytest

from torchmark.errors import InputError, UnknownNameError
from torchmark.results import SCHEMA_VERSION, Ceiling, Result, RunRecord, Verdict, Work, schema
from torchmark.store import open_store
from torchmark.store.exchange import CSV_COLUMNS, export_run, import_run, parse_run

FIXTURES = Path(__file__).parents[1] / "fixtures" / "runs"
SAMPLES = [0.1 + 0.2, 1 / 3, 1.2345678901234567e-05, 5e-324, 0.0025, 0.0026]
PER_RESULT = ("workload", "variant", "device", "params", "median_s", "iqr_s", "n",
              "samples_s", "throughput", "pct_of_ceiling", "flags")  # fmt: skip


def make_run() -> RunRecord:
    bw = Ceiling(
        device="cpu", key="bandwidth", value=4.5e10, unit="B/s", method="best of mul_, add_",
        details={"mul_": 4.5e10, "copy": 2.5e10},
    )  # fmt: skip
    ok = Result(
        workload="add",
        variant="fp32",
        device="cpu",
        params={"numel": 1 << 20, "label": "1 Mi"},
        samples_s=SAMPLES,
        calls_per_sample=8,
        first_call_s=0.5,
        work=Work(bytes=12 * (1 << 20)),
        headline="bytes",
        ceiling=bw,
        extra_flags=["loaded_machine"],
        excluded=[3],
        verdict=Verdict(level="warn", reasons=["busy", "noisy"]),
        telemetry={"cpu_percent": [12.5, 99.0]},
    )
    skip = Result(
        workload="matmul", variant="int8", device="cpu", status="skipped", reason="no int8"
    )
    return RunRecord(
        tool_version="0.1.0",
        run_id="20261121-083012-a1b2",
        created_utc=datetime(2026, 11, 21, 8, 30, 12, 345678, tzinfo=timezone.utc),
        finished_utc=datetime(2026, 11, 21, 8, 31, 0, tzinfo=timezone.utc),
        status="complete",
        command="torchmark run --quick",
        config={"suite": "quick", "devices": ["cpu"]},
        environment={"host": "box", "devices": {"cpu": {"model": "Fake"}}},
        fingerprint="abc",
        ceilings=[bw],
        results=[ok, skip],
        verdict=Verdict(level="ok"),
        payload={
            "kind": "run",
            "notes": ["a note"],
            "found": {"numel": 4096},
        },  # a key kept as written
    )


def test_json_has_the_documented_fields_per_result() -> None:
    doc = json.loads(export_run(make_run(), "json"))
    assert doc["schema_version"] == SCHEMA_VERSION and doc["run_id"] == "20261121-083012-a1b2"
    first = doc["results"][0]
    assert set(PER_RESULT) <= set(first)
    assert first["throughput"]["unit"] == "GB/s"
    assert first["samples_s"] == SAMPLES
    assert "loaded_machine" in first["flags"]
    assert doc["results"][1]["median_s"] is None and doc["results"][1]["n"] == 0


def test_json_round_trip_is_lossless(tmp_path: Path) -> None:
    run = make_run()
    text = export_run(run, "json")
    back = import_run(text)
    assert export_run(back, "json") == text
    assert [x.hex() for x in back.results[0].samples_s] == [x.hex() for x in SAMPLES]
    assert back.model_dump() == run.model_dump()
    # ... and through a store and a file as well.
    store = open_store(str(tmp_path / "r.db"))
    run_id = store.save(back)
    path = tmp_path / "run.json"
    path.write_text(export_run(store.load(run_id), "json"))
    assert export_run(import_run(path), "json") == text


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.json")))
def test_fixture_runs_round_trip(name: str) -> None:
    text = export_run(import_run(FIXTURES / name), "json")
    assert export_run(import_run(text), "json") == text


def test_derived_fields_in_a_file_are_ignored(tmp_path: Path) -> None:
    doc = json.loads(export_run(make_run(), "json"))
    doc["results"][0]["median_s"] = 1e-9  # a doctored headline figure
    doc["results"][0]["throughput"] = {"value": 1e9, "unit": "GB/s"}
    doc["results"][0]["flags"] = []
    back = parse_run(json.dumps(doc))
    assert back.results[0].median_s == make_run().results[0].median_s
    assert back.results[0].throughput == make_run().results[0].throughput
    assert "loaded_machine" in back.results[0].flags


def test_csv_one_row_per_result() -> None:
    run = make_run()
    rows = list(csv.DictReader(io.StringIO(export_run(run, "csv"))))
    assert len(rows) == 2
    assert tuple(rows[0]) == CSV_COLUMNS
    ok, skip = rows
    r0 = run.results[0]
    assert ok["run_id"] == "20261121-083012-a1b2"
    assert json.loads(ok["params"]) == {"label": "1 Mi", "numel": 1 << 20}
    assert float(ok["median_s"]) == r0.median_s
    assert int(ok["n"]) == r0.n == len(SAMPLES) - 1  # one sample excluded
    assert r0.throughput is not None and float(ok["throughput"]) == r0.throughput.value
    assert ok["throughput_unit"] == "GB/s"
    assert r0.pct_of_ceiling is not None
    assert math.isclose(float(ok["pct_of_ceiling"]), r0.pct_of_ceiling)
    assert ok["ceiling_key"] == "bandwidth"
    assert ok["flags"].split(";") == r0.flags
    assert (ok["verdict"], ok["verdict_reasons"]) == ("warn", "busy;noisy")
    samples = [float(s) for s in ok["samples_s"].split(";")]
    assert [x.hex() for x in samples] == [x.hex() for x in SAMPLES]  # repr precision
    assert (skip["status"], skip["reason"], skip["median_s"], skip["samples_s"]) == (
        "skipped",
        "no int8",
        "",
        "",
    )


def test_unknown_export_format() -> None:
    with pytest.raises(UnknownNameError, match="valid formats: csv, json"):
        export_run(make_run(), "xml")


# -- bad input -----------------------------------------------------------------------------


def test_malformed_json_says_where(tmp_path: Path) -> None:
    bad = tmp_path / "broken.json"
    bad.write_text('{\n  "schema_version": 1,\n  "results": [,]\n}\n')
    with pytest.raises(
        InputError, match=rf"^{bad} is not valid JSON \(line 3, column 15\): Expecting value$"
    ):
        import_run(bad)


def test_wrong_shaped_json_is_not_a_run(tmp_path: Path) -> None:
    cases = {
        "[1, 2]": "expected a JSON object, got an array",
        '{"name": "my notes"}': "no 'schema_version' field",
        '{"schema_version": 1, "created_utc": "2026-01-01T00:00:00Z", "results": '
        '[{"workload": "add", "variant": "x", "device": "cpu", "samples_s": ["fast"]}]}': (
            "results.0.samples_s.0: Input should be a valid number, "
            "unable to parse string as a number"
        ),
    }
    for i, (text, why) in enumerate(cases.items()):
        path = tmp_path / f"f{i}.json"
        path.write_text(text)
        with pytest.raises(InputError) as e:
            import_run(path)
        assert str(e.value) == f"{path} is not a torchmark run: {why}"


def test_other_bad_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        import_run(tmp_path / "missing.json")
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="is not valid JSON"):
        import_run(binary)
    sheet = tmp_path / "run.csv"
    sheet.write_text(export_run(make_run(), "csv"))
    with pytest.raises(InputError, match="export with --format json"):
        import_run(sheet)


def test_newer_document_asks_for_an_upgrade() -> None:
    doc = json.loads(export_run(make_run(), "json")) | {"schema_version": 99}
    with pytest.raises(InputError, match=r"schema version 99; .*upgrade torchmark"):
        parse_run(json.dumps(doc), "new.json")


def test_older_document_is_migrated_on_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake version 0 that called the results 'measurements' imports through its step."""
    doc = json.loads(export_run(make_run(), "json"))
    old = {k: v for k, v in doc.items() if k != "results"}
    old |= {"schema_version": 0, "measurements": doc["results"], "results": []}

    def v0_to_v1(d: dict) -> dict:  # type: ignore[type-arg]
        return {k: v for k, v in d.items() if k != "measurements"} | {"results": d["measurements"]}

    monkeypatch.setitem(schema.DOC_STEPS, 0, v0_to_v1)
    back = parse_run(json.dumps(old))
    assert back.schema_version == SCHEMA_VERSION
    assert export_run(back, "json") == export_run(make_run(), "json")


# -- impossible numbers, non-standard JSON, ids and paths ----------------------


def _with(path: str, value: object) -> str:
    """make_run() as exported JSON with one field replaced (path: dotted, ints index)."""
    doc = json.loads(export_run(make_run()))
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    target = doc
    for p in parents:
        target = target[p]
    target[last] = value
    return json.dumps(doc)  # writes NaN / Infinity literally, as a careless tool would


@pytest.mark.parametrize(
    ("path", "value", "named"),
    [
        ("results.0.samples_s.1", -0.5, "results.0.samples_s: sample 1 is -0.5"),
        ("results.0.samples_s.0", 0.0, "results.0.samples_s: sample 0 is 0.0"),
        ("results.0.samples_s.2", math.nan, "results.0.samples_s: sample 2 is nan"),
        ("results.0.samples_s.2", math.inf, "results.0.samples_s: sample 2 is inf"),
        ("results.0.samples_s.0", 1e308, "results.0.samples_s: sample 0 is 1e+308"),
        ("results.0.work.bytes", -1.0, "results.0.work.bytes: -1.0 is not a finite amount"),
        ("results.0.work.flops", math.nan, "results.0.work.flops: nan is not a finite amount"),
        ("results.0.excluded", [6], "results.0.excluded: index 6; excluded holds"),
        ("results.0.excluded", [-1], "results.0.excluded: index -1"),
        ("results.0.calls_per_sample", 0, "results.0.calls_per_sample: 0 calls per sample"),
        ("results.0.first_call_s", -2.0, "results.0.first_call_s: -2.0 is not a finite time"),
        ("ceilings.0.value", math.inf, "ceilings.0.value: inf is not a finite amount"),
    ],
)
def test_import_refuses_impossible_numbers(path: str, value: object, named: str) -> None:
    # Before: each of these was imported as a complete run.
    with pytest.raises(InputError) as e:
        parse_run(_with(path, value), "run.json")
    assert str(e.value).startswith(f"run.json is not a torchmark run: {named}")
    assert "\n" not in str(e.value)


def test_values_measured_here_are_not_rechecked() -> None:
    # The checks guard imports; a run being measured must never be lost to them.
    r = Result(workload="a", variant="b", device="cpu", samples_s=[0.0, 1.0], excluded=[9])
    assert r.samples_s == [0.0, 1.0]


def test_export_never_writes_nan_or_infinity() -> None:
    # Before: `NaN` / `Infinity` in the output, which is not JSON.
    run = make_run()
    # A sample stored before imports were checked, and sensor gaps in telemetry.
    run.results[0] = run.results[0].model_copy(update={"samples_s": [*SAMPLES, math.nan]})
    run.results[0].telemetry = {"power_w": [math.nan, 30.0], "temp_c": math.inf}
    run.payload.ratio = -math.inf  # type: ignore[attr-defined]
    text = export_run(run)

    def refuse(name: str) -> float:
        raise AssertionError(f"non-standard JSON constant {name}")

    doc = json.loads(text, parse_constant=refuse)
    assert doc["results"][0]["samples_s"][-1] is None
    assert doc["results"][0]["telemetry"] == {"power_w": [None, 30.0], "temp_c": None}
    assert doc["payload"]["ratio"] is None
    with pytest.raises(InputError, match=r"results\.0\.samples_s\.6: "):
        parse_run(text)  # the damaged sample is named on import, not taken for a time
    assert parse_run(export_run(make_run())).results[0].samples_s == SAMPLES


@pytest.mark.parametrize("bad_id", ["latest", "runs/one", "old.json", "C:\\runs\\x", " "])
def test_imported_ids_that_read_as_paths_get_fresh_ones(bad_id: str) -> None:
    store = open_store(":memory:")
    run = make_run().model_copy(update={"run_id": bad_id})
    new = store.save(run)
    assert new != bad_id and new.startswith("20261121-083012-")
    store.close()


def test_a_run_id_is_never_read_as_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: a file in the current directory named like a run id was read instead of the run.
    from torchmark.cli.report import load_runs
    from torchmark.store.exchange import is_file_spec

    db = f"sqlite:///{tmp_path / 'r.db'}"
    store = open_store(db)
    run_id = store.save(make_run())
    store.close()
    monkeypatch.chdir(tmp_path)
    (tmp_path / run_id).write_text("not a run")
    (tmp_path / "latest").write_text("not a run either")
    assert [r.run_id for r in load_runs([run_id, "latest"], db)] == [run_id, run_id]
    (tmp_path / "mine.json").write_text(export_run(make_run()))
    assert [r.run_id for r in load_runs(["mine.json"], db)] == [make_run().run_id]
    assert is_file_spec("./x") and is_file_spec("a/b") and is_file_spec("X.JSON")
    assert not is_file_spec(run_id) and not is_file_spec("latest")


def test_a_committed_reference_run_imports_as_its_run() -> None:
    # src/torchmark/reference/NAME.json wraps the run with its title and provenance:
    # `import` and `submit` take the file as it is
    import torchmark.reference

    path = Path(torchmark.reference.__file__).parent / "h100-quick.json"
    run = import_run(path)
    assert run.run_id == json.loads(path.read_text())["run"]["run_id"]
    assert any(r.device == "cuda:0" for r in run.results)
    with pytest.raises(InputError, match="no 'schema_version' field"):
        parse_run(json.dumps({"kind": "run", "run": "not an object"}))


@pytest.mark.parametrize("name", ["h100-quick", "h200-quick"])
def test_each_committed_gpu_reference_run_imports_with_its_gpu_results(name: str) -> None:
    import torchmark.reference

    path = Path(torchmark.reference.__file__).parent / f"{name}.json"
    run = import_run(path)
    gpu = [r for r in run.results if r.device == "cuda:0" and r.ok]
    assert gpu and run.status == "complete"
    assert any(r.workload == "seed-add" and r.variant == "as-published" for r in gpu)
