"""How long the standard suite takes on an H100, estimated without one, per part.

    python benchmarks/gpu_standard_estimate.py [--suite standard|extended] [--reference h100-quick]

The plan is the real one (``run.plan.make_plan``) for a fake H100 (``cuda:0``: 80 GB, 50 MB
L2, TF32, graphs and pinned copies as an H100 has them): the cases a `torchmark run -d
cuda` would measure. Each case's time is estimated from:

- its stopping rule's bounds (timing/stopping.py): a case that converges ends at
  ``min_time_s`` or after ``min_samples`` calls, whichever is longer; one whose call is
  longer than the time-out is one sample; the input pipeline's cases are noisy (on the H200
  13 of them ended "timed out" at +-5-22 %), so they run to "out of reach" (twice the
  rule's minimum samples and time, at most its time-out) after a warm-up cut at the time-out;
- its call time: declared FLOPs (models: FlopCounterMode at batch 1, linear in batch) at
  ``EFFICIENCY`` of the H100's measured matmul ceiling for the precision, bytes at its
  measured bandwidth or link, never under a per-call floor (launches), and epochs of JPEG
  decoding for the input pipeline (``EPOCH_S``);
- what the committed quick run on an H100 says about the rest: every GPU case there but
  one converged at its rule's minimum time (``--reference``), and a case costs
  ``overhead`` seconds beyond its samples (set-up, check, first call, warm-up, storing),
  worked out from that run's wall time.

Every constant is printed; none is a measurement of the standard suite (there is none yet):
an estimate, to be replaced by the measured time on a lent GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from typing import Any, get_args

from torchmark import ceilings
from torchmark.run.config import RunConfig
from torchmark.run.plan import make_plan
from torchmark.testing import FakeClock, FakeH100
from torchmark.timing.stopping import preset
from torchmark.workloads import WORKLOADS, Case
from torchmark.workloads.base import Suite

# The H100's measured ceilings (benchmarks/README.md, "On a lent GPU machine").
PEAK = {"fp32": 51.5e12, "tf32": 402e12, "fp16": 769e12, "bf16": 794e12}
BANDWIDTH = 3.0e12  # B/s device memory
LINK = {"pinned": 55e9, "pageable": 9.3e9}  # B/s host <-> device
EFFICIENCY = 0.25  # of the matmul peak, for whole models (GPT-2 21.5 %, ResNet-50 ~12-40 %)
# A call cannot be shorter than its kernel launches (~5-10 us each): per model and scenario.
FLOOR_S = {"infer": 2e-3, "infer-e2e": 3e-3, "train": 6e-3, "prefill": 3e-3, "decode": 0.35}
SMALL_FLOOR_S = {"simplenet": 1e-4, "linear10": 5e-5}  # a handful of kernels
EPOCH_S = 2.0  # one input-pipeline epoch (512 JPEGs) on an H100 host: 0.3-2 s (README)
WARMUP_CALLS = 3


def reference(name: str) -> tuple[float, float, int, int]:
    """(wall s, seconds in samples, GPU cases, GPU cases converged) of a committed run."""
    doc = json.loads(resources.files("torchmark.reference").joinpath(f"{name}.json").read_text())
    run = doc["run"]
    from datetime import datetime

    wall = (
        datetime.fromisoformat(run["finished_utc"].replace("Z", "+00:00"))
        - datetime.fromisoformat(run["created_utc"].replace("Z", "+00:00"))
    ).total_seconds()
    sampled = sum(sum(r["samples_s"]) * r["calls_per_sample"] for r in run["results"])
    gpu = [r for r in run["results"] if r["device"].startswith("cuda")]
    converged = sum(r["stop_reason"] in ("converged", "stalled") for r in gpu)
    return wall, sampled, len(gpu), converged


def precision_peak(case: Case) -> float:
    p = str(case.param_dict.get("precision", case.variant))
    for key, peak in (("bf16", "bf16"), ("fp16", "fp16"), ("tf32", "tf32")):
        if key in p:
            return PEAK[peak]
    if "bfloat16" in p:
        return PEAK["bf16"]
    if "float16" in p:
        return PEAK["fp16"]
    return PEAK["fp32"]


_FLOPS: dict[tuple[str, str, tuple[Any, ...]], float] = {}


def call_s(case: Case) -> float:
    """One call's time on the H100, by the rules in the module docstring."""
    w, p = case.workload, case.param_dict
    if w in ("add", "triad"):
        return 12 * int(p["n"]) / BANDWIDTH
    if w == "matmul":
        return 2 * int(p["n"]) ** 3 / (0.9 * precision_peak(case))
    if w == "transfer":
        return int(p.get("bytes", 0)) / LINK["pinned" if "pinned" in case.variant else "pageable"]
    if w == "seed-add":
        return 0.3 if case.variant == "intended" else 4e-4  # 3.4 it/s PCIe; 2,422 it/s
    if w in ("input", "input-tokens"):
        return EPOCH_S
    if w == "collectives":
        return 1e-3
    from torchmark.workloads.models.base import ModelWorkload, Sizes

    model = WORKLOADS.get(w)()
    assert isinstance(model, ModelWorkload)
    scenario = str(p["scenario"])
    sizes = Sizes.from_params(p)
    key = (w, scenario, Sizes.from_params({**p, "batch": 1}).params())
    if key not in _FLOPS:
        _FLOPS[key] = model.flops_per_call(scenario, Sizes.from_params({**p, "batch": 1}))
    flops = _FLOPS[key] * sizes.batch
    floor = SMALL_FLOOR_S.get(w, FLOOR_S.get(scenario, 2e-3))
    return max(floor, flops / (EFFICIENCY * precision_peak(case)))


