"""NVML telemetry on a real NVIDIA GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from torchmark.devices import CUDADevice
from torchmark.telemetry import watch
from torchmark.timing import measure, preset

pytestmark = pytest.mark.gpu


def test_nvml_sampler_on_a_real_gpu() -> None:
    if torch.version.hip:
        pytest.skip("ROCm GPUs have no NVML")
    d = CUDADevice(0)
    a = torch.randn(4096, 4096, device="cuda")
    with watch(d) as trace:
        m = measure(lambda: a @ a, d, rule=preset("quick"), on_sample=trace.mark)
    s = trace.summary()
    assert s is not None
    assert s["sources"]["nvml"] == {"present": True, "reason": None, "missing": {}}
    assert s["throttle_checked"] is True and s["throttle_source"] == "nvml"
    assert len(s["sample_tags"]) == len(m.samples_s)
    assert s["clock_max_mhz"] > 0 and 0 < s["clock_pct_of_max"] <= 105
    assert s["power_w_mean"] > 0 and s["temp_c"][0] > 0
    assert s["timeline"]["rows"]
