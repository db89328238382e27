"""The serving core on a fake clock with a fake device of known service time: the loop, the
load points and the search checked against queueing theory, deterministically (simulated
time: nothing here depends on this machine's speed or load)."""

from __future__ import annotations

import math
import multiprocessing as mp
from pathlib import Path

import mpmath
import numpy as np
import pytest
from scipy import stats as sps

from torchmark.kinds.serving import answer, stats
from torchmark.kinds.serving.arrivals import Arrivals
from torchmark.kinds.serving.fleet import Local, expect
from torchmark.kinds.serving.point import PointPlan, run_point
from torchmark.kinds.serving.search import SearchPlan, search
from torchmark.kinds.serving.server import Batching
from torchmark.results import RunRecord
from torchmark.results.serving import DeviceAnswer, PointDoc, ServingPayload, read, write
from torchmark.stats import early_stopping, order
from torchmark.testing import FakeClock, FakeExecutor

S = 0.010  # the fake device's service time per request


def fake(fixed_s: float = S, per_item_s: float = 0.0, **kw: object) -> tuple[Local, FakeClock]:
    clock = FakeClock(0.0, **kw)  # type: ignore[arg-type]
    return Local(FakeExecutor(clock, fixed_s, per_item_s), clock), clock


# -- queueing theory --------------------------------------------------------------------------


def md1_wait_cdf(t: float, lam: float, d: float) -> float:
    """P(W <= t) in an M/D/1 queue (Erlang / Crommelin): (1 - rho) sum_{k <= t/d}
    (lam (k d - t))^k / k! exp(-lam (k d - t)); alternating terms, so in 80 digits."""
    mpmath.mp.dps = 80
    n = math.floor(t / d)
    lam_, d_, t_ = mpmath.mpf(lam), mpmath.mpf(d), mpmath.mpf(t)
    total = mpmath.mpf(0)
    for k in range(n + 1):
        x = lam_ * (k * d_ - t_)
        total += x**k / mpmath.factorial(k) * mpmath.exp(-x)
    return float((1 - lam_ * d_) * total)


def md1_p99_latency(lam: float, d: float) -> float:
    lo, hi = 0.0, 200 * d
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if md1_wait_cdf(mid, lam, d) < 0.99 else (lo, mid)
    return hi + d  # response = wait + service


def md1_max_rate(bound_s: float, d: float) -> float:
    """The arrival rate whose p99 latency is exactly the bound."""
    lo, hi = 0.01 / d, 0.999 / d
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if md1_p99_latency(mid, d) < bound_s else (lo, mid)
    return lo


def test_crommelin_formula_against_its_known_points() -> None:
    # P(W = 0) = 1 - rho; and the P-K mean from the CDF's integral
    assert md1_wait_cdf(0.0, 50, S) == pytest.approx(0.5)
    ts = np.linspace(0, 0.3, 601)
    mean = float(np.trapezoid([1 - md1_wait_cdf(t, 50, S) for t in ts], ts))
    assert mean == pytest.approx(0.5 * S / (2 * 0.5), rel=0.01)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_and_p99_match_queueing_theory(rho: float) -> None:
    fleet, _ = fake()
    lam = rho / S
    plan = PointPlan(bound_s=10.0, max_point_s=3000, min_requests=30_000)
    p = run_point(fleet, lam, Batching(1, 0.0), plan, seed=3)
    wq = rho * S / (2 * (1 - rho))  # Pollaczek-Khinchine, deterministic service
    assert p.kept.wait.mean() == pytest.approx(wq, rel=0.10)
    assert p.latencies.p99 == pytest.approx(md1_p99_latency(lam, S), rel=0.10)
    assert p.utilisation == pytest.approx(rho, rel=0.05)
    assert p.achieved_rate == pytest.approx(lam, rel=0.05)
    assert p.outcome == "within" and not p.generator_behind
    assert len(p.kept) >= 30_000 and p.stable


