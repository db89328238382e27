"""Run configuration: plain frozen data, validated by pure functions."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from torchmark.devices.host import available_cores
from torchmark.errors import InputError, UnknownNameError
from torchmark.timing.stopping import preset
from torchmark.workloads.base import PlanOptions, Suite

if TYPE_CHECKING:
    from torchmark.workloads.base import Case

T = TypeVar("T")

SUITES: tuple[Suite, ...] = ("quick", "standard", "extended", "full")
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
    # reuse a stored quiet ceiling set instead: "quiet" (the cache) or a run id
    ceilings_from: str | None = None
    telemetry: bool = True
    cache_dir: str | None = None  # data sets workloads write (input: JPEGs)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def plan_options(self) -> PlanOptions:
        return PlanOptions(
            self.suite, self.scenarios, self.precisions, self.batches, self.sizes, self.cache_dir
        )

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
    cores = available_cores()
    if cfg.threads is not None and cfg.threads > cores:
        # More threads than cores only time the scheduler: each thread waits its turn.
        raise InputError(
            f"--threads {cfg.threads} is more than the {cores} cores this process may use; "
            f"pass --threads {cores} or fewer"
        )
    bad = [b for b in cfg.batches if b < 1]
    if bad:
        raise InputError(f"--batch: batch sizes must be >= 1, got {bad[0]}")
    bad = [n for n in cfg.sizes if n < 1]
    if bad:  # a size of 0 plans cases that measure nothing and still "complete"
        raise InputError(f"--size takes sizes >= 1, got {bad[0]}")
    if cfg.rule is not None:
        try:
            preset(cfg.rule)  # the presets' own list names the valid choices
        except UnknownNameError as e:
            raise InputError(str(e)) from None
    return cfg


# Options a workload may ignore: (flag, RunConfig field).
OPTIONAL_AXES = (
    ("--precision", "precisions"),
    ("--batch", "batches"),
    ("--size", "sizes"),
    ("--scenario", "scenarios"),
)


def ignored_options(cfg: RunConfig, plan: Callable[[RunConfig], Sequence[Case]]) -> list[str]:
    """What the user asked for that planned workloads do not use, one line each (say it
    before measuring; the caller may refuse when no workload uses an option at all).

    ``plan(cfg)`` gives the cases for a config. A workload ignores an option when its cases
    are the same with and without it (`add` with --precision bf16 still times float32)."""

    def by_workload(
        cases: Sequence[Case],
    ) -> dict[str, set[tuple[str, str, tuple[tuple[str, Any], ...]]]]:
        out: dict[str, set[tuple[str, str, tuple[tuple[str, Any], ...]]]] = {}
        for c in cases:
            out.setdefault(c.workload, set()).add((c.variant, c.device.name, c.params))
        return out

    asked = by_workload(plan(cfg))
    notes = []
    for flag, name in OPTIONAL_AXES:
        values = getattr(cfg, name)
        if not values:
            continue
        cleared: dict[str, Any] = {name: ()}
        without = by_workload(plan(replace(cfg, **cleared)))
        # the same cases with and without it, and none of them carrying the value asked:
        # ignored. An option equal to a workload's default is used, not ignored (gpt2-padded
        # runs amp-bf16 by default; `--precision amp-bf16` was said to be ignored by it)
        wanted = _spellings(name, values)
        ignoring = sorted(
            w
            for w, keys in asked.items()
            if without.get(w) == keys
            and not any(str(v) in wanted for _, _, params in keys for _, v in params)
        )
        if not ignoring:
            continue
        shown = ",".join(str(v) for v in values)
        if len(ignoring) == len(asked):
            notes.append(
                f"{flag} {shown} is not used by any planned workload ({', '.join(ignoring)})"
            )
        else:
            notes.append(f"{flag} {shown} is ignored by {', '.join(ignoring)}")
    return notes


def _spellings(axis: str, values: Sequence[Any]) -> set[str]:
    """The values asked for an option as a planned case's params spell them: a precision by
    its variant's name (``bf16`` is ``amp-bf16``), anything else as written."""
    out = {str(v) for v in values}
    if axis == "precisions":
        from torchmark import variants  # torch: only once a plan is being checked

        for v in values:
            try:
                out.add(variants.parse(str(v)).name)
            except (InputError, UnknownNameError):
                continue  # a name the plan refused already
    return out


DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str, option: str = "--duration") -> float:
    """'90s', '10m', '1h', '1.5m' or plain seconds '45' -> seconds; zero, a negative time
    and anything else name the option and an example."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text.lower())
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"{option} takes a positive time such as 90s, 10m or 1h; got {text!r}")
    return float(m.group(1)) * DURATION_UNITS[m.group(2) or "s"]


def parse_int_list(text: str | None, what: str) -> tuple[int, ...]:
    """'1,32,256' -> (1, 32, 256); a bad value names the option."""
    return _parse_list(text, what, int, "integers, e.g. 1,32,256")


def parse_float_list(text: str | None, what: str) -> tuple[float, ...]:
    """'0,5' -> (0.0, 5.0); a bad value names the option."""
    return _parse_list(text, what, float, "numbers, e.g. 0,5")


def _parse_list(
    text: str | None, what: str, convert: Callable[[str], T], example: str
) -> tuple[T, ...]:
    if not text:
        return ()
    try:
        return tuple(convert(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InputError(f"{what} takes comma-separated {example}; got {text!r}") from None
