"""Run configuration: plain frozen data, validated by pure functions."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from torchmark.errors import InputError, UnknownNameError
from torchmark.timing.stopping import preset
from torchmark.workloads.base import PlanOptions, Suite

SUITES: tuple[Suite, ...] = ("quick", "standard", "full")
TIMINGS = ("device", "e2e")


@dataclass(frozen=True)
class RunConfig:
    devices: tuple[str, ...] = ("all",)
    workloads: tuple[str, ...] = ()  # empty: every workload of the suite
    suite: Suite = "standard"
    scenarios: tuple[str, ...] = ()
    precisions: tuple[str, ...] = ()
    batches: tuple[int, ...] = ()
    sizes: tuple[int, ...] = ()
    threads: int | None = None  # CPU threads; None keeps torch's default (recorded)
    timing: Literal["device", "e2e"] = "device"
    rule: str | None = None  # stopping preset override: micro | model | quick | test
    remeasure_ceilings: bool = False
    ceilings: bool = True  # measure ceilings at all (tests turn it off)
    telemetry: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def plan_options(self) -> PlanOptions:
        return PlanOptions(self.suite, self.scenarios, self.precisions, self.batches, self.sizes)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def validate(cfg: RunConfig) -> RunConfig:
    """Check values that need no hardware; names are checked against registries later."""
    if cfg.suite not in SUITES:
        raise InputError(f"unknown suite {cfg.suite!r}; valid suites: {', '.join(SUITES)}")
    if cfg.timing not in TIMINGS:
        raise InputError(f"unknown timing {cfg.timing!r}; valid: {', '.join(TIMINGS)}")
    if cfg.threads is not None and cfg.threads < 1:
        raise InputError(f"--threads must be >= 1, got {cfg.threads}")
    bad = [b for b in cfg.batches if b < 1]
    if bad:
        raise InputError(f"batch sizes must be >= 1, got {bad[0]}")
    if cfg.rule is not None:
        try:
            preset(cfg.rule)  # the presets' own list names the valid choices
        except UnknownNameError as e:
            raise InputError(str(e)) from None
    return cfg


def parse_int_list(text: str | None, what: str) -> tuple[int, ...]:
    """'1,32,256' -> (1, 32, 256); a bad value names the option."""
    if not text:
        return ()
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(
            f"{what} takes comma-separated integers, e.g. 1,32,256; got {text!r}"
        ) from None
