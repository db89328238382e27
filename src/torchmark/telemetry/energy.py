"""Energy counters read around a measured region: RAPL package energy on the host CPU.

An NVIDIA GPU's energy is not read here during a traced case: its NVML total-energy counter
is already read by the telemetry trace (one NVML handle per run), and energy per item comes
from those readings (``kinds.model._trace_energy``); reading it twice meant two NVML
sessions per case. A region measured without a trace (a serving load point) reads the
device's telemetry source itself (``for_region``: ``SourceCounter`` over NVML's counter).

Energy per item = joules counted over the measured region / items processed in it. Where no
counter can be read the answer is ``Unavailable(reason)`` (absent, permission denied, not
supported), never an estimate from TDP or utilisation.

    counter = counter_for(device)          # EnergyCounter or Unavailable
    region = Region(counter); region.start(); ...; region.stop()
    region.summary(calls=n, items=n * batch)
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

RAPL_ROOT = Path("/sys/class/powercap")
# NVML refreshes the energy counter every ~10-100 ms and RAPL every ~1 ms; below 1 s of
# region the refresh step is a visible share of the total, so the figure carries a note.
SHORT_REGION_S = 1.0


@dataclass(frozen=True)
class Unavailable:
    reason: str


class EnergyCounter(ABC):
    """A monotonic energy counter (possibly several zones) read as raw values."""

    source: str  # what is counted, in words

    @abstractmethod
    def read(self) -> tuple[float, ...]:
        """Raw readings, one per zone (joules)."""

    @abstractmethod
    def joules(self, start: tuple[float, ...], end: tuple[float, ...]) -> float:
        """Energy between two readings, counter wrap-around included."""

    def close(self) -> None:
        return None


# -- RAPL (Intel, and AMD on Linux >= 5.8 through the same powercap driver) ------------------


class RaplCounter(EnergyCounter):
    def __init__(self, zones: list[tuple[Path, float]], names: list[str]) -> None:
        self.zones = zones  # (energy_uj file, wrap range in joules)
        self.source = (
            f"RAPL {' + '.join(names)} (whole CPU package, every process on it; DRAM excluded)"
        )

    def read(self) -> tuple[float, ...]:
        return tuple(int(p.read_text()) / 1e6 for p, _ in self.zones)

    def joules(self, start: tuple[float, ...], end: tuple[float, ...]) -> float:
        total = 0.0
        for (_, wrap), a, b in zip(self.zones, start, end, strict=True):
            # energy_uj counts up to max_energy_range_uj and restarts at 0 (~hours at 100 W)
            total += b - a if b >= a else b + wrap - a
        return total


def rapl(root: Path = RAPL_ROOT) -> RaplCounter | Unavailable:
    """Package zones (``intel-rapl:N``, not their core/uncore/dram subzones nor psys)."""
    if not root.is_dir():
        return Unavailable(f"no RAPL: {root} is absent (not Linux, or no powercap driver)")
    zones, names = [], []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:
            continue  # a subzone, already inside its package's count
        try:
            name = (zone / "name").read_text().strip()
            if not name.startswith("package"):
                continue  # psys covers the whole platform and would double count
            energy = zone / "energy_uj"
            int(energy.read_text())
            wrap = int((zone / "max_energy_range_uj").read_text()) / 1e6
        except PermissionError:
            return Unavailable(
                f"permission denied reading {zone}/energy_uj (root only since Linux 5.10; "
                "grant read access to measure CPU energy)"
            )
        except (OSError, ValueError) as e:
            return Unavailable(f"cannot read RAPL zone {zone.name}: {e}")
        zones.append((energy, wrap))
        names.append(name)
    if not zones:
        return Unavailable(f"no RAPL package zone under {root}")
    return RaplCounter(zones, names)


class _Counted(Protocol):
    """A ``devices.Device``: typed by what is used of it, so that devices (which build
    their counters here) and this module do not import each other."""

    def energy_counter(self) -> Any: ...


def counter_for(device: _Counted) -> EnergyCounter | Unavailable:
    """The device's own choice (``Device.energy_counter``): RAPL for the host CPU; for an
    accelerator Unavailable (an NVIDIA GPU's energy comes from its telemetry trace)."""
    counter: EnergyCounter | Unavailable = device.energy_counter()
    return counter


class SourceCounter(EnergyCounter):
    """The ``energy_j`` a device's telemetry source reads (NVML's total energy of the
    board), opened at the region's first reading and closed at its end."""

    def __init__(self, source: Any) -> None:
        self.telemetry = source
        self.source = f"{source.name} total energy of the device (read around the region)"
        self._open = False

    def read(self) -> tuple[float, ...]:
        if not self._open:
            self.telemetry.open()
            self._open = True
        joules = self.telemetry.read().get("energy_j")
        if joules is None:
            raise ValueError(f"{self.telemetry.name} reads no energy counter on this device")
        return (float(joules),)

    def joules(self, start: tuple[float, ...], end: tuple[float, ...]) -> float:
        return end[0] - start[0]

    def close(self) -> None:
        if self._open:
            self.telemetry.close()
            self._open = False


class _Watched(_Counted, Protocol):
    def telemetry_sources(self) -> list[Any]: ...


def for_region(device: _Watched) -> EnergyCounter | Unavailable:
    """The counter for a region measured without a telemetry trace: the device's own
    (RAPL for the host CPU), else the energy its own telemetry source reads (an NVIDIA
    GPU's NVML counter); Unavailable with the device's reason where neither exists."""
    own = counter_for(device)
    if isinstance(own, EnergyCounter):
        return own
    watched = [s for s in device.telemetry_sources() if getattr(s, "role", "") == "device"]
    return SourceCounter(watched[0]) if watched else own


class Region:
    """Energy over one measured region: ``start()`` before the first call, ``stop()`` after
    the device finished the last one."""

    def __init__(self, counter: EnergyCounter | Unavailable) -> None:
        self.counter = counter
        self._t0 = self._t1 = 0.0
        self._e0: tuple[float, ...] | None = None
        self._e1: tuple[float, ...] | None = None
        self.error: str | None = None

    @property
    def started(self) -> bool:
        return self._e0 is not None or self.error is not None

    def start(self) -> None:
        if isinstance(self.counter, EnergyCounter):
            try:
                self._e0, self._t0 = self.counter.read(), time.perf_counter()
            except Exception as e:  # a counter that dies mid-run: say so, do not guess
                self.error = f"energy counter failed: {e}"
                self.counter.close()

    def stop(self) -> None:
        if isinstance(self.counter, EnergyCounter) and self._e0 is not None:
            try:
                self._e1, self._t1 = self.counter.read(), time.perf_counter()
            except Exception as e:
                self.error = f"energy counter failed: {e}"
            self.counter.close()

    def summary(self, calls: int, items: float) -> dict[str, Any]:
        if isinstance(self.counter, Unavailable):
            return {"available": False, "reason": self.counter.reason}
        if self.error or self._e0 is None or self._e1 is None:
            return {"available": False, "reason": self.error or "region never started"}
        joules = self.counter.joules(self._e0, self._e1)
        region_s = self._t1 - self._t0
        notes = []
        if region_s < SHORT_REGION_S:
            notes.append(
                f"region {region_s:.2f} s < {SHORT_REGION_S:.0f} s: counter refresh steps "
                "are a visible share of it"
            )
        return per_item(self.counter.source, joules, region_s, calls, items, notes)


def per_item(
    source: str, joules: float, region_s: float, calls: int, items: float, notes: list[str]
) -> dict[str, Any]:
    """The stored energy figures of one case: joules over a timed region and per item."""
    return {
        "available": True,
        "source": source,
        "joules": joules,
        "region_s": region_s,
        "mean_power_w": joules / region_s if region_s > 0 else None,
        "calls": calls,
        "items": items,
        "j_per_item": joules / items if items else None,
        "notes": notes,
    }
