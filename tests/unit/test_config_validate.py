"""Run options checked before anything is measured."""

from __future__ import annotations

from dataclasses import replace

import pytest

from torchmark.devices.host import available_cores
from torchmark.errors import InputError
from torchmark.run.config import RunConfig, ignored_options, validate


@pytest.mark.parametrize("sizes", [(0,), (-5,), (1024, 0)])
def test_a_size_below_one_is_refused(sizes: tuple[int, ...]) -> None:
    # Before: `--size 0` measured nothing and stored a "complete" run with 0 results, exit 0.
    with pytest.raises(InputError, match=r"--size takes sizes >= 1, got (0|-5)"):
        validate(RunConfig(sizes=sizes))


def test_more_threads_than_cores_is_refused() -> None:
    # Before: --threads 999 was accepted on a 2-core machine.
    cores = available_cores()
    assert validate(RunConfig(threads=cores)).threads == cores
    with pytest.raises(InputError, match=rf"--threads {999 + cores} is more than the {cores}"):
        validate(RunConfig(threads=999 + cores))
    with pytest.raises(InputError) as e:
        validate(RunConfig(threads=cores + 1))
    assert f"pass --threads {cores} or fewer" in str(e.value)


def test_options_no_planned_workload_uses_are_named() -> None:
    # Before: --precision and --batch were silently ignored by micro workloads.
    from torchmark.devices import resolve
    from torchmark.run.plan import plan, select_workloads

    def planner(cfg: RunConfig):  # type: ignore[no-untyped-def]
        return plan(select_workloads(cfg), resolve(cfg.devices), cfg)

    base = RunConfig(devices=("cpu",), suite="quick", workloads=("add",))
    assert ignored_options(base, planner) == []
    notes = ignored_options(replace(base, precisions=("bf16",), batches=(4,)), planner)
    assert notes == [
        "--precision bf16 is not used by any planned workload (add)",
        "--batch 4 is not used by any planned workload (add)",
    ]
    mixed = replace(base, workloads=("add", "matmul"), precisions=("bf16",))
    assert ignored_options(mixed, planner) == ["--precision bf16 is ignored by add"]
    assert ignored_options(replace(base, sizes=(4096,)), planner) == []


def test_an_option_equal_to_a_workloads_default_is_not_ignored() -> None:
    # `run -w gpt2 -w gpt2-padded --precision amp-bf16` said "--precision
    # amp-bf16 is ignored by gpt2-padded", then measured it in amp-bf16 (its default on a GPU).
    # The same on the CPU: simplenet's default precision is fp32, linear10's batch 1000.
    from torchmark.devices import resolve
    from torchmark.run.plan import plan, select_workloads

    def planner(cfg: RunConfig):  # type: ignore[no-untyped-def]
        return plan(select_workloads(cfg), resolve(cfg.devices), cfg)

    base = RunConfig(devices=("cpu",), suite="quick", workloads=("simplenet", "add"))
    assert ignored_options(replace(base, precisions=("fp32",)), planner) == [
        "--precision fp32 is ignored by add"
    ]
    linear = replace(base, workloads=("simplenet", "linear10"), batches=(1000,))
    assert ignored_options(linear, planner) == []
