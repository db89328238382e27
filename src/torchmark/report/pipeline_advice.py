"""The advice on an input pipeline, a pure function of the ``input`` workloads' stored
results: the best configuration and its measured gain over DataLoader's defaults, where
adding workers stops helping, what the pipeline costs against device-resident data, and the
code to apply it. Gains are judged against the noise (``comparison.independent``): an effect
the noise covers is "can't tell", never "same"."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchmark.judge import verdicts
from torchmark.loaders import INPUT_WORKLOADS, LOADER, RESIDENT, YOURS, LoaderConfig, config_of
from torchmark.results import Ceiling, Result, link_ceiling

if TYPE_CHECKING:
    from torchmark.judge.comparison import Judgement
    from torchmark.stats.measurement import Measurement

__all__ = ["Advice", "advise", "rate", "unit_of"]


def _independent(a: Measurement, b: Measurement) -> Judgement | str:
    """``comparison.independent``, imported at the first test: numpy is loaded where an
    input workload ran, not by every reader of a stored run (``show``, ``export``)."""
    from torchmark.judge.comparison import independent

    return independent(a, b)


@dataclass(frozen=True)
class Advice:
    device: str
    lines: list[str]
    best: LoaderConfig | None = None
    gain: float | None = None  # best items/s over the default's
    cost: float | None = None  # 1 - best / resident: the share of the possible throughput lost
    plateau: int | None = None  # the smallest worker count no larger count measurably beat
    workload: str = "input"


def advise(results: Sequence[Result], ceilings: Sequence[Ceiling] = ()) -> list[Advice]:
    """One Advice per device and batch the ``input`` workload ran on; ``ceilings``: the
    run's measured ones (each copy is read against the link's limit, ``link_ceiling``)."""
    groups: dict[tuple[str, str, object], list[Result]] = {}
    for r in results:
        if r.workload in INPUT_WORKLOADS:
            groups.setdefault((r.workload, r.device, r.params.get("batch")), []).append(r)
    return [
        dataclasses.replace(
            _one(device, rs, [c for c in ceilings if c.device == device]), workload=workload
        )
        for (workload, device, _), rs in groups.items()
    ]


def unit_of(rs: Sequence[Result]) -> str:
    return next((r.work.item_unit for r in rs if r.work is not None), "items")


def rate(r: Result) -> float:
    return r.rate("items") or 0.0


def _one(device: str, rs: list[Result], ceilings: Sequence[Ceiling] = ()) -> Advice:
    resident = next((r for r in rs if r.variant == RESIDENT and r.ok), None)
    loaders = [
        (config_of(r.params), r)
        for r in rs
        if r.variant == LOADER and r.ok and not r.params.get(YOURS)
    ]
    yours = next((r for r in rs if r.params.get(YOURS) and r.ok), None)
    wrong = [r for r in rs if r.status == "wrong"]
    lines = [f"{config_of(r.params).label()}: wrong batches, left out ({r.reason})" for r in wrong]
    unit = unit_of(rs)
    default = next((r for c, r in loaders if c.is_default), None)
    rebuilt_any = any(r.variant == LOADER and not r.params.get(YOURS) for r in rs)
    if yours is not None and not rebuilt_any:  # not a DataLoader: nothing was rebuilt
        loaders = [(LoaderConfig(), yours)]
        lines.append("your loader is not a DataLoader: it was measured as given only")
    if not loaders:
        return Advice(device, [*lines, "no loader configuration ran"])
    # a configuration its own verdict keeps from being recommended (verdicts: invalid,
    # unreliable) is named with why, never picked as the best
    refused = [(c, r) for c, r in loaders if not verdicts.may(r, "recommend")]
    lines += [f"{c.label()}: left out, {verdicts.says(r)}" for c, r in refused]
    loaders = [(c, r) for c, r in loaders if verdicts.may(r, "recommend")]
    if not loaders:
        return Advice(
            device,
            [*lines, "no loader configuration can be recommended: each one's verdict rejects it"],
        )
    if default is not None and all(r is not default for _, r in loaders):
        default = None  # the defaults' own figure is rejected: no gain is read off it
    best_cfg, best = max(loaders, key=lambda cr: rate(cr[1]))
    gain: float | None = None
    faster = False
    if default is not None and best is not default:
        gain = rate(best) / rate(default)
        j = _independent(default.measurement, best.measurement)
        faster = not isinstance(j, str) and j.verdict == "FASTER"
        lines.append(
            f"best: {best_cfg.label()}: {rate(best):,.0f} {unit}/s, {gain:.2f}x the "
            f"DataLoader defaults ({rate(default):,.0f} {unit}/s)"
            + ("" if faster else "; can't tell it from the noise")
        )
    elif default is not None:
        lines.append(f"best: DataLoader's defaults ({rate(default):,.0f} {unit}/s)")
    if yours is not None and best is not yours and not verdicts.may(yours, "compare"):
        lines.append(f"your loader as given: no ratio to the best setting, {verdicts.says(yours)}")
    elif yours is not None and rate(yours) > 0 and best is not yours:
        j = _independent(yours.measurement, best.measurement)
        told = not isinstance(j, str) and j.verdict in ("FASTER", "SLOWER")
        lines.append(
            f"your loader as given: {rate(yours):,.0f} {unit}/s; the best setting is "
            f"{rate(best) / rate(yours):.2f}x it" + ("" if told else " (can't tell from the noise)")
        )
    plateau, most = _plateau(loaders)
    if plateau is not None and plateau == most and most > 0:
        lines.append(f"workers: still helping at {most}, the most tried (the cores it may use)")
    elif plateau is not None and most > 0:
        lines.append(f"workers: no count above {plateau} measurably beat {plateau}")
    cost: float | None = None
    if resident is not None and rate(resident) > 0:
        sides = (("step fed from device memory", resident), ("best fed step", best))
        if bad := next(((what, why) for what, r in sides if (why := _unusable(r))), None):
            # a cost read off a figure its verdict keeps from comparisons (invalid, WRONG):
            # a verdict its own table denies
            lines.append(f"pipeline cost: can't tell; the {bad[0]} is {bad[1]}")
        elif rate(best) > rate(resident):
            # the fed step cannot beat the same step with no loading: the machine's
            # speed changed between the cases (other load), so no cost can be read off
            lines.append(
                f"pipeline cost: can't tell; the best fed step measured faster than the "
                f"same step fed from device memory ({rate(best):,.0f} vs "
                f"{rate(resident):,.0f} {unit}/s): the machine's load changed between them"
            )
        else:
            cost = 1 - rate(best) / rate(resident)
            lines.append(
                f"your pipeline costs {round(100 * cost)} % of the possible throughput: best "
                f"{rate(best):,.0f} vs {rate(resident):,.0f} {unit}/s fed from device memory"
            )
    lines += _contention(loaders, resident)
    lines += _copies(loaders, ceilings)
    lines += _side_stream(loaders)
    bound = best.extra.get("input", {}).get("input_bound")
    if bound is not None:
        lines.append(f"input-bound: {round(100 * bound)} % of each step waits for data (best)")
    if faster:
        lines.append(f"apply: DataLoader(dataset, batch_size=..., {best_cfg.code()})")
        if (copy := best_cfg.copy_code()) is not None:
            lines.append(f"apply: and {copy}")
    elif default is not None:
        lines.append("apply: nothing; no configuration measurably beat DataLoader's defaults")
    return Advice(device, lines, best_cfg, gain, cost, plateau)


def _unusable(r: Result) -> str | None:
    """Why ``r``'s verdict keeps it from a comparison (``invalid: spread 730 % ...``);
    None where it may be compared (the one rule, ``verdicts``)."""
    return None if verdicts.may(r, "compare") else verdicts.says(r)


# Compute per step this much above the resident step's is worth a line: below it, the
# two are within this machine's run-to-run spread (5-15 % under other helpers' load).
SLOWER_COMPUTE = 1.25


def _contention(loaders: list[tuple[LoaderConfig, Result]], resident: Result | None) -> list[str]:
    """Workers that slow the step itself: on a CPU they decode on the cores the step
    computes on (2 loaded cores here: compute per step rose 1.5-2x with 1-2 workers and
    one torch thread, and 35x with torch's 2 OpenMP threads spinning against them)."""
    if resident is None or resident.median_s is None or _unusable(resident):
        return []  # no ratio to a step its verdict keeps from comparisons (invalid, WRONG)
    slowed = [
        (c, b["compute_s"])
        for c, r in loaders
        if c.workers
        and (b := r.extra.get("input", {})).get("compute_s") is not None
        and b["compute_s"] > SLOWER_COMPUTE * resident.median_s
    ]
    if not slowed:
        return []
    c, t = max(slowed, key=lambda ct: ct[1])
    return [
        f"contention: with {c.label()} the step's compute took {t * 1e3:.3g} ms vs "
        f"{resident.median_s * 1e3:.3g} ms fed from device memory: the workers take the "
        "cores or memory bandwidth the step needs"
    ]


def _plateau(loaders: list[tuple[LoaderConfig, Result]]) -> tuple[int | None, int]:
    """(the smallest plain worker count that no larger count measurably beats, the largest
    count tried). Each larger count is judged against it, not only the next one: a noisy
    middle point must not hide a gain further up."""
    plain = [(c.workers, r) for c, r in loaders if LoaderConfig(c.workers) == c]
    curve = sorted(plain, key=lambda wr: wr[0])
    if not curve:
        return None, 0
    for i, (w, r) in enumerate(curve):
        beaten = False
        for _, up in curve[i + 1 :]:
            j = _independent(r.measurement, up.measurement)
            beaten = beaten or (not isinstance(j, str) and j.verdict == "FASTER")
        if not beaten:
            return w, curve[-1][0]
    return None, curve[-1][0]  # unreachable: the last count has nothing above it


def _copy_rate(r: Result) -> float | None:
    b = r.extra.get("input", {})
    copy, size = b.get("copy_device_s"), b.get("batch_bytes")
    return size / copy if copy and size else None


def _copies(loaders: list[tuple[LoaderConfig, Result]], ceilings: Sequence[Ceiling]) -> list[str]:
    """The fastest in-line copy from pinned and from pageable memory, each against the
    link's limit (``link_ceiling``: the pinned rate, as the transfer workload reads every
    copy), so the gap of pageable is what pinning would win. Side-stream copies are left
    out: they share the device with the compute beside them."""
    parts = []
    for pinned, memory in ((True, "h2d:pinned"), (False, "h2d:pageable")):
        key = link_ceiling(memory)
        rates = [
            rate_
            for c, r in loaders
            if c.pin == pinned and not c.side_stream and (rate_ := _copy_rate(r)) is not None
        ]
        if not rates:
            continue
        best = max(rates)
        part = f"{'pinned' if pinned else 'pageable'} {best / 1e9:.3g} GB/s"
        ceiling = next((c for c in ceilings if c.key == key), None)
        if ceiling is not None and ceiling.value > 0:
            part += f" ({round(100 * best / ceiling.value)} % of the measured {key}, "
            part += f"{ceiling.value / 1e9:.3g} GB/s)"
        parts.append(part)
    if not parts:
        return []
    return ["host-to-device copy of a batch (fastest): " + "; ".join(parts)]


def _side_stream(loaders: list[tuple[LoaderConfig, Result]]) -> list[str]:
    """What the side stream hid of the copy, against what it could hide, and its gain
    over the same loader copying in line (pinned, non_blocking)."""
    out = []
    for c, r in loaders:
        b = r.extra.get("input", {})
        if not c.side_stream or b.get("overlap") is None:
            continue
        line = (
            f"side stream: hid {round(100 * b['overlap'])} % of the copy time behind the "
            f"compute (ideal {round(100 * b['overlap_ideal'])} %: the copy can hide only "
            "behind as much compute)"
        )
        twin = LoaderConfig(c.workers, c.pin, c.prefetch, c.persistent, non_blocking=True)
        base = next((r2 for c2, r2 in loaders if c2 == twin), None)
        if base is not None and rate(base) > 0:
            j = _independent(base.measurement, r.measurement)
            told = not isinstance(j, str) and j.verdict in ("FASTER", "SLOWER")
            line += f"; {rate(r) / rate(base):.2f}x the same loader copying in line" + (
                "" if told else " (can't tell it from the noise)"
            )
        out.append(line)
    return out
