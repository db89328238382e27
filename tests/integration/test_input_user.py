"""The user's own loader feeding the user's model (``--loader``, ``loader=``): a real CPU
run at a tiny size, and each bad loader ending in one clear line before anything is
measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from rich.console import Console
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset, get_worker_info

from clitest import cli
from torchmark.errors import InputError
from torchmark.kinds.loader.kind import benchmark_loader
from torchmark.kinds.model.kind import benchmark_model
from torchmark.report.pipeline import advise, pipeline_tables

pytestmark = pytest.mark.usefixtures("one_thread")


def model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 16), nn.ReLU(), nn.Linear(16, 4))


def make_loader() -> DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    ds = TensorDataset(torch.randn(64, 3, 8, 8, generator=g), torch.randint(0, 4, (64,)))
    return DataLoader(ds, batch_size=16)


def batches_in_a_list() -> list[Any]:
    return [(torch.randn(16, 3, 8, 8), torch.zeros(16)) for _ in range(4)]


def test_users_loader_as_given_and_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark.kinds.loader import workload as user

    monkeypatch.setattr(user, "available_cores", lambda: 1)  # workers 0 and 1: a short test
    record = benchmark_loader(
        model(), make_loader, devices="cpu", rule="test", ceilings=False, telemetry=False
    )
    by = {r.extra.get("loader"): r for r in record.results if r.variant == "loader"}
    yours = by["your loader, as given"]
    assert yours.ok and yours.work is not None and yours.work.item_unit == "samples"
    assert yours.work.items == 64  # 4 batches of 16 an epoch
    assert by["num_workers=1"].ok  # rebuilt from the same dataset and batches, checked
    skipped = [r for r in record.results if r.status == "skipped"]
    assert {r.reason for r in skipped} == {"not available: no CUDA"}
    (a,) = advise(record.results)
    assert any(line.startswith("your loader as given: ") for line in a.lines)
    console = Console(width=80, record=True)
    console.print(*pipeline_tables(record))
    assert "your loader, as given" in console.export_text()


class OpenedPerWorker(Dataset[Any]):
    """A dataset that opens its files in each worker's worker_init_fn (as h5py or LMDB
    datasets must): a worker where it never ran fails."""

    opened = False

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if get_worker_info() is not None and not self.opened:
            raise RuntimeError("worker_init_fn never ran: files not opened")
        return torch.full((3, 8, 8), float(i)), i % 4


def open_files(worker_id: int) -> None:
    info = get_worker_info()
    assert info is not None
    info.dataset.opened = True  # type: ignore[attr-defined]


def test_rebuilt_loaders_keep_the_users_worker_init(monkeypatch: pytest.MonkeyPatch) -> None:
    from torchmark.kinds.loader import workload as user

    monkeypatch.setattr(user, "available_cores", lambda: 1)  # workers 0 and 1
    loader = DataLoader(OpenedPerWorker(), batch_size=16, num_workers=1, worker_init_fn=open_files)
    record = benchmark_loader(
        model(), lambda: loader, devices="cpu", rule="test", ceilings=False, telemetry=False
    )
    by = {r.extra.get("loader"): r for r in record.results if r.variant == "loader"}
    assert by["num_workers=1"].ok, by["num_workers=1"].reason  # was: the loader failed
    assert by["your loader, as given"].ok
    assert loader.worker_init_fn is open_files  # the user's loader as it was


def test_an_iterable_is_measured_as_given_only() -> None:
    record = benchmark_loader(
        model(), batches_in_a_list, devices="cpu", rule="test", ceilings=False, telemetry=False
    )
    assert [r.variant for r in record.results] == ["resident", "loader"]
    assert all(r.ok for r in record.results)
    (a,) = advise(record.results)
    assert "your loader is not a DataLoader: it was measured as given only" in a.lines


def raises() -> Any:
    raise ValueError("no data here")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (raises, "make_loader() raised ValueError: no data here"),
        (lambda: 42, "returned int, not a DataLoader or an iterable of batches"),
        (lambda: [torch.randn(4, 5)] * 3, "the model cannot take your loader's batches"),
        (lambda: [torch.randn(4, 3, 8, 8)], "fewer than 2 batches; the breakdown needs 2"),
    ],
    ids=["raises", "not-iterable", "wrong-shape", "too-few"],
)
def test_a_bad_loader_is_one_line_before_measuring(make: Any, says: str) -> None:
    with pytest.raises(InputError, match=says.replace("(", r"\(").replace(")", r"\)")):
        benchmark_model(model(), loader=make, devices="cpu", telemetry=False)


def test_cli_loader_errors_and_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    src = tmp_path / "m.py"
    src.write_text(
        "import torch\n"
        "def make_model():\n    return torch.nn.Linear(4, 2)\n"
        "def bad():\n    raise OSError('disk gone')\n"
    )
    db = f"sqlite:///{tmp_path / 'r.db'}"
    code, out, err = cli(
        capsys, "model", f"{src}:make_model", "--loader", f"{src}:bad", "-d", "cpu", "--db", db
    )
    assert code == 2
    (line,) = [x for x in (out + err).splitlines() if x.startswith("error:")]
    assert "make_loader() raised OSError: disk gone" in line
    code, out, err = cli(
        capsys, "model", f"{src}:make_model", "--loader", f"{src}:bad", "--input", "4", "--db", db
    )
    assert code == 2 and "either --loader or --input" in out + err
