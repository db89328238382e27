"""Break-even and cost are pure functions of Results: tested with fake results."""

from __future__ import annotations

import numpy as np
import pytest

from torchmark.devices import CPUDevice
from torchmark.errors import InputError
from torchmark.judge.comparison import paired
from torchmark.results import Result, Work
from torchmark.testing import FakeClock, FakeDevice
from torchmark.user import breakeven, cost


def res(device: str, variant: str, batch: int, median_s: float, spread: float = 0.01) -> Result:
    rng = np.random.default_rng(batch)
    samples = median_s * (1 + spread * rng.standard_normal(20))
    return Result(
        workload="m",
        variant=variant,
        device=device,
        params={"batch": batch},
        samples_s=samples.tolist(),
        work=Work(items=batch),
    )


def test_gpu_verdict_respects_noise() -> None:
    cpu = res("cpu", "e2e", 1, 2e-3)
    assert breakeven.gpu_verdict(res("g", "e2e", 1, 1e-3), cpu) == ("FASTER", "faster")
    assert breakeven.gpu_verdict(res("g", "e2e", 1, 4e-3), cpu)[0] == "SLOWER"
    assert breakeven.gpu_verdict(res("g", "e2e", 1, 1.99e-3), cpu)[0] != "FASTER"  # 0.5 %
    # ~23 % relative IQR a side (33 % combined): a 1.2x GPU is within it, UNCLEAR
    noisy = breakeven.gpu_verdict(res("g", "e2e", 1, 1.67e-3, 0.3), res("cpu", "e2e", 1, 2e-3, 0.3))
    assert noisy[0] == "UNCLEAR"


def test_crossing_cases() -> None:
    assert breakeven.crossing({1: "FASTER", 8: "FASTER"}) == ("always", None)
    assert breakeven.crossing({1: "SLOWER", 8: "SAME"}) == ("never", None)
    assert breakeven.crossing({1: "SLOWER", 4: "FASTER", 8: "FASTER"}) == (4, None)
    value, note = breakeven.crossing({1: "SLOWER", 4: "FASTER", 8: "SLOWER"})
    assert value == 4 and note and "only at batch 4" in note
    assert breakeven.crossing({}) == ("not measured", None)


def test_unclear_batches_are_not_never() -> None:
    # the GPU cannot be told apart from the CPU at batch 8: "never" would be a guess
    value, note = breakeven.crossing({1: "SLOWER", 4: "SLOWER", 8: "UNCLEAR"})
    assert value == "unclear" and note
    assert "batch 8" in note and "never in the range tried or from batch 8" in note
    assert breakeven.describe(value) == "can't tell (too noisy)"
    # an UNCLEAR batch that does not change the answer leaves it as it is
    assert breakeven.crossing({1: "UNCLEAR", 2: "SLOWER", 4: "FASTER"}) == (4, None)


def two_device_sweep() -> list[Result]:
    # CPU: 1 ms per item; GPU end-to-end: 5 ms fixed + 0.1 ms/item; device-only: 0.5 ms fixed
    out = []
    for b in (1, 2, 4, 8, 16):
        out.append(res("cpu", "e2e", b, 1e-3 * b))
        out.append(res("cuda:0", "e2e", b, 5e-3 + 1e-4 * b))
        out.append(res("cuda:0", "device", b, 5e-4 + 1e-4 * b))
        out.append(res("cuda:1", "e2e", b, 1.0))  # a very slow GPU
        out.append(res("cuda:1", "device", b, 1.0))
    return out


def test_break_even_two_gpus() -> None:
    be = breakeven.break_even(two_device_sweep(), "cpu", ["cuda:0", "cuda:1"], {"cuda:0": "G0"})
    g0 = be["cuda:0"]
    assert g0["e2e"] == 8  # 5.8 ms < 8 ms at 8; 5.4 > 4 at 4
    assert g0["device"] == "always"  # 0.6 ms < 1 ms already at batch 1
    assert g0["range"] == [1, 16] and g0["label"] == "G0"
    assert be["cuda:1"]["e2e"] == "never" and be["cuda:1"]["device"] == "never"
    row = next(r for r in g0["per_batch"] if r["batch"] == 16 and r["mode"] == "e2e")
    assert row["speedup"] == pytest.approx(16e-3 / 6.6e-3, rel=0.05)