def test_search_finds_the_md1_max_rate() -> None:
    bound = 0.050
    truth = md1_max_rate(bound, S)  # 56.1/s: p99 of wait + 10 ms service = 50 ms
    fleet, clock = fake()
    plan = SearchPlan(PointPlan(bound, max_point_s=600), batches=(1,), budget_s=1e5)
    s = search(fleet, plan, clock, seed=1)
    lo, hi = s.bracket
    # the answer held for its re-confirmation: never above the true limit by more than the
    # search's tolerance, and at most one step of 10 % under the bracket found below it
    assert 0.85 * truth <= lo <= (1 + plan.tolerance) * truth
    assert s.confirmed and s.best is not None and s.best.confirm
    assert hi > lo and (hi / lo - 1 <= plan.tolerance + 1e-9 or "re-confirmed" in s.stop_reason)
    assert s.best is not None and s.best.batching == Batching(1, 0.0)
    assert s.offline[1] == pytest.approx(1 / S)
    assert s.single_p99_s == pytest.approx(S)
    assert "bracketed" in s.stop_reason
    assert not s.generator_bound


def test_search_picks_batching_where_batches_are_cheap() -> None:
    # a GPU-like device: 20 ms a batch plus 0.5 ms an item; one at a time it serves < 50/s
    fleet, clock = fake(fixed_s=0.020, per_item_s=0.0005)
    plan = SearchPlan(PointPlan(0.100, max_point_s=300), batches=(1, 8, 32), budget_s=1e5)
    s = search(fleet, plan, clock, seed=2)
    assert s.best is not None
    assert s.best.batching.max_batch > 1
    assert s.best.rate > 2 / 0.0205  # more than twice what batch 1 can ever serve
    assert s.offline[32] == pytest.approx(32 / (0.020 + 32 * 0.0005))
    assert s.best.kept.batch.mean() > 1


def test_search_says_no_rate_when_one_request_is_already_over_the_bound() -> None:
    fleet, clock = fake(fixed_s=0.080)
    s = search(fleet, SearchPlan(PointPlan(0.050)), clock)
    assert s.best is None and s.points == []
    assert "one request at a time already takes 80 ms" in s.stop_reason


def test_search_stops_at_its_budget_keeping_every_point() -> None:
    fleet, clock = fake()
    seen: list[float] = []
    plan = SearchPlan(PointPlan(0.050, max_point_s=60), batches=(1,), budget_s=100)
    s = search(fleet, plan, clock, on_point=lambda p: seen.append(p.rate))
    assert "time budget (100 s) spent" in s.stop_reason
    assert seen == [p.rate for p in s.points] and len(seen) >= 1


# -- failures and the generator --------------------------------------------------------------


def test_a_failing_request_is_counted_with_its_first_error_line() -> None:
    clock = FakeClock(0.0)
    device = FakeExecutor(clock, S, failing={5})
    p = run_point(Local(device, clock), 20.0, Batching(1, 0.0), PointPlan(1.0), seed=0)
    assert p.errors == {"ValueError: request 5 is malformed": 1}
    assert p.outcome == "over" and "failed_requests" in p.flags
    assert p.why == "1 request(s) failed: ValueError: request 5 is malformed"
    # the failed request has no latency; every other one has
    assert p.kept.latency.size == len(p.kept) - int(p.kept.failed.sum())


def test_a_failing_batch_fails_every_request_in_it() -> None:
    clock = FakeClock(0.0)
    device = FakeExecutor(clock, S, failing={0})
    fleet = Local(device, clock)
    reqs, _ = fleet.offline(4, 8, 10.0)
    assert reqs.failed.tolist() == [True] * 4 + [False] * 4


def test_a_late_generator_is_marked_and_never_read_as_the_device_limit() -> None:
    # the host wakes 45 ms late every time: over a 50 ms bound, that is the host, not the
    # device (10 ms a request)
    fleet, clock = fake(wake_late_s=0.045)
    p = run_point(fleet, 10.0, Batching(1, 0.0), PointPlan(0.050, max_point_s=200), seed=0)
    assert p.outcome == "generator_behind"
    assert "woke 45 ms late" in (p.generator_behind or "")
    plan = SearchPlan(PointPlan(0.050, max_point_s=200), batches=(1,), budget_s=1e5)
    s = search(fleet, plan, clock)
    assert s.best is None  # every point was the host's timing: no device limit claimed
    assert all(x.outcome == "generator_behind" for x in s.points)


