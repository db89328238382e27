"""`torchmark profile` on real tiny CPU cases, and its faults: each one clear line."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from clitest import cli
from torchmark.devices import resolve
from torchmark.errors import CaseSkipped
from torchmark.kinds.profile import capture as cap_mod
from torchmark.kinds.profile import categories as c
from torchmark.kinds.profile.capture import ProfileError, capture
from torchmark.report import html
from torchmark.results import RunRecord
from torchmark.workloads.models.mlp import Linear10Workload

FAST = ("--stopping", "test", "--no-ceilings", "-d", "cpu")


class QuietLoad:
    """The profile's reading of other processes' load, quiet: these tests check what a
    profile measures and stores on this machine, whose other jobs come and go; the verdict
    under load is checked on a recorded trace (tests/unit/test_profile_load.py)."""

    def __init__(self, count_processes: bool = False) -> None:
        self.cores = 0.0

    def start(self) -> QuietLoad:
        return self

    def stop(self) -> None:
        return None

    def facts(self) -> dict[str, object]:
        return {"other_cores": 0.0, "logical_cores": 2, "other_processes": 0}


@pytest.fixture(autouse=True)
def _quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark.kinds.profile import kind as profile_run

    monkeypatch.setattr(profile_run, "OtherLoad", QuietLoad)


def shares(out_json: Path) -> dict[str, float]:
    doc = json.loads(out_json.read_text())
    assert doc["kind"] == "profile"
    return {cat["name"]: cat["share"] for cat in doc["payload"]["profile"]["categories"]}


def test_linear10_profile_sums_to_100_and_saves_the_trace(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Which verdict this machine's run earns depends on its load (overhead-bound quiet,
    # "can't tell under load" with other jobs on the 2 cores): that is checked on a recorded
    # trace with a fake load (tests/unit/test_profile_load.py), not here.
    out_json, trace = tmp_path / "run.json", tmp_path / "l10.json"
    args = ("profile", "-w", "linear10", "--scenario", "infer", "--steps", "3", *FAST)
    code, out, err = cli(capsys, *args, "--json", str(out_json), "--trace", str(trace))
    assert code == 0, err
    s = shares(out_json)
    assert sum(s.values()) == pytest.approx(100)
    assert s[c.MATMUL] > 0 and s[c.PYTHON] > 0
    assert "\nverdict: " in out
    assert "profiler overhead" in out and "Top ops by self time" in out
    assert "memory: host RSS peak" in out and "trace caps: 20 active steps" in out
    p = json.loads(out_json.read_text())["payload"]["profile"]
    assert p["steps"] == 3 and p["unprofiled_median_s"] > 0 and p["overhead_pct"] is not None
    assert any(o["name"] == "aten::addmm" and o["flops"] == 2 * 1000 * 10 for o in p["ops"])
    with gzip.open(str(trace) + ".gz", "rt") as f:
        assert any(e.get("name") == "aten::addmm" for e in json.load(f)["traceEvents"])
    # the HTML report's section: a stacked bar whose parts add up, and the top ops
    page = html.render([RunRecord.model_validate_json(out_json.read_text())])
    assert "Profile: where the step's time goes" in page
    bars = re.findall(r'<div class="pbar"[^>]*>(.*?)</div>', page)
    assert len(bars) == 2  # the step's time, and memory at its peak
    for bar in bars:  # each adds up
        widths = [float(w) for w in re.findall(r'<span style="width:([0-9.]+)%', bar)]
        assert sum(widths) == pytest.approx(100, abs=0.01)
    assert '<td title="aten::addmm">aten::addmm</td>' in page


def test_simplenet_train_profile_is_stored_exported_and_imported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'a.db'}"
    args = ("profile", "-w", "simplenet", "--scenario", "train", "--batch", "4", "--steps", "2")
    code, out, err = cli(capsys, *args, *FAST, "--db", db, "-v")
    assert code == 0, err
    assert "rules:" in out and "addmm" in out  # -v prints every regex
    # memory by what it holds, from torch's memory profiler: a train step has them all
    assert "Memory at the step's peak" in out and "CPUAllocator" not in err
    mem = json.loads(cli(capsys, "export", "latest", "--db", db)[1])["payload"]["profile"]["memory"]
    held = {m["name"]: m["bytes"] for m in mem["categories"]}
    assert sum(held.values()) == mem["peak_bytes"] > 0
    assert held["parameters"] > 0 and held["activations"] + held["gradients"] > 0
    exported = tmp_path / "run.json"
    assert cli(capsys, "export", "latest", "--db", db, "-o", str(exported))[0] == 0
    s = shares(exported)
    assert sum(s.values()) == pytest.approx(100) and s[c.MATMUL] > 0
    other = f"sqlite:///{tmp_path / 'b.db'}"
    assert cli(capsys, "import", str(exported), "--db", other)[0] == 0
    code, out, _ = cli(capsys, "export", "latest", "--db", other)
    assert code == 0 and json.loads(out)["payload"]["profile"]["categories"]


def test_a_case_that_cannot_run_is_one_line_and_the_run_is_kept(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: object, case: object) -> None:
        raise CaseSkipped("the model cannot be built here")

    monkeypatch.setattr(Linear10Workload, "prepare", broken)
    db = f"sqlite:///{tmp_path / 'a.db'}"
    code, out, err = cli(
        capsys, "profile", "-w", "linear10", "--scenario", "infer", *FAST, "--db", db
    )
    assert code == 1
    assert "cannot profile linear10/infer" in err and "cannot be built" in err
    assert len(err.strip().splitlines()) == 1
    code, out, _ = cli(capsys, "history", "--db", db)
    assert "profile" in out and "incomplete" in out


def test_bad_steps_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "profile", "-w", "linear10", "--steps", "50", *FAST)
    assert code == 2 and "1 to 20 active steps" in err


def step_fn() -> None:
    import torch

    torch.ones(8).add_(1)


def test_a_step_that_fails_under_the_profiler() -> None:
    def fails() -> None:
        raise RuntimeError("boom")

    with pytest.raises(ProfileError, match="the step failed under the profiler: RuntimeError"):
        capture(fails, resolve("cpu")[0], active=1)


def test_a_trace_over_the_event_cap_is_refused() -> None:
    with pytest.raises(ProfileError, match=r"events, above the cap of 5; profile fewer --steps"):
        capture(step_fn, resolve("cpu")[0], active=1, max_events=5)


def test_a_profile_that_captured_no_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cap_mod, "_export", lambda prof: {"traceEvents": []})
    with pytest.raises(ProfileError, match="captured no steps"):
        capture(step_fn, resolve("cpu")[0], active=1)


def test_a_real_cpu_capture_adds_up_per_step() -> None:
    got = capture(step_fn, resolve("cpu")[0], active=3)
    bd = got.breakdown
    assert bd.kind == "cpu" and bd.steps == 3
    assert sum(bd.categories.values()) == pytest.approx(bd.wall_us)
    assert bd.ops["aten::add_"].calls == 3 and bd.ops["aten::add_"].category == c.ELEMENTWISE


CNN = f"{Path(__file__).parents[1] / 'fixtures' / 'user_models'}/cnn.py:make_model"


def test_the_users_model_is_profiled_like_a_builtin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_json = tmp_path / "run.json"
    args = ("profile", CNN, "--input", "3x16x16", "--batch", "2", "--steps", "2", *FAST)
    code, out, err = cli(capsys, *args, "--json", str(out_json))
    assert code == 0, err
    assert "Profile of cnn.py:make_model/e2e b=2 on cpu" in out
    s = shares(out_json)
    assert sum(s.values()) == pytest.approx(100) and s[c.MATMUL] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-w", "linear10", CNN), "a built-in --workload NAME or your model's SPEC (not both)"),
        ((), "a built-in --workload NAME or your model's SPEC (not both)"),
        (("-w", "linear10", "--input", "8"), "--input/--inputs go with a SPEC"),
        (
            (CNN, "--input", "3x16x16", "--check"),
            "for your model run `torchmark tune " + CNN + " --input 3x16x16`",
        ),
    ],
)
def test_target_mistakes_are_one_line(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, _, err = cli(capsys, "profile", *args, *FAST)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_check_measures_each_suggested_variant_against_the_profiled_case(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.kinds.profile import advice

    # linear10 reads overhead-bound, which suggests compile (~1 min to compile here): the
    # check itself is what is tested, on a variant measured in seconds
    monkeypatch.setattr(advice, "candidates", lambda p, params: [("amp-bf16", "because")])
    out_json = tmp_path / "run.json"
    args = ("profile", "-w", "linear10", "--scenario", "infer", "--steps", "2", "--no-memory")
    code, out, err = cli(capsys, *args, *FAST, "--check", "--json", str(out_json))
    assert code == 0, err
    flat = " ".join(out.split())
    assert "- amp-bf16: because" in flat
    # the command on one line however narrow the terminal: it copies whole
    assert (
        "    $ torchmark run -w linear10 --scenario infer --batch 1000 -d cpu --precision fp32 "
        "--precision amp-bf16\n" in out
    )
    doc = json.loads(out_json.read_text())
    checked = doc["payload"]["profile"]["advice"][0]["checked"]
    # measured and judged, or skipped with the reason (a CPU without bf16)
    assert checked["status"] != "ok" or checked["verdict"] in (
        "FASTER",
        "SLOWER",
        "SAME",
        "UNCLEAR",
    )
    assert ("measured:" in flat) == (checked["status"] == "ok")
    assert len(doc["results"]) == (2 if checked["status"] in ("ok", "skipped") else 1)


def test_flops_per_call_are_keyed_as_the_trace_names_each_call() -> None:
    # a kernel finds its launching call's FLOPs by name and input shapes: the two sides
    # (torch's key_averages, the trace's Input Dims) must spell them alike
    import torch

    a, b, m = torch.randn(64, 32), torch.randn(32, 16), torch.randn(48, 48)
    got = capture(lambda: (a @ b, m @ m), resolve(("cpu",))[0], active=2)
    mms = [
        e for e in got.trace["traceEvents"] if e.get("name") == "aten::mm" and e.get("ph") == "X"
    ]
    keys = {c.call_key("aten::mm", e["args"]["Input Dims"]) for e in mms}
    assert len(keys) == 2
    assert {got.flops_by_call[k] for k in keys} == {2 * 64 * 32 * 16, 2 * 48**3}


@pytest.mark.parametrize(("name", "odd"), [("gpt2", 500), ("gpt2-padded", None)])
def test_a_real_profile_keeps_gemm_shapes_and_finds_the_odd_vocabulary(
    name: str, odd: int | None
) -> None:
    """A tiny GPT-2 over a 500-token vocabulary, trained under bf16 autocast: the profile
    keeps each GEMM's shapes and dtype, and the LM head's 500 is the misaligned dimension;
    padded to 512, no dimension is."""
    from torchmark.kinds.profile.advice import misaligned
    from torchmark.kinds.profile.ops import gemm_rows
    from torchmark.workloads import WORKLOADS, Case, load_builtins

    load_builtins()
    # 64 tokens: GEMMs with a dimension under 64 are matrix-vector work, not checked
    params = {"scenario": "train", "precision": "amp-bf16", "batch": 1, "seq": 64}
    case = Case(name, "train", resolve("cpu")[0], (*params.items(), ("layers", 1), ("vocab", 500)))
    prepared = WORKLOADS.get(name)().prepare(case)
    try:
        got = capture(prepared.fn, case.device, active=1)
    finally:
        if prepared.teardown:
            prepared.teardown()
    rows = gemm_rows(got.breakdown)
    assert rows and all(r["share"] > 0 and r["calls"] >= 1 for r in rows)
    assert any(r["dtype"] == "c10::BFloat16" for r in rows)
    # every GEMM shape of the step is kept: 5 GEMMs, forward and two backward each
    assert len(rows) == 15
    found = misaligned({"gemms": rows})
    assert (found[0] if found else None) == odd


def test_check_measures_the_padded_twin_on_the_same_case(monkeypatch: pytest.MonkeyPatch) -> None:
    """The padding advice (a GPU's finding, put here by hand) is checked by measuring the
    very case on gpt2-padded, stored beside it and judged against the unprofiled median."""
    from torchmark.kinds.profile import kind as run_mod
    from torchmark.kinds.profile.advice import Advice
    from torchmark.run.config import RunConfig
    from torchmark.workloads import WORKLOADS, Case, load_builtins

    load_builtins()
    pad = Advice("pad 500 to 512", "because", "torchmark run ...", "gpt2-padded", "shape")
    monkeypatch.setattr(run_mod, "advise", lambda *a, **k: [pad])
    params = {"scenario": "train", "precision": "fp32", "batch": 1, "seq": 8}
    case = Case(
        "gpt2", "train", resolve("cpu")[0], (*params.items(), ("layers", 1), ("vocab", 500))
    )
    cfg = RunConfig(devices=("cpu",), rule="test", ceilings=False, telemetry=False)
    record, _ = run_mod.profile(
        cfg, None, active=1, memory=False, check=True, target=(WORKLOADS.get("gpt2")(), case, [])
    )
    checked = record.payload.profile.advice[0].checked
    assert checked.status == "ok" and checked.verdict in (
        "FASTER",
        "SLOWER",
        "SAME",
        "UNCLEAR",
    )
    twin = record.results[-1]
    assert (twin.workload, twin.params) == ("gpt2-padded", dict(case.params))
    assert any(n.startswith("vocabulary padded from 500 to 512") for n in twin.notes)
