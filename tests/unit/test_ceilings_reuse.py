"""A quiet ceiling set reused on purpose (``--ceilings quiet|RUN``), a set measured under
other load kept with its run and out of the cache, and the dry run's estimate reading the
cache."""

from __future__ import annotations

from html import unescape
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from clitest import cli
from torchmark.devices import Device
from torchmark.errors import InputError
from torchmark.results import Ceiling, Work
from torchmark.run import plan, runner
from torchmark.run.config import RunConfig
from torchmark.testing import MemoryStore
from torchmark.workloads import Case, PlanOptions, Prepared, Workload


class One(Workload):
    name: ClassVar[str] = "one"
    summary: ClassVar[str] = "test workload"

    def cases(self, device: Device, opts: PlanOptions) -> list[Case]:
        return [Case("one", "v", device, (("i", 0),))]

    def prepare(self, case: Case) -> Prepared:
        x = torch.randn(64)
        return Prepared(
            fn=lambda: x + x, work=Work(bytes=3 * 64 * 4), headline="bytes", ceiling="bandwidth"
        )


class Load:
    """OtherLoad as a fake: the cores other processes use, whatever this machine's load."""

    cores = 0.1
    logical_cores = 2

    def __enter__(self) -> Load:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Each measurement of the ceilings returns the next bandwidth; Load.cores is the
    other load it sees."""
    from torchmark import ceilings

    values = [1e9, 2e9, 3e9]

    def measure(device: Device, *, quick: bool) -> list[Ceiling]:
        return [
            Ceiling(
                device=device.name, key="bandwidth", value=values.pop(0), unit="B/s", method="m"
            )
        ]

    monkeypatch.setattr(ceilings, "measure", measure)
    monkeypatch.setattr(runner, "OtherLoad", Load)
    monkeypatch.setattr(Load, "cores", 0.1)
    monkeypatch.setattr(plan, "select_workloads", lambda cfg: {"one": One()})
    return values


CFG = RunConfig(devices=("cpu",), rule="test", telemetry=False)


def cfg(**changed: object) -> RunConfig:
    """CFG with some of its fields changed."""
    return RunConfig(**{**CFG.as_dict(), **changed})


def bandwidth(record: object) -> float:
    (c,) = record.ceilings  # type: ignore[attr-defined]
    return float(c.value)


def test_a_loaded_set_stays_with_its_run_and_quiet_reuses_the_cached_one(
    measured: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    quiet = runner.run(CFG, store)
    monkeypatch.setattr(Load, "cores", 1.2)
    loaded = runner.run(cfg(remeasure_ceilings=True), store)
    (c,) = loaded.ceilings
    assert c.value == 2e9 and c.details["competing_load_cores"] == 1.2  # kept, marked
    assert "not cached" in c.method
    reused = runner.run(cfg(ceilings_from="quiet"), store)
    assert bandwidth(reused) == bandwidth(quiet) == 1e9  # the quiet set, not the loaded one
    assert measured == [3e9]  # nothing measured for the reuse


def test_load_below_the_judges_threshold_on_a_gpu_still_caches(
    measured: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    # what "other load" is comes from judge.load: a GPU's ceilings need one free host core,
    # so 0.6 of 16 cores is quiet there (it was called loaded and never cached)
    from torchmark.testing import FakeClock, FakeH100

    monkeypatch.setattr(Load, "cores", 0.6)
    monkeypatch.setattr(Load, "logical_cores", 16)
    found, quiet = runner.measure_device_ceilings(FakeH100(FakeClock()), CFG)
    assert quiet and "competing_load_cores" not in found[0].details
    cpu = next(iter(plan.make_plan(CFG).devices))
    found, quiet = runner.measure_device_ceilings(cpu, CFG)
    assert not quiet and found[0].details["competing_load_cores"] == 0.6


def test_ceilings_from_a_stored_run_reuses_it_and_refuses_a_loaded_one(
    measured: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = MemoryStore()
    first = runner.run(CFG, store)
    monkeypatch.setattr(Load, "cores", 1.5)
    loaded = runner.run(cfg(remeasure_ceilings=True), store)
    assert first.run_id and loaded.run_id
    again = runner.run(cfg(ceilings_from=first.run_id), store)
    assert bandwidth(again) == 1e9
    cpu = next(iter(plan.make_plan(CFG).devices))
    env = again.environment
    with pytest.raises(InputError, match=r"under other load \(1\.5 cores\); give quiet"):
        runner.reused_ceilings(loaded.run_id, cpu, store, env)
    with pytest.raises(InputError, match="no such run; give quiet or a run id"):
        runner.reused_ceilings("nope", cpu, store, env)
    other = {**env, "host": "elsewhere"}
    with pytest.raises(InputError, match="on another machine"):
        runner.reused_ceilings(first.run_id, cpu, store, other)
    with pytest.raises(InputError, match="no quiet ceilings of cpu cached"):
        runner.reused_ceilings("quiet", cpu, MemoryStore(), env)


def test_run_ceilings_quiet_says_so_or_names_the_fix(
    measured: list[float], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "r.db")
    args = ("run", "-d", "cpu", "-w", "one", "--stopping", "test", "--no-telemetry", "--db", db)
    code, out, err = cli(capsys, *args, "--ceilings", "quiet")
    assert code == 2 and "--ceilings quiet: no quiet ceilings of cpu cached" in err
    assert "drop --ceilings" in err
    assert cli(capsys, *args)[0] == 0  # measures and caches the quiet set
    code, out, err = cli(capsys, *args, "--ceilings", "quiet")
    assert code == 0, err
    said = " ".join(out.split())
    assert "ceilings of cpu: the quiet set measured " in said
    assert "(--ceilings quiet), not measured again" in said
    assert measured == [2e9, 3e9]
    code, _, err = cli(capsys, *args, "--ceilings", "quiet", "--no-ceilings")
    assert code == 2 and "not both" in err


def test_dry_run_leaves_cached_ceilings_out_of_the_estimate(
    measured: list[float], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db = str(tmp_path / "r.db")
    args = ("run", "-d", "cpu", "-w", "one", "--stopping", "test", "--no-telemetry", "--db", db)
    code, out, _ = cli(capsys, *args, "--dry-run")
    assert code == 0 and "for ceilings not cached yet" in " ".join(out.split())
    assert cli(capsys, *args)[0] == 0  # caches them
    code, out, _ = cli(capsys, *args, "--dry-run")
    assert code == 0 and "not cached yet" not in " ".join(out.split())


def test_reports_of_several_runs_hold_them_against_one_quiet_set(
    measured: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.report import html, markdown

    store = MemoryStore()
    quiet = runner.run(CFG, store)
    monkeypatch.setattr(Load, "cores", 1.2)
    loaded = runner.run(cfg(remeasure_ceilings=True), store)
    from torchmark.judge.ceilings import one_set

    (a, b), notes = one_set([quiet, loaded])
    assert notes == ["% of ceiling on cpu: A and B against A's quiet ceilings, one set for all"]
    assert b.results[0].ceiling == quiet.ceilings[0] and b.ceilings == quiet.ceilings
    own = loaded.results[0].pct_of_ceiling  # against its own loaded 2 GB/s
    assert own is not None and b.results[0].pct_of_ceiling == pytest.approx(2 * own)
    assert a == quiet
    text = " ".join(markdown.render([quiet, loaded]).split())
    assert "Note: % of ceiling on cpu: A and B against A's quiet ceilings" in text
    page = unescape(html.render([quiet, loaded]))
    assert "A and B against A's quiet ceilings" in page


def test_reports_say_when_every_set_was_measured_under_load(
    measured: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.judge.ceilings import one_set
    from torchmark.report import markdown

    monkeypatch.setattr(Load, "cores", 1.2)
    store = MemoryStore()
    first = runner.run(CFG, store)
    second = runner.run(CFG, store)  # nothing quiet cached: measured again, under load
    (a, b), notes = one_set([first, second])
    assert (a, b) == (first, second)  # each keeps its own set: none is better
    said = "% of ceiling on cpu not compared: A's and B's ceilings were measured under load"
    assert notes == [said]
    assert said in " ".join(markdown.render([first, second]).split())
    assert one_set([first]) == ([first], [])  # one run compares nothing


def test_profile_and_model_refuse_a_missing_quiet_set_before_a_run_is_stored(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from torchmark.kinds.model.kind import benchmark_model
    from torchmark.store import open_store

    db = str(tmp_path / "r.db")
    code, _, err = cli(
        capsys, "profile", "-w", "linear10", "-d", "cpu", "--scenario", "infer", "--steps",
        "1", "--stopping", "test", "--ceilings", "quiet", "--db", db,
    )  # fmt: skip
    assert code == 2 and "--ceilings quiet: no quiet ceilings of cpu cached" in err
    assert open_store(db).list_runs() == []  # no empty run left behind
    store = MemoryStore()
    with pytest.raises(InputError, match="no quiet ceilings of cpu cached"):
        benchmark_model(
            torch.nn.Linear(4, 4), torch.randn(2, 4), devices="cpu", store=store,
            ceilings_from="quiet", telemetry=False,
        )  # fmt: skip
    assert store.runs == {}


def test_a_library_run_refuses_a_missing_quiet_set_before_a_run_is_stored(
    measured: list[float],
) -> None:
    store = MemoryStore()
    with pytest.raises(InputError, match="no quiet ceilings of cpu cached"):
        runner.run(cfg(ceilings_from="quiet"), store)
    assert store.runs == {} and measured == [1e9, 2e9, 3e9]
