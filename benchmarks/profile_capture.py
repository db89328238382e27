"""Wall time of `torchmark profile`'s capture on a step of many tiny CPU ops (gpt2 decode
b=1 records ~23,000 events a step on the CPU): where a long profile's time goes.

    python benchmarks/profile_capture.py [OPS_PER_STEP] [ACTIVE]
"""

from __future__ import annotations

import sys
import time

import torch

from torchmark.devices import resolve
from torchmark.kinds.profile.capture import capture


def main() -> None:
    ops = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
    active = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    x = torch.ones(4)

    def step() -> None:
        for _ in range(ops // 2):
            x.add_(1).mul_(1)

    t = time.perf_counter()
    step()
    plain = time.perf_counter() - t
    t = time.perf_counter()
    got = capture(step, resolve("cpu")[0], active=active)
    wall = time.perf_counter() - t
    events = len(got.trace.get("traceEvents") or [])
    print(
        f"{ops} ops a step, unprofiled {plain:.3f} s: capture of {got.breakdown.steps} active "
        f"steps took {wall:.1f} s ({events:,} trace events)"
    )


if __name__ == "__main__":
    main()
