"""The options that select cases, declared and parsed once for `run` and `profile` (its
case is the first that `run` would plan with the same options), so their help and their
checks cannot drift apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

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


def selected(
    device: list[str] | None,
    workload: list[str] | None,
    scenario: list[str] | None,
    precision: list[str] | None,
    batch: str | None,
    size: str | None,
    stopping: str | None,
    **more: Any,
) -> RunConfig:
    """The selectors (and ``more`` RunConfig fields) as a checked RunConfig: a bad value
    fails here with one line naming the option, before anything is loaded or measured."""
    from torchmark.run.config import RunConfig, parse_int_list, validate

    return validate(
        RunConfig(
            devices=tuple(device or ("all",)),
            workloads=tuple(workload or ()),
            scenarios=tuple(scenario or ()),
            precisions=tuple(precision or ()),
            batches=parse_int_list(batch, "--batch"),
            sizes=parse_int_list(size, "--size"),
            rule=stopping,
            **more,
        )
    )
