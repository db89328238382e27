"""Schema-1 documents: real runs of every kind, exported by torchmark before typed payloads
(main at dac9388), still load, show, report and compare as that torchmark printed them.

The runs (tests/fixtures/runs/v1-*.json) were measured on this project's 2-core CPU VM at
tiny sizes and exported with ``torchmark export``::

    torchmark run --quick -w linear10 -d cpu --no-ceilings --stopping test          # run
    torchmark model tests/fixtures/user_models/cnn.py:make_model --input 3x16x16 \\
        --batch 1,2 --stopping test --price cpu=0.1 -d cpu                          # model
    torchmark tune tests/fixtures/user_models/cnn.py:make_model --input 3x8x8 -d cpu \\
        --no-compile --budget-s 20 --per-candidate-s 0.1                            # tune
    torchmark soak --duration 3s -w linear10 -d cpu                                 # soak
    torchmark profile -w linear10 -d cpu --scenario infer --steps 3 --stopping test \\
        --no-ceilings                                                               # profile
    torchmark model tiny_loader.py:make_model --loader tiny_loader.py:make_loader \\
        -d cpu --stopping test                                                      # loader
    torchmark run -w simplenet --scenario train --precision fp32 --batch 8 --threads 1 \\
        --stopping test --no-telemetry --no-ceilings --nproc-per-node 2             # ranks
    torchmark run -w collectives --stopping test --no-telemetry --no-ceilings \\
        --size 1024 --nproc-per-node 2                                              # collectives
    torchmark run -d cpu -w add --size 1048576,...,16777216 --stopping quick \\
        --no-ceilings --no-telemetry; SIGTERM after 1 case; run --resume latest     # resumed

(``tiny_loader.py`` is tests/fixtures/user_models/tiny_loader.py.) The golden text in
tests/fixtures/runs/golden/v1/ is what main printed for ``show FILE``,
``report --markdown - FILE`` and ``compare FILE FILE``, piped (80 columns), before typed
payloads: recorded at dac9388, and again with main's own code at 73f7858 after the verdicts
branch changed on purpose how invalid results print (``TORCHMARK_UPDATE_GOLDEN=1`` rewrites
it; do that only with code whose readers changed on purpose, never to make this branch's
output pass). Independently of the golden text, each document prints exactly as its own
schema-2 export does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from clitest import cli
from torchmark.errors import InputError
from torchmark.results import SCHEMA_VERSION, RunRecord
from torchmark.results.payloads import (
    CostRow,
    ModelPayload,
    ProfilePayload,
    RunPayload,
    SoakPayload,
    TunePayload,
)
from torchmark.store import SQLStore, open_store
from torchmark.store.exchange import export_run, import_run, parse_run
from v1store import store_v1

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
GOLDEN = RUNS / "golden" / "v1"
KINDS = ["run", "model", "tune", "soak", "profile", "loader", "ranks", "collectives", "resumed"]


def v1(kind: str) -> str:
    return str(RUNS / f"v1-{kind}.json")


@pytest.fixture(autouse=True)
def _piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # rich's 80 columns, as the golden text


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "what, args",
    [("show", ("show", "{f}")), ("md", ("report", "--markdown", "-", "{f}")),
     ("cmp", ("compare", "{f}", "{f}"))],
)  # fmt: skip
def test_a_schema_1_run_prints_as_the_torchmark_that_wrote_it(
    kind: str, what: str, args: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *(a.format(f=v1(kind)) for a in args))
    assert code == 0, err
    golden = GOLDEN / f"{what}-{kind}.txt"
    if os.environ.get("TORCHMARK_UPDATE_GOLDEN"):
        golden.write_text(out)
    assert out == golden.read_text()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "args",
    [("show", "{f}"), ("report", "--markdown", "-", "{f}"), ("compare", "{f}", "{f}")],
)
def test_a_schema_1_run_prints_as_its_schema_2_export(
    kind: str, args: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / f"v2-{kind}.json"
    new.write_text(export_run(import_run(Path(v1(kind)))))
    printed = []
    for f in (v1(kind), str(new)):
        code, out, err = cli(capsys, *(a.format(f=f) for a in args))
        assert code == 0, err
        printed.append(out)
    assert printed[0] == printed[1]


# -- schema 2: the same documents, typed ---------------------------------------------------

PAYLOAD = {
    "run": RunPayload,
    "model": ModelPayload,
    "tune": TunePayload,
    "soak": SoakPayload,
    "profile": ProfilePayload,
    "loader": ModelPayload,  # `model --loader`: a model run whose config names the loader
    "ranks": RunPayload,  # distributed: a run whose config names the world
    "collectives": RunPayload,
    "resumed": RunPayload,
}


def load(kind: str) -> RunRecord:
    return import_run(Path(v1(kind)))


@pytest.mark.parametrize("kind", KINDS)
def test_a_schema_1_run_reads_as_its_kinds_typed_payload(kind: str) -> None:
    doc = json.loads(Path(v1(kind)).read_text())
    assert doc["schema_version"] == 1 and "extra" in doc and "payload" not in doc
    run = load(kind)
    assert run.schema_version == SCHEMA_VERSION == 2
    assert type(run.payload) is PAYLOAD[kind] and run.payload.kind == run.kind == doc["kind"]
    assert run.payload.notes == doc["extra"].get("notes", [])
    again = parse_run(export_run(run))  # schema 2 written, read back: the same run
    assert again == run and export_run(again) == export_run(run)
    # as strictly as the leaderboard reads a submission (no coercion: times as ISO text)
    assert parse_run(export_run(run), strict=True) == run


def test_each_kinds_findings_are_typed_fields() -> None:
    model = load("model").payload
    written = json.loads(Path(v1("model")).read_text())["extra"]["model"]
    assert isinstance(model, ModelPayload) and model.model is not None
    assert model.model.parameters == written["parameters"] > 0 and model.break_even == {}
    assert model.break_even_note is not None and model.break_even_note.startswith("no GPU")
    assert model.cost is not None and [r.batch for r in model.cost.rows] == [1, 2]
    assert all(isinstance(r, CostRow) and r.device == "cpu" for r in model.cost.rows)

    tune = load("tune").payload
    assert isinstance(tune, TunePayload)
    assert [c.status for c in tune.candidates] == ["baseline"]
    assert tune.recommendation["cpu"].name == "no recommendation"
    assert tune.recommendation["cpu"].speedup is None

    soak = load("soak").payload
    assert isinstance(soak, SoakPayload) and soak.soak is not None
    assert len(soak.soak.windows) == 20 and soak.soak.unit == "samples/s"
    assert all(w.t1_s > w.t0_s and w.rate and w.clock_mhz == 2600 for w in soak.soak.windows)

    profile = load("profile").payload
    assert isinstance(profile, ProfilePayload) and profile.profile is not None
    p = profile.profile
    assert p.kind == "cpu" and p.schedule.active == 3
    assert sum(c.share for c in p.categories) == pytest.approx(100)
    assert p.ops and p.ops[0].self_us > 0 and p.advice and p.advice[0].command
    assert p.memory is not None and p.memory.peak_bytes == sum(c.bytes for c in p.memory.categories)

    loader = load("loader")
    assert isinstance(loader.payload, ModelPayload) and loader.payload.model is None
    assert loader.config["loader"] == "--loader /tmp/v1mk/tiny_loader.py:make_loader"
    fed = [r for r in loader.results if r.ok and "input" in r.extra]
    assert fed and all(r.extra["input"]["step_s"] > 0 for r in fed)

    ranks = load("ranks")
    assert ranks.config["distributed"]["world_size"] == 2
    (r,) = ranks.results
    assert [x["rank"] for x in r.extra["per_rank"]] == [0, 1] and r.extra["world_size"] == 2
    assert r.extra["ddp"]["backward_comm_s"] > 0 and r.extra["ddp"]["alone"]["samples_s"]

    parts = load("resumed").payload
    assert isinstance(parts, RunPayload) and parts.parts is not None
    assert [p.results for p in parts.parts] == [1, 4]
    assert all(p.started_utc is not None and p.finished_utc is not None for p in parts.parts)


@pytest.mark.parametrize("kind", KINDS)
def test_a_schema_1_run_compares_with_its_schema_2_export(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    new = tmp_path / f"v2-{kind}.json"
    new.write_text(export_run(load(kind)))
    code, out, err = cli(capsys, "compare", v1(kind), str(new))
    assert code == 0, err
    assert out == (GOLDEN / f"cmp-{kind}.txt").read_text()


@pytest.mark.parametrize("kind", KINDS)
def test_a_schema_1_row_in_the_store_loads_typed_and_shows_as_before(
    kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SQLite store written by schema 1 (PostgreSQL: tests/integration/test_store_postgres)."""
    doc = json.loads(Path(v1(kind)).read_text())
    store = open_store(os.environ["TORCHMARK_DB"])
    assert isinstance(store, SQLStore)
    try:
        run_id = store_v1(store, doc)
        stored = store.load(run_id)
    finally:
        store.close()
    assert stored == load(kind).model_copy(update={"results": stored.results})
    assert [r.samples_s for r in stored.results] == [r["samples_s"] for r in doc["results"]]
    code, out, err = cli(capsys, "show", run_id)
    assert code == 0, err
    assert out == (GOLDEN / f"show-{kind}.txt").read_text()


