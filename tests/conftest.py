"""Shared test set-up: an isolated results store per test, GPU and browser tests skipped
where the hardware or browser is absent."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

pytest_plugins = ["abandonsaid"]

# rich fixes a console's size for good where COLUMNS and LINES are both set when it is made
# (the CLI's consoles are made on import): an xdist worker starts with LINES set, so the
# first importer's COLUMNS held for every later test. Each test sets its own (below).
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): a worker per usable core, at most 4. Integration
    tests run real CPU work, servers and torchrun: more workers only queue for the cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(4, cores or 1))


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test writes to the user's real results database."""
    monkeypatch.setenv("TORCHMARK_DB", f"sqlite:///{tmp_path / 'results.db'}")
    # the library's default store (no URL) lives under XDG_DATA_HOME: keep it in tmp too
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    # and `torchmark list`'s catalog, kept under XDG_CACHE_HOME
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.setenv("COLUMNS", "120")


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Torch on one thread for the test (modules opt in with ``usefixtures``): other test
    processes share the 2 cores, and 2 spinning OpenMP threads slowed a tiny GPT-2 train
    step from 0.07 s to 0.7-1.5 s, an input step 10x."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_gpu = pytest.mark.skip(reason="needs a CUDA device")
    has_browser = shutil.which("chromium") is not None or os.path.exists("/usr/bin/chromium")
    no_browser = pytest.mark.skip(reason="needs Debian's chromium (apt-get install chromium)")
    for item in items:
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)
        if "browser" in item.keywords and not has_browser:
            item.add_marker(no_browser)
