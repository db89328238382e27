"""Ceilings without real timing: datasheet lookup, byte/FLOP accounting, buffer sizing."""

from __future__ import annotations

from typing import ClassVar

import pytest

from torchmark.ceilings import bandwidth, matmul, transfer, with_theoretical
from torchmark.ceilings.base import MiB
from torchmark.devices.cache import buffer_bytes
from torchmark.hardware import datasheet
from torchmark.results import Ceiling
from torchmark.testing import FakeClock, FakeDevice


@pytest.mark.parametrize(
    ("name", "gib", "model"),
    [
        ("NVIDIA H100 80GB HBM3", 79.1, "H100 SXM"),
        ("NVIDIA H100 PCIe", 79.1, "H100 PCIe"),
        ("NVIDIA H100 NVL", 93.1, "H100 NVL"),
        ("NVIDIA H200", 139.8, "H200 SXM"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "A100 40GB"),
        ("NVIDIA A100-PCIE-40GB", 39.4, "A100 40GB"),
        ("NVIDIA A100-SXM4-80GB", 79.2, "A100 80GB SXM"),
        ("NVIDIA A100 80GB PCIe", 79.2, "A100 80GB PCIe"),
        ("NVIDIA A10", 22.1, "A10"),
        ("NVIDIA L4", 22.0, "L4"),
        ("NVIDIA L40S", 44.4, "L40S"),
        ("Tesla T4", 14.6, "T4"),
        ("Tesla V100-SXM2-16GB", 15.8, "V100 SXM2"),
        ("Tesla V100-PCIE-32GB", 31.7, "V100 PCIe"),
        ("NVIDIA GeForce RTX 3060", 11.7, "RTX 3060"),
        ("NVIDIA GeForce RTX 3060 Ti", 7.8, "RTX 3060 Ti"),
        ("NVIDIA GeForce RTX 3080", 9.8, "RTX 3080"),
        ("NVIDIA GeForce RTX 3090", 23.7, "RTX 3090"),
        ("NVIDIA GeForce RTX 4090", 23.6, "RTX 4090"),
        ("NVIDIA GeForce GTX 1080 Ti", 10.9, "GTX 1080 Ti"),
    ],
)
def test_datasheet_matches_torch_device_names(name: str, gib: float, model: str) -> None:
    spec = datasheet.lookup(name, int(gib * 2**30))
    assert spec is not None and spec.model == model
    assert spec.source


@pytest.mark.parametrize(
    ("name", "gib"),
    [
        ("AMD EPYC 7763 64-Core Processor", None),  # CPUs: no guess
        ("NVIDIA A10G", 22.0),  # AWS part, not in the table: no borrowed A10 figure
        ("NVIDIA GeForce RTX 3060", 7.8),  # 8 GB model: 240 GB/s, not the 12 GB's 360
        ("NVIDIA GeForce RTX 3080", 11.8),  # 12 GB model: 912 GB/s, not listed
        ("NVIDIA GeForce RTX 3060", None),  # memory unknown: cannot tell the variants apart
        ("", None),
    ],
)
def test_datasheet_refuses_to_guess(name: str, gib: float | None) -> None:
    assert datasheet.lookup(name, int(gib * 2**30) if gib else None) is None


