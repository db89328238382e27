"""What a DataLoader configuration is, as plain data (no torch: reports of stored runs read
it without importing torch): the knobs the ``input`` workload sweeps, how a case names them,
and the code a user types to apply one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

YOURS = "yours"  # the param of a user-input case fed by the user's loader as given
RESIDENT = "resident"  # the input case fed from device memory: the ceiling
LOADER = "loader"  # an input case fed by a DataLoader configuration
INPUT_WORKLOADS = (
    "input",
    "input-tokens",
    "user-input",
)  # the workloads whose results these describe


@dataclass(frozen=True)
class LoaderConfig:
    """The DataLoader knobs the sweep turns; the defaults are DataLoader's own."""

    workers: int = 0
    pin: bool = False
    prefetch: int | None = None  # batches per worker in flight; None: DataLoader's (2)
    persistent: bool = False
    # how the batch reaches the device: ``.to(device, non_blocking=...)`` in the loop, or
    # the copy of batch i+1 issued on a side stream while batch i computes (implies both)
    non_blocking: bool = False
    side_stream: bool = False

    @property
    def copies_async(self) -> bool:
        """Needs pinned memory, non_blocking copies or a side stream: CUDA only."""
        return self.pin or self.non_blocking or self.side_stream

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

    def copy_code(self) -> str | None:
        """How the loop copies a batch, where it differs from a plain ``.to(device)``."""
        if self.side_stream:
            return (
                "copy batch i+1 on a side stream while batch i computes: with "
                "torch.cuda.stream(side): x = x.to(device, non_blocking=True); then "
                "torch.cuda.current_stream().wait_stream(side) and x.record_stream(...) "
                "before using it"
            )
        if self.non_blocking:
            return "x = x.to(device, non_blocking=True)"
        return None

    def label(self) -> str:
        """Everything that differs from the defaults, for tables and advice."""
        words = [self.code()]
        if self.side_stream:
            words.append("side-stream copy")
        elif self.non_blocking:
            words.append("non_blocking copy")
        return ", ".join(words)


def params(c: LoaderConfig, batch: int) -> tuple[tuple[str, Any], ...]:
    """Case params: workers always, the other knobs where they differ from the default."""
    out: list[tuple[str, Any]] = [("workers", c.workers)]
    if c.pin:
        out.append(("pin", 1))
    if c.prefetch is not None:
        out.append(("prefetch", c.prefetch))
    if c.persistent:
        out.append(("persistent", 1))
    if c.non_blocking:
        out.append(("non_blocking", 1))
    if c.side_stream:
        out.append(("side_stream", 1))
    return (*out, ("batch", batch))


def config_of(p: dict[str, Any]) -> LoaderConfig:
    prefetch = p.get("prefetch")
    return LoaderConfig(
        workers=int(p.get("workers", 0)),
        pin=bool(p.get("pin", 0)),
        prefetch=int(prefetch) if prefetch is not None else None,
        persistent=bool(p.get("persistent", 0)),
        non_blocking=bool(p.get("non_blocking", 0)),
        side_stream=bool(p.get("side_stream", 0)),
    )
