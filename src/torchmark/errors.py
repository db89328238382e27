"""One error hierarchy for torchmark.

    TorchmarkError                 anything torchmark raises on purpose
    ├── UsageError                 the user asked for something invalid (exit 2)
    │   ├── UnknownNameError       a registry name that does not exist; lists the valid ones
    │   └── InputError             a file, spec or option value that cannot be used
    ├── StoreError                 the results store cannot be opened, read or written (exit 1)
    │   ├── RunNotFoundError       a run id that is not in the store
    │   └── StoreUnavailable       a write kept failing past its retry time (lock, disk, server)
    ├── RunInterrupted             Ctrl-C mid-run: carries the run measured so far (exit 130)
    ├── CaseSkipped                a case cannot run here (OOM, unsupported dtype); run goes on
    │   └── OutOfMemory            it did not fit: the rest of its sweep is skipped too
    └── WrongResultError           a correctness guard failed: the case is reported wrong

The CLI turns TorchmarkError into one line and a non-zero exit; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class TorchmarkError(Exception):
    exit_code = 1


class UsageError(TorchmarkError):
    exit_code = 2


class UnknownNameError(UsageError):
    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.kind, self.name, self.valid = kind, name, sorted(valid)
        choices = ", ".join(self.valid) or "(none)"
        super().__init__(f"unknown {kind} {name!r}; valid {kind}s: {choices}")


class InputError(UsageError):
    pass


class StoreError(TorchmarkError):
    pass


class RunNotFoundError(StoreError):
    pass


class StoreUnavailable(StoreError):
    """The store kept failing for a passing reason (a held lock, a full disk, a server
    restart) past the retry time; the message names the real cause."""


class RunInterrupted(TorchmarkError):
    """Ctrl-C during a run: what was measured is stored; ``record`` holds it (incomplete)."""

    exit_code = 130

    def __init__(self, record: object, run_id: str | None) -> None:
        self.record = record
        super().__init__(
            f"interrupted: run {run_id} saved as incomplete with the cases measured so far"
        )


class CaseSkipped(TorchmarkError):
    """Raised inside a case: the case is recorded as skipped with this reason."""


class OutOfMemory(CaseSkipped):
    """The case did not fit in the device's memory; larger cases of its sweep will not either."""


class WrongResultError(TorchmarkError):
    """Raised by a correctness guard: the case is reported as wrong, with this reason."""
