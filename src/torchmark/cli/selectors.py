"""The options that select cases, declared and parsed once for `run` and `profile` (its
case is the first that `run` would plan with the same options), so their help and their
checks cannot drift apart."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from torchmark.cli.app import ceilings_choice

if TYPE_CHECKING:
    from torchmark.run.config import RunConfig

WorkloadsOption = Annotated[
    list[str] | None,
    typer.Option("--workload", "-w", help="Built-in workload (repeatable); see `torchmark list`."),
]
ScenariosOption = Annotated[
    list[str] | None,
    typer.Option(help="Model scenario (repeatable): infer, infer-e2e, train, prefill, decode."),
]
PrecisionsOption = Annotated[
    list[str] | None,
    typer.Option(help="Precision/optimisation variant (repeatable), e.g. fp32, amp-bf16."),
]
BatchesOption = Annotated[str | None, typer.Option(help="Batch sizes, e.g. 1,32,256.")]
SizesOption = Annotated[str | None, typer.Option(help="Problem sizes for micro workloads.")]
StoppingOption = Annotated[
    str | None,
    typer.Option(
        help="Stopping preset for every case: micro (0.5 % target), model (1.5 %), quick, "
        "epoch (input pipelines: 5 epochs), test (default: each workload's own)."
    ),
]


def selected(params: Mapping[str, Any], **more: Any) -> RunConfig:
    """The selectors among a command's parsed options (``ctx.params``, by the parameter
    names `run` and `profile` share: device, workload, ... stopping, ceilings, no_ceilings)
    and ``more`` RunConfig fields as a checked RunConfig: a bad value fails here with one
    line naming the option, before anything is loaded or measured."""
    from torchmark.run.config import RunConfig, parse_int_list, validate

    ceilings = ceilings_choice(params["ceilings"], params["no_ceilings"])
    return validate(
        RunConfig(
            devices=tuple(params["device"] or ("all",)),
            workloads=tuple(params["workload"] or ()),
            scenarios=tuple(params["scenario"] or ()),
            precisions=tuple(params["precision"] or ()),
            batches=parse_int_list(params["batch"], "--batch"),
            sizes=parse_int_list(params["size"], "--size"),
            rule=params["stopping"],
            **ceilings,
            **more,
        )
    )
