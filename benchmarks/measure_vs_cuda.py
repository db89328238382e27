"""Does torchmark.measure agree with a plain CUDA-event loop and triton's do_bench on a GPU?

The GPU counterpart of measure_vs_timer.py: torchmark.measure against
triton.testing.do_bench and a plain CUDA-event loop on the same kernels in one process,
medians within 3 %. Each kernel is timed by the three tools in rounds, the order rotated
each round so a drift of the GPU's clocks falls on all; the headline is the median of the
per-round ratios torchmark / other.

- torchmark: ``torchmark.measure(fn, "cuda")`` with the "quick" rule (CUDA events around
  k back-to-back calls, k chosen so a sample is >= 1 ms).
- events: a plain loop, one CUDA event pair around 20 back-to-back calls, 50 samples,
  median; the simplest honest GPU timer.
- do_bench: ``triton.testing.do_bench(fn, return_mode="median")``. It clears the L2 cache
  before every call, so for kernels whose data fit in L2 it reads slower by design; the
  kernels here are far beyond the 50 MB L2 except the small one, which is printed as a
  reminder of that difference, not judged.

    python benchmarks/measure_vs_cuda.py [--rounds 5]

Exit status 1 if a judged kernel misses the target. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from typing import Any

import torch

TARGET = 0.03


def kernels() -> dict[str, tuple[Callable[[], Any], bool]]:
    """name -> (callable, judged); inputs made once, outside every timed region."""
    g = torch.Generator(device="cuda").manual_seed(0)
    a8 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=g)
    b8 = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16, generator=g)
    a4, b4 = a8[:4096, :4096].contiguous(), b8[:4096, :4096].contiguous()
    x = torch.randn(2**28, device="cuda", generator=g)  # 1 GiB fp32
    y = torch.randn(2**28, device="cuda", generator=g)
    out = torch.empty_like(x)
    s1, s2 = x[: 2**18].clone(), y[: 2**18].clone()  # 1 MiB: fits in L2
    return {
        "matmul bf16 8192^3": (lambda: a8 @ b8, True),
        "matmul bf16 4096^3": (lambda: a4 @ b4, True),
        "add fp32 1 GiB": (lambda: torch.add(x, y, out=out), True),
        "copy fp32 1 GiB": (lambda: out.copy_(x), True),
        "add fp32 1 MiB (L2)": (lambda: s1 + s2, False),
    }


def with_torchmark(fn: Callable[[], Any]) -> float:
    import torchmark
    from torchmark.timing import preset

    return torchmark.measure(fn, "cuda", rule=preset("quick")).median


def with_events(fn: Callable[[], Any], calls: int = 20, samples: int = 50) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(samples):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return statistics.median(times)


def with_do_bench(fn: Callable[[], Any]) -> float | None:
    try:
        from triton.testing import do_bench
    except ImportError:
        return None
    return float(do_bench(fn, return_mode="median")) / 1e3


def sm_clock() -> Callable[[], int | None]:
    """The SM clock (MHz) right after a tool's run: a longer run under the H100's power cap
    settles at a lower clock, which is a real difference in speed, not a timer's error."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return lambda: None
    return lambda: int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("not available: no CUDA device")
        return 0
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, {args.rounds} rounds")
    print("ratio = torchmark / other, median over rounds (min-max)\n")
    head = (
        f"{'kernel':22} {'torchmark':>10} {'events':>10} {'do_bench':>10} "
        f"{'tm/ev':>15} {'tm/db':>15}"
    )
    print(head)
    print("-" * len(head))
    tools: dict[str, Callable[[Callable[[], Any]], float | None]] = {
        "tm": with_torchmark,
        "ev": with_events,
        "db": with_do_bench,
    }
    clock = sm_clock()
    failed = False
    for name, (fn, judged) in kernels().items():
        fn()
        torch.cuda.synchronize()
        got: dict[str, list[float]] = {k: [] for k in tools}
        mhz: dict[str, list[int]] = {k: [] for k in tools}
        order = list(tools)
        for r in range(args.rounds):
            for k in order[r % 3 :] + order[: r % 3]:
                v = tools[k](fn)
                if v is not None:
                    got[k].append(v)
                    if (c := clock()) is not None:
                        mhz[k].append(c)
        cells, verdicts = [], []
        for other in ("ev", "db"):
            if not got[other]:
                cells.append(f"{'n/a':>15}")
                continue
            ratios = [a / b for a, b in zip(got["tm"], got[other], strict=False)]
            ratio = statistics.median(ratios)
            cells.append(f"{ratio:6.3f} {min(ratios):.2f}-{max(ratios):.2f}")
            if judged:
                ok = abs(ratio - 1) <= TARGET
                failed |= not ok
                verdicts.append("PASS" if ok else "FAIL")
        med = {k: (statistics.median(v) if v else None) for k, v in got.items()}
        print(
            f"{name:22} {fmt(med['tm']):>10} {fmt(med['ev']):>10} {fmt(med['db']):>10} "
            f"{cells[0]:>15} {cells[1]:>15}  {'/'.join(verdicts) or 'not judged'}"
        )
        if any(mhz.values()):
            after = ", ".join(f"{k} {statistics.median(v):.0f}" for k, v in mhz.items() if v)
            print(f"{'':22} SM MHz after each tool's run (median): {after}")
    print(f"\ntarget: |median ratio - 1| <= {TARGET:.0%} for the judged kernels")
    return 1 if failed else 0


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


if __name__ == "__main__":
    sys.exit(main())
