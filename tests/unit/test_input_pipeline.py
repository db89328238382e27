"""The input workload's pieces without timing: the dataset, the sweep plan, the batch check,
the advice and its table (fabricated results)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from torchmark.devices import CPUDevice
from torchmark.errors import InputError, WrongResultError
from torchmark.loaders import LoaderConfig, config_of, params
from torchmark.report.layout import FitTable
from torchmark.report.pipeline import advise, pipeline_tables
from torchmark.results import Result, RunRecord, Verdict, Work
from torchmark.workloads.base import PlanOptions
from torchmark.workloads.pipeline.feed import first_batches, make_loader
from torchmark.workloads.pipeline.images import JpegImages, crop_box, ensure_images
from torchmark.workloads.pipeline.workload import InputPipeline, same_batches, worker_counts


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_images(tmp_path_factory.mktemp("cache"), 12, 48)


def test_images_written_once(folder: Path) -> None:
    files = sorted(folder.glob("*.jpg"))
    assert len(files) == 12
    stamp = files[0].stat().st_mtime_ns
    assert ensure_images(folder.parent, 12, 48) == folder
    assert files[0].stat().st_mtime_ns == stamp  # not written again


def test_augmentation_depends_on_the_index_only(folder: Path) -> None:
    ds = JpegImages(folder, crop=32, classes=10)
    x, y = ds[3]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and y == 3
    assert torch.equal(ds[3][0], x)  # same index, same crop and flip
    assert not torch.equal(ds[4][0], x)
    assert -3 < float(x.mean()) < 3  # normalised, not 0-255


def test_crop_box_inside_the_image() -> None:
    g = torch.Generator().manual_seed(0)
    for w, h in [(40, 30), (30, 90), (400, 300), (7, 300)]:
        for _ in range(50):
            x0, y0, x1, y1 = crop_box(w, h, g)
            assert 0 <= x0 < x1 <= w and 0 <= y0 < y1 <= h


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_unwritable_cache_dir_names_it_and_the_option(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    with pytest.raises(InputError, match=r"ro/jpeg-4x32.*--cache-dir"):
        ensure_images(ro, 4, 32)


def test_cache_dir_that_is_a_file_names_it(tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")  # mkdir under a file fails for root too
    with pytest.raises(InputError, match=r"afile/jpeg-4x32.*--cache-dir"):
        ensure_images(blocker, 4, 32)


def test_worker_counts_stop_at_the_cores() -> None:
    assert worker_counts(2, quick=False) == [0, 1, 2]
    assert worker_counts(6, quick=False) == [0, 1, 2, 4, 6]
    assert worker_counts(8, quick=True) == [0, 2]


def test_plan_names_each_configuration() -> None:
    opts = PlanOptions(suite="quick", batches=(8,), cache_dir="/tmp/x")
    cases = InputPipeline().cases(CPUDevice(), opts)
    assert cases[0].variant == "resident"
    configs = [config_of(c.param_dict) for c in cases[1:]]
    assert configs[0] == LoaderConfig()
    assert len(set(configs)) == len(configs)
    assert all(c.param_dict["batch"] == 8 for c in cases)
    every = LoaderConfig(2, True, 4, True)
    assert config_of(dict(params(every, 8))) == every


def test_code_lines() -> None:
    assert LoaderConfig().code() == "num_workers=0"
    assert LoaderConfig(2, pin=True, prefetch=4, persistent=True).code() == (
        "num_workers=2, pin_memory=True, prefetch_factor=4, persistent_workers=True"
    )


class Shuffled(JpegImages):
    """A loader that is fast and wrong: it ignores the index's seed."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return super().__getitem__((i + 1) % len(self))


def test_a_loader_with_other_batches_is_wrong(folder: Path) -> None:
    ds = JpegImages(folder, crop=16, classes=10)
    want = first_batches(make_loader(ds, 4, LoaderConfig(), 5.0), 2)
    same_batches(first_batches(make_loader(ds, 4, LoaderConfig(), 5.0), 2), want, LoaderConfig(1))
    bad = first_batches(make_loader(Shuffled(folder, 16, 10), 4, LoaderConfig(), 5.0), 2)
    with pytest.raises(WrongResultError, match="batch 0 differs"):
        same_batches(bad, want, LoaderConfig(1))


def result(variant: str, per_call_s: list[float], **p: int) -> Result:
    p.setdefault("batch", 16)
    step = sum(per_call_s) / len(per_call_s) / 10
    return Result(
        workload="input",
        variant=variant,
        device="cpu",
        params=p,
        samples_s=per_call_s,
        work=Work(items=160, item_unit="images"),
        extra={
            "input": {
                "step_s": step,
                "wait_s": step / 2,
                "compute_s": step / 2,
                "copy_s": None,
                "input_bound": 0.5,
            }
        },
    )


