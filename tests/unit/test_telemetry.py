"""Samplers, tagging and summaries with fake sources: no hardware, no real timing."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pynvml
import pytest

from torchmark.hardware.throttle import decode_reasons
from torchmark.telemetry import NullTrace, Source, SourceUnavailable, watch
from torchmark.telemetry.host import HostSource, base_clock_mhz
from torchmark.telemetry.nvml import NVMLSource
from torchmark.telemetry.trace import Recording, Sampler, SourceState, cpu_load, summarize
from torchmark.testing import FakeClock, FakeDevice

FIXTURES = Path(__file__).parents[1] / "fixtures" / "telemetry"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def test_decode_reasons_names_each_bit() -> None:
    assert decode_reasons(0x44) == ["SW power cap", "HW thermal slowdown"]
    assert decode_reasons(0x88) == ["HW slowdown", "HW power brake"]
    assert decode_reasons(0) == []


# --- NVML with monkeypatched pynvml ----------------------------------------------------


class FakeNVML:
    """Stands in for the NVML calls NVMLSource makes; ``lose_after`` reads kill the GPU."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, lose_after: int | None = None) -> None:
        self.reads, self.lose_after, self.shutdowns = 0, lose_after, 0
        nv = pynvml
        fns = {
            "nvmlInit": lambda: None,
            "nvmlShutdown": self._shutdown,
            "nvmlDeviceGetHandleByUUID": self._no_uuid,
            "nvmlDeviceGetHandleByIndex": lambda i: f"handle{i}",
            "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
            "nvmlDeviceGetMaxClockInfo": lambda h, t: {1: 1980, 2: 2619}[t],
            "nvmlDeviceGetDefaultApplicationsClock": self._not_supported,
            "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700_000,
            # capped below its 750 W default: "SW power cap" is throttling here
            "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 750_000,
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=99, memory=60),
            "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(used=3 * 2**30),
            "nvmlDeviceGetCurrentClocksEventReasons": lambda h: 0x44,
            "nvmlDeviceGetClockInfo": lambda h, t: {1: 1410, 2: 2619}[t],
            "nvmlDeviceGetTemperature": self._temperature,
            "nvmlDeviceGetPowerUsage": lambda h: 690_500,
            "nvmlDeviceGetTotalEnergyConsumption": self._not_supported,
        }
        for name, fn in fns.items():
            monkeypatch.setattr(nv, name, fn)

    def _shutdown(self) -> None:
        self.shutdowns += 1

    @staticmethod
    def _no_uuid(uuid: str) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    @staticmethod
    def _not_supported(*args: Any) -> Any:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _temperature(self, handle: Any, sensor: int) -> int:
        self.reads += 1
        if self.lose_after is not None and self.reads > self.lose_after:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return 81


def test_nvml_source_reads_and_decodes(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeNVML(monkeypatch)
    src = NVMLSource(0, uuid="1234")  # unknown UUID: falls back to the index
    static = src.open()
    assert static == {
        "name": "NVIDIA H100 80GB HBM3",
        "max_sm_mhz": 1980,
        "max_mem_mhz": 2619,
        "base_sm_mhz": None,  # not supported on this (fake) card: None, not a guess
        "power_limit_w": 700.0,
        "default_power_limit_w": 750.0,
    }
    r = src.read()
    assert r == {
        "sm_mhz": 1410,
        "mem_mhz": 2619,
        "temp_c": 81,
        "power_w": 690.5,
        "util_pct": 99,
        "mem_util_pct": 60,
        "mem_used_bytes": 3 * 2**30,
        "reasons": ["SW power cap", "HW thermal slowdown"],
        "energy_j": None,
    }
    assert src.unsupported == {"base_sm_mhz", "energy_j"}


def test_nvml_missing_library_is_absent_with_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_lib() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_lib)
    rec = Recording(device="cuda:0", accelerator=True)
    Sampler([NVMLSource(0)], rec)
    assert rec.sources["nvml"].present is False
    assert rec.sources["nvml"].reason == "NVML not available (NVML Shared Library Not Found)"


def test_nvml_error_mid_run_marks_source_dead_and_run_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeNVML(monkeypatch, lose_after=2)
    clock = FakeClock()
    rec = Recording(device="cuda:0", accelerator=True)
    sampler = Sampler([NVMLSource(0)], rec, clock=clock)
    for _ in range(4):  # ticks by hand: no thread, no real time
        sampler.tick()
        clock.advance(0.1)
    state = rec.sources["nvml"]
    assert state.present is True
    assert state.failed_after == 2
    assert state.reason == "stopped mid-run: NVML error reading temp_c (GPU is lost)"
    assert len(rec.readings["nvml"]) == 2
    assert fake.shutdowns == 1 and sampler.live == []
    rec.marks = [(0, 1000.0, 1000.05), (1, 1000.3, 1000.35)]
    s = summarize(rec)
    assert s["sources"]["nvml"]["reason"].startswith("stopped mid-run")
    assert s["sample_tags"][0] == ["SW power cap", "HW thermal slowdown", "low clock"]