def test_a_point_within_the_bound_counts_whatever_the_loops_lateness() -> None:
    # 20 ms late every time, 10 ms a request: 30 ms < 50 ms; late wake-ups only add latency
    fleet, _ = fake(wake_late_s=0.020)
    p = run_point(fleet, 10.0, Batching(1, 0.0), PointPlan(0.050, max_point_s=200), seed=0)
    assert p.generator_behind and p.outcome == "within"
    assert p.latencies.p99 == pytest.approx(0.030, abs=0.011)


def test_a_loop_busy_with_itself_is_the_generator_and_the_answer_is_at_least() -> None:
    # every clock reading costs 20 µs of loop work; the device takes 10 µs a request: past
    # a few thousand arrivals/s the loop's own bookkeeping, not the device, is the limit
    fleet, clock = fake(fixed_s=1e-5, read_s=2e-5)
    point = PointPlan(0.050, max_point_s=60)
    s = search(fleet, SearchPlan(point, batches=(1,), budget_s=1e5), clock)
    assert s.best is not None
    assert s.generator_bound
    behind = [p for p in s.points if p.outcome == "generator_behind"]
    assert behind and all(p.loop_share > 0.25 for p in behind)
    assert "bookkeeping took" in (behind[0].generator_behind or "")
    assert "generator fell behind" in s.stop_reason
    # the climb stops where the generator fell behind: no rate measured again and again
    tried = [(p.rate, p.batching) for p in s.points if not p.confirm]
    assert len(tried) == len(set(tried))
    doc = answer.fleet_doc(s, "cpu", "fake")
    a = answer.device_answer("cpu", "fake", [(0, doc)], 0.050, rate=100.0)
    assert "at least" in a.sentence and "load generator fell behind" in a.sentence


def test_the_loop_records_lateness_only_where_it_woke() -> None:
    fleet, _ = fake(wake_late_s=1e-4)
    (w,) = [next(fleet.windows(5.0, Batching(1, 0.0), 100.0, 1.0, seed=0))]
    late = w.requests.lateness
    assert np.nanmax(late) == pytest.approx(1e-4) and np.nanmin(late) == pytest.approx(1e-4)


# -- scenarios --------------------------------------------------------------------------------


def test_single_stream_and_offline_on_a_known_device() -> None:
    fleet, _ = fake(fixed_s=0.004, per_item_s=0.001)
    single = fleet.single_stream(50, 10.0)
    assert np.allclose(single.latency, 0.005) and len(single) == 50
    reqs, took = fleet.offline(8, 64, 10.0)
    assert len(reqs) == 64 and took == pytest.approx(8 * 0.012)
    assert set(reqs.batch.tolist()) == {8}


def test_max_wait_holds_a_lone_request_until_the_deadline() -> None:
    fleet, _ = fake(fixed_s=0.001)
    w = next(fleet.windows(1.0, Batching(8, 0.005), 50.0, 1.0, seed=0))
    # requests 1 s apart on average: a lone one waits its full 5 ms for company; one that
    # arrives within those 5 ms joins it (the batch goes at the first one's deadline)
    alone = w.requests.batch == 1
    assert alone.sum() > 0.8 * len(w.requests)
    assert np.allclose(w.requests.wait[alone], 0.005)
    assert np.all(w.requests.wait <= 0.005 + 1e-12) and w.requests.batch.max() <= 8


# -- statistics -------------------------------------------------------------------------------