def spread(t: float) -> list[float]:
    return [t * (1 + 0.002 * i) for i in range(-5, 6)]


def sweep() -> list[Result]:
    return [
        result("resident", spread(0.05)),
        result("loader", spread(0.20), workers=0),
        result("loader", spread(0.11), workers=1),
        result("loader", spread(0.10), workers=2),
        result("loader", spread(0.10), workers=4),
        result("loader", spread(0.08), workers=4, persistent=1),
    ]


def test_advice_names_best_gain_plateau_and_cost() -> None:
    (a,) = advise(sweep())
    assert a.best == LoaderConfig(4, persistent=True)
    assert a.gain == pytest.approx(2.5, rel=0.01)
    assert a.plateau == 2  # 4 workers measured no faster than 2
    assert a.cost == pytest.approx(1 - 0.05 / 0.08, rel=0.01)
    text = "\n".join(a.lines)
    assert "2.50x the DataLoader defaults" in text
    assert "costs 38 % of the possible throughput" in text
    code = "num_workers=4, persistent_workers=True"
    assert f"apply: DataLoader(dataset, batch_size=..., {code})" in text


def test_no_cost_is_read_off_an_invalid_measurement() -> None:
    """A loaded machine left the resident step invalid (730 % spread) while the advice still
    said "your pipeline costs 92 %" beside it: a verdict its own table denies."""
    rs = sweep()
    rs[0].verdict = Verdict(level="invalid", reasons=["spread 730 % of the median"])
    (a,) = advise(rs)
    text = "\n".join(a.lines)
    assert a.cost is None and "costs" not in text
    assert (
        "pipeline cost: can't tell; the step fed from device memory is invalid: spread 730 % "
        "of the median" in text
    )
    rs[0].verdict = Verdict(level="warn", reasons=["other processes used 1.0 of 2 cores"])
    assert advise(rs)[0].cost == pytest.approx(1 - 0.05 / 0.08, rel=0.01)  # a warning: read


def test_an_invalid_loader_as_given_gets_no_ratio_nor_a_vs_resident_cell() -> None:
    """The user's loader as given, judged invalid under load, was still told "the best
    setting is 2.50x it", and its breakdown row still read a ratio to the resident step."""
    from torchmark.loaders import YOURS
    from torchmark.report.pipeline import breakdown_cells

    rs = sweep()
    yours = result("loader", spread(0.20), workers=0, **{YOURS: 1})
    yours.verdict = Verdict(level="invalid", reasons=["samples split into two clusters"])
    (a,) = advise([*rs, yours])
    text = "\n".join(a.lines)
    assert "the best setting is" not in text
    assert "your loader as given: no ratio to the best setting, invalid" in text
    assert breakdown_cells(yours, rs[0])[-1] == breakdown_cells(yours, None)[-1]
    assert breakdown_cells(rs[1], rs[0])[-1] != breakdown_cells(rs[1], None)[-1]


def test_advice_within_noise_says_cant_tell() -> None:
    noisy = [0.2 * (1 + 0.3 * ((-1) ** i)) for i in range(11)]
    faster = [t * 0.97 for t in noisy]
    rs = [result("loader", noisy, workers=0), result("loader", faster, workers=1)]
    (a,) = advise(rs)
    text = "\n".join(a.lines)
    assert "can't tell" in text and "apply: nothing" in text


def test_breakdown_table_fits_80_columns() -> None:
    record = RunRecord(kind="run", command="x", config={}, environment={}, fingerprint="f")
    record.results = sweep()
    table, _ = pipeline_tables(record)
    assert isinstance(table, FitTable)
    from rich.console import Console

    console = Console(width=80, record=True)
    console.print(*pipeline_tables(record))
    out = console.export_text()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "w=4 persistent" in out and "defaults (workers=0)" in out
    assert "25 %" in out  # w=0 vs resident: 0.05 / 0.20


def test_workers_that_slow_the_step_are_named() -> None:
    rs = sweep()
    assert not any("contention" in line for line in advise(rs)[0].lines)
    rs[3].extra["input"]["compute_s"] = 0.2  # w=2: 4x the resident step's 0.05 s
    (line,) = [line for line in advise(rs)[0].lines if line.startswith("contention")]
    assert "num_workers=2" in line and "200 ms vs 50 ms" in line


def test_no_contention_is_read_off_an_invalid_resident_step() -> None:
    """The resident step judged invalid under load still set the bar workers were held
    against: "the step's compute took 200 ms vs 50 ms", a ratio to a figure its verdict
    rejects, beside "pipeline cost: can't tell" for the same reason."""
    rs = sweep()
    rs[3].extra["input"]["compute_s"] = 0.2
    rs[0].verdict = Verdict(level="invalid", reasons=["spread 730 % of the median"])
    text = "\n".join(advise(rs)[0].lines)
    assert "pipeline cost: can't tell" in text and "contention" not in text


