"""``torchmark run --scaling 1,2``: the ladder's CLI side (store, progress, the table)."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

from rich.text import Text

from torchmark.cli.app import console, open_store
from torchmark.errors import InputError
from torchmark.results import RunRecord
from torchmark.run.config import RunConfig, parse_int_list


def scaling_ladder(
    cfg: RunConfig,
    scaling: str,
    opts: Any,
    world: Any,
    strategy: str | None,
    db: str | None,
    json_path: Path | None,
    verbose: bool,
    dry_run: bool = False,
) -> None:
    from torchmark.cli.output import finish, show_plan, shown_even_if_interrupted
    from torchmark.cli.printers import printed
    from torchmark.cli.printers import show_run as show
    from torchmark.cli.progress import ProgressEvents
    from torchmark.kinds.ranks import ladder
    from torchmark.report.scaling import ladder_renderables
    from torchmark.run import plan, runner

    if world is not None:
        raise InputError("--scaling starts its own ranks: run it alone, not under torchrun/srun")
    if json_path is not None:
        raise InputError(
            "--scaling stores each rung as its own run: drop --json and write them out "
            "afterwards with `torchmark export`"
        )
    sizes = parse_int_list(scaling, "--scaling")
    strategies = tuple(x.strip() for x in (strategy or "ddp").split(",") if x.strip())
    cases = plan.planned(cfg)
    import torch

    ladder.check(sizes, opts, cases, strategies, torch.cuda.device_count())
    if dry_run:  # the ladder's refusals above, then its rungs and the cases each measures
        for i, (s, n) in enumerate(planned := ladder.rungs(sizes, strategies), start=1):
            label, how = ladder.rung_label(s, n), ladder.rung_how(s, n)
            console.print(Text(f"scaling ladder, rung {i}/{len(planned)}: {label} ({how})"))
        show_plan(cases)
        return
    batches = sorted({int(c.param_dict["batch"]) for c in cases if "batch" in c.param_dict})
    store = open_store(db)

    def plain(c: RunConfig) -> RunRecord:
        events = ProgressEvents(console)
        render = functools.partial(show, verbose=verbose)
        with shown_even_if_interrupted(render, None), events.shown():
            record = runner.run(c, store, events)
        finish(record, render, None, store.url)
        return record

    def say(line: str) -> None:
        console.print(Text(line, style="bold"), soft_wrap=not console.is_terminal)

    try:
        records, labels = ladder.run_ladder(
            cfg, sizes, opts, sys.argv[1:], plain, say, strategies, batches
        )
    except ladder.LadderFailed as e:
        printed(ladder_renderables(e.records, e.labels))
        raise e.cause from None
    printed(ladder_renderables(records, labels))
    ids = ", ".join(str(r.run_id) for r in records)
    console.print(f"Ladder runs (no DDP first): {ids}; compare them with `torchmark compare`")


__all__ = ["scaling_ladder"]