def test_min_requests_from_the_binomial_against_the_normal_approximation() -> None:
    # p99 at 99 % confidence within +-0.05 percentile, by the normal approximation:
    # z^2 q (1 - q) / m^2 = 262,742; the exact binomial asks a little more
    z = sps.norm.isf(0.005)
    normal = z * z * 0.99 * 0.01 / 0.0005**2
    assert normal == pytest.approx(262_742, abs=1)
    exact = stats.min_requests(0.99, 0.99, 0.0005)
    assert normal < exact < 1.05 * normal
    n = stats.min_requests()  # the default: p99's 95 % interval within p98.5 .. p99.5
    lo, hi = stats._ranks(np.array([n - 1, n]), 0.99, 0.95)
    assert hi[1] <= n * 0.995 and lo[1] >= n * 0.985  # holds at n
    assert not (hi[0] <= (n - 1) * 0.995 and lo[0] >= (n - 1) * 0.985)  # not at n - 1
    for k in (n - 1, n, 5 * n):  # the scan's ranks are the one order-statistics module's
        low, high = stats._ranks(np.array([k]), 0.99, 0.95)
        assert (int(low[0]) - 1, int(high[0]) - 1) == order.quantile_ranks(k, 0.99, 0.95)


def test_the_module_claims_no_loadgen_count_loadgen_does_not_have() -> None:
    # LoadGen's Server settings have no 270,336-query rule (600 s and early stopping):
    # what the module says of LoadGen is its early-stopping count, checked against it
    assert "270,336" not in (stats.__doc__ or "")
    assert "459" in (stats.__doc__ or "") and early_stopping.min_queries(0) == 459


def test_tail_interval_needs_368_requests_at_95_percent() -> None:
    x = np.random.default_rng(0).exponential(size=368)
    lo, hi = stats.quantile_ci(x)
    assert lo < stats.percentile(x, 0.99) <= hi
    assert math.isnan(stats.quantile_ci(x[:367])[1])


def test_percentile_is_a_latency_some_request_had() -> None:
    x = np.arange(1, 101, dtype=float)
    assert stats.percentile(x, 0.99) == 99.0 and stats.percentile(x, 0.5) == 50.0


def test_stability_over_the_last_three_windows() -> None:
    assert stats.stable([5.0, 1.0, 1.05, 0.97])
    assert not stats.stable([1.0, 1.2, 1.0])
    assert not stats.stable([1.0, 1.0])
    assert not stats.stable([1.0, math.nan, 1.0, 1.0][:3])


def test_poisson_arrivals_have_the_rate_and_exponential_gaps() -> None:
    a = Arrivals(200.0, t0=5.0, seed=1)
    times = np.concatenate([a.until(5.0 + k) for k in range(1, 101)])
    assert times.size == pytest.approx(20_000, rel=0.03)
    assert np.all(np.diff(times) >= 0) and times[0] > 5.0
    gaps = np.diff(times)
    assert sps.kstest(gaps, "expon", args=(0, 1 / 200.0)).pvalue > 0.01


# -- the answer -------------------------------------------------------------------------------


def _answer(device: str, rate: float, top: float | None, price: float) -> DeviceAnswer:
    return DeviceAnswer(
        device=device,
        label=device,
        max_rate=rate,
        top=top,
        needed=math.ceil(1000 / rate),
        needed_range=(math.ceil(1000 / top) if top else math.ceil(1000 / rate),
                      math.ceil(1000 / rate)),
        price_per_hour=price,
    )  # fmt: skip


def test_verdict_names_the_cheaper_device_only_where_both_brackets_agree() -> None:
    cpu = _answer("cpu", 100.0, 105.0, 0.10)  # 10 CPUs: 1.0 an hour
    gpu = _answer("cuda:0", 900.0, 950.0, 2.50)  # 2 GPUs: 5.0 an hour
    text = answer.verdict([cpu, gpu], 1000.0, 0.050)
    assert text == (
        "at 1,000 req/s within 50 ms: cpu x 10 (1.00 an hour) or cuda:0 x 2 (5.00 an hour), "
        "cpu cheaper by 5x"
    )
    close = _answer("cuda:0", 480.0, 520.0, 0.45)  # 2-3 GPUs: 0.9 .. 1.35 an hour
    assert "can't tell which is cheaper" in answer.verdict([cpu, close], 1000.0, 0.050)


