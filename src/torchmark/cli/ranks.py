"""The ranks of ``torchmark run --nproc-per-node N`` (or under torchrun / Slurm): the check
before they start, and this process's rank of the job (``kinds.ranks``)."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any

from rich.text import Text

from torchmark.cli.app import console
from torchmark.cli.output import check_json_path, finish
from torchmark.cli.printers import show_distributed
from torchmark.cli.target import recording
from torchmark.errors import InputError
from torchmark.run.config import RunConfig

__all__ = ["check_ranks", "distributed", "show_distributed"]


def check_ranks(cfg: RunConfig, opts: Any) -> None:
    """More GPU ranks than GPUs is an error; more CPU ranks than cores only a warning (they
    share the cores, and the figures say so)."""
    import torch

    from torchmark.devices.host import available_cores

    gpus = torch.cuda.device_count()
    on_gpu = any(d.startswith("cuda") for d in cfg.devices) or (
        cfg.devices == ("all",) and gpus > 0
    )
    n = opts.nproc
    if on_gpu and n > gpus:
        raise InputError(f"--nproc-per-node {n} is more than the {gpus} GPUs here: pass {gpus}")
    cores = available_cores()
    if not on_gpu and n > cores:
        console.print(
            f"warning: --nproc-per-node {n} is more than the {cores} cores here: "
            "the ranks share cores and each is slower"
        )


def distributed(
    cfg: RunConfig,
    world: Any,
    backend: str | None,
    json_path: Path | None,
    db: str | None,
    verbose: bool,
    strategy: str = "ddp",
) -> None:
    """This process is one rank of a job (torchrun, Slurm): rank 0 stores and prints."""
    from torchmark.kinds.ranks import kind as ranks

    if not world.is_main:
        ranks.run(cfg, None, None, world, backend, strategy=strategy)
        # A worker rank stores and prints nothing, and its group is destroyed: it leaves
        # without the interpreter's teardown, where a finished rank 1 twice died of SIGABRT
        # ("terminate called without an active exception", a C++ thread still joinable),
        # failing a complete ladder rung.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    check_json_path(json_path)
    render = functools.partial(show_distributed, verbose=verbose)
    with recording(render, json_path, db, lines=False) as (store, events):

        def say(line: str) -> None:
            console.print(Text(line), soft_wrap=not console.is_terminal)

        record = ranks.run(
            cfg, store, events, world, backend, json_path=json_path, say=say, strategy=strategy
        )
    finish(record, render, json_path, store.url)
