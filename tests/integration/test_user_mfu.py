"""A user model's numbers against the machine's ceilings: `model` reads MFU
against the peak of the dtype its FLOPs run in, reusing the cached ceilings and saying so."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
from rich.console import Console

from torchmark import format as fmt
from torchmark.devices import CPUDevice
from torchmark.kinds.model.kind import benchmark_model
from torchmark.report.model import model_view
from torchmark.results import Ceiling, CeilingSource, utcnow
from torchmark.run import environment
from torchmark.testing import MemoryStore


def _text(parts: list) -> str:
    console = Console(record=True, width=200)
    for p in parts:
        console.print(p)
    return console.export_text()


def _cached_store(peak: float) -> MemoryStore:
    """A store whose ceiling cache holds this CPU's ceilings, as an earlier run left them."""
    d = CPUDevice()
    fp = environment.device_fingerprint(d, environment.collect([d]))
    src = CeilingSource(
        measured_utc=utcnow() - timedelta(hours=1), run_id="earlier", other_cores=0.1
    )
    store = MemoryStore()
    store.cache_ceilings(
        fp,
        "cpu",
        [
            Ceiling(device="cpu", key="matmul:float32", value=peak, unit="FLOP/s",
                    method="test", provenance=src),
            Ceiling(device="cpu", key="bandwidth", value=1e11, unit="B/s", method="test",
                    provenance=src),
        ],
    )  # fmt: skip
    return store


def test_model_prints_mfu_against_the_cached_fp32_peak() -> None:
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8))
    store = _cached_store(peak=2e12)
    rec = benchmark_model(
        mlp, torch.randn(32, 256), devices="cpu", rule="test", store=store,
        measure_energy=False, telemetry=False,
    )  # fmt: skip
    (r,) = rec.results
    assert r.ok and r.ceiling is not None
    assert (r.ceiling.key, r.ceiling.value) == ("matmul:float32", 2e12)
    assert r.pct_of_ceiling == pytest.approx(100 * (r.rate("flops") or 0) / 2e12)
    text = " ".join(_text(model_view(rec)).split())
    assert "MFU" in text and f"{fmt.pct(r.pct_of_ceiling)} fp32" in text
    # reused, said so: the peak's figure and the run that measured it
    assert f"measured matmul:float32 peak ({fmt.ceiling_value(r.ceiling)})" in text
    assert "reused from run earlier" in text


def test_no_ceilings_says_why_there_is_no_mfu() -> None:
    rec = benchmark_model(
        torch.nn.Linear(16, 4), torch.randn(4, 16), devices="cpu", rule="test",
        ceilings=False, measure_energy=False, telemetry=False,
    )  # fmt: skip
    assert rec.results[0].ceiling is None
    text = " ".join(_text(model_view(rec)).split())
    assert "MFU: not available (no ceilings in this run: --no-ceilings" in text