def test_verdict_without_rate_or_prices() -> None:
    cpu = _answer("cpu", 100.0, 105.0, 0.10)
    assert answer.verdict([cpu], None, 0.05).startswith("within 50 ms at the p99 the most")
    cpu.price_per_hour = None
    gpu = _answer("cuda:0", 900.0, None, 2.5)
    gpu.price_per_hour = None
    assert "give --price" in answer.verdict([cpu, gpu], 1000.0, 0.05)
    none = DeviceAnswer(device="cuda:1", label="x")
    assert answer.verdict([none], 10.0, 0.05).startswith("no device measured serves")


def test_stored_point_rederives_its_percentiles() -> None:
    fleet, _ = fake()
    p = run_point(fleet, 50.0, Batching(1, 0.0), PointPlan(0.1, max_point_s=100), seed=4)
    doc = PointDoc.model_validate_json(answer.point_doc(p).model_dump_json())
    lat = np.array(doc.latency_us) / 1e6
    again = stats.Latencies.of(lat)
    assert doc.p99_s == pytest.approx(again.p99, abs=1e-6)
    assert doc.p50_s == pytest.approx(again.p50, abs=1e-6)
    assert doc.p99_ci_s[0] == pytest.approx(again.p99_ci[0], abs=1e-6)
    assert doc.n == lat.size == len(p.kept)


# -- a stored serving run read back (torch-free readers) ------------------------------------

FIXTURE = Path(__file__).parents[1] / "fixtures" / "runs" / "serving-cpu.json"


def stored_payload(run: RunRecord) -> ServingPayload:
    p = read(run)
    assert p is not None
    return p


def _stored(**change: object) -> RunRecord:
    """The fixture run (a real tiny CPU run) with its first answer changed."""
    run = RunRecord.model_validate_json(FIXTURE.read_text())
    p = stored_payload(run)
    p.answers[0] = p.answers[0].model_copy(update=change)
    write(run, p)
    return run


def test_stored_run_prints_in_80_columns() -> None:
    from rich.console import Console

    from torchmark.report.serving import serving_view

    console = Console(width=80, record=True, highlight=False, markup=False)
    for part in serving_view(_stored()):
        console.print(part)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "Serving simplenet" in text and "verdict: at 1,000 req/s within 100 ms" in text
    assert "38.1-76.3" in text  # the bracket: within at 38.1/s, over at 76.3/s


@pytest.mark.parametrize(
    ("change", "verdict"),
    [
        ({"max_rate": 100.0, "top": 110.0}, "FASTER"),
        ({"max_rate": 10.0, "top": 20.0}, "SLOWER"),
        ({"max_rate": 50.0, "top": 90.0}, "UNCLEAR"),
        ({"max_rate": 100.0, "top": None}, "FASTER"),  # >= 100: still above A's 76.3
        ({"max_rate": 50.0, "top": 200.0, "generator_bound": True}, "UNCLEAR"),
        # a bracket wholly above A's, but its rate failed (or never had) a re-confirmation
        ({"max_rate": 100.0, "top": 110.0, "confirmed": False}, "UNCLEAR"),
        ({"max_rate": 100.0, "top": 110.0, "confirmed": True}, "FASTER"),
    ],
)
def test_compare_serving_runs_by_their_brackets(change: dict[str, object], verdict: str) -> None:
    from torchmark.report.serving import compare_table

    _, changes = compare_table([_stored(), _stored(**change)])
    assert [c[1] for c in changes] == [verdict]


def test_compare_gate_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from clitest import cli

    a, slower, unclear = tmp_path / "a.json", tmp_path / "s.json", tmp_path / "u.json"
    a.write_text(_stored().model_dump_json())
    slower.write_text(_stored(max_rate=10.0, top=20.0).model_dump_json())
    unclear.write_text(_stored(max_rate=50.0, top=90.0).model_dump_json())
    code, out, _ = cli(capsys, "compare", str(a), str(slower))
    assert code == 0 and "B SLOWER: failed at 20/s where A served 38.1/s" in out
    gate = ("--fail-on-regression",)
    assert cli(capsys, "compare", str(a), str(slower), *gate, "10")[0] == 1
    assert cli(capsys, "compare", str(a), str(slower), *gate, "60")[0] == 0  # a 47 % drop
    assert cli(capsys, "compare", str(a), str(unclear), *gate, "10")[0] == 3
    other = _stored()
    p = stored_payload(other)
    p.bound_s = 0.05
    write(other, p)
    (tmp_path / "o.json").write_text(other.model_dump_json())
    code, _, err = cli(capsys, "compare", str(a), str(tmp_path / "o.json"))
    assert code == 2 and "same model and --p99-ms" in err


