"""Real CPU runs of the input workload at tiny sizes, through ``runner.run_planned``: the
breakdown adds up to the measured step, and a dataset that raises or hangs ends its case
with the reason, leaves no worker process behind, and the run goes on."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

import psutil
import pytest
import torch

from clitest import cli, spawn
from torchmark.devices import CPUDevice
from torchmark.loaders import LoaderConfig, config_of
from torchmark.results import RunRecord
from torchmark.run import runner
from torchmark.run.config import RunConfig
from torchmark.run.record import new_record
from torchmark.run.session import Quiet, Session
from torchmark.workloads.base import Case, PlanOptions
from torchmark.workloads.pipeline.feed import make_loader, shut
from torchmark.workloads.pipeline.images import JpegImages
from torchmark.workloads.pipeline.workload import InputPipeline, Shape

CFG = RunConfig(rule="test", ceilings=False, telemetry=False)


pytestmark = pytest.mark.usefixtures("one_thread")


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def run(w: InputPipeline, cache: Path, keep: Any) -> RunRecord:
    opts = PlanOptions(suite="quick", sizes=(32,), batches=(8,), cache_dir=str(cache))
    cases = [c for c in w.cases(CPUDevice(), opts) if keep(c)]
    session = Session(new_record("run", {}, [CPUDevice()]), None, Quiet())
    return runner.run_planned(session, cases, {"input": w}, CFG)


def plain(c: Case) -> bool:
    cfg = config_of(c.param_dict)
    plain = not (cfg.persistent or cfg.copies_async) and cfg.prefetch is None
    return c.variant == "resident" or plain


def test_copy_configurations_are_skipped_on_the_cpu_with_the_reason(tmp_path: Path) -> None:
    record = run(InputPipeline(), tmp_path, lambda c: config_of(c.param_dict).copies_async)
    assert len(record.results) == 4  # pinned, pinned + non_blocking, non_blocking, side stream
    assert all(r.status == "skipped" for r in record.results)
    assert {r.reason for r in record.results} == {"not available: no CUDA"}


def test_breakdown_adds_up_to_the_measured_step(tmp_path: Path) -> None:
    before = children()
    record = run(InputPipeline(), tmp_path, plain)
    by = {(r.variant, r.params.get("workers")): r for r in record.results}
    assert all(r.ok for r in record.results), [r.reason for r in record.results]
    for workers in (0, 2):
        r = by[("loader", workers)]
        b = r.extra["input"]
        assert b["copy_s"] is None and "no copy" in b["copy_note"]
        assert b["wait_s"] > 0 and b["compute_s"] > 0
        assert 0 < b["input_bound"] < 1
        # the harness timed each epoch on its own clock: the segments must add up to it
        epoch = sum(r.samples_s) / len(r.samples_s)
        assert b["step_s"] * b["steps_per_epoch"] == pytest.approx(epoch, rel=0.05)
    assert children() <= before  # every worker joined


def order() -> list[int]:
    """The first epoch's indices: 32 images in batches of 8, as every configuration sees them."""
    loader = make_loader(list(range(32)), 8, LoaderConfig(), 1.0)  # type: ignore[arg-type]
    return [int(i) for b in loader for i in b]


# One bad index inside the 2 batches the check compares, one only the timed epochs reach.
IN_CHECK, IN_EPOCH = order()[3], order()[-3]


class Raises(JpegImages):
    bad: ClassVar[int] = IN_CHECK

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i == self.bad:
            raise ValueError(f"corrupt image {i}")
        return super().__getitem__(i)


class Hangs(Raises):
    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if i == self.bad:
            time.sleep(3600)
        return super().__getitem__(i)


class Faulty(InputPipeline):
    batch_timeout_s: ClassVar[float] = 1.0
    dataset: ClassVar[type[JpegImages]] = JpegImages

    def __init__(self) -> None:
        super().__init__()
        self.dataset_factory = lambda s, folder: self.dataset(folder, s.crop, s.classes)