# --- Host source ----------------------------------------------------------------------


def test_host_source_reports_missing_sensors(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(*a: Any, **k: Any) -> Any:
        raise PermissionError("permission denied: /sys/class/hwmon")

    monkeypatch.setattr(psutil, "sensors_temperatures", denied)
    monkeypatch.setattr(psutil, "cpu_freq", lambda percpu=False: [] if percpu else None)
    src = HostSource()
    static = src.open()
    assert static["missing"] == {
        "clock": "CPU clock not exposed (no cpufreq, e.g. a container)",
        "temperature": "no temperature sensors exposed",
    }
    r = src.read()
    assert r["temp_c"] is None and r["clock_mhz"] is None
    assert r["busy_s"] > 0 and r["proc_s"] > 0


def test_base_clock_read_from_sysfs(tmp_path: Path) -> None:
    (tmp_path / "base_frequency").write_text("2100000\n")
    assert base_clock_mhz(tmp_path) == 2100.0
    assert base_clock_mhz(tmp_path / "absent") is None


def test_cpu_load_splits_own_and_other_cores() -> None:
    readings = [
        (10.0, {"busy_s": 100.0, "proc_s": 5.0, "steal_s": 1.0}),
        (11.0, {"busy_s": 101.5, "proc_s": 5.4, "steal_s": 1.0}),
        (12.0, {"busy_s": 103.0, "proc_s": 5.8, "steal_s": 1.2}),
    ]
    assert cpu_load(readings, 10.2, 11.9) == {
        "own_cores": 0.4,
        "other_cores": 1.1,
        "steal_cores": 0.1,
        "span_s": 2.0,
    }
    assert cpu_load(readings[:1], 10.2, 11.9) is None  # one reading: no rate


def test_the_timeline_has_the_cores_other_processes_used_row_by_row() -> None:
    from torchmark.telemetry.trace import timeline

    host = [
        (10.0, {"busy_s": 100.0, "proc_s": 5.0, "clock_mhz": 3000.0}),
        (10.1, {"busy_s": 100.1, "proc_s": 5.05, "clock_mhz": 3000.0}),
        (11.0, {"busy_s": 101.5, "proc_s": 5.4, "clock_mhz": 3000.0}),
        (12.0, {"busy_s": 103.5, "proc_s": 5.8, "clock_mhz": 3000.0}),
    ]
    tl = timeline(host, "host", 10.0, 2)
    other = [row[tl["columns"].index("other_cores")] for row in tl["rows"]]
    # none before 0.2 s of readings (CPU times tick in 10 ms); then over >= 0.2 s back
    assert other == [None, None, 1.17, 1.6]  # (1.4 - 0.35) / 0.9, (2 - 0.4) / 1
    # a GPU's timeline reads the host's CPU times beside its own readings
    gpu = [(t, {"sm_mhz": 1980}) for t in (10.0, 11.0, 12.0)]
    tl = timeline(gpu, "device", 10.0, 2, host)
    assert [row[-1] for row in tl["rows"]] == [None, 1.17, 1.6]


# --- Sampler and watch ----------------------------------------------------------------


class ScriptedSource(Source):
    role = "device"

    def __init__(self, fail_on: int | None = None, absent: str | None = None) -> None:
        self.name, self.fail_on, self.absent, self.n = "fake", fail_on, absent, 0

    def open(self) -> dict[str, Any]:
        if self.absent:
            raise SourceUnavailable(self.absent)
        return {"max_sm_mhz": 2000, "base_sm_mhz": 1600}

    def read(self) -> dict[str, Any]:
        self.n += 1
        if self.n == self.fail_on:
            raise RuntimeError("sensor vanished")
        return {"sm_mhz": 1000, "reasons": []}


def test_watch_disabled_yields_null_trace() -> None:
    with watch(FakeDevice(FakeClock()), enabled=False) as trace:
        assert isinstance(trace, NullTrace)
    assert trace.summary() is None and trace.throttled_samples() == []


def test_watch_absent_and_failing_sources_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    dev = FakeDevice(FakeClock())
    with watch(dev, sources=[ScriptedSource(absent="no such sensor")]) as trace:
        trace.mark(0, 0.0, 1.0)
    s = trace.summary()
    assert s is not None
    assert s["sources"] == {"fake": {"present": False, "reason": "no such sensor", "missing": {}}}
    assert s["throttle_checked"] is False and s["sample_tags"] == [[]]

    # the second read (at the latest, the one stop() makes) raises: recorded, not raised
    with watch(dev, sources=[ScriptedSource(fail_on=2)], interval_s=10.0) as trace:
        pass
    s = trace.summary()
    assert s is not None
    assert s["sources"]["fake"]["reason"] == "stopped mid-run: sensor vanished"


def test_adaptive_interval_keeps_sampling_under_one_percent() -> None:
    clock = FakeClock()
    rec = Recording(device="cuda:0", accelerator=True)
    sampler = Sampler([], rec, interval_s=0.1, clock=clock)
    assert sampler.interval() == 0.1
    rec.overhead_s, sampler._ticks = 0.05, 10  # 5 ms per reading -> 0.5 s apart
    assert sampler.interval() == pytest.approx(0.5)
    clock.advance(1200.0)  # a 20-minute region keeps ~1,000 readings
    assert sampler.interval() == pytest.approx(1.2)


def _recording(throttled: set[int], n: int = 10) -> Recording:
    static = {"max_sm_mhz": 2000, "base_sm_mhz": 1600}
    readings = [
        (
            100.0 + i + 0.5,
            {"sm_mhz": 1900, "reasons": ["SW power cap"] if i in throttled else []},
        )
        for i in range(n)
    ]
    return Recording(
        device="cuda:0",
        accelerator=True,
        sources={"nvml": SourceState(True, "device", static=static)},
        readings={"nvml": readings},
        marks=[(i, 100.0 + i, 101.0 + i) for i in range(n)],
    )


def test_throttled_samples_set_aside_only_while_five_remain() -> None:
    s = summarize(_recording({0, 1, 2}))
    assert s["throttled_samples"] == [0, 1, 2] and s["excluded"] == [0, 1, 2]
    s = summarize(_recording({0, 1, 2, 3, 4, 5}))
    assert s["throttled_samples"] == [0, 1, 2, 3, 4, 5] and s["excluded"] == []
    assert s["throttled_pct"] == 60.0 and s["flags"] == ["throttled"]


def test_sample_far_from_any_reading_is_not_tagged() -> None:
    rec = _recording({0})
    rec.marks.append((10, 200.0, 200.1))  # 90 s after the last reading
    s = summarize(rec)
    assert s["sample_tags"][0] == ["SW power cap"]
    assert s["sample_tags"][10] == []


class Growing(list[Any]):
    """A source's readings while the sampler thread still runs (a soak's summary so far):
    a reading is appended each time the list is read through, as the thread can do between
    any two reads."""

    def __iter__(self) -> Any:
        yield from list.__iter__(self)
        t = self[-1][0] + 0.1
        self.append((t, {"sm_mhz": 1900, "reasons": []}))


def test_summary_while_the_sampler_appends_reads_one_copy() -> None:
    rec = _recording(set(), n=8)
    rec.readings["nvml"] = Growing(rec.readings["nvml"])
    rec.marks.append((8, 108.9, 108.95))  # after the last reading, within its reach
    s = summarize(rec)  # was IndexError: times one shorter than the readings
    assert len(s["sample_tags"]) == 9
    assert s["readings"] == 8  # the copy: what the sampler added after it is not counted


def test_gpu_idle_low_clock_is_not_throttling() -> None:
    rec = _recording(set())
    rec.readings["nvml"] = [
        (t, {"sm_mhz": 345, "reasons": ["GPU idle"]}) for t, _ in rec.readings["nvml"]
    ]
    assert summarize(rec)["throttled_samples"] == []
    rec.readings["nvml"] = [(t, {"sm_mhz": 345, "reasons": []}) for t, _ in rec.readings["nvml"]]
    assert summarize(rec)["throttle_reasons_pct"] == {"low clock": 100.0}


def test_summary_of_recorded_trace_is_json_and_has_a_timeline() -> None:
    d = fixture("gpu_thermal_throttled.json")
    rec = Recording.from_dict(d["recording"])
    assert Recording.from_dict(rec.as_dict()) == rec  # a fixture round-trips
    s = summarize(rec)
    json.dumps(s)
    columns = ["t_s", "clock_mhz", "temp_c", "power_w", "util_pct", "other_cores"]
    assert s["timeline"]["columns"] == columns
    assert s["timeline"]["rows"][0] == [-0.02, 1980, 70, 650.0, 100, None]
    assert s["temp_c"] == [70, 87]
    assert s["clock_pct_of_max"] == 70.4
    assert s["energy_j"] == 1333.0


def test_host_clock_is_the_fastest_of_the_cores_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from types import SimpleNamespace

    from torchmark.telemetry import host

    # 4-core host, this process pinned to cores 2 and 3; cores 0-1 idle at powersave clocks
    freqs = [SimpleNamespace(current=c) for c in (800.0, 900.0, 3400.0, 3300.0)]
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: {2, 3})
    assert host._clocks_of_our_cores(freqs) == [3400.0, 3300.0]
    monkeypatch.setattr(host.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 7})
    assert max(host._clocks_of_our_cores(freqs)) == 3400.0  # not the 2,100 MHz average