def test_markdown_report_of_a_serving_run() -> None:
    from torchmark.report.markdown import render

    text = render([_stored()])
    assert "| Device | Max req/s | Over at |" in text and "| Re-confirmed |" in text
    assert "| 38.1 | 76.3 | 1 x 2 |" in text
    assert "verdict: at 1,000 req/s within 100 ms: cpu x 14-27" in text
    assert "stored by an earlier torchmark (serving schema 1)" in text  # migrated on read
    held = render([_stored(confirmed=True, duration_s=15.0)])
    assert "| yes, 15 s |" in held
    assert "| NO |" in render([_stored(confirmed=False)])


def test_the_html_report_and_the_points_table_read_schema_2s_fields() -> None:
    from rich.console import Console

    from torchmark.report.serving import html_context, serving_view

    run = _stored(confirmed=True, duration_s=15.0)
    p = stored_payload(run)
    f = p.fleets[0]
    f.points[0] = f.points[0].model_copy(
        update={"valid": False, "duration_s": 5.0, "invalid_why": ["p99 over"], "confirm": True}
    )
    write(run, p)
    ctx = html_context(run)
    assert ctx is not None
    (points,) = [
        x["table"] for x in ctx["parts"] if "LoadGen" in x.get("table", {}).get("headers", [])
    ]
    first = dict(zip(points["headers"], points["rows"][0], strict=True))
    assert first["LoadGen"] == "INVALID" and first["rate/s"].endswith(" R")
    console = Console(width=80, record=True, highlight=False, markup=False)
    for part in serving_view(run):
        console.print(part)
    text = console.export_text()
    assert "INVALID" in text and " R " in text and "R: a re-confirmation" in text


def test_cpu_splits_use_every_core() -> None:
    from torchmark.kinds.serving.workers import splits

    assert splits(2) == [(1, 2), (2, 1)]
    assert splits(16) == [(1, 16), (2, 8), (4, 4), (8, 2), (16, 1)]
    assert splits(16, max_procs=4) == [(1, 16), (2, 8), (4, 4)]
    assert splits(12) == [(1, 12), (2, 6), (4, 3), (12, 1)]
    assert splits(1) == [(1, 1)]


def test_serving_config_is_checked_before_anything_runs() -> None:
    from torchmark.errors import InputError
    from torchmark.kinds.serving.kind import ServingConfig, validate

    validate(ServingConfig("simplenet", 50.0, rate=100.0, batches=(1, 8)))
    validate(ServingConfig("simplenet", 50.0, split=False, threads=1))
    for bad in (
        {"p99_ms": 0.0},
        {"p99_ms": math.inf},
        {"rate": 0.0},
        {"budget_s": 0.0},
        {"batches": (0, 8)},
        {"max_wait_ms": (-1.0,)},
        {"max_procs": 0},
        {"min_requests": -1},
        {"threads": 1},  # threads only without the split
        {"threads": 0, "split": False},
    ):
        args = {"model": "simplenet", "p99_ms": 50.0, **bad}
        with pytest.raises(InputError):
            validate(ServingConfig(**args))  # type: ignore[arg-type]


def test_a_fleet_answers_from_the_points_so_far() -> None:
    from torchmark.results.serving import FleetDoc

    def pt(rate: float, outcome: str, batch: int = 8) -> PointDoc:
        return PointDoc(rate=rate, max_batch=batch, max_wait_s=0.0, outcome=outcome, why="")  # type: ignore[arg-type]

    doc = FleetDoc(device="cpu", label="x", points=[pt(100, "over"), pt(50, "within")])
    doc.points[1].flags = ["unstable"]
    answer.refresh(doc)
    assert (doc.best, doc.top, doc.generator_bound) == (1, 100, False)
    doc.points += [pt(75, "generator_behind"), pt(90, "over", batch=1)]
    answer.refresh(doc)  # the lowest rate above 50 with its batching: 75, the generator's
    assert (doc.best, doc.top, doc.generator_bound) == (1, 75, True)
    a = answer.device_answer("cpu", "x", [(0, doc)], 0.05, rate=120.0)
    assert a.max_rate == 50 and a.generator_bound and a.needed == 3
    assert a.flags == ["unstable"] and "(unstable)" in a.sentence  # it travels with the rate


