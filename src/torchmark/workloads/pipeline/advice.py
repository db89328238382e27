"""What the ``input`` sweep says, as a pure function of its stored results: the best loader
configuration and its measured gain over DataLoader's defaults, where adding workers stops
helping, what the pipeline costs against the same step fed from device memory, and the
code to apply it. Gains are judged against the noise (``comparison.independent``): an
effect the noise covers is "can't tell", never "same"."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from torchmark.comparison import independent
from torchmark.results import Result
from torchmark.workloads.pipeline.feed import LoaderConfig
from torchmark.workloads.pipeline.workload import LOADER, RESIDENT, config_of


@dataclass(frozen=True)
class Advice:
    device: str
    lines: list[str]
    best: LoaderConfig | None
    gain: float | None  # best items/s over the default's
    cost: float | None  # 1 - best / resident: the share of the possible throughput lost
    plateau: int | None  # workers past which the next count measured no gain


def advise(results: Sequence[Result]) -> list[Advice]:
    """One Advice per device and batch the ``input`` workload ran on."""
    groups: dict[tuple[str, object], list[Result]] = {}
    for r in results:
        if r.workload == "input":
            groups.setdefault((r.device, r.params.get("batch")), []).append(r)
    return [_one(device, rs) for (device, _), rs in groups.items()]


def rate(r: Result) -> float:
    return r.rate("items") or 0.0


def _one(device: str, rs: list[Result]) -> Advice:
    resident = next((r for r in rs if r.variant == RESIDENT and r.ok), None)
    loaders = [(config_of(r.params), r) for r in rs if r.variant == LOADER and r.ok]
    wrong = [r for r in rs if r.status == "wrong"]
    lines = [f"{config_of(r.params).code()}: wrong batches, left out ({r.reason})" for r in wrong]
    default = next((r for c, r in loaders if c.is_default), None)
    if not loaders:
        return Advice(device, [*lines, "no loader configuration ran"], None, None, None, None)
    best_cfg, best = max(loaders, key=lambda cr: rate(cr[1]))
    gain: float | None = None
    faster = False
    if default is not None and best is not default:
        gain = rate(best) / rate(default)
        j = independent(default.measurement, best.measurement)
        faster = not isinstance(j, str) and j.verdict == "FASTER"
        lines.append(
            f"best: {best_cfg.code()}: {rate(best):,.0f} images/s, {gain:.2f}x the "
            f"DataLoader defaults ({rate(default):,.0f} images/s)"
            + ("" if faster else "; can't tell it from the noise")
        )
    elif default is not None:
        lines.append(f"best: DataLoader's defaults ({rate(default):,.0f} images/s)")
    plateau = _plateau(loaders)
    if plateau is not None:
        lines.append(
            f"workers: no measured gain past {plateau} (the next count was not measurably faster)"
        )
    cost: float | None = None
    if resident is not None and rate(resident) > 0:
        cost = max(0.0, 1 - rate(best) / rate(resident))
        lines.append(
            f"your pipeline costs {round(100 * cost)} % of the possible throughput: best "
            f"{rate(best):,.0f} vs {rate(resident):,.0f} images/s fed from device memory"
        )
    lines += _contention(loaders, resident)
    bound = best.extra.get("input", {}).get("input_bound")
    if bound is not None:
        lines.append(f"input-bound: {round(100 * bound)} % of each step waits for data (best)")
    if faster:
        lines.append(f"apply: DataLoader(dataset, batch_size=..., {best_cfg.code()})")
    elif default is not None:
        lines.append("apply: nothing; no configuration measurably beat DataLoader's defaults")
    return Advice(device, lines, best_cfg, gain, cost, plateau)


# Compute per step this much above the resident step's is worth a line: below it, the
# two are within this machine's run-to-run spread (5-15 % under other helpers' load).
SLOWER_COMPUTE = 1.25


def _contention(loaders: list[tuple[LoaderConfig, Result]], resident: Result | None) -> list[str]:
    """Workers that slow the step itself: on a CPU they decode on the cores the step
    computes on (2 loaded cores here: compute per step rose 1.5-2x with 1-2 workers and
    one torch thread, and 35x with torch's 2 OpenMP threads spinning against them)."""
    if resident is None or resident.median_s is None:
        return []
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
        f"contention: with {c.code()} the step's compute took {t * 1e3:.3g} ms vs "
        f"{resident.median_s * 1e3:.3g} ms fed from device memory: the workers take the "
        "cores or memory bandwidth the step needs"
    ]


def _plateau(loaders: list[tuple[LoaderConfig, Result]]) -> int | None:
    """The first worker count the next (plain) count did not measurably beat."""
    plain = [(c.workers, r) for c, r in loaders if LoaderConfig(c.workers) == c]
    curve = sorted(plain, key=lambda wr: wr[0])
    for (w, r), (_, nxt) in itertools.pairwise(curve):
        j = independent(r.measurement, nxt.measurement)
        if isinstance(j, str) or j.verdict != "FASTER":
            return w
    return None
