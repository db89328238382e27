"""The input workload's workers curve and input-bound fraction on this machine.

    python benchmarks/input_workers.py [--side 320] [--images 128] [--threads 1]

A decode-heavy dataset (large JPEGs, a small crop, a small CNN): DataLoader workers must
beat num_workers=0 here. Target: the best plain worker count >= 1.2x workers=0 (exit 1
otherwise). Under other load the figure says little: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import torch
from rich.console import Console

from torchmark.devices import CPUDevice
from torchmark.loaders import LoaderConfig, config_of
from torchmark.report.pipeline import pipeline_tables
from torchmark.run import runner
from torchmark.run.config import RunConfig
from torchmark.run.record import new_record
from torchmark.run.session import Quiet, Session
from torchmark.workloads.base import PlanOptions
from torchmark.workloads.pipeline.workload import InputPipeline, Shape

TARGET = 1.2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=128)
    ap.add_argument("--side", type=int, default=320)
    ap.add_argument("--crop", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the main process")
    ap.add_argument("--stopping", default="quick")
    ap.add_argument("--suite", default="standard")
    ap.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "tm-input-bench"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    print(f"load average at start: {os.getloadavg()}")
    w = InputPipeline(Shape(a.images, a.side, a.crop, a.batch, classes=10))
    opts = PlanOptions(suite=a.suite, cache_dir=a.cache_dir)
    cases = w.cases(CPUDevice(), opts)
    cfg = RunConfig(rule=a.stopping, ceilings=False, telemetry=False)
    session = Session(new_record("run", {}, [CPUDevice()]), None, Quiet())
    record = runner.run_planned(session, cases, {"input": w}, cfg)
    Console(width=80).print(*pipeline_tables(record))
    print(f"load average at end: {os.getloadavg()}")
    curve = {
        c.workers: r.rate("items") or 0.0
        for r in record.results
        if r.variant == "loader" and r.ok
        for c in [config_of(r.params)]
        if c == LoaderConfig(c.workers)  # the plain counts, other knobs at their defaults
    }
    print("workers curve (images/s): " + ", ".join(f"{k}: {v:,.0f}" for k, v in curve.items()))
    if 0 not in curve or len(curve) < 2:
        print("no curve to judge")
        return 1
    best = max(v for k, v in curve.items() if k)
    gain = best / curve[0]
    ok = gain >= TARGET
    verdict = "ok" if ok else "MISSED"
    print(f"best workers > 0 vs workers=0: {gain:.2f}x (target >= {TARGET}x): {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