def test_csv_export_of_a_serving_run_has_a_row_per_load_point() -> None:
    import csv
    import io

    from torchmark.store.exchange import export_run

    run = _stored()
    rows = list(csv.DictReader(io.StringIO(export_run(run, "csv"))))
    p = stored_payload(run)
    assert len(rows) == sum(len(f.points) for f in p.fleets) == 3
    best = [r for r in rows if r["best"] == "1"]
    assert len(best) == 1 and float(best[0]["rate"]) == pytest.approx(38.1, abs=0.05)
    assert {r["outcome"] for r in rows} == {"within", "over"}


def test_a_large_point_stores_a_seeded_sample_of_its_latencies() -> None:
    fleet, _ = fake()
    plan = PointPlan(bound_s=10.0, max_point_s=3000, min_requests=30_000)
    p = run_point(fleet, 50.0, Batching(1, 0.0), plan, seed=3)
    doc = answer.point_doc(p)
    assert doc.n == len(p.kept) > answer.MAX_STORED == len(doc.latency_us)
    assert doc.p99_s == stats.Latencies.of(p.kept.latency).p99  # of them all
    sample = np.array(doc.latency_us) / 1e6
    assert stats.percentile(sample, 0.99) == pytest.approx(doc.p99_s, rel=0.05)
    assert answer.point_doc(p).latency_us == doc.latency_us  # seeded: the same each time


def _generator_checked_to_100k() -> RunRecord:
    """The README walk's run: every generator check up to 100,000 arrivals/s kept time (p99
    13.9 ms there), while the run's load points went no higher than 35,896/s."""
    from torchmark.results.serving import GeneratorDoc

    run = _stored()
    p = stored_payload(run)
    rates = (1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000)
    p.generator = GeneratorDoc(
        limit=100_000,
        sentence="the load generator issues up to 100,000 arrivals/s (the highest rate "
        "tried) on this host, median lateness 2.1 µs, p99 13930 µs (load average 4.10)",
        rates=[{"rate": r, "median_s": 2.1e-6, "p99_s": 0.01393} for r in rates],
    )
    p.fleets[0].points[0] = p.fleets[0].points[0].model_copy(update={"rate": 35_896.0})
    write(run, p)
    return run


def test_the_generator_line_names_its_own_checks_and_the_run_its_highest_rate() -> None:
    from torchmark.report.serving import lines

    said = lines(stored_payload(_generator_checked_to_100k()))
    text = "\n".join(said)
    assert "the highest rate tried: 35,896 req/s" in said, text
    gen = next(x for x in said if x.startswith("the load generator"))
    assert "highest rate tried" not in gen and "its own limit is higher" in gen, gen
    assert "up to 100,000 arrivals/s" in gen and "(load average 4.10)" in gen, gen
    # one unit for every serving latency: "p99 lateness 13.9 ms", never "p99 13930 µs"
    assert "p99 lateness 13.9 ms" in gen and "µs" not in text, text


def test_the_generators_limit_is_judged_on_its_p99_lateness_against_the_bound() -> None:
    # the run: median lateness 2.1 µs, p99 13.9 ms at every rate to 100,000/s, a
    # 50 ms bound: past the 12.5 ms at which a load point is marked generator-limited, so
    # the loop kept time at none of them (the median said "up to 100,000")
    from torchmark.report.serving import lines

    p = stored_payload(_generator_checked_to_100k())
    p.bound_s = 0.050
    gen = next(x for x in lines(p) if x.startswith("the load generator"))
    assert "kept time (p99 lateness within 12.5 ms) at none of the rates" in gen, gen
    assert "up to 100,000" not in gen
    from torchmark.kinds.serving import generator

    check = generator.RateCheck(100_000, 25_000, 2.1e-6, 0.0139, 0.02, p99_max_s=0.0125)
    assert not check.on_time  # the median alone said on time
    assert generator.RateCheck(100_000, 25_000, 2.1e-6, 0.0139, 0.02).on_time


