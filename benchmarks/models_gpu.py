"""Issue 3's GPU targets for the standard models, printed beside each measured figure.

    python benchmarks/models_gpu.py            # on a machine with a CUDA GPU

- ResNet-50 bf16 training             >= 2,500 images/s
- GPT-2 small bf16 training MFU       >= 40 % of the measured bf16 matmul peak (also with
  the vocabulary padded to 50,304: gpt2-padded)
- BERT-base inference at batch 256    >= 5,000 sequences/s

Each figure is a real ``run_case`` with the "model" stopping rule; MFU uses the bf16 matmul
ceiling measured in the same process. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import sys
from typing import Any

import torch


def main() -> int:
    if not torch.cuda.is_available():
        print("not available: no CUDA device")
        return 0
    from torchmark import ceilings
    from torchmark.devices import CUDADevice
    from torchmark.run.case import run_case
    from torchmark.run.config import RunConfig
    from torchmark.workloads import WORKLOADS, Case, load_builtins

    load_builtins()
    dev = CUDADevice(0)
    # the full (not quick) sweep: MFU's denominator must be the best matmul rate found
    peaks = {c.key: c for c in ceilings.measure(dev, quick=False)}
    cfg = RunConfig(rule="model", telemetry=False)
    print(f"device: {dev.label()}")
    bf16 = peaks.get("matmul:bfloat16")
    if bf16:
        print(f"measured bf16 matmul peak: {bf16.value / 1e12:.0f} TFLOP/s")

    targets: list[tuple[str, str, dict[str, Any], str, float]] = [
        ("ResNet-50 bf16 train", "resnet50",
         {"scenario": "train", "precision": "amp-bf16+channels-last", "batch": 256},
         "items", 2500.0),
        ("GPT-2 small bf16 train", "gpt2",
         {"scenario": "train", "precision": "amp-bf16", "batch": 16, "seq": 1024},
         "mfu", 40.0),
        ("GPT-2 padded bf16 train", "gpt2-padded",
         {"scenario": "train", "precision": "amp-bf16", "batch": 16, "seq": 1024},
         "mfu", 40.0),
        ("BERT-base infer b256", "bert-base",
         {"scenario": "infer", "precision": "amp-bf16", "batch": 256, "seq": 128},
         "items", 5000.0),
    ]  # fmt: skip
    for label, name, params, metric, target in targets:
        case = Case(name, params["scenario"], dev, tuple(params.items()))
        r = run_case(WORKLOADS.get(name)(), case, peaks, cfg)
        if not r.ok:
            print(f"{label:26s} {r.status}: {r.reason}   (target {target:,.0f})")
            continue
        tflops = (r.rate("flops") or 0.0) / 1e12
        if metric == "mfu":
            value, unit = r.pct_of_ceiling or 0.0, "% MFU"
        else:
            value, unit = r.rate("items") or 0.0, f"{r.work.item_unit}/s"
        verdict = "meets" if value >= target else "BELOW"
        print(
            f"{label:26s} {value:10,.1f} {unit:14s} target >= {target:,.0f}  {verdict}"
            f"   ({tflops:.0f} TFLOP/s, compile {r.extra.get('compile_s', 0):.1f} s, "
            f"peak mem {r.extra.get('peak_memory_bytes', 0) / 2**30:.1f} GiB, "
            f"IQR {100 * r.measurement.rel_iqr:.1f} %)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
