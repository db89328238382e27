"""The copy paths of ``FedEpoch`` on a fake device with a copy stream: the side stream's
order (the compute waits for its copy and owns its batch; the next copy is issued before
the compute), the batches intact, and the overlap read off the marks, on a fake clock."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from torchmark.devices.base import Streams
from torchmark.testing import FakeClock, FakeDevice
from torchmark.workloads.pipeline import feed
from torchmark.workloads.pipeline.feed import FedEpoch

COMPUTE_S = 0.010


class FakeStreams(Streams):
    """A copy stream on its own timeline: a copy starts when issued (or when the last one
    ended) and takes ``copy_s``; the compute stream is the host's fake clock."""

    def __init__(self, clock: FakeClock, copy_s: float, log: list[str]) -> None:
        self.clock, self.copy_s, self.log = clock, copy_s, log
        self.side_end = 0.0
        self.inside = False
        self.opened = False

    def mark(self) -> float:
        if not self.inside:
            return self.clock()
        if not self.opened:  # before the copy
            self.opened = True
            self.side_start = max(self.side_end, self.clock())
            return self.side_start
        self.side_end = self.side_start + self.copy_s  # after it
        self.log.append("copy")
        return self.side_end

    def elapsed_s(self, start: Any, end: Any) -> float:
        return float(end - start)

    @contextlib.contextmanager
    def side(self) -> Iterator[None]:
        self.inside, self.opened = True, False
        yield
        self.inside = False

    def wait_side(self) -> None:
        self.log.append("wait_side")
        self.clock.t = max(self.clock(), self.side_end)

    def keep(self, t: torch.Tensor) -> None:
        self.log.append("keep")


class CopyDevice(FakeDevice):
    def __init__(self, clock: FakeClock, copy_s: float) -> None:
        super().__init__(clock)
        self.log: list[str] = []
        self.fake_streams = FakeStreams(clock, copy_s, self.log)

    def supports_async_copy(self) -> str | None:
        return None

    def streams(self) -> Streams:
        return self.fake_streams


def batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((2, 3), float(i)), torch.tensor([i, i])) for i in range(n)]


def epoch(copy_s: float, side_stream: bool) -> tuple[FedEpoch, CopyDevice, list[float]]:
    clock = FakeClock()
    device = CopyDevice(clock, copy_s)
    seen: list[float] = []

    def train(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        x, y = batch
        device.log.append("train")
        seen.append(float(x[0, 0]))
        assert int(y[0]) == int(x[0, 0])  # the batch's own labels
        clock.advance(COMPUTE_S)

    e = FedEpoch(batches(5), train, device, clock, non_blocking=True, side_stream=side_stream)
    return e, device, seen


def test_side_stream_order_and_batches() -> None:
    e, device, seen = epoch(0.004, side_stream=True)
    e()
    assert seen == [0, 1, 2, 3, 4]  # every batch once, in order
    log = device.log
    assert log[:1] == ["copy"]  # batch 0's copy, before the first step
    # the compute waits for its copy and owns its batch; the next copy, then the step
    assert log[1:6] == ["wait_side", "keep", "keep", "copy", "train"]
    assert log[-4:] == ["wait_side", "keep", "keep", "train"]  # nothing left to copy
    assert log.count("copy") == 5 and log.count("train") == 5


def test_overlap_hides_a_copy_shorter_than_the_compute() -> None:
    e, _, _ = epoch(0.004, side_stream=True)
    e()
    b = e.breakdown()
    # 4 of the 5 copies ran beside a compute (batch 0's had none before it)
    assert b["overlap"] == pytest.approx(4 / 5)
    assert b["overlap_ideal"] == pytest.approx(4 / 5)
    assert b["copy_device_s"] == pytest.approx(0.004)
    assert b["compute_device_s"] == pytest.approx(COMPUTE_S)
    assert b["batch_bytes"] == 2 * 3 * 4 + 2 * 8


def test_overlap_of_a_copy_longer_than_the_compute() -> None:
    e, _, _ = epoch(0.015, side_stream=True)
    e()
    b = e.breakdown()
    # each step can hide 10 ms of the next 15 ms copy: 4 x 10 of 5 x 15 ms
    assert b["overlap"] == pytest.approx(40 / 75)
    assert b["overlap_ideal"] == pytest.approx(40 / 75)


def test_in_line_copy_hides_nothing_and_copied_returns_the_batches() -> None:
    e, device, seen = epoch(0.004, side_stream=False)
    e()
    assert seen == [0, 1, 2, 3, 4] and "wait_side" not in device.log
    b = e.breakdown()
    assert "overlap" not in b and b["compute_device_s"] == pytest.approx(COMPUTE_S)
    side, _, _ = epoch(0.004, side_stream=True)
    for f in (e, side):
        got = f.copied(batches(2))
        assert all(
            torch.equal(x, wx) and torch.equal(y, wy)
            for (x, y), (wx, wy) in zip(got, batches(2), strict=True)
        )


def test_breakdown_sums_to_the_step() -> None:
    e, _, _ = epoch(0.004, side_stream=True)
    e()
    b = e.breakdown()
    assert b["wait_s"] + b["copy_s"] + b["compute_s"] == pytest.approx(b["step_s"])
    assert b["compute_s"] == pytest.approx(COMPUTE_S)  # the fake's copy costs no host time


@pytest.mark.parametrize("side_stream", [False, True])
def test_sizing_a_batch_is_in_no_segment(
    side_stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch's bytes are summed outside the timed segments: a sizing that costs a second of
    the fake clock shows in no wait and no copy, and the size is still recorded."""
    e, device, _ = epoch(0.004, side_stream=side_stream)

    def slow_nbytes(batch: Any) -> int:
        device.clock.advance(1.0)
        return sum(t.nbytes for t in batch)

    monkeypatch.setattr(feed, "nbytes", slow_nbytes)
    e()
    assert all(wait < 1.0 and copy < 1.0 for wait, copy, _ in e.segments)
    assert e.batch_bytes == 2 * 3 * 4 + 2 * 8


@pytest.mark.parametrize("side_stream", [False, True])
def test_a_short_last_batch_does_not_size_the_copies(side_stream: bool) -> None:
    """The copy rate divides the batch size by the mean copy time: with drop_last=False the
    last batch can be short, and sizing it read the rate low."""
    e, _, _ = epoch(0.004, side_stream=side_stream)
    x, y = batches(5)[-1]
    e.loader = [*batches(4), (x[:1], y[:1])]  # 1 sample in the last batch, 2 in the others
    e()
    assert e.batch_bytes == 2 * 3 * 4 + 2 * 8
