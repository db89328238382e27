"""Micro workloads without timing: planning, work accounting, skip reasons."""

from __future__ import annotations

from typing import ClassVar

import pytest

from torchmark.devices import CPUDevice, cache
from torchmark.errors import CaseSkipped, UnknownNameError
from torchmark.testing import FakeClock, FakeDevice
from torchmark.workloads import WORKLOADS, Case, PlanOptions, load_builtins
from torchmark.workloads.base import Suite
from torchmark.workloads.micro import elementwise, matmul, seed_add, transfer
from torchmark.workloads.micro._common import MiB, geometric, rule_for

N = seed_add.BLOG_SIZE


class _CPULike(FakeDevice):
    """A host-like fake with a known 32 MiB LLC and 24 GiB of memory."""

    is_accelerator: ClassVar[bool] = False

    def cache_bytes(self) -> int | None:
        return 32 * MiB

    def total_memory_bytes(self) -> int | None:
        return 24 * 2**30


@pytest.fixture
def gpu() -> FakeDevice:
    return FakeDevice(FakeClock())


@pytest.fixture
def host() -> FakeDevice:
    return _CPULike(FakeClock())


def test_micro_workloads_are_registered_with_summaries() -> None:
    load_builtins()
    for name, quick in [
        ("seed-add", True),
        ("add", True),
        ("triad", True),
        ("matmul", True),
        ("transfer", False),
    ]:
        cls = WORKLOADS.get(name)
        assert cls.in_quick is quick and cls.group == "micro" and len(cls.summary) > 20


def test_seed_add_published_bytes_match_method_md() -> None:
    # METHOD.md §1: one 12288^2 float32 tensor is 604 MB; read + write = 1.21 GB
    assert pytest.approx(604e6, rel=1e-3) == 4 * N * N
    assert pytest.approx(1.208e9, rel=1e-3) == 2 * 4 * N * N


def test_seed_add_intended_work_on_cpu_and_accelerator(host: FakeDevice, gpu: FakeDevice) -> None:
    t = 4 * N * N
    work, ceiling, parts = seed_add.unfolded_work(N, host, extra_add=False)
    assert ceiling == "bandwidth" and work.bytes == 2 * t + 3 * t and parts["h2d_copy"] == 0
    work, ceiling, parts = seed_add.unfolded_work(N, gpu, extra_add=False)
    # PCIe-bound: only the bytes that cross the link count, against its pinned rate (every
    # copy is judged against the link, as transfer and the input pipeline judge theirs)
    assert ceiling == "h2d:pinned" and work.bytes == 2 * t == parts["h2d_copy"]
    assert parts["host_fill_write"] == 2 * t and parts["add_read_write"] == 3 * t
    # an unfolded as-published loop also pays z0 += zz
    work, _, _ = seed_add.unfolded_work(N, host, extra_add=True)
    assert work.bytes == 8 * t and work.items == 1 and work.item_unit == "it"


def test_seed_add_plans_both_variants_at_the_blog_size(host: FakeDevice) -> None:
    w = seed_add.SeedAdd()
    cases = w.cases(host, PlanOptions(suite="standard"))  # quick: test_sizing.py
    assert [(c.variant, c.param_dict) for c in cases] == [
        ("as-published", {"size": N}),
        ("intended", {"size": N}),
    ]
    assert {c.rule for c in cases} == {"micro"}
    sized = w.cases(host, PlanOptions(sizes=(256, 512)))
    assert [c.param_dict["size"] for c in sized] == [256, 512, 256, 512]
    assert {c.rule for c in sized} == {"micro"}


def test_blog_source_moves_like_the_blog() -> None:
    assert seed_add.move_expr(CPUDevice()) == "cpu()"
    src = seed_add.BLOG_SOURCE.format(n=N, move="cuda()")
    assert "torch.ones((12288, 12288), dtype=torch.float32)" in src and "x = x.cuda()" in src


def test_elementwise_work_uses_stream_bytes() -> None:
    add = elementwise.Add.work(1000, elementwise.Add.flops_per_element)
    triad = elementwise.Triad.work(1000, elementwise.Triad.flops_per_element)
    assert add.bytes == triad.bytes == 3 * 4 * 1000
    assert (add.flops, triad.flops) == (1000, 2000)
    assert add.items == 1000 and add.item_unit == "elem"


def test_elementwise_sweeps_cross_the_cache(host: FakeDevice) -> None:
    llc = 32 * MiB
    quick = elementwise.default_sizes(host, "quick")
    assert len(quick) == 1 and 3 * 4 * quick[0] >= 8 * llc  # working set far past the LLC
    standard = [4 * n for n in elementwise.default_sizes(host, "standard")]
    assert standard[0] * 3 <= llc  # starts in cache ...
    assert standard[-1] >= 8 * llc  # ... ends far beyond it
    full = elementwise.default_sizes(host, "full")
    assert len(full) > len(standard)
    w = elementwise.Triad()
    assert [c.param_dict["n"] for c in w.cases(host, PlanOptions(sizes=(10,)))] == [10]


def test_geometric_and_rules() -> None:
    assert geometric(1, 10, 4) == [1, 4, 16]
    assert rule_for("quick") == "quick" and rule_for("full") == "micro"


