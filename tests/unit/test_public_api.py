"""The public API list stays true: every exported name exists and nothing else is promised."""

from __future__ import annotations

import torchmark

EXPECTED = {
    "Ceiling",
    "Measurement",
    "Result",
    "RunRecord",
    "TorchmarkError",
    "Work",
    "__version__",
    "benchmark_model",
    "measure",
    "open_store",
}


def test_public_api() -> None:
    assert set(torchmark.__all__) == EXPECTED
    for name in torchmark.__all__:
        assert getattr(torchmark, name) is not None


def test_measure_any_callable_on_cpu() -> None:
    import torch

    from torchmark.timing import preset

    x = torch.randn(256, 256)
    m = torchmark.measure(lambda: x @ x, "cpu", rule=preset("test"))
    assert m.n >= 5 and m.median > 0 and m.first_call_s is not None
    assert len(m.samples_s) >= m.n