def test_advice_never_contradicts_itself() -> None:
    text = "\n".join(advise(sweep())[0].lines)
    assert "no count above 2 measurably beat 2" in text
    rs = sweep()
    rs[0] = result("resident", spread(0.5))  # resident slower than every fed step
    rs[4] = result("loader", spread(0.09), workers=4)  # 4 beats 2
    text = "\n".join(advise(rs)[0].lines)
    assert "pipeline cost: can't tell" in text and "costs" not in text.replace("cost:", "")
    assert "still helping at 4, the most tried" in text
    (a,) = advise(rs)
    assert a.cost is None and a.plateau == 4


def test_sweep_on_a_16_core_gpu_machine_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark.testing import FakeClock, FakeDevice
    from torchmark.timing.stopping import preset
    from torchmark.workloads.base import plan_notes
    from torchmark.workloads.pipeline import workload

    monkeypatch.setattr(workload, "available_cores", lambda: 16)
    # the whole sweep is the extended suite's on a GPU (standard keeps three cases)
    cases = InputPipeline().cases(FakeDevice(FakeClock()), PlanOptions(suite="extended"))
    # resident, workers 0-16, persistent, prefetch; pinned, pinned + non_blocking, pageable +
    # non_blocking, side stream
    assert len(cases) == 13
    rules = {preset(c.rule or "").max_time_s for c in cases}
    # warm-up and samples each end at the rule's time-out: the sweep in a few minutes
    assert len(cases) * 2 * max(rules) <= 5 * 60
    (line,) = plan_notes(cases)
    assert line.startswith("input on fake:0: 13 cases; a call is an epoch of 512 JPEGs of ~400")
    assert "(8 batches of 64," in line and "for ~10 s each (at least one epoch each)" in line
    # the slowest epoch measured on an H100 VM (workers=0, 259 images/s) fits the rule
    assert workload.GPU_SHAPE.images / 259 < max(rules) / 4


def gpu_sweep() -> list[Result]:
    rs = [result("resident", spread(0.05)), result("loader", spread(0.20), workers=0)]
    rs.append(result("loader", spread(0.10), workers=4, pin=1))
    rs.append(result("loader", spread(0.09), workers=4, pin=1, non_blocking=1))
    rs.append(result("loader", spread(0.12), workers=4, non_blocking=1))
    rs.append(result("loader", spread(0.07), workers=4, pin=1, non_blocking=1, side_stream=1))
    mb = 38.5e6  # 64 x 3 x 224 x 224 float32 and the labels
    copies = [None, 2e-3, 1.75e-3, 3.85e-3, 2.5e-3]  # pinned 22 GB/s, pageable 10 GB/s
    for r, copy in zip(rs[1:], copies, strict=True):
        r.device = "cuda:0"
        if copy is not None:
            r.extra["input"] |= {"copy_device_s": copy, "batch_bytes": mb, "copy_s": 1e-4}
    rs[0].device = "cuda:0"
    rs[-1].extra["input"] |= {"overlap": 0.6, "overlap_ideal": 0.8}
    return rs


def ceiling(key: str, value: float) -> Any:
    from torchmark.results import Ceiling

    return Ceiling(device="cuda:0", key=key, value=value, unit="B/s", method="test")


def test_gpu_advice_reads_copies_against_the_ceilings_and_the_side_stream() -> None:
    cs = [ceiling("h2d:pinned", 55e9), ceiling("h2d:pageable", 11e9)]
    (a,) = advise(gpu_sweep(), cs)
    text = "\n".join(a.lines)
    # pinned: 38.5 MB in 1.75 ms; pageable: 38.5 MB in 3.85 ms
    assert "pinned 22 GB/s (40 % of the measured h2d:pinned, 55 GB/s)" in text
    # pageable against the link's limit too, not the h2d:pageable ceiling (91 % of 11 GB/s)
    assert "pageable 10 GB/s (18 % of the measured h2d:pinned, 55 GB/s)" in text
    assert "side stream: hid 60 % of the copy time behind the compute (ideal 80 %" in text
    assert "1.29x the same loader copying in line" in text  # 0.09 / 0.07 s per epoch
    assert a.best == LoaderConfig(4, pin=True, non_blocking=True, side_stream=True)
    assert "best: num_workers=4, pin_memory=True, side-stream copy: 2,286 images/s" in text
    assert "apply: and copy batch i+1 on a side stream" in text
    (b,) = advise(gpu_sweep())  # no ceilings measured: the rates alone
    assert "pinned 22 GB/s; pageable 10 GB/s" in "\n".join(b.lines)