def test_matmul_variants_per_device(host: FakeDevice, gpu: FakeDevice) -> None:
    assert matmul.variants(host, PlanOptions(suite="quick")) == ["float32"]
    assert matmul.variants(host, PlanOptions()) == ["float32", "bfloat16"]
    assert matmul.variants(gpu, PlanOptions()) == ["float32", "tf32", "float16", "bfloat16", "int8"]
    chosen = matmul.variants(host, PlanOptions(precisions=("bf16", "amp-fp16+compile", "half")))
    assert chosen == ["bfloat16", "float16"]
    assert matmul.variants(host, PlanOptions(precisions=("tf32", "int8"))) == ["tf32", "int8"]
    w = matmul.Matmul()
    cases = w.cases(host, PlanOptions(suite="quick"))
    assert {c.variant for c in cases} == {"float32"} and 1 <= len(cases) <= 2
    assert all(c.param_dict["n"] <= 1024 for c in cases)


def test_matmul_unknown_precision_fails_with_the_valid_list(host: FakeDevice) -> None:
    # it was dropped in silence: `--precision fp23` ran no matmul at all
    with pytest.raises(UnknownNameError, match=r"unknown precision 'fp23'.*amp-bf16"):
        matmul.Matmul().cases(host, PlanOptions(precisions=("fp32", "fp23")))


def test_matmul_skips_what_the_device_lacks(gpu: FakeDevice) -> None:
    # FakeDevice inherits the base answer: no TF32 outside NVIDIA GPUs
    w = matmul.Matmul()
    case = next(c for c in w.cases(gpu, PlanOptions(sizes=(64,))) if c.variant == "tf32")
    with pytest.raises(CaseSkipped, match="tf32 not available"):
        w.prepare(case)


def test_transfer_on_a_cpu_is_one_visible_skip(host: FakeDevice, gpu: FakeDevice) -> None:
    w = transfer.Transfer()
    cpu = CPUDevice()
    cases = w.cases(cpu, PlanOptions())
    assert len(cases) == 1
    with pytest.raises(CaseSkipped, match="not available: cpu has no host-device transfer"):
        w.prepare(cases[0])
    on_gpu = w.cases(gpu, PlanOptions(suite="quick"))
    variants = {c.variant for c in on_gpu}
    assert variants == {"h2d-pinned", "h2d-pageable", "d2h-pinned", "d2h-pageable"}


def test_seed_add_without_torchscript_is_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    def gone(source: str) -> None:
        raise RuntimeError("TorchScript was removed")

    monkeypatch.setattr(torch.jit, "CompilationUnit", gone)
    w = seed_add.SeedAdd()
    case = w.cases(CPUDevice(), PlanOptions(sizes=(64,)))[0]
    with pytest.raises(CaseSkipped, match=r"torch\.jit\.script is unavailable here.*removed"):
        w.prepare(case)


class _TinyCache(_CPULike):
    def cache_bytes(self) -> int | None:
        return 64 * 1024


@pytest.mark.parametrize(("llc_multiple", "has_ceiling"), [(1, False), (6, False), (8, True)])
def test_elementwise_uses_the_one_beyond_cache_rule(llc_multiple: int, has_ceiling: bool) -> None:
    # the bandwidth ceiling's rule (devices/cache.py): memory traffic only from 8x the LLC;
    # 6x read as "beyond" when elementwise had its own 4x rule
    device = _TinyCache(FakeClock())
    n = -(-llc_multiple * 64 * 1024 // (3 * 4))  # working set just >= the multiple
    prepared = elementwise.Add().prepare(Case("add", "float32", device, (("n", n),)))
    assert (prepared.ceiling == "bandwidth") is has_ceiling
    assert bool(prepared.notes) is not has_ceiling


def test_one_fallback_llc_for_ceilings_and_sweeps(host: FakeDevice) -> None:
    unknown = FakeDevice(FakeClock())  # cache_bytes() is None
    assert cache.llc(unknown) == cache.FALLBACK_LLC
    assert cache.buffer_bytes(unknown) == cache.beyond_cache(unknown) == cache.MIN_BUFFER
    assert elementwise.default_sizes(unknown, "standard")[-1] * 4 == cache.beyond_cache(unknown)


@pytest.mark.parametrize(("suite", "rule"), [("quick", "quick"), ("standard", "micro")])
def test_the_suite_reaches_prepare_through_the_case(suite: Suite, rule: str) -> None:
    # planned by one object, prepared by another: no state kept between cases() and prepare()
    device = _TinyCache(FakeClock())
    for cls in (elementwise.Add, matmul.Matmul, seed_add.SeedAdd):
        case = cls().cases(device, PlanOptions(suite=suite, sizes=(64,)))[-1]
        assert case.rule == rule
        assert cls().prepare(case).rule == rule


def test_every_copy_is_judged_against_the_link(gpu: FakeDevice) -> None:
    """On an H100 a 16 MiB pageable copy (12.7 GB/s, staged from the host's cache) read 126 %
    of the h2d:pageable ceiling timed at 256 MiB (10.1 GB/s) and was called invalid. The
    link's limit is the pinned rate: pageable copies are a fraction of it."""
    assert transfer.link_ceiling("h2d:pageable") == "h2d:pinned"
    assert transfer.link_ceiling("d2h:pageable") == "d2h:pinned"
    assert transfer.link_ceiling("h2d:pinned") == "h2d:pinned"