@pytest.mark.parametrize("bad", [IN_CHECK, IN_EPOCH], ids=["in-check", "in-epoch"])
@pytest.mark.parametrize(("dataset", "reason"), [(Raises, "corrupt image"), (Hangs, "timed out")])
def test_a_failing_worker_ends_its_case_and_leaves_no_process(
    tmp_path: Path, dataset: type[Raises], reason: str, bad: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dataset, "bad", bad)
    Faulty.dataset = dataset
    before = children()
    t0 = time.perf_counter()
    # workers=2 fails; the resident case after it in the plan still runs
    record = run(Faulty(), tmp_path, lambda c: c.param_dict.get("workers") == 2 and plain(c))
    record2 = run(InputPipeline(), tmp_path, lambda c: c.variant == "resident")
    took = time.perf_counter() - t0
    (failed,) = record.results
    assert failed.status == "skipped" and reason in (failed.reason or "")
    assert "the loader failed" in (failed.reason or "")
    assert record2.results[0].ok
    # 1 s batch time-out + DataLoader's 5 s join before it terminates a hung worker, for
    # a worker that would hang 3600 s; two runs' start-up on a loaded CI machine beside it
    assert took < 60
    deadline = time.monotonic() + 60  # a condition waited for: only a failure waits it out
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not children() - before, "worker processes outlived their case"


def test_shape_is_small_on_cpu() -> None:
    s = InputPipeline().shape(CPUDevice())
    assert isinstance(s, Shape) and s.crop <= 64 and s.images <= 512


class PerWorker(JpegImages):
    """Fast and wrong: each worker process draws its own flips from the global RNG."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y = super().__getitem__(i)
        return (x.flip(-1) if torch.rand(()) < 0.5 else x), y


def test_a_loader_whose_batches_differ_is_reported_wrong(tmp_path: Path) -> None:
    Faulty.dataset = PerWorker
    record = run(Faulty(), tmp_path, lambda c: c.param_dict.get("workers") == 2 and plain(c))
    (r,) = record.results
    assert r.status == "wrong" and "differs from the default loader's" in (r.reason or "")


def test_cli_cache_dir_that_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    db = f"sqlite:///{tmp_path / 'r.db'}"
    args = ["run", "-w", "input", "-d", "cpu", "--stopping", "test", "--no-ceilings"]
    code, out, err = cli(
        capsys, *args, "--no-telemetry", "--cache-dir", str(blocker), "--size", "8", "--db", db
    )
    assert code != 0
    (line,) = [x for x in (out + err).splitlines() if x.startswith("error:")]
    assert str(blocker) in line and "--cache-dir" in line


def test_too_few_images_for_the_batch_is_skipped_with_the_fix(tmp_path: Path) -> None:
    opts = PlanOptions(suite="quick", sizes=(8,), batches=(8,), cache_dir=str(tmp_path))
    w = InputPipeline()
    (case,) = [c for c in w.cases(CPUDevice(), opts) if c.param_dict.get("workers") == 0]
    session = Session(new_record("run", {}, [CPUDevice()]), None, Quiet())
    (r,) = runner.run_planned(session, [case], {"input": w}, CFG).results
    assert r.status == "skipped" and "pass --size 16 or more" in (r.reason or "")


def test_sigterm_to_the_process_group_while_workers_run_stops_cleanly(tmp_path: Path) -> None:
    """`timeout` and Slurm signal the whole process group: the DataLoader workers get the
    SIGTERM too. Dying of it, they made DataLoader's SIGCHLD handler raise "worker killed
    by signal" in the main process over the run's own stop (a traceback, not exit 143)."""
    env = {**os.environ, "TORCHMARK_DB": f"sqlite:///{tmp_path / 'r.db'}", "PYTHONUNBUFFERED": "1"}
    args = ["run", "-w", "input", "-d", "cpu", "--quick", "--no-ceilings", "--no-telemetry"]
    args += ["--cache-dir", str(tmp_path), "--batch", "8", "--size", "64", "--threads", "1"]
    args += ["--stopping", "test"]
    proc = spawn(args, env, tmp_path, start_new_session=True)
    main = psutil.Process(proc.pid)

    def workers() -> set[int]:
        # forked with the main's command line and still so 0.1 s later: a DataLoader worker,
        # not a subprocess (cpuinfo) between its fork and its exec
        with contextlib.suppress(psutil.Error):
            seen = {c.pid for c in main.children() if c.cmdline() == main.cmdline()}
            time.sleep(0.1)
            return seen & {c.pid for c in main.children() if c.cmdline() == main.cmdline()}
        return set()

    try:
        deadline = time.monotonic() + 90
        while not (seen := workers()) and time.monotonic() < deadline:
            assert proc.poll() is None, "the run ended before its workers were seen"
        assert seen, "no DataLoader worker within 90 s"
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 143, err
    assert "interrupted by SIGTERM" in err and "Traceback" not in err, err
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every process of the group has ended
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("processes of the run outlived it")