def test_datasheet_figures_are_dense_and_in_si_units() -> None:
    h100 = datasheet.lookup("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert h100.peak("bandwidth") == pytest.approx(3.35e12)
    assert h100.peak("bandwidth:copy") == h100.bandwidth
    # the datasheet's 1979 TFLOPS bf16 is with sparsity: dense is half
    assert h100.peak("matmul:bfloat16") == pytest.approx(989.5e12)
    assert h100.peak("matmul:float32") == pytest.approx(67e12)
    assert h100.peak("matmul:int8") == pytest.approx(1979e12)
    assert h100.peak("h2d:pinned") is None and h100.peak("dispatch") is None
    t4 = datasheet.lookup("Tesla T4")
    assert t4 is not None and t4.peak("matmul:bfloat16") is None  # Turing has no bf16
    a100 = datasheet.lookup("NVIDIA A100-SXM4-40GB")
    assert a100 is not None and a100.peak("matmul:tf32") == pytest.approx(156e12)


def test_every_required_model_is_in_the_table() -> None:
    models = {s.model for s in datasheet.SPECS}
    for required in (
        "A100 40GB", "A100 80GB SXM", "H100 SXM", "H100 PCIe", "H200 SXM", "L4", "L40S",
        "A10", "T4", "V100 SXM2", "RTX 3060", "RTX 3060 Ti", "RTX 3080", "RTX 3090",
        "RTX 4090", "GTX 1080 Ti",
    ):  # fmt: skip
        assert required in models
    for s in datasheet.SPECS:  # bandwidth and fp32 always; tensor peaks never below fp32
        assert s.bandwidth > 1e11 and s.float32 > 1e12
        for key in ("tf32", "float16", "bfloat16", "int8"):
            peak = s.peak(f"matmul:{key}")
            assert peak is None or peak >= s.float32


def _ceiling(key: str, value: float = 1e12) -> Ceiling:
    unit = "s" if key == "dispatch" else ("FLOP/s" if key.startswith("matmul") else "B/s")
    return Ceiling(device="fake:0", key=key, value=value, unit=unit, method="m")  # type: ignore[arg-type]


def test_with_theoretical_fills_known_keys_and_names_the_source() -> None:
    dev = FakeDevice(FakeClock(), model="NVIDIA H100 80GB HBM3")
    out = with_theoretical(
        [_ceiling("bandwidth", 3e12), _ceiling("matmul:bfloat16", 8e14), _ceiling("dispatch")],
        dev,
    )
    bw, mm, disp = out
    assert bw.theoretical == pytest.approx(3.35e12) and "H100" in (bw.theoretical_source or "")
    assert bw.pct_of_theoretical == pytest.approx(100 * 3e12 / 3.35e12)
    assert mm.theoretical == pytest.approx(989.5e12)
    assert disp.theoretical is None and disp.theoretical_source is None


def test_with_theoretical_leaves_unknown_devices_alone() -> None:
    dev = FakeDevice(FakeClock(), model="Some Future GPU")
    c = [_ceiling("bandwidth")]
    assert with_theoretical(c, dev) == c


@pytest.mark.parametrize(
    ("kernel", "moved"), [("copy", 2), ("triad", 3), ("mul_", 2), ("add_", 3), ("self_add_", 2)]
)
def test_stream_byte_convention(kernel: str, moved: int) -> None:
    k = next(k for k in bandwidth.KERNELS if k.name == kernel)
    assert bandwidth.bytes_per_call(k, 1000) == moved * 4 * 1000


class _CachedDevice(FakeDevice):
    is_accelerator: ClassVar[bool] = False

    def __init__(self, cache: int | None, memory: int | None = None) -> None:
        super().__init__(FakeClock())
        self._cache, self._memory = cache, memory

    def cache_bytes(self) -> int | None:
        return self._cache

    def total_memory_bytes(self) -> int | None:
        return self._memory


def test_bandwidth_buffers_are_far_beyond_the_cache() -> None:
    assert buffer_bytes(_CachedDevice(None)) == 256 * MiB  # LLC unknown: fallback
    assert buffer_bytes(_CachedDevice(32 * MiB)) == 256 * MiB  # 8x a 32 MiB LLC
    assert buffer_bytes(_CachedDevice(96 * MiB)) == 768 * MiB  # 8x a 96 MiB LLC
    # a small device: three buffers stay within 3/8 of its memory
    assert buffer_bytes(_CachedDevice(32 * MiB, memory=1024 * MiB)) == 128 * MiB


def test_matmul_flops_and_sweeps() -> None:
    assert matmul.flops(4096) == 2 * 4096**3
    cpu, gpu = _CachedDevice(None), FakeDevice(FakeClock())
    assert max(matmul.sizes(cpu, quick=True)) <= 1024  # quick on a CPU costs seconds
    assert min(matmul.sizes(gpu, quick=False)) >= 4096  # GPUs: large shapes only
    keys = [p.key for p in matmul.PRECISIONS]
    assert keys == ["float32", "tf32", "float16", "bfloat16", "int8"]
    on_cpu = [p.key for p in matmul.PRECISIONS if not p.accelerator_only]
    assert on_cpu == ["float32", "bfloat16"]


def test_transfer_is_for_accelerators_only() -> None:
    assert transfer.measure(_CachedDevice(None), quick=True) == []
    assert [d.key for d in transfer.DIRECTIONS] == [
        "h2d:pinned",
        "h2d:pageable",
        "d2h:pinned",
        "d2h:pageable",
    ]


def test_tf32_mode_restores_the_user_setting() -> None:
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        with matmul.tf32_mode(True):
            assert torch.backends.cuda.matmul.allow_tf32 is True
        assert torch.backends.cuda.matmul.allow_tf32 is False
        with pytest.raises(RuntimeError), matmul.tf32_mode(True):
            raise RuntimeError("boom")
        assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_matmul_sweep_stops_on_a_slow_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dtype the CPU emulates must not eat the run: one slow call ends its sweep."""
    monkeypatch.setattr(matmul, "CPU_SIZES", {True: (8, 16), False: (8, 16)})
    monkeypatch.setattr(matmul, "probe", lambda fn, device: 5.0)
    p = next(p for p in matmul.PRECISIONS if p.key == "bfloat16")
    ceiling, why = matmul.measure_one(_CachedDevice(None), p, quick=True)
    assert ceiling is None
    assert "stopped at n=8: one call takes 5 s" in str(why["skipped"])


def test_conv_flops_use_the_direct_algorithm_count() -> None:
    from torchmark.ceilings import matmul

    # 2 x MACs: batch x out-channels x in-channels x 3 x 3 x H x W, as FlopCounterMode counts
    assert matmul.conv_flops(256, 28, 4) == 2 * 4 * 256 * 256 * 9 * 28 * 28


def test_a_conv_above_the_datasheet_is_not_the_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an H100, fp32 3x3 convs (allow_tf32=False) read 124 TFLOP/s in direct-algorithm
    FLOPs against a 67 TFLOP/s datasheet fp32 peak and became "the fp32 ceiling" (185 % of
    the datasheet), so a true-fp32 GEMM at 52 TFLOP/s read 42 % of peak."""
    from types import SimpleNamespace

    from torchmark.ceilings import matmul

    monkeypatch.setattr(matmul, "CPU_SIZES", {True: (8, 16), False: (8, 16)})
    gemm_rate, conv_rate = 52e12, 124e12

    def fake_size(device: object, p: object, n: int, quick: bool, left: float) -> object:
        t = matmul.flops(n) / gemm_rate
        return SimpleNamespace(min=t, median=t)

    monkeypatch.setattr(matmul, "time_size", fake_size)
    monkeypatch.setattr(matmul, "time_convs", lambda *a: {"conv3x3 c=512": conv_rate})
    p = next(p for p in matmul.PRECISIONS if p.key == "float32")
    capped, _ = matmul.measure_one(_CachedDevice(None), p, quick=True, datasheet_peak=67e12)
    assert capped is not None and capped.value == pytest.approx(gemm_rate)
    assert "above the datasheet's 67 TFLOP/s" in " ".join(capped.details["notes"])  # type: ignore[arg-type]
    # no datasheet figure (a CPU): the conv may win, as oneDNN's did on a 2-core EPYC
    free, _ = matmul.measure_one(_CachedDevice(None), p, quick=True)
    assert free is not None and free.value == pytest.approx(conv_rate)


def test_a_ceiling_never_gives_up_as_out_of_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    # a ceiling is the best sample: a noisy kernel measures to its time-out for it, even
    # under a rule a caller set (the CPU ceilings' test sets its own tiny one)
    from torchmark.ceilings import base
    from torchmark.timing import Adaptive

    assert base.rule(True).reach == 0 and base.rule(False).reach == 0  # type: ignore[attr-defined]
    monkeypatch.setattr(base, "QUICK_RULE", Adaptive(max_time_s=0.2))
    assert base.rule(True) == Adaptive(max_time_s=0.2, reach=0)
