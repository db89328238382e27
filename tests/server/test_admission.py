"""The one admission module, as the server, `submit --dry-run` and `import` use it: huge
integers and NaN refused as the JSON is read (they were a 500 and a stored NaN), samples
bounded by the run's own duration, the run's verdict judged from its results, serving
error maps bounded, look-alike case names refused, CPU bounds from the hardware
catalogue (never from the submitter's core count), and `serving --p99-ms` bounded like
the board."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from boardtest import builtin_run, doc, make_run
from torchmark.hardware import catalog
from torchmark.results import Verdict, Work
from torchmark.results.serving import MAX_ERRORS, OTHER_ERRORS, bound_errors
from torchmark.store.exchange import export_run, import_run
from torchmark.web import admission
from torchmark.web.accounts import Accounts

Server = tuple[TestClient, str, Accounts]


def post(server: Server, payload: bytes, path: str = "/api/v1/runs") -> Any:
    client, token, _ = server
    return client.post(path, content=payload, headers={"Authorization": f"Bearer {token}"})


def add_run(model: str, gbs: float, **cpu: Any) -> dict[str, Any]:
    """The built-in `add` of 268M float32 on cpu at ``gbs`` GB/s, in a 1-minute run."""
    run = builtin_run()
    n, nbytes = 268435456, 3221225472.0
    t = nbytes / (gbs * 1e9)
    run.results[0] = run.results[0].model_copy(
        update={
            "workload": "add",
            "variant": "float32",
            "params": {"n": n},
            "samples_s": [t] * 12,
            "work": Work(flops=float(n), bytes=nbytes, items=float(n), item_unit="elem"),
            "headline": "bytes",
        }
    )
    run.finished_utc = run.created_utc + timedelta(seconds=60)
    d = doc(run)
    d["environment"]["devices"]["cpu"] = {"kind": "cpu", "model": model} | cpu
    return d


def test_a_huge_integer_is_a_422_on_every_route(server: Server) -> None:
    payload = json.dumps(doc(builtin_run())).replace('"pid": 4242', '"pid": ' + "9" * 5001)
    for path in ("/api/v1/runs", "/api/v1/place"):
        r = post(server, payload.encode(), path)
        assert r.status_code == 422, (path, r.text[:200])
        assert "5,001 digits" in r.json()["detail"]


def test_a_nan_load_average_is_refused(server: Server) -> None:
    d = doc(builtin_run())
    d["environment"]["loadavg"] = [0.5, 0.5, 0.5]
    payload = json.dumps(d).replace("[0.5, 0.5, 0.5]", "[NaN, 0.5, 0.5]")
    r = post(server, payload.encode())
    assert r.status_code == 422 and "NaN is no number" in r.json()["detail"]


def test_samples_past_the_runs_own_duration_are_refused(server: Server) -> None:
    run = make_run()
    run.results[0] = run.results[0].model_copy(update={"samples_s": [1e6] * 10})
    run.finished_utc = run.created_utc + timedelta(seconds=0.8)
    r = post(server, json.dumps(doc(run)).encode())
    assert r.status_code == 422, r.text
    assert "add up to 1e+07 s, more than the run's own 0.8 s" in r.json()["detail"]
    # the same samples in a run that lasted long enough are a measurement's
    run.finished_utc = run.created_utc + timedelta(seconds=2e7)
    assert admission.over_duration(run) is None


def test_the_runs_verdict_is_judged_from_its_results(server: Server) -> None:
    run = make_run(verdict="invalid")
    run.verdict = Verdict(level="ok")
    r = post(server, json.dumps(doc(run)).encode())
    assert r.status_code == 201, r.text
    stored = TestClient.get(server[0], f"/api/v1/runs/{r.json()['run_id']}").json()
    assert stored["verdict"]["level"] == "invalid"


def test_error_maps_keep_their_first_messages_and_a_count() -> None:
    errors = {f"ValueError: id {i}": 2 for i in range(8328)}
    bounded = bound_errors(errors)
    assert len(bounded) == MAX_ERRORS + 1
    assert list(bounded)[:MAX_ERRORS] == list(errors)[:MAX_ERRORS]
    assert bounded[OTHER_ERRORS] == 2 * (8328 - MAX_ERRORS)
    assert sum(bounded.values()) == sum(errors.values())
    assert bound_errors({"a": 1}) == {"a": 1}


def test_a_serving_runs_error_flood_is_stored_bounded() -> None:
    path = Path(__file__).parents[1] / "fixtures" / "runs" / "serving-cpu.json"
    sent = import_run(path)
    point = sent.payload.serving.fleets[0].points[0]  # type: ignore[union-attr]
    point.errors = {f"RuntimeError: shape {i}": 1 for i in range(500)}
    run = admission.checked(json.loads(export_run(sent)), "the run")
    kept = run.payload.serving.fleets[0].points[0].errors  # type: ignore[union-attr]
    assert len(kept) == MAX_ERRORS + 1 and kept[OTHER_ERRORS] == 500 - MAX_ERRORS


@pytest.mark.parametrize(
    ("name", "said"),
    [("аdd", "U+0430 CYRILLIC SMALL LETTER A"), ("ａｄｄ", "FULLWIDTH"), ("mаtmul", "'matmul'")],
)
def test_a_case_name_spelt_with_look_alikes_is_refused(
    server: Server, name: str, said: str
) -> None:
    d = doc(builtin_run())
    d["results"][0]["workload"] = name
    r = post(server, json.dumps(d).encode())
    assert r.status_code == 422, r.text
    assert said in r.json()["detail"] and "reads as" in r.json()["detail"]


def test_a_name_wholly_in_another_script_is_a_name() -> None:
    run = make_run()
    run.results[0] = run.results[0].model_copy(update={"workload": "модель"})
    assert admission.confusable(run) is None


def test_a_forged_core_count_is_refused_and_never_raises_the_bound(server: Server) -> None:
    r = post(server, json.dumps(add_run("AMD EPYC", 50, physical_cores=100000)).encode())
    assert r.status_code == 422
    assert "100,000 cores; a AMD EPYC (model hidden) has at most 768" in r.json()["detail"]
    # the bound is the catalogue's, whatever the document says: 2,517 GB/s from the VM
    # that measures 3-33 GB/s is refused with its cores left out, with 512 claimed, and
    # with a 1 TB last-level cache claimed (which made the old bound an in-cache one)
    for cpu in ({}, {"physical_cores": 512}, {"llc_bytes": 10**12}):
        r = post(server, json.dumps(add_run("AMD EPYC", 2517, **cpu)).encode())
        assert r.status_code == 422, r.text
        assert "AMD EPYC (model hidden) in the hardware catalogue" in r.json()["detail"]
    assert post(server, json.dumps(add_run("AMD EPYC", 30)).encode()).status_code == 201


def test_the_catalogue_bounds_every_reference_measurement() -> None:
    """Bounds below a real measurement would refuse honest runs: each committed reference
    run's CPU ceilings are under its catalogued row's figures."""
    from torchmark import reference

    for name in ("h100-quick", "h200-quick"):
        d = json.loads((Path(reference.__file__).parent / f"{name}.json").read_text())["run"]
        cpu = catalog.cpu(d["environment"]["devices"]["cpu"]["model"])
        assert cpu is not None, name
        for c in d["ceilings"]:
            if c["device"] != "cpu":
                continue
            if c["key"].startswith("bandwidth"):
                assert c["value"] < cpu.dram_bps, (name, c)
            if c["key"].startswith("matmul:"):
                assert c["value"] < cpu.flops(c["key"] != "matmul:float32"), (name, c)
            if c["key"] in cpu.measured:
                assert c["value"] <= cpu.measured[c["key"]], (name, c)
    assert catalog.cpu("an unknown CPU") is None
    assert catalog.any_cpu().max_threads >= max(r.max_threads for r in catalog.cpus())


def test_import_applies_the_boards_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from clitest import cli

    run = make_run()
    run.results[0] = run.results[0].model_copy(update={"samples_s": [5e-324] * 12})
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(doc(run)))
    code, out, err = cli(capsys, "import", str(path))
    assert code == 2, out + err
    assert "no timer resolves less than" in err and "Traceback" not in err
    assert "No runs stored" in "".join(cli(capsys, "history")[1:])  # nothing stored


def test_serving_p99_bound_past_an_hour_is_refused_locally() -> None:
    from torchmark.errors import InputError
    from torchmark.kinds.serving.kind import ServingConfig, validate

    with pytest.raises(InputError, match="at most 3600000"):
        validate(ServingConfig(model="m.py:make", p99_ms=1e9))


def test_a_run_keeps_its_local_id_on_the_board(server: Server) -> None:
    run = make_run()
    run.run_id = "20261206-101010-abcd"
    assert post(server, json.dumps(doc(run)).encode()).json()["run_id"] == run.run_id
    # taken (another machine's run, the same id): a new one; any other text: a new one
    again = make_run(scale=2.0)
    again.run_id = "20261206-101010-abcd"
    assert post(server, json.dumps(doc(again)).encode()).json()["run_id"] != run.run_id
    odd = make_run(scale=3.0)
    odd.run_id = "../<x>"
    assert post(server, json.dumps(doc(odd)).encode()).json()["run_id"] != "../<x>"


def test_report_html_draws_a_stored_run_of_5e_324_s_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`import` refuses such samples now; a store written before keeps them, and its
    report is drawn, never a traceback."""
    import os

    from clitest import cli
    from torchmark.store import open_store

    run = make_run()
    run.results[0] = run.results[0].model_copy(update={"samples_s": [5e-324] * 12})
    store = open_store(os.environ["TORCHMARK_DB"])
    try:
        run_id = store.save(run)
    finally:
        store.close()
    out = tmp_path / "r.html"
    code, _, err = cli(capsys, "report", run_id, "--html", str(out))
    assert code == 0 and "Traceback" not in err, err
    assert out.stat().st_size > 0
