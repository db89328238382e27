"""Energy counters: RAPL from a fake sysfs tree, wrap-around, unreadable cases, regions."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchmark.telemetry import energy
from torchmark.testing import FakeClock, FakeDevice


def zone(root: Path, name: str, label: str, uj: int, max_uj: int = 1_000_000) -> Path:
    z = root / name
    z.mkdir(parents=True)
    (z / "name").write_text(label + "\n")
    (z / "energy_uj").write_text(f"{uj}\n")
    (z / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return z


def test_rapl_sums_packages_only(tmp_path: Path) -> None:
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 100)
    zone(tmp_path, "intel-rapl:0:0", "core", 50)  # subzone: inside package-0 already
    zone(tmp_path, "intel-rapl:1", "psys", 70)  # whole platform: would double count
    c = energy.rapl(tmp_path)
    assert isinstance(c, energy.RaplCounter) and "package-0" in c.source
    a = c.read()
    (p0 / "energy_uj").write_text("2100100\n")
    # wraps? no: 2.1 J counted; the max range (1 J) is only used when the value went down
    assert c.joules(a, c.read()) == pytest.approx(2.1)


def test_rapl_wrap_around(tmp_path: Path) -> None:
    p0 = zone(tmp_path, "intel-rapl:0", "package-0", 900_000, max_uj=1_000_000)
    c = energy.rapl(tmp_path)
    assert isinstance(c, energy.RaplCounter)
    a = c.read()
    (p0 / "energy_uj").write_text("100000\n")  # passed the top (1 J) and restarted
    assert c.joules(a, c.read()) == pytest.approx(0.2)


def test_rapl_absent_and_permission_denied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    absent = energy.rapl(tmp_path / "nope")
    assert isinstance(absent, energy.Unavailable) and "absent" in absent.reason
    empty = energy.rapl(tmp_path)
    assert isinstance(empty, energy.Unavailable) and "no RAPL package zone" in empty.reason
    zone(tmp_path, "intel-rapl:0", "package-0", 1)
    real = Path.read_text

    def deny(self: Path, *a: object, **k: object) -> str:
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "read_text", deny)
    denied = energy.rapl(tmp_path)
    assert isinstance(denied, energy.Unavailable) and "permission denied" in denied.reason


def test_no_counter_for_an_unknown_accelerator() -> None:
    got = energy.counter_for(FakeDevice(FakeClock()))
    assert isinstance(got, energy.Unavailable) and "FakeGPU" in got.reason


class Scripted(energy.EnergyCounter):
    source = "scripted"

    def __init__(self, values: list[float]) -> None:
        self.values = values

    def read(self) -> tuple[float, ...]:
        return (self.values.pop(0),)

    def joules(self, start: tuple[float, ...], end: tuple[float, ...]) -> float:
        return end[0] - start[0]


def test_region_energy_per_item() -> None:
    region = energy.Region(Scripted([10.0, 40.0]))
    region.start()
    region.stop()
    s = region.summary(calls=100, items=800)
    assert s["available"] and s["joules"] == 30.0 and s["j_per_item"] == pytest.approx(30 / 800)
    assert s["notes"]  # a region far under 1 s says the counter step matters


def test_region_unavailable_says_why() -> None:
    region = energy.Region(energy.Unavailable("permission denied reading x"))
    region.start()
    region.stop()
    assert region.summary(1, 1) == {"available": False, "reason": "permission denied reading x"}
