"""The standard suite on a GPU is trimmed to fit one sitting; `extended` keeps the rest."""

from __future__ import annotations

from collections import Counter

from torchmark.devices import CPUDevice
from torchmark.run.config import RunConfig
from torchmark.run.plan import make_plan
from torchmark.testing import FakeClock, FakeDevice, FakeH100
from torchmark.workloads import budget
from torchmark.workloads.base import every_other

GPU = FakeH100  # what an H100 says about itself to the planner


def plan(suite: str, device: FakeDevice | CPUDevice) -> list:  # type: ignore[type-arg]
    cfg = RunConfig(devices=(device.name,), suite=suite)  # type: ignore[arg-type]
    return make_plan(cfg, devices=[device]).cases


def test_every_other_keeps_the_largest() -> None:
    assert every_other((1, 2, 4, 8, 16, 32, 64, 128, 256)) == (1, 4, 16, 64, 256)
    assert every_other((1, 2, 4, 8, 16, 32)) == (1, 4, 16, 32)
    assert every_other(()) == ()


def test_a_gpu_standard_suite_leaves_its_tail_to_extended() -> None:
    gpu = GPU(FakeClock(), 0)
    std, ext = plan("standard", gpu), plan("extended", gpu)
    keys = {(c.workload, c.variant, c.params) for c in std}
    assert keys < {(c.workload, c.variant, c.params) for c in ext}  # a strict subset
    assert len(std) < 0.6 * len(ext)
    per = Counter(c.workload for c in std)
    assert "input-tokens" not in per and per["input"] == 3  # resident, defaults, best
    assert not any(c.param_dict.get("precision") == "amp-fp16" for c in std)
    assert any(c.param_dict.get("precision") == "amp-fp16" for c in ext)
    resnet = sorted(
        int(c.param_dict["batch"])
        for c in std
        if c.workload == "resnet50"
        and c.param_dict["precision"] == "amp-bf16"
        and c.variant == "train"
    )
    assert resnet == [1, 4, 16, 64, 256]
    fp32 = {int(c.param_dict["batch"]) for c in std if c.workload == "resnet50"
            and c.param_dict["precision"] == "fp32"}  # fmt: skip
    assert max(fp32) == 64  # a quarter of the 256 cap
    assert len({c.workload for c in std}) == len({c.workload for c in ext}) - 1  # tokens


def test_the_cpu_plans_the_same_standard_and_extended() -> None:
    cpu = CPUDevice()
    assert [(c.workload, c.params) for c in plan("standard", cpu)] == [
        (c.workload, c.params) for c in plan("extended", cpu)
    ]


def test_the_dry_run_names_what_extended_holds() -> None:
    gpu = GPU(FakeClock(), 0)
    said = budget.lines(plan("standard", gpu), ceilings=False, suite="standard")
    assert said[-1].startswith("on a GPU the standard suite leaves to --suite extended")
    assert budget.EXTENDED not in budget.lines(
        plan("standard", CPUDevice()), ceilings=False, suite="standard"
    )