def test_break_even_ignores_failed_cases() -> None:
    rows = [
        *two_device_sweep(),
        Result(
            workload="m",
            variant="e2e",
            device="cuda:0",
            params={"batch": 32},
            status="skipped",
            reason="oom",
        ),
    ]
    assert breakeven.break_even(rows, "cpu", ["cuda:0"])["cuda:0"]["range"] == [1, 16]


def test_results_their_verdict_rejects_are_left_out() -> None:
    """A loaded machine's invalid GPU result at batch 1 (a scheduler artefact, say) was
    listed with its speedup, counted as "not faster" (break-even 8 where the valid batches
    say "always") and called the cheaper device by the cost table."""
    from torchmark.results import Verdict

    rows = two_device_sweep()
    for r in rows:
        if r.device == "cuda:0" and r.params["batch"] == 1:
            r.verdict = Verdict(level="invalid", reasons=["a scheduler artefact"])
    be = breakeven.break_even(rows, "cpu", ["cuda:0"])["cuda:0"]
    assert be["range"] == [2, 16] and be["device"] == "always"
    assert all(r["batch"] != 1 for r in be["per_batch"])
    table = cost.cost_table(rows, {"cpu": 0.10, "cuda:0": 0.0001})
    assert "1" not in table["cheaper"] or table["cheaper"]["1"] == "cpu"
    assert not any(r["device"] == "cuda:0" and r["batch"] == 1 for r in table["rows"])


def test_describe_words() -> None:
    assert breakeven.describe("never") == "never in the range tried"
    assert breakeven.describe(8) == "from batch 8"


def test_parse_price() -> None:
    assert cost.parse_price("cpu=0.10, CUDA=2.5") == {"cpu": 0.1, "cuda": 2.5}
    assert cost.parse_price(None) == {}


@pytest.mark.parametrize("bad", ["cpu", "cpu=abc", "=1", "cpu=-1", "cpu=0.1;cuda=2"])
def test_bad_price_names_an_example(bad: str) -> None:
    with pytest.raises(InputError, match=r"e\.g\. --price cpu=0\.10,cuda=2\.50"):
        cost.parse_price(bad)


def test_prices_match_kinds_and_names_and_ignore_absent_devices() -> None:
    clock = FakeClock()
    devs = [CPUDevice(), FakeDevice(clock, 0), FakeDevice(clock, 1)]
    got = cost.device_prices({"cpu": 0.1, "fake": 2.0, "fake:1": 3.0, "cuda": 9.0}, devs)
    assert got == {"cpu": 0.1, "fake:0": 2.0, "fake:1": 3.0}


def test_cost_per_million_and_cheaper_device() -> None:
    assert cost.cost_per_million(3.6, 1e-3) == pytest.approx(1.0)  # 3.6/h = 1e-3/s
    table = cost.cost_table(two_device_sweep(), {"cpu": 0.10, "cuda:0": 2.50})
    cheaper = table["cheaper"]
    # cpu: 0.1/3600*1e-3*1e6 = 0.0278 per M; cuda at 16: 2.5/3600*(6.6e-3/16)*1e6 = 0.286
    assert cheaper["16"] == "cpu" and cheaper["1"] == "cpu"
    row = next(r for r in table["rows"] if r["device"] == "cpu" and r["batch"] == 4)
    assert row["cost_per_million"] == pytest.approx(0.1 / 3600 * 1e-3 * 1e6, rel=0.05)


def test_paired_verdict() -> None:
    base = [1.0, 1.02, 0.98, 1.01, 0.99, 1.0]
    assert paired(base, [b / 2 for b in base]).verdict == "FASTER"
    assert paired(base, [b * 2 for b in base]).verdict == "SLOWER"
    steady = [1.0 + 0.001 * ((i * 7) % 5 - 2) for i in range(20)]  # ±0.2 %, 20 rounds
    assert paired(steady, steady).verdict == "SAME"
    assert paired(base, base).verdict == "UNCLEAR"  # 6 rounds: the CI spans ±4 %
    # drift both ways: the medians differ 2x but the rounds disagree: can't tell, not "same"
    assert paired([3.0, 0.2, 5.0, 0.3, 4.0, 0.25], [1.0] * 6).verdict == "UNCLEAR"
    assert paired([2.0, 2.0], [1.0, 1.0]).verdict == "UNCLEAR"  # too few rounds to tell