def test_a_newer_document_is_refused_with_the_fix(tmp_path: Path) -> None:
    doc = json.loads(export_run(load("run"))) | {"schema_version": SCHEMA_VERSION + 1}
    path = tmp_path / "new.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        import_run(path)
    assert str(e.value) == (
        f"{path} was written by schema version 3; this torchmark reads up to version 2: "
        "upgrade torchmark (pip install -U torchmark)"
    )
    with pytest.raises(InputError, match="upgrade torchmark"):  # however it comes in
        RunRecord.model_validate(doc)


def test_a_kind_this_torchmark_does_not_know_is_refused_with_the_fix(tmp_path: Path) -> None:
    doc = json.loads(export_run(load("run")))
    doc["kind"] = doc["payload"]["kind"] = "training"
    with pytest.raises(InputError) as e:
        parse_run(json.dumps(doc), "s.json")
    assert str(e.value) == (
        "s.json is not a torchmark run: kind: kind 'training' is not a kind of run "
        "this torchmark knows (run, model, tune, soak, profile, serving, predict, bench): a "
        "newer "
        "torchmark "
        "wrote it; "
        "upgrade torchmark (pip install -U torchmark)"
    )


def test_keys_no_field_names_are_kept_from_old_and_new_documents() -> None:
    doc = json.loads(Path(v1("model")).read_text())
    doc["extra"]["written_by_someone_else"] = {"x": [1, 2]}
    doc["results"][0]["extra"]["a_workloads_own_fact"] = "kept"
    run = RunRecord.model_validate(doc)
    out = json.loads(export_run(run))
    assert out["payload"]["written_by_someone_else"] == {"x": [1, 2]}
    assert out["results"][0]["extra"]["a_workloads_own_fact"] == "kept"
    assert out["results"][0]["extra"]["inputs"] == doc["results"][0]["extra"]["inputs"]


def test_schema_1_spelling_in_a_schema_2_record_is_refused() -> None:
    with pytest.raises(ValueError, match="`extra` is schema 1's field"):
        RunRecord(kind="model", extra={"break_even": {}})
    with pytest.raises(ValueError, match="a 'model' run holds a 'tune' payload"):
        RunRecord(kind="model", payload=TunePayload())
    assert RunRecord(kind="soak").payload == SoakPayload()  # an empty payload of its kind


def test_the_committed_reference_runs_load_typed() -> None:
    from torchmark import reference

    runs = reference.runs()
    assert {r.name for r in runs} >= {"h100-quick", "h200-quick"}
    for r in runs:
        assert r.run is not None and r.run.schema_version == SCHEMA_VERSION
        assert isinstance(r.run.payload, RunPayload) and r.run.results