def test_a_pageable_copy_reads_the_same_percentage_in_input_and_transfer() -> None:
    """The transfer workload judges every copy against the pinned rate of its direction;
    the input pipeline's advice must print the same percentage for the same copy (it read
    the pageable ceiling: 91 % here where transfer said 18 %)."""
    from torchmark.workloads.micro import transfer

    cs = [ceiling("h2d:pinned", 55e9), ceiling("h2d:pageable", 11e9)]
    by_key = {c.key: c for c in cs}
    (a,) = advise(gpu_sweep(), cs)
    for kind, copy_s in (("pinned", 1.75e-3), ("pageable", 3.85e-3)):
        # the same copy as transfer measures it: 38.5 MB in copy_s, against its ceiling
        r = Result(
            workload="transfer",
            variant=f"h2d-{kind}",
            device="cuda:0",
            samples_s=[copy_s],
            work=Work(bytes=38.5e6, items=1, item_unit="copy"),
            ceiling=by_key[transfer.link_ceiling(f"h2d:{kind}")],
        )
        assert r.pct_of_ceiling is not None
        said = f"{kind} {38.5e6 / copy_s / 1e9:.3g} GB/s ({round(r.pct_of_ceiling)} % of"
        assert said in "\n".join(a.lines), kind


def test_gpu_table_names_the_copy_and_fits_80_columns() -> None:
    from rich.console import Console

    record = RunRecord(kind="run", command="x", config={}, environment={}, fingerprint="f")
    record.results = gpu_sweep()
    console = Console(width=80, record=True)
    console.print(*pipeline_tables(record))
    out = console.export_text()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "w=4 pin side-stream" in out or "w=4 pin side" in out
    assert "w=4 non_blocking" in out or "w=4 nb" in out


def test_token_shards_windows(tmp_path: Path) -> None:
    import numpy as np

    from torchmark.workloads.pipeline.tokens import SHARDS, TokenShards, ensure_tokens

    folder = ensure_tokens(tmp_path, sequences=10, seq=8, vocab=1000)
    assert len(list(folder.glob("*.bin"))) == SHARDS
    assert ensure_tokens(tmp_path, sequences=10, seq=8, vocab=1000) == folder  # once
    ds = TokenShards(folder, seq=8, vocab=1000)
    assert len(ds) == 10
    flat = [np.fromfile(f, dtype=np.uint16) for f in sorted(folder.glob("*.bin"))]
    for i in range(len(ds)):
        x, y = ds[i]
        assert x.shape == y.shape == (8,) and x.dtype == torch.int64
        assert torch.equal(x[1:], y[:-1])  # the target is the next token
        assert int(x.max()) < 1000
    # window 3 is the first of the second shard (3 windows a shard): it starts the file
    assert torch.equal(ds[3][0], torch.from_numpy(flat[1][:8].astype(np.int64)))


def test_token_cache_dir_that_is_a_file_names_it(tmp_path: Path) -> None:
    from torchmark.workloads.pipeline.tokens import ensure_tokens

    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(InputError, match=r"afile/tokens-4x8.*--cache-dir"):
        ensure_tokens(blocker, 4, 8, 100)


def test_token_plan_is_the_light_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark.workloads.pipeline import workload

    for cores, plain in [(16, [0, 2]), (1, [0, 1])]:
        monkeypatch.setattr(workload, "available_cores", lambda n=cores: n)
        cases = workload.InputTokens().cases(CPUDevice(), PlanOptions(cache_dir="/tmp/x"))
        assert cases[0].variant == "resident" and all(c.workload == "input-tokens" for c in cases)
        configs = [config_of(c.param_dict) for c in cases[1:]]
        assert [c.workers for c in configs if not c.copies_async] == plain
        assert [c.side_stream for c in configs if c.copies_async] == [False, True]


def test_advice_never_recommends_a_configuration_its_verdict_rejects() -> None:
    # The input advice picked the fastest rate, an invalid one included (a
    # scheduler artefact 30x faster than its neighbours read as "best: ... apply: ...").
    rs = [result("loader", spread(0.2), workers=0), result("loader", spread(0.1), workers=1)]
    artefact = result("loader", spread(0.006), workers=2)
    artefact.verdict = Verdict(level="invalid", reasons=["samples split into two clusters"])
    (a,) = advise([*rs, artefact])
    text = "\n".join(a.lines)
    assert a.best is not None and a.best.workers == 1
    assert "workers=2: left out, invalid: samples split into two clusters" in " ".join(
        text.split()
    ).replace("num_workers", "workers")
    assert "apply: DataLoader(dataset, batch_size=..., num_workers=1" in text
