"""Real ceilings on this CPU at tiny sizes: every key present, values sane, methods stated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from torchmark import ceilings
from torchmark.ceilings import base, matmul
from torchmark.devices import CPUDevice, cache, cpu
from torchmark.results import Ceiling
from torchmark.timing import Adaptive

KiB = 2**10
TINY_RULE = Adaptive(min_samples=3, min_time_s=0.0, target=0.05, max_time_s=0.2)
# one small 3x3 conv for the real ones (~0.7 s a call here on first use, 15 s in all)
TINY_CONVS = ((16, 8, 1),)


@pytest.fixture(scope="module")
def tiny_ceilings() -> Iterator[dict[str, Ceiling]]:
    """Ceilings measured as usual, but with a pretend 64 KiB LLC, 1 MiB buffers, 64/128
    matmuls and one small conv, so the whole set costs about a second."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cpu, "_llc_bytes", lambda: 64 * KiB)
        mp.setattr(cache, "MIN_BUFFER", 1024 * KiB)
        mp.setattr(base, "QUICK_RULE", TINY_RULE)
        mp.setattr(matmul, "CPU_SIZES", {True: (64, 128), False: (64, 128)})
        mp.setattr(matmul, "CONV_SHAPES", TINY_CONVS)
        mp.setattr(matmul, "BUDGET_S", {True: 60.0, False: 60.0})  # a loaded machine stalls
        yield {c.key: c for c in ceilings.measure(CPUDevice(), quick=True)}
    CPUDevice.info.cache_clear()  # the pretend LLC must not outlive these tests


def test_cpu_ceilings_are_all_there(tiny_ceilings: dict[str, Ceiling]) -> None:
    kernels = {f"bandwidth:{k}" for k in ("copy", "triad", "mul_", "add_", "self_add_")}
    assert set(tiny_ceilings) == {"bandwidth", *kernels, "matmul:float32", "matmul:bfloat16",
                                  "dispatch"}  # fmt: skip
    assert not any(k.startswith(("h2d", "d2h")) for k in tiny_ceilings)  # no link on a CPU


def test_cpu_ceilings_are_sane(tiny_ceilings: dict[str, Ceiling]) -> None:
    # Bounds that hold however loaded the machine is: other jobs only slow a kernel (a 1 MiB
    # copy read 0.08 GB/s beside two busy processes at load 9), never speed it past what
    # the hardware can do, so rates are bounded above and times below.
    for c in tiny_ceilings.values():
        assert c.device == "cpu" and c.method and c.theoretical is None  # no CPU guess
        if c.unit == "B/s":
            assert 0 < c.value < 1e13
        elif c.unit == "FLOP/s":
            assert 0 < c.value < 1e14
        else:
            assert 1e-8 < c.value < 60  # a tiny op: ns to ms quiet, never a minute
    bw = tiny_ceilings["bandwidth"]
    per_kernel = [tiny_ceilings[f"bandwidth:{k}"].value for k in bw.details["kernels"]]
    assert bw.value == max(per_kernel)  # the best kernel
    assert bw.details["buffer_bytes"] == 1024 * KiB and bw.details["llc_bytes"] == 64 * KiB
    assert "best sample" in bw.method and "16x the 64 KiB last-level cache" in bw.method
    assert "copy/triad/mul_/add_/self_add_" in bw.method
    mm = tiny_ceilings["matmul:float32"].details
    assert set(mm["TFLOPs_by_size"]) == {"64", "128"}, mm["notes"]
    assert "median" in tiny_ceilings["dispatch"].method
