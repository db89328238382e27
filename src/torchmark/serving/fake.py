"""A fake device of known service time, for tests and for the generator's own benchmark:
serving a batch of n takes ``fixed_s + per_item_s * n`` on its clock (on a FakeClock that
is simulated time, so a queue's behaviour is exact and repeatable)."""

from __future__ import annotations

from collections.abc import Collection

from torchmark.serving.clock import Clock


class FakeDevice:
    """An executor: a batch of n takes ``fixed_s + per_item_s * n``; a batch holding a
    request in ``failing`` raises after its time (as a model that raises on one input)."""

    def __init__(
        self,
        clock: Clock,
        fixed_s: float,
        per_item_s: float = 0.0,
        failing: Collection[int] = (),
    ) -> None:
        self.clock, self.fixed_s, self.per_item_s = clock, fixed_s, per_item_s
        self.failing = frozenset(failing)
        self.batches: list[int] = []

    def service_s(self, n: int) -> float:
        return self.fixed_s + self.per_item_s * n

    def __call__(self, first: int, n: int) -> None:
        self.batches.append(n)
        advance = getattr(self.clock, "advance", None)
        if advance is not None:  # simulated time: exactly the service time, never late
            advance(self.service_s(n))
        else:
            self.clock.sleep_until(self.clock.now() + self.service_s(n))
        bad = [i for i in range(first, first + n) if i in self.failing]
        if bad:
            raise ValueError(f"request {bad[0]} is malformed\n(a second line never shown)")
