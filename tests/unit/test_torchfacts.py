"""torch's facts kept for `env` and `doctor` (run/torchfacts.py): read back only for the
same install and machine, and what they rebuild is the record a torch import makes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from torchmark.devices import CPUDevice, available, cpu
from torchmark.run import environment, torchfacts


@pytest.fixture
def keeping(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchfacts, "KEEP_BY", "torchmark run")


def test_the_build_is_read_from_the_install_without_torch() -> None:
    b = torchfacts.build()
    assert b["version"] == torch.__version__
    assert b["cuda"] == torch.version.cuda and b["hip"] == getattr(torch.version, "hip", None)
    assert b["debug"] == torch.version.debug
    assert Path(b["path"]) == Path(torch.__file__).parent


def test_a_record_rebuilt_from_kept_facts_is_the_one_torch_gives(keeping: None) -> None:
    assert environment.collect_kept() is None  # nothing kept yet: `env` imports torch
    record = environment.collect(available())
    again = environment.collect_kept()
    assert again is not None
    for section in torchfacts.SECTIONS:
        assert json.loads(json.dumps(again[section])) == json.loads(
            json.dumps(record[section], default=str)
        )
    assert environment.machine_fingerprint(again) == environment.machine_fingerprint(record)
    assert again["facts_from"]["by"] == "torchmark run"
    assert Path(again["facts_from"]["file"]).exists()


def test_a_run_with_its_own_threads_keeps_torchs_defaults(keeping: None) -> None:
    default, _ = cpu.DEFAULT_THREADS
    dev = CPUDevice()
    before = torch.get_num_threads()
    try:
        dev.set_threads(1 if default != 1 else 2)
        record = environment.collect(available())
        assert record["threads"]["torch_num_threads"] != default  # the run's, recorded
    finally:
        torch.set_num_threads(before)
    kept = torchfacts.kept()
    assert kept is not None
    assert kept["threads"]["torch_num_threads"] == default  # what a fresh `env` would say
    assert kept["devices"]["cpu"]["threads"] == default
    assert kept["software"]["parallel_info_threads"] == default


def test_kept_facts_are_read_only_for_the_same_settings(
    keeping: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    environment.collect(available())
    assert torchfacts.kept() is not None
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torch's threads would differ: not these
    assert torchfacts.kept() is None
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert torchfacts.kept() is not None
    monkeypatch.setattr(torchfacts, "build", lambda: {"version": "9.9.9", "path": "/else"})
    assert torchfacts.kept() is None  # another torch


def test_a_library_caller_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torchfacts, "KEEP_BY", None)  # not the CLI: threads may be its own
    environment.collect(available())
    assert torchfacts.kept() is None


def test_only_a_record_of_every_device_is_kept(
    keeping: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.testing import FakeClock, FakeDevice

    every = [CPUDevice(), FakeDevice(FakeClock())]  # a machine with a GPU, run with -d cpu
    monkeypatch.setattr(environment, "_every_device", lambda: every)
    environment.collect(every[:1])
    assert torchfacts.kept() is None  # `env` would list one device short
    environment.collect(every)
    assert torchfacts.kept() is not None
