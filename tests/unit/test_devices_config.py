from __future__ import annotations

import pytest

from torchmark.devices import CPUDevice, resolve
from torchmark.devices.base import MemoryStats
from torchmark.errors import InputError, UnknownNameError
from torchmark.registry import Registry
from torchmark.run.config import RunConfig, parse_int_list, validate
from torchmark.testing import FakeClock, FakeDevice


def test_resolve_all_and_by_kind() -> None:
    cpu, g0, g1 = CPUDevice(), FakeDevice(FakeClock(), 0), FakeDevice(FakeClock(), 1)
    found = [cpu, g0, g1]
    assert resolve(None, found) == found
    assert resolve("all", found) == found
    assert resolve(["fake"], found) == [g0, g1]
    assert resolve(["fake:1,cpu"], found) == [g1, cpu]
    assert resolve(["cpu", "cpu"], found) == [cpu]


def test_unknown_device_names_the_choices() -> None:
    with pytest.raises(InputError) as e:
        resolve(["cuda:7"], [CPUDevice()])
    msg = str(e.value)
    assert "cuda:7" in msg and "choose from: all, cpu" in msg and "\n" not in msg


def test_registry_names_valid_choices() -> None:
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    reg.add("b", 2)
    assert reg.get("b") == 2 and reg.names() == ["a", "b"]
    with pytest.raises(UnknownNameError, match="unknown widget 'c'; valid widgets: a, b"):
        reg.get("c")
    with pytest.raises(ValueError):
        reg.add("a", 3)


@pytest.mark.parametrize(
    "cfg, message",
    [
        (RunConfig(suite="huge"), "unknown suite 'huge'"),  # type: ignore[arg-type]
        (RunConfig(threads=0), "--threads must be >= 1"),
        (RunConfig(batches=(0,)), "batch sizes must be >= 1"),
        (RunConfig(timing="wall"), "unknown timing"),  # type: ignore[arg-type]
        (RunConfig(rule="slow"), "unknown stopping preset"),
    ],
)
def test_validate_rejects(cfg: RunConfig, message: str) -> None:
    with pytest.raises(InputError, match=message):
        validate(cfg)


def test_parse_int_list() -> None:
    assert parse_int_list("1,32, 256", "--batch") == (1, 32, 256)
    assert parse_int_list(None, "--batch") == ()
    with pytest.raises(InputError, match="--batch takes comma-separated integers"):
        parse_int_list("1,x", "--batch")


def test_cpu_info_is_described() -> None:
    info = CPUDevice().info()
    assert info["kind"] == "cpu" and info["logical_cores"] >= 1
    assert isinstance(info["isa"], list)


def test_peak_memory_is_the_allocators_peak_where_there_is_one() -> None:
    class Allocating(FakeDevice):
        def memory_stats(self) -> MemoryStats | None:
            return MemoryStats(allocated_bytes=300, reserved_bytes=512)

    assert Allocating(FakeClock()).peak_memory_bytes() == 300
    assert FakeDevice(FakeClock()).peak_memory_bytes() is None  # no allocator, no figure
    assert CPUDevice().peak_memory_bytes() > 0  # host RSS, not an allocator