def case_s(case: Case, overhead: float) -> float:
    """Warm-up, samples and the overhead of one case under its rule."""
    rule = preset(
        case.rule or ("model" if WORKLOADS.get(case.workload).group == "model" else "micro")
    )
    call = call_s(case)
    min_time = getattr(rule, "min_time_s", 0.5)
    min_samples = getattr(rule, "min_samples", 10)
    sample = max(call, 1e-3)  # a GPU sample is >= 1 ms
    if case.workload in ("input", "input-tokens"):  # noisy: warm-up to the time-out, out of reach
        warm = min(rule.max_time_s, WARMUP_CALLS * call)
        # out of reach once the verdict held on the first half too (timing/stopping.py)
        samples = min(rule.max_time_s, 2 * max(min_time, min_samples * call))
        return overhead + 2 * call + warm + samples  # check and first epoch too
    warm = max(0.025, WARMUP_CALLS * call)
    samples = call if call >= rule.max_time_s else max(min_time, min_samples * sample)
    return overhead + 3 * call + min(warm, rule.max_time_s) + samples  # check (2), first call


def part_of(workload: str) -> str:
    """The part of the suite a workload's cases belong to."""
    if workload in ("simplenet", "linear10", "resnet50", "bert-base", "gpt2", "gpt2-padded"):
        return workload
    if workload in ("input", "input-tokens"):
        return "input pipeline"
    return MICRO


MICRO = "micro (add, triad, matmul, transfer, seed-add, collectives)"
START = "start-up (interpreter, torch, CUDA context)"


@dataclass
class Estimate:
    """The suite's estimated time: start-up, ceilings and each part (cases, seconds)."""

    suite: Suite
    cases: int
    start_s: float
    ceilings: int  # measurements
    ceiling_s: float
    parts: dict[str, tuple[int, float]]  # part -> (cases, seconds), longest first
    overhead_s: float  # per case, from the reference run
    reference: tuple[float, float, int, int]  # reference(): wall, sampled, GPU cases, converged

    @property
    def total_s(self) -> float:
        return self.start_s + self.ceiling_s + sum(s for _, s in self.parts.values())


def estimate(suite: Suite = "standard", ref: str = "h100-quick") -> Estimate:
    """The plan of ``suite`` for a fake H100, each case's time estimated (module docstring)."""
    gpu = FakeH100(FakeClock(), 0)
    plan = make_plan(RunConfig(devices=("cuda:0",), suite=suite), devices=[gpu])
    wall, sampled, n_gpu, converged = reference(ref)
    n_all = 28  # the quick run's cases on its two devices (10 CPU, 18 GPU)
    ceilings_quick = 25.0  # both devices' ceilings in that run (assumed: not stored apart)
    overhead = (wall - sampled - ceilings_quick) / n_all
    timed, _ = ceilings.planned(gpu, quick=False)
    from torchmark.ceilings.base import rule

    full_rule = rule(False)
    ceiling_s = timed * (full_rule.min_time_s + 0.1)  # type: ignore[attr-defined]
    parts: dict[str, list[float]] = defaultdict(list)
    for c in plan.cases:
        parts[part_of(c.workload)].append(case_s(c, overhead))
    ranked = sorted(parts.items(), key=lambda kv: -sum(kv[1]))
    return Estimate(
        suite,
        len(plan.cases),
        10.0,  # interpreter, torch, CUDA context, planning
        timed,
        ceiling_s,
        {name: (len(times), sum(times)) for name, times in ranked},
        overhead,
        (wall, sampled, n_gpu, converged),
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="standard", choices=get_args(Suite))
    ap.add_argument("--reference", default="h100-quick", help="a committed GPU quick run")
    args = ap.parse_args()
    est = estimate(args.suite, args.reference)
    wall, sampled, n_gpu, converged = est.reference
    print(f"machine: this script's host ({os.cpu_count()} CPUs); nothing is timed here")
    print(
        f"reference {args.reference}: {wall:.0f} s wall, {sampled:.0f} s in samples, "
        f"{converged} of {n_gpu} GPU cases converged; overhead {est.overhead_s:.2f} s a case "
        f"(after 25 s assumed for ceilings)"
    )
    print(
        f"constants: efficiency {EFFICIENCY:.0%} of the matmul ceiling for models, bandwidth "
        f"{BANDWIDTH / 1e12:.1f} TB/s, epoch {EPOCH_S:.1f} s, floors {FLOOR_S}"
    )
    total = est.total_s
    print(f"\nsuite {args.suite!r} on an H100: {est.cases} cases (estimate)")
    print(f"{'part':62} {'cases':>5} {'s':>7}")
    print(f"{START:62} {'':>5} {est.start_s:7.0f}")
    print(
        f"{f'ceilings ({est.ceilings} measurements, converging at min_time)':62} {'':>5} "
        f"{est.ceiling_s:7.0f}"
    )
    for name, (n, secs) in est.parts.items():
        print(f"{name:62} {n:5} {secs:7.0f}")
    print(f"{'total':62} {est.cases:5} {total:7.0f}  = {total / 60:.1f} min (goal <= 8)")
    return 0 if math.isfinite(total) else 1


if __name__ == "__main__":
    sys.exit(main())