def started(workers: int) -> Any:
    ds = list(range(64))
    it = iter(make_loader(ds, 4, LoaderConfig(workers), 5.0))  # type: ignore[arg-type]
    next(it)
    return it


def test_a_worker_stopped_by_sigterm_exits_0() -> None:
    # killed by it, the SIGCHLD handler would raise "killed by signal" in this process
    it = started(1)
    (w,) = it._workers
    subprocess.run(["kill", "-TERM", str(w.pid)], check=True)  # not from its parent, as a group's
    w.join(timeout=60)
    assert w.exitcode == 0
    shut(it)


def test_teardown_with_a_worker_already_dead_does_not_raise() -> None:
    from torch.utils.data._utils import signal_handling

    # DataLoader's SIGCHLD handler set aside, so that the death is found where the test
    # says, mid-shutdown, not at whatever line the signal lands on (a mask would not do:
    # threads other tests left behind would take the signal)
    it = started(2)  # installs DataLoader's handler, once per process
    it._shutdown_workers()
    handler = signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # SIG_DFL: children not reaped
    try:
        it = started(2)
        dead, alive = it._workers
        os.kill(dead.pid, signal.SIGKILL)  # as the OOM killer, or a group signal to a user's
        deadline = time.monotonic() + 10  # dead, not reaped (join would reap it)
        while not os.waitid(os.P_PID, dead.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        real, raised = it._shutdown_workers, []

        def interrupted() -> None:  # the SIGCHLD handler's check, as it runs: mid-shutdown
            try:
                signal_handling._error_if_any_worker_fails()
            except RuntimeError as e:  # what the old teardown let out of the Stopped handler
                raised.append(str(e))
                raise
            real()

        it._shutdown_workers = interrupted
        shut(it)
        assert raised and "killed by signal" in raised[0]
        assert not it._worker_pids_set and not dead.is_alive() and not alive.is_alive()
    finally:
        signal.signal(signal.SIGCHLD, handler)


def test_token_pipeline_runs_and_is_reported_in_tokens(tmp_path: Path) -> None:
    from torchmark.report.pipeline import pipeline_tables
    from torchmark.workloads.pipeline.workload import InputTokens

    w = InputTokens()
    opts = PlanOptions(suite="quick", sizes=(32,), batches=(8,), cache_dir=str(tmp_path))
    cases = [c for c in w.cases(CPUDevice(), opts) if plain(c)]
    session = Session(new_record("run", {}, [CPUDevice()]), None, Quiet())
    record = runner.run_planned(session, cases, {"input-tokens": w}, CFG)
    assert all(r.ok for r in record.results), [r.reason for r in record.results]
    fed = next(r for r in record.results if r.variant == "loader")
    assert fed.work is not None and fed.work.item_unit == "tokens"
    assert fed.work.items == 32 * 32  # 4 batches of 8 sequences of 32 tokens an epoch
    from rich.console import Console

    console = Console(width=80, record=True)
    console.print(*pipeline_tables(record))
    out = console.export_text()
    assert "input-tokens pipeline" in out and "tokens/s" in out
