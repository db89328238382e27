"""Ceilings and micro workloads on a real CUDA GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from torchmark import ceilings
from torchmark.ceilings import bandwidth, transfer
from torchmark.devices import CUDADevice
from torchmark.hardware import datasheet
from torchmark.results import Ceiling, Result
from torchmark.run.case import run_case
from torchmark.run.config import RunConfig
from torchmark.workloads import Case, PlanOptions, Workload
from torchmark.workloads.micro import matmul, seed_add
from torchmark.workloads.micro import transfer as transfer_workload

pytestmark = pytest.mark.gpu
CFG = RunConfig(devices=("cuda",), rule="test", telemetry=False)


@pytest.fixture(scope="module")
def gpu_ceilings() -> dict[str, Ceiling]:
    return {c.key: c for c in ceilings.measure(CUDADevice(0), quick=True)}


def run(w: Workload, variant: str, params: dict[str, int], found: dict[str, Ceiling]) -> Result:
    case = Case(w.name, variant, CUDADevice(0), tuple(params.items()))
    return run_case(w, case, found, CFG)


def test_gpu_ceilings_are_complete_and_below_the_datasheet(
    gpu_ceilings: dict[str, Ceiling],
) -> None:
    keys = set(gpu_ceilings)
    assert {"bandwidth", "matmul:float32", "dispatch"} <= keys
    assert {"h2d:pinned", "h2d:pageable", "d2h:pinned", "d2h:pageable"} <= keys
    for k in ("h2d:pinned", "h2d:pageable", "d2h:pinned", "d2h:pageable"):
        assert 1e9 < gpu_ceilings[k].value < 1e12, k  # PCIe 3 x16 .. NVLink-C2C
    assert 1e-7 < gpu_ceilings["dispatch"].value < 1e-3
    spec = datasheet.lookup(torch.cuda.get_device_name(0), CUDADevice(0).total_memory_bytes())
    if spec is not None:  # a measured ceiling above the datasheet is a measurement error
        for c in gpu_ceilings.values():
            if c.theoretical:
                assert c.pct_of_theoretical is not None and c.pct_of_theoretical < 102, c.key


def test_transfer_ceilings_alone() -> None:
    found = transfer.measure(CUDADevice(0), quick=True)
    assert [c.key for c in found] == ["h2d:pinned", "h2d:pageable", "d2h:pinned", "d2h:pageable"]
    assert all(c.value > 1e9 and "end to end" in c.method for c in found)


def test_seed_add_as_published_is_one_aliased_add(gpu_ceilings: dict[str, Ceiling]) -> None:
    r = run(seed_add.SeedAdd(), "as-published", {"size": seed_add.BLOG_SIZE}, gpu_ceilings)
    assert r.status == "ok", r.reason
    assert r.extra["aliased"] is True
    assert r.work.bytes == 2 * 4 * seed_add.BLOG_SIZE**2
    assert r.throughput is not None and r.throughput.unit == "it/s"
    # METHOD.md §1: ~2,500 it/s on an H100; any GPU does >= 100 and stays under its ceiling
    assert r.throughput.value > 100
    assert r.pct_of_ceiling is not None and r.pct_of_ceiling < 105


def test_seed_add_intended_is_bound_by_the_host_link(gpu_ceilings: dict[str, Ceiling]) -> None:
    r = run(seed_add.SeedAdd(), "intended", {"size": 4096}, gpu_ceilings)
    assert r.status == "ok", r.reason
    assert r.ceiling is not None and r.ceiling.key == "h2d:pinned"
    assert r.work.bytes == 2 * 4 * 4096**2  # the bytes that cross the link
    assert r.pct_of_ceiling is not None and 0 < r.pct_of_ceiling < 110
    assert "PCIe-bound" in r.notes[0]


def test_transfer_workload_every_direction(gpu_ceilings: dict[str, Ceiling]) -> None:
    w = transfer_workload.Transfer()
    cases = w.cases(CUDADevice(0), PlanOptions(sizes=(64 * 2**20,)))
    assert len(cases) == 4
    for case in cases:
        r = run_case(w, case, gpu_ceilings, CFG)
        assert r.status == "ok", r.reason
        assert r.throughput is not None and r.throughput.unit == "GB/s"
        assert r.pct_of_ceiling is not None and 5 < r.pct_of_ceiling < 102  # of pinned: the link


@pytest.mark.parametrize("variant", ["float32", "tf32", "float16", "bfloat16", "int8"])
def test_matmul_dtypes_run_or_say_why(variant: str, gpu_ceilings: dict[str, Ceiling]) -> None:
    before = torch.backends.cuda.matmul.allow_tf32
    r = run(matmul.Matmul(), variant, {"n": 4096}, gpu_ceilings)
    assert torch.backends.cuda.matmul.allow_tf32 == before  # restored
    if r.status == "skipped":
        assert r.reason
        return
    assert r.status == "ok", r.reason
    assert r.throughput is not None and r.throughput.value > 1  # > 1 TFLOP/s on any GPU
    if f"matmul:{variant}" in gpu_ceilings:
        assert r.pct_of_ceiling is not None and r.pct_of_ceiling < 110


def test_bandwidth_kernels_agree_on_a_gpu() -> None:
    """GPUs do not write-allocate from DRAM: copy and mul_ land within 25 % of each other."""
    found = {c.key: c.value for c in bandwidth.measure(CUDADevice(0), quick=True)}
    assert found["bandwidth:copy"] > 0.75 * found["bandwidth:mul_"]


def test_event_samples_leave_out_the_first_launch() -> None:
    """A one-element add takes a few µs on the GPU; a sample that starts on an idle stream
    would also count the host's launch (13.8 µs dispatch floor on an H100 host)."""
    from torchmark.devices.cuda import EventTimer

    x = torch.ones(1, device="cuda")
    timer, samples = EventTimer(torch.device("cuda", 0)), []
    for _ in range(50):
        torch.cuda.synchronize()
        timer.start()
        x.add_(1)
        samples.append(timer.stop())
    assert sorted(samples)[25] < 8e-6, sorted(samples)[25]
