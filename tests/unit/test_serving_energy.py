"""Energy per request in the serving kind, through its own path (``Serving`` -> the device's
energy counter for a region -> each load point -> the answer and its cost), on a fake
accelerator whose telemetry source reads a known energy (as NVML's total-energy counter
does on an NVIDIA GPU) and a fake device of known service time, in simulated time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from torchmark.kinds.serving import answer, generator, kind
from torchmark.kinds.serving.fleet import Local
from torchmark.results.serving import FleetDoc, PointDoc, read
from torchmark.telemetry import energy
from torchmark.telemetry.base import Source
from torchmark.testing import FakeClock, FakeDevice, MemoryStore
from torchmark.testing import FakeClock as HostClock
from torchmark.testing import FakeExecutor as ServedDevice

S = 0.010  # the fake device's service time per request
WATTS = 300.0  # the fake board's constant draw


class Board(Source):
    """A GPU board's telemetry as NVMLSource reads it: ``energy_j`` grows at WATTS on the
    simulated clock (None: a board without the counter)."""

    name, role = "nvml", "device"

    def __init__(self, clock: FakeClock, counts: bool = True) -> None:
        self.clock, self.counts = clock, counts
        self.opened = self.closed = 0

    def open(self) -> dict[str, Any]:
        self.opened += 1
        return {}

    def read(self) -> dict[str, Any]:
        return {"energy_j": WATTS * self.clock.t if self.counts else None, "power_w": WATTS}

    def close(self) -> None:
        self.closed += 1


class Gpu(FakeDevice):
    """An accelerator with no energy counter of its own (as CUDADevice: its energy is in
    its NVML telemetry)."""

    def __init__(self, board: Board) -> None:
        super().__init__(HostClock(), 0, "Fake GPU")
        self.board = board

    def telemetry_sources(self) -> list[Any]:
        return [self.board, *super().telemetry_sources()]


def serve(
    board: Board, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, **cfg: Any
) -> tuple[kind.ServingPayload, Board]:
    monkeypatch.setattr(generator, "PER_RATE_S", 0.01)
    monkeypatch.setattr(generator, "RATES", (1_000,))

    @contextlib.contextmanager
    def fleet(self: kind.Serving, *args: Any) -> Iterator[Local]:
        yield Local(ServedDevice(clock, S), clock)  # the model: 10 ms a request

    monkeypatch.setattr(kind.Serving, "_fleet", fleet)
    config = kind.ServingConfig(
        model="fake", p99_ms=50, batches=(1,), budget_s=120, point_s=60, **cfg
    )
    device = Gpu(board)
    run = kind.Serving(config, lambda: None, [device], MemoryStore(), clock=clock).run()  # type: ignore[arg-type,return-value]
    p = read(run)
    assert p is not None
    return p, board


def test_a_gpu_point_reports_joules_per_request_and_the_cost_uses_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock(0.0)
    p, board = serve(Board(clock), clock, monkeypatch, rate=100.0, energy_price=0.25)
    (a,) = p.answers
    assert a.max_rate is not None and a.j_per_request is not None
    best = p.fleets[a.fleet or 0].best_point
    assert best is not None and best.energy is not None and best.energy["available"]
    # the board draws WATTS throughout: a request costs WATTS / the rate served
    assert a.j_per_request == pytest.approx(WATTS / best.rate, rel=0.05)
    e = best.energy
    assert a.j_per_request == pytest.approx(float(e["joules"]) / float(e["items"]))  # type: ignore[arg-type]
    assert float(e["items"]) >= best.n and "nvml" in str(e["source"])  # type: ignore[arg-type]
    # no device-hour price: the cost per million requests is their energy at 0.25 / kWh
    kwh_per_million = a.j_per_request * 1e6 / 3.6e6
    assert a.energy_cost_per_million == pytest.approx(0.25 * kwh_per_million)
    assert a.cost_per_million == pytest.approx(a.energy_cost_per_million)
    assert "of it energy" in a.sentence
    assert board.opened == board.closed == len([x for f in p.fleets for x in f.points])


def test_a_device_price_and_the_energy_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(0.0)
    p, _ = serve(Board(clock), clock, monkeypatch, prices=(("fake", 3.6),), energy_price=1.0)
    (a,) = p.answers
    assert a.max_rate is not None and a.j_per_request is not None
    rent = 3.6 / 3600 / a.max_rate * 1e6  # the device-hour's share of a million requests
    assert a.cost_per_million == pytest.approx(rent + a.j_per_request / 3.6)


def test_a_board_without_the_counter_says_not_available(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(0.0)
    p, board = serve(Board(clock, counts=False), clock, monkeypatch, energy_price=0.25)
    (a,) = p.answers
    assert a.j_per_request is None and a.energy_cost_per_million is None
    assert "reads no energy counter" in a.energy_note
    assert a.energy_cost_note.startswith("no energy cost for fake:0")
    assert a.cost_per_million is None  # nothing priced
    assert board.opened == board.closed >= 1


def _answer(device: str, rate: float, j: float | None, price: float) -> answer.DeviceAnswer:
    energy_doc: dict[str, object] = (
        {"available": True, "j_per_item": j} if j is not None else {"available": False}
    )
    energy_doc.setdefault("reason", "no RAPL: /sys/class/powercap is absent")
    pt = PointDoc(
        rate=rate, max_batch=1, max_wait_s=0.0, outcome="within", why="", energy=energy_doc
    )
    fleet = answer.refresh(FleetDoc(device=device, label=device, points=[pt]))
    return answer.device_answer(device, device, [(0, fleet)], 0.05, 1000.0, price, 0.25)


def test_the_verdict_does_not_compare_cost_where_one_device_has_no_energy_counter() -> None:
    gpu, cpu = _answer("cuda:0", 5000.0, 0.5, 2.5), _answer("cpu", 1000.0, None, 0.1)
    assert cpu.energy_note.startswith("no RAPL") and cpu.j_per_request is None
    said = answer.verdict([gpu, cpu], 1000.0, 0.05)
    assert "can't tell which is cheaper: no energy counter on cpu" in said
    both = [gpu, _answer("cpu", 1000.0, 0.02, 0.1)]
    assert "cheaper by" in answer.verdict(both, 1000.0, 0.05)


def test_a_cpu_region_without_rapl_is_unavailable_with_its_reason(tmp_path: Any) -> None:
    from torchmark.devices.cpu import CPUDevice

    counter = energy.rapl(tmp_path / "absent")
    assert isinstance(counter, energy.Unavailable)
    cpu = CPUDevice()
    monkey = pytest.MonkeyPatch()
    with monkey.context() as m:
        m.setattr(CPUDevice, "energy_counter", lambda self: counter)
        found = energy.for_region(cpu)  # the host source is no energy counter
    assert found == counter
    region = energy.Region(found)
    region.start()
    region.stop()
    assert region.summary(1, 1) == {"available": False, "reason": counter.reason}


def test_the_verdict_does_not_compare_a_rented_device_with_one_priced_by_energy_alone() -> None:
    # --price for the GPU only, --energy-price for both: the CPU's cost would be its
    # energy alone (no rent), so "cpu cheaper" would rest on a price never given
    gpu = _answer("cuda:0", 5000.0, 0.5, 2.5)
    pt = PointDoc(
        rate=1000.0,
        max_batch=1,
        max_wait_s=0.0,
        outcome="within",
        why="",
        energy={"available": True, "j_per_item": 0.02},
    )
    fleet = answer.refresh(FleetDoc(device="cpu", label="cpu", points=[pt]))
    cpu = answer.device_answer("cpu", "cpu", [(0, fleet)], 0.05, 1000.0, None, 0.25)
    assert cpu.price_per_hour is None and cpu.energy_cost_per_million is not None
    said = answer.verdict([gpu, cpu], 1000.0, 0.05)
    assert "cheaper" not in said and "(give --price for each to compare cost)" in said
