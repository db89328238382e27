"""`torchmark run` plans the suite once: its workloads are built and its devices resolved
once, whether it checks the options, shows the plan (--dry-run) or measures it."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import pytest

from clitest import cli
from torchmark.run import plan
from torchmark.run.record import new_record


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    counted: Counter[str] = Counter()

    def counting(name: str) -> Any:
        real = getattr(plan, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counted[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(plan, name, wrapper)

    for name in ("make_plan", "select_workloads", "resolve"):
        counting(name)
    return counted


ONCE = Counter({"make_plan": 1, "select_workloads": 1, "resolve": 1})


def test_dry_run_with_options_plans_once(
    capsys: pytest.CaptureFixture[str], calls: Counter[str]
) -> None:
    code, out, err = cli(
        capsys, "run", "-d", "cpu", "-w", "add", "-w", "matmul", "--precision", "bf16",
        "--size", "256", "--dry-run",
    )  # fmt: skip
    assert code == 0, err
    assert calls == ONCE
    # the output as before planning was shared: the note, then the plan
    assert out.splitlines()[:6] == [
        "note: --precision bf16 is ignored by add",
        "2 planned cases on cpu",
        "workload  case      ",
        "────────────────────",
        "add       fp32 n=256",
        "matmul    bf16 n=256",
    ]
    # then the sizes chosen and why, and the plan's estimated time and memory
    tail = out.splitlines()[6:]
    assert [line.split(":")[0] for line in tail[:3]] == [
        "sizes",
        "estimate of wall time",
        "estimate of peak memory",
    ]


def test_dry_run_says_what_the_run_would_say_with_its_plan(
    capsys: pytest.CaptureFixture[str], calls: Counter[str]
) -> None:
    # the README: "the plan says the data's size"; --dry-run is where a user reads the plan
    code, out, err = cli(capsys, "run", "-d", "cpu", "-w", "input", "--size", "64", "--dry-run")
    assert code == 0, err
    assert calls == ONCE
    lines = out.splitlines()
    n = lines[0].split()[0]  # the worker counts swept follow the cores here
    assert lines[0] == f"{n} planned cases on cpu"
    assert lines[-1].startswith(f"input on cpu: {n} cases; a call is an epoch of 64 JPEGs")
    assert "(4 batches of 16, written once to the cache dir)" in lines[-1]


def test_a_run_with_options_plans_once_and_measures_that_plan(
    capsys: pytest.CaptureFixture[str], calls: Counter[str]
) -> None:
    code, _, err = cli(
        capsys, "run", "-d", "cpu", "-w", "add", "--size", "4096", "--stopping", "test",
        "--no-ceilings", "--no-telemetry",
    )  # fmt: skip
    assert code == 0, err
    assert calls == ONCE
    code, out, _ = cli(capsys, "history", "--json")
    assert code == 0
    (run,) = json.loads(out)
    assert (run["kind"], run["status"], run["ok"], run["total"]) == ("run", "complete", 1, 1)


def test_an_unused_option_is_still_refused_before_anything_is_measured(
    capsys: pytest.CaptureFixture[str], calls: Counter[str]
) -> None:
    code, _, err = cli(capsys, "run", "-d", "cpu", "-w", "add", "--batch", "8")
    assert code == 2
    assert err.strip().splitlines() == [
        "error: --batch 8 is not used by any planned workload (add): drop it, or choose a "
        "--workload that uses it"
    ]
    assert calls == ONCE
    code, out, _ = cli(capsys, "history", "--json")
    assert code == 0 and json.loads(out) == []


def test_a_size_for_collectives_on_one_process_names_the_ranks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One process plans collectives as the one row that says they need ranks: --size is
    unused there, and the fix is ranks, not another workload."""
    code, _, err = cli(capsys, "run", "-d", "cpu", "-w", "collectives", "--size", "1024")
    assert code == 2
    assert err.strip().splitlines() == [
        "error: --size 1024 is not used by any planned workload (collectives): collectives "
        "measure across ranks: add --nproc-per-node N"
    ]


def test_a_resume_plans_the_stored_options_once(
    capsys: pytest.CaptureFixture[str], calls: Counter[str]
) -> None:
    from torchmark.devices.cpu import CPUDevice
    from torchmark.run.config import RunConfig
    from torchmark.store import open_store

    # CPUDevice.info() is cached for the process; a test that fakes the LLC size leaves its
    # own there, and the resume would rightly refuse that environment
    CPUDevice.info.cache_clear()
    cfg = RunConfig(devices=("cpu",), workloads=("add",), sizes=(256, 512))
    record = new_record("run", cfg.as_dict(), [CPUDevice()])
    record.status = "incomplete"
    store = open_store(os.environ["TORCHMARK_DB"])
    run_id = store.save(record)
    store.close()
    code, out, err = cli(capsys, "run", "--resume", "latest", "--dry-run")
    assert code == 0, err
    assert calls == ONCE  # through make_plan, as a new run plans
    assert out.splitlines()[:2] == [
        f"resuming run {run_id}: 0 of 2 cases done, 2 to go",
        "2 planned cases on cpu",
    ]


def test_dry_run_of_a_scaling_ladder_lists_its_rungs_and_refuses_as_the_ladder_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["run", "-d", "cpu", "-w", "simplenet", "--batch", "8", "--precision", "fp32"]
    code, out, err = cli(capsys, *args, "--scenario", "train", "--scaling", "1,2", "--dry-run")
    assert code == 0, err
    assert out.splitlines()[:4] == [
        "scaling ladder, rung 1/3: no DDP (this process)",
        "scaling ladder, rung 2/3: DDP x1 (torchrun launcher, 1 local rank)",
        "scaling ladder, rung 3/3: DDP x2 (torchrun launcher, 2 local ranks)",
        "1 planned case on cpu",
    ]
    code, _, err = cli(capsys, *args, "--scenario", "infer", "--scaling", "1,2", "--dry-run")
    assert code == 2 and "add --scenario train" in err
    code, out, _ = cli(capsys, "history", "--json")
    assert code == 0 and json.loads(out) == []  # nothing started, nothing stored


def test_dry_run_under_ranks_plans_what_the_ranks_will_measure(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["run", "-d", "cpu", "-w", "collectives", "--size", "1024", "--dry-run"]
    code, out, err = cli(capsys, *args, "--nproc-per-node", "2", "--precision", "all_reduce")
    assert code == 0, err  # --size is used by the ranks, not refused as unused
    assert out.splitlines()[:5] == [  # then the sizes and the estimate
        "world size 2: every rank measures these cases together",
        "1 planned case on cpu",
        "workload     case                         ",
        "──────────────────────────────────────────",
        "collectives  all_reduce bytes=1024 ranks=2",
    ]
    code, _, err = cli(capsys, "run", "-w", "simplenet", "--strategy", "fsdp", "--dry-run")
    assert code == 2 and "--strategy applies to ranks" in err  # as the run would refuse it
    code, out, err = cli(capsys, *args, "--nproc-per-node", "2", "--strategy", "fsdp")
    assert code == 0, err
    # alone, a process plans the one row that says collectives need ranks
    code, out, err = cli(capsys, "run", "-d", "cpu", "-w", "collectives", "--dry-run")
    assert code == 0, err
    rows = [line for line in out.splitlines() if line.startswith("collectives")]
    assert rows[-1].split() == ["collectives", "all", "ranks=1"]  # the plan's last row
