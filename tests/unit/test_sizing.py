"""Buffers sized from what the machine can spare: a bounded LLC, a share of free memory."""

from __future__ import annotations

from typing import ClassVar

import pytest

from torchmark.devices import CPUDevice, cache, cpu
from torchmark.testing import FakeClock, FakeDevice
from torchmark.workloads import Case, load_builtins
from torchmark.workloads import budget as plan_budget
from torchmark.workloads.micro import elementwise

MiB, GiB = 2**20, 2**30


class _Host(FakeDevice):
    """A host as a VM describes it: any LLC, any core count, any free memory."""

    is_accelerator: ClassVar[bool] = False

    def __init__(self, llc: int | None, cores: int | None, free: int | None) -> None:
        super().__init__(FakeClock(), index=None)
        self._llc, self._cores, self._free = llc, cores, free

    def cache_bytes(self) -> int | None:
        return self._llc

    def cores(self) -> int | None:
        return self._cores

    def available_memory_bytes(self) -> int | None:
        return self._free

    def total_memory_bytes(self) -> int | None:
        return 24 * GiB


def test_a_huge_reported_l3_is_bounded_per_core() -> None:
    # the 2-vCPU VM reports its host's 480 MiB L3 (here a fake 1 GiB): 8x that sized three
    # 8 GiB buffers; 2 cores can hold 32 MiB at most
    vm = _Host(GiB, cores=2, free=20 * GiB)
    est = cache.estimate(vm)
    assert est.bytes == 32 * MiB and est.reported == GiB
    assert "counted as 32 MiB" in est.why and "2 logical CPUs" in est.why
    assert cache.buffer_bytes(vm) == 256 * MiB
    assert elementwise.default_sizes(vm, "quick") == [128 * MiB // 4]
    assert max(elementwise.default_sizes(vm, "standard")) * 4 <= 256 * MiB


def test_the_absolute_bound_and_an_honest_llc() -> None:
    big = _Host(2048 * MiB, cores=256, free=500 * GiB)  # 256 x 16 MiB would allow 4 GiB
    assert cache.llc(big) == cache.LLC_MAX
    real = _Host(96 * MiB, cores=16, free=64 * GiB)  # within both bounds: kept as reported
    assert cache.estimate(real) == cache.LLC(96 * MiB, 96 * MiB, "LLC 96 MiB")
    assert cache.buffer_bytes(real) == 768 * MiB


def test_little_free_memory_caps_every_buffer() -> None:
    small = _Host(32 * MiB, cores=2, free=GiB)  # 1/16 of 1 GiB: 64 MiB a buffer
    cap, why = cache.buffer_cap(small)
    assert cap == 64 * MiB and why == "1/16 of 1 GiB available"
    assert cache.buffer_bytes(small) == 64 * MiB  # below the 256 MiB floor: memory wins
    assert elementwise.default_sizes(small, "quick") == [64 * MiB // 4]
    standard = elementwise.default_sizes(small, "standard")
    assert max(standard) == 64 * MiB // 4 and len(set(standard)) == len(standard)
    assert "the memory bound" in cache.sizing(small)


def test_the_cpu_device_reads_bounds_from_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu, "_llc_bytes", lambda: GiB)
    monkeypatch.setattr(CPUDevice, "cores", lambda self: 2)
    monkeypatch.setattr(CPUDevice, "available_memory_bytes", lambda self: 512 * MiB)
    host = CPUDevice()
    assert cache.llc(host) == 32 * MiB
    assert cache.buffer_bytes(host) == 32 * MiB  # 1/16 of 512 MiB
    assert elementwise.default_sizes(host, "quick") == [32 * MiB // 4]


def test_the_plan_estimate_names_its_peak_and_bounds() -> None:
    load_builtins()
    vm = _Host(GiB, cores=2, free=20 * GiB)
    cases = [
        Case("add", "float32", vm, (("n", 32 * MiB),), rule="quick"),
        Case("seed-add", "intended", vm, (("size", 1024),), rule="quick"),
        Case("simplenet", "infer", vm, (("batch", 64),), rule="quick"),
    ]
    b = plan_budget.estimate(cases, ceilings=False)
    assert b.peak_bytes == 3 * 4 * 32 * MiB and b.peak_what.startswith("add fp32")
    assert b.unknown == 1  # the model: known once built
    assert b.low_s == pytest.approx(3 * (0.025 + 0.2)) and b.high_s == pytest.approx(3 * 4.0)
    with_ceilings = plan_budget.estimate(cases, ceilings=True, quick=True)
    assert with_ceilings.ceilings_s > 0 and with_ceilings.peak_what.startswith("the ceilings")
    text = plan_budget.lines(cases, ceilings=False, process_bytes=300 * MiB)
    assert text[0].startswith("sizes: fake: LLC reported 1 GiB, counted as 32 MiB")
    assert b.timeout_s == pytest.approx(3 * (0.025 + 2.0))
    # each end says what it assumes: settling at the least, timing out, the most
    assert text[1] == (
        "estimate of wall time: 3 cases take 1 s if each settles at its stopping rule's least "
        "(quick calls, steady timings); 6 s if each runs to its time-out (timings that never "
        "settle, as under other load); 12 s at the most (calls of seconds: warm-up times out "
        "too); setting cases up (models, data, compiling) adds to it"
    )
    ceilings = plan_budget.lines(cases, quick=True)[1]
    assert "; plus up to " in ceilings and ceilings.endswith(
        " for ceilings not cached yet; setting cases up (models, data, compiling) adds to it"
    )
    assert "estimate of peak memory: 684 MiB (300 MiB this process now" in text[2]


def test_seed_add_keeps_the_blogs_size_where_it_fits_and_says_why_where_not() -> None:
    from torchmark.workloads.base import PlanOptions
    from torchmark.workloads.micro import seed_add

    tensor = 4 * seed_add.BLOG_SIZE**2  # 604 MB, three held at once
    roomy = _Host(32 * MiB, cores=2, free=20 * GiB)
    opts = PlanOptions(suite="standard")
    assert {c.param_dict["size"] for c in seed_add.SeedAdd().cases(roomy, opts)} == {12288}
    assert seed_add.SeedAdd.plan_note(seed_add.SeedAdd().cases(roomy, opts)) == []
    small = _Host(32 * MiB, cores=2, free=2 * GiB)  # half of it is 1 GiB: not 1.81 GB
    cases = seed_add.SeedAdd().cases(small, opts)
    side = cases[0].param_dict["size"]
    assert side % 1024 == 0 and 3 * 4 * side**2 <= GiB < 3 * 4 * (side + 1024) ** 2
    assert 3 * tensor > GiB
    (note,) = seed_add.SeedAdd.plan_note(cases)
    assert note.startswith(f"seed-add on fake: measured at {side}^2, not the blog's 12288^2")
    assert "more than half the memory available (2 GiB)" in note
    assert "not placed in the blog's 2023 table" in note
    # a size asked for is kept, and said not to be the blog's
    asked = seed_add.SeedAdd().cases(roomy, PlanOptions(suite="quick", sizes=(2048,)))
    (note,) = seed_add.SeedAdd.plan_note(asked)
    assert "measured at 2048^2, not the blog's 12288^2; not placed" in note


def test_a_quick_run_keeps_seed_add_within_2_gb_on_the_host() -> None:
    """A quick run's process stays within 2 GB. The blog's three 604 MB tensors
    beside what a run holds (torch's own ~0.3 GB, its heap) do not, so the host's side is
    the largest that fits 2 GB less that, the same whatever this process holds now (a
    resumed run plans the sizes of its first part); the note says why and which command
    measures the blog's."""
    from torchmark.workloads.base import PlanOptions
    from torchmark.workloads.micro import _common, seed_add

    # 6 GiB free: the blog's 1.81 GB is more than a quarter of it
    roomy = _Host(32 * MiB, cores=2, free=6 * GiB)
    cases = seed_add.SeedAdd().cases(roomy, PlanOptions(suite="quick"))
    side = cases[0].param_dict["size"]
    room = _common.QUICK_PEAK_BYTES - _common.QUICK_HELD_BYTES
    assert side % 1024 == 0 and 3 * 4 * side**2 <= room < 3 * 4 * (side + 1024) ** 2
    assert side == 11264
    (note,) = seed_add.SeedAdd.plan_note(cases)
    assert "keeps a run within 2 GB" in note and "1.81 GB" in note
    assert "fit a quarter of the memory available" in note
    assert "the 450 MiB a run holds besides them" in note
    assert note.endswith("`torchmark run -w seed-add` measures it at the blog's size")
    assert "half the memory available" not in note  # 6 GiB: the only reason is quick's
    prepared_note = seed_add.size_note(side, roomy, quick=cases[0].sized_for == "quick")
    assert prepared_note == [note.removeprefix("seed-add on fake: ")]  # the result says it too
    # little memory available: the smaller room wins, and both reasons are said
    small = _Host(32 * MiB, cores=2, free=2 * GiB)
    (tight,) = seed_add.SeedAdd.plan_note(seed_add.SeedAdd().cases(small, PlanOptions("quick")))
    assert "keeps a run within" in tight
    assert "more than half the memory available (2 GiB)" in tight
    # a GPU holds the tensors in its own memory: the blog's size, placed in its table
    gpu = FakeDevice(FakeClock())
    on_gpu = seed_add.SeedAdd().cases(gpu, PlanOptions(suite="quick"))
    assert {c.param_dict["size"] for c in on_gpu} == {12288}


def test_a_size_given_to_a_quick_run_is_not_said_to_be_quicks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`run --quick -w seed-add --size 2048` measures at the size asked for: its note does
    not blame --quick's 2 GB nor send the reader to another command for the blog's size
    (it said both), while the size a quick run chose itself still says so, at plan and at
    prepare, by another object (the reason travels with the case)."""
    from torchmark.workloads.base import PlanOptions
    from torchmark.workloads.micro import seed_add

    monkeypatch.setattr(seed_add, "QUICK_CASE_BYTES", 40 * MiB)  # room: 1024^2
    roomy = _Host(32 * MiB, cores=2, free=6 * GiB)  # the blog's size is not quick's here
    asked = seed_add.SeedAdd().cases(roomy, PlanOptions(suite="quick", sizes=(2048,)))
    assert {c.rule for c in asked} == {"quick"}  # still stopped as quick
    (note,) = seed_add.SeedAdd.plan_note(asked)
    assert note == (
        "seed-add on fake: measured at 2048^2, not the blog's 12288^2; not placed in the "
        "blog's 2023 table, which is of its size only"
    )
    chosen = seed_add.SeedAdd().cases(roomy, PlanOptions(suite="quick"))
    assert {c.param_dict["size"] for c in chosen} == {1024}
    (said,) = seed_add.SeedAdd.plan_note(chosen)
    assert "keeps a run within 2 GB" in said
    small = seed_add.SeedAdd().cases(roomy, PlanOptions(suite="quick", sizes=(1024,)))
    for case, quick in ((chosen[-1], True), (small[-1], False)):
        notes = seed_add.SeedAdd().prepare(case).notes
        assert ("keeps a run within" in notes[0]) is quick, notes[0]


def test_a_quick_run_measures_the_blogs_size_where_a_quarter_of_memory_holds_it() -> None:
    """The seed's table is the headline: with 24 GB free a quick run measured 11264^2 to
    keep within 2 GB, and was not placed in the table. Where the three 604 MB tensors fit
    a quarter of the memory available (7.25 GB), it measures 12288^2 and says nothing of
    size; below that it keeps within 2 GB as before."""
    from torchmark.workloads.base import PlanOptions
    from torchmark.workloads.micro import seed_add

    plenty = _Host(32 * MiB, cores=2, free=20 * GiB)
    cases = seed_add.SeedAdd().cases(plenty, PlanOptions(suite="quick"))
    assert {c.param_dict["size"] for c in cases} == {12288}
    assert seed_add.SeedAdd.plan_note(cases) == []
    edge = 4 * 3 * 4 * 12288**2  # exactly a quarter
    at = seed_add.SeedAdd().cases(_Host(32 * MiB, cores=2, free=edge), PlanOptions("quick"))
    assert {c.param_dict["size"] for c in at} == {12288}
    below = _Host(32 * MiB, cores=2, free=edge - 1)
    under = seed_add.SeedAdd().cases(below, PlanOptions(suite="quick"))
    assert {c.param_dict["size"] for c in under} == {11264}
