"""``torchmark run --scaling 1,2``: the DDP scaling ladder in one command.

Rung 0 is the plain run (no DDP, this process, the CLI's own run path); each DDP (or FSDP,
``--strategy ddp,fsdp``) rung is ``torchmark run --nproc-per-node N`` through torchrun's
launcher, i.e. the very command a user would type, whose rank 0 stores its run and writes
it to a JSON file read back here. A DataParallel rung (``dp``) is the plain run again with
the model in ``nn.DataParallel`` over N GPUs and N x the batch (the same batch per GPU);
on a CPU its case is skipped with the reason, through the same path.
Every rung is a stored run of its own (``compare`` and ``report`` take them like any
other); the ladder table is a view of them (report/scaling.py).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from torchmark.errors import InputError
from torchmark.launch.env import RUNG_ENV
from torchmark.launch.torchrun import Launch, launch
from torchmark.results import RunRecord
from torchmark.run.config import RunConfig
from torchmark.workloads import Case
from torchmark.workloads.models.ddp import STRATEGIES, using

# Options the ladder sets itself on each rung's command line (each takes a value).
OWN = ("--scaling", "--nproc-per-node", "--json", "--strategy")


def check(
    sizes: Sequence[int],
    opts: Launch,
    cases: Sequence[Case],
    strategies: Sequence[str] = ("ddp",),
    gpus: int = 0,
) -> None:
    """Bad ladders are refused before anything is measured. ``gpus``: CUDA devices here
    (a rank per GPU; DataParallel rows beyond them are skipped with the reason instead)."""
    bad = [s for s in strategies if s not in STRATEGIES]
    if bad or not strategies:
        raise InputError(f"unknown --strategy {','.join(bad)}; valid: {', '.join(STRATEGIES)}")
    if not sizes:
        raise InputError("--scaling takes world sizes, e.g. 1,2,4")
    if any(n < 1 for n in sizes) or list(sizes) != sorted(set(sizes)):
        raise InputError(f"--scaling takes increasing world sizes >= 1, e.g. 1,2,4; got {sizes}")
    if opts.nproc_per_node is not None or opts.nnodes > 1:
        raise InputError(
            "--scaling starts its own ranks on this machine: drop --nproc-per-node/--nnodes"
        )
    on_gpu = any(c.device.kind == "cuda" for c in cases)
    if on_gpu and max(sizes) > gpus and any(s != "dp" for s in strategies):
        raise InputError(
            f"--scaling {max(sizes)} ranks need {max(sizes)} GPUs, one each; {gpus} here: "
            f"stop the ladder at {gpus}"
        )
    others = sorted({c.label for c in cases if c.param_dict.get("scenario") != "train"})
    if others or not cases:
        what = f" (not: {', '.join(others[:3])})" if others else ""
        raise InputError(f"--scaling measures training steps under DDP: add --scenario train{what}")


def rung_argv(argv: Sequence[str], n: int, json_path: Path, strategy: str = "ddp") -> list[str]:
    """The user's command line with the ladder's own options replaced for rung ``n``."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in OWN:
            skip = "=" not in a
            continue
        out.append(a)
    return [*out, "--nproc-per-node", str(n), "--strategy", strategy, "--json", str(json_path)]


def run_ladder(
    cfg: RunConfig,
    sizes: Sequence[int],
    opts: Launch,
    argv: Sequence[str],
    plain: Callable[[RunConfig], RunRecord],
    say: Callable[[str], None],
    strategies: Sequence[str] = ("ddp",),
    batches: Sequence[int] = (),
) -> tuple[list[RunRecord], list[str]]:
    """No DDP, then each strategy on each world size (DataParallel from 2 GPUs); the records
    and their rung labels. ``argv``: the command line after the program name; ``batches``:
    the planned batch sizes (a DataParallel rung multiplies them). A rung that fails raises
    LadderFailed with the rungs measured so far (each stored by its rank 0)."""
    # distributed rungs measure no ceilings (rank.run): neither does the plain rung, so
    # every rung runs the same way and the ladder's wait is its cases alone
    cfg = replace(cfg, ceilings=False)
    planned = rungs(sizes, strategies)
    records: list[RunRecord] = []
    labels: list[str] = []
    with tempfile.TemporaryDirectory(prefix="torchmark-ladder-") as tmp:
        for i, (s, n) in enumerate(planned, start=1):
            label = rung_label(s, n)
            say(f"scaling ladder, rung {i}/{len(planned)}: {label} ({rung_how(s, n)})")
            labels.append(label)
            if s == "no":
                records.append(plain(cfg))
                continue
            if s == "dp":  # one process: the same batch per GPU is n x the batch
                with using("dp", n):
                    records.append(plain(replace(cfg, batches=tuple(b * n for b in batches))))
                continue
            out = Path(tmp) / f"{s}{n}.json"
            try:
                with rung_env():
                    launch(replace(opts, nproc_per_node=n), rung_argv(argv, n, out, s))
            except Exception as e:
                if out.exists():  # rank 0 wrote what finished before the failure
                    records.append(RunRecord.model_validate_json(out.read_text()))
                else:
                    labels.pop()
                raise LadderFailed(records, labels, label, e) from None
            records.append(RunRecord.model_validate_json(out.read_text()))
    return records, labels


def rungs(sizes: Sequence[int], strategies: Sequence[str]) -> list[tuple[str, int]]:
    """(strategy, world size) of each rung in order: no DDP, then each strategy on each
    world size (DataParallel from 2 GPUs)."""
    return [("no", 1)] + [(s, n) for s in strategies for n in sizes if s != "dp" or n > 1]


def rung_label(strategy: str, n: int) -> str:
    return "no DDP" if strategy == "no" else f"{strategy.upper()} x{n}"


def rung_how(strategy: str, n: int) -> str:
    return {
        "no": "this process",
        "dp": f"nn.DataParallel over {n} GPUs, this process, batch x{n}",
    }.get(strategy, f"torchrun launcher, {n} local rank{'s' if n > 1 else ''}")


@contextlib.contextmanager
def rung_env() -> Iterator[None]:
    """The launcher's ranks inherit this process's environment: mark them as a rung."""
    old = os.environ.get(RUNG_ENV)
    os.environ[RUNG_ENV] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(RUNG_ENV, None)
        else:
            os.environ[RUNG_ENV] = old


class LadderFailed(Exception):
    """A rung failed: ``records`` holds every rung measured so far (each already stored)."""

    def __init__(
        self, records: list[RunRecord], labels: list[str], rung: str, cause: Exception
    ) -> None:
        super().__init__(f"scaling ladder stopped at {rung}: {cause}")
        self.records, self.labels, self.rung, self.cause = records, labels, rung, cause


__all__ = ["LadderFailed", "check", "run_ladder", "rung_argv"]
