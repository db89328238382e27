"""One error hierarchy for torchmark.

    TorchmarkError                 anything torchmark raises on purpose
    ├── UsageError                 the user asked for something invalid (exit 2)
    │   ├── UnknownNameError       a registry name that does not exist; lists the valid ones
    │   └── InputError             a file, spec or option value that cannot be used
    ├── StoreError                 the results store cannot be opened, read or written (exit 1)
    │   ├── RunNotFoundError       a run asked for that is not in the store (exit 2: bad input)
    │   ├── StoreUnavailable       the store stayed down through its retries (lock, server)
    │   │   └── StoreFull          its disk is full: raised at once, no retries
    │   └── RunNotStored           a run measured but not (fully) stored: carries the run
    ├── RunInterrupted             Ctrl-C / SIGTERM / SIGHUP mid-run: carries the run measured
    │                              so far (exit 128 + signal: 130, 143, 129)
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
        self.suggestion = self.closest(name, self.valid)
        choices = ", ".join(self.valid) or "(none)"
        hint = f"did you mean {self.suggestion!r}? " if self.suggestion else ""
        super().__init__(f"unknown {kind} {name!r}; {hint}valid {kind}s: {choices}")

    @staticmethod
    def closest(name: str, valid: Iterable[str]) -> str | None:
        """The valid name nearest ``name`` (a typo, another case), or None if none is close."""
        import difflib

        by_lower = {v.lower(): v for v in valid}
        near = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1, cutoff=0.6)
        return by_lower[near[0]] if near else None


class InputError(UsageError):
    pass


class StoreError(TorchmarkError):
    pass


class StorePathError(StoreError):
    """The store the user named (``--db``, TORCHMARK_DB) cannot be written or is not a
    torchmark database: bad input, exit 2 with the fix, as every other bad input."""

    exit_code = 2


class ServerError(TorchmarkError):
    """A leaderboard server refused a request or could not be reached (``submit``)."""


class RunNotFoundError(StoreError):
    """A run id (or ``latest``) the store does not hold: the input is wrong, not the store,
    so it exits 2 as every other bad input does (exit 1 read as a regression in
    ``compare --fail-on-regression``, whose 1 means a case got slower)."""

    exit_code = 2


class StoreUnavailable(StoreError):
    """The store could not be written for longer than its retries allow (a lock held by
    another writer, a full disk, a database server restarting)."""


class StoreFull(StoreUnavailable):
    """The store's disk is full: raised at once, not after retries (nothing frees space by
    waiting); the run keeps its results in memory and writes them to a JSON file."""


class RunNotStored(StoreError):
    """The run was measured but the store failed: ``record`` holds every result measured,
    so the caller can still show it and write it to a file."""

    def __init__(self, record: object, cause: str) -> None:
        self.record, self.cause = record, cause
        super().__init__(f"the run could not be stored: {cause}")


# Signals a run stops on, by name: a shell reports 128 + the number as the exit status.
SIGNAL_NAMES = {2: "Ctrl-C (SIGINT)", 15: "SIGTERM", 1: "SIGHUP"}


class RunInterrupted(TorchmarkError):
    """Ctrl-C, SIGTERM or SIGHUP during a run: what was measured is stored (incomplete);
    ``record`` holds it. The exit code is 128 + the signal, as a shell would report it."""

    exit_code = 130

    def __init__(self, record: object, run_id: str | None, signum: int = 2) -> None:
        self.record, self.signum = record, signum
        self.exit_code = 128 + signum
        what = SIGNAL_NAMES.get(signum, f"signal {signum}")
        where = f"run {run_id} saved" if run_id else "the run (not stored) kept"
        super().__init__(
            f"interrupted by {what}: {where} as incomplete with the cases measured so far"
        )


class CaseSkipped(TorchmarkError):
    """Raised inside a case: the case is recorded as skipped with this reason."""


class OutOfMemory(CaseSkipped):
    """The case did not fit in the device's memory; larger cases of its sweep will not either."""


class WrongResultError(TorchmarkError):
    """Raised by a correctness guard: the case is reported as wrong, with this reason."""


def first_line(e: BaseException, limit: int | None = None) -> str:
    """The first line of ``e``'s message (at most ``limit`` characters), else its type's
    name: a library's error (NCCL, c10d, a driver) can run to dozens of lines."""
    text = str(e).strip()
    return text.splitlines()[0][:limit] if text else type(e).__name__
