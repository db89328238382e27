"""What a DataLoader configuration is, as plain data (no torch: reports of stored runs read
it without importing torch): the knobs the ``input`` workload sweeps, how a case names them,
and the code a user types to apply one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

RESIDENT = "resident"  # the input case fed from device memory: the ceiling
LOADER = "loader"  # an input case fed by a DataLoader configuration


@dataclass(frozen=True)
class LoaderConfig:
    """The DataLoader knobs the sweep turns; the defaults are DataLoader's own."""

    workers: int = 0
    pin: bool = False
    prefetch: int | None = None  # batches per worker in flight; None: DataLoader's (2)
    persistent: bool = False

    @property
    def is_default(self) -> bool:
        return self == LoaderConfig()

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"num_workers": self.workers}
        if self.pin:
            out["pin_memory"] = True
        if self.workers and self.prefetch is not None:
            out["prefetch_factor"] = self.prefetch
        if self.workers and self.persistent:
            out["persistent_workers"] = True
        return out

    def code(self) -> str:
        """The DataLoader arguments to apply it, as a user types them."""
        return ", ".join(f"{k}={v}" for k, v in self.kwargs().items())


def params(c: LoaderConfig, batch: int) -> tuple[tuple[str, Any], ...]:
    """Case params: workers always, the other knobs where they differ from the default."""
    out: list[tuple[str, Any]] = [("workers", c.workers)]
    if c.pin:
        out.append(("pin", 1))
    if c.prefetch is not None:
        out.append(("prefetch", c.prefetch))
    if c.persistent:
        out.append(("persistent", 1))
    return (*out, ("batch", batch))


def config_of(p: dict[str, Any]) -> LoaderConfig:
    prefetch = p.get("prefetch")
    return LoaderConfig(
        workers=int(p.get("workers", 0)),
        pin=bool(p.get("pin", 0)),
        prefetch=int(prefetch) if prefetch is not None else None,
        persistent=bool(p.get("persistent", 0)),
    )