def test_a_generator_that_fell_behind_says_where() -> None:
    from torchmark.report.serving import lines

    p = stored_payload(_stored())  # the fixture: p99 lateness 7.2 ms at 20,000/s
    gen = next(x for x in lines(p) if x.startswith("the load generator"))
    assert "up to 20,000 arrivals/s" in gen and "its own limit is higher" in gen, gen
    p.bound_s = 0.020  # a quarter of it is 5 ms: 7.2 ms late at its p99 is the host's tail
    gen = next(x for x in lines(p) if x.startswith("the load generator"))
    assert gen.startswith("the load generator keeps time up to "), gen
    assert "<= 5 ms, a quarter of the bound" in gen and "(load average 6.80)" in gen, gen


@pytest.mark.parametrize(
    ("level", "change", "counted"),
    [("ok", {}, (1, 1)), ("invalid", {}, (0, 1)), ("ok", {"max_rate": None}, (0, 1))],
)
def test_history_counts_a_serving_runs_answers_by_their_verdicts(
    tmp_path: Path, level: str, change: dict[str, object], counted: tuple[int, int]
) -> None:
    # `torchmark history` said "0/0" for every serving run: it has answers, not results
    from torchmark.results import Verdict
    from torchmark.store import open_store

    run = _stored(**change)
    run.verdict = Verdict(level=level, reasons=["made so"] if level != "ok" else [])  # type: ignore[arg-type]
    store = open_store(str(tmp_path / "s.db"))
    store.save(run)
    (summary,) = store.list_runs()
    assert (summary.n_ok, summary.n_results) == counted


def test_a_serving_process_answer_is_read_by_its_tag_and_a_failure_names_the_process() -> None:
    ours, theirs = mp.Pipe()
    theirs.send(("ready", 1))
    assert expect(ours, "ready", 1.0, RuntimeError, "a worker") == 1
    theirs.send(("end", None))
    assert expect(ours, ("window", "end"), 1.0, RuntimeError, "a worker") == ("end", None)
    theirs.send(("done", 2))
    with pytest.raises(RuntimeError, match="a worker said 'done' where 'ready' was expected"):
        expect(ours, "ready", 1.0, RuntimeError, "a worker")
    theirs.send(("error", "ValueError: bad input"))
    with pytest.raises(RuntimeError, match="a worker failed: ValueError: bad input"):
        expect(ours, "ready", 1.0, RuntimeError, "a worker")
    with pytest.raises(RuntimeError, match=r"a worker did not answer within 0\.01 s"):
        expect(ours, "ready", 0.01, RuntimeError, "a worker")
    theirs.close()
    with pytest.raises(RuntimeError, match=r"a worker died \(its pipe closed\)"):
        expect(ours, "ready", 1.0, RuntimeError, "a worker")


def test_the_load_generator_bounds_its_errors_as_the_board_does() -> None:
    from torchmark.kinds.serving.client import Ledger
    from torchmark.results.serving import bound_errors

    r = Ledger()
    for i in range(25):  # 25 distinct messages: the first 20 kept, the rest one count
        r.done(r.add(0.0), f"HTTP 500: request {i}")
    assert len(r.errors) == 21 and bound_errors(r.errors) == r.errors


def test_the_ledger_tells_each_requests_first_end_once() -> None:
    from torchmark.kinds.serving.client import Ledger

    told: list[tuple[int, str | None]] = []
    r = Ledger(on_done=lambda i, error: told.append((i, error)))
    a, b = r.add(0.0), r.add(0.0)
    r.done(b, "timed out")
    r.done(a, None, batch=4)
    r.done(b, None)  # an answer after its time-out: already ended, not told again
    assert told == [(b, "timed out"), (a, None)]
    assert (r.left, r.failed, r.batch) == (0, [False, True], [4, 0])
