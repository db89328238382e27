"""A near-miss name is answered with the closest valid one, for every kind of name."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from torchmark import variants
from torchmark.devices import CPUDevice, resolve
from torchmark.errors import InputError, UnknownNameError
from torchmark.registry import Registry
from torchmark.timing.stopping import preset
from torchmark.workloads import WORKLOADS, PlanOptions, load_builtins

load_builtins()


@pytest.mark.parametrize(
    ("lookup", "suggestion"),
    [
        (lambda: WORKLOADS.get("matmull"), "matmul"),
        (lambda: WORKLOADS.get("Triad"), "triad"),  # another case
        (lambda: variants.parse("amp-bf61"), "amp-bf16"),
        (lambda: variants.parse("bf16+compille"), "amp-bf16+compile"),
        (lambda: preset("quik"), "quick"),
        (
            lambda: WORKLOADS.get("resnet50")().cases(
                CPUDevice(), PlanOptions(scenarios=("trian",))
            ),
            "train",
        ),
    ],
)
def test_near_miss_names_the_closest(lookup: Callable[[], object], suggestion: str) -> None:
    with pytest.raises(UnknownNameError) as e:
        lookup()
    assert e.value.suggestion == suggestion
    assert f"did you mean {suggestion!r}? valid " in str(e.value)


def test_device_near_miss_names_the_closest() -> None:
    with pytest.raises(InputError, match="did you mean 'cpu'\\? choose from: all, cpu"):
        resolve("cpuu", [CPUDevice()])


def test_no_suggestion_when_nothing_is_close() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("alpha", 1)
    with pytest.raises(UnknownNameError) as e:
        reg.get("zzz")
    assert e.value.suggestion is None
    assert str(e.value) == "unknown widget 'zzz'; valid widgets: alpha"
