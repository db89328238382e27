"""A straggling rank is flagged in a distributed result's verdict, by the one rule the
scaling ladder uses (torchmark.judge.stragglers.find), on results built by hand."""

from __future__ import annotations

from typing import Any

import numpy as np

from torchmark.judge import stragglers
from torchmark.judge.validity import judge
from torchmark.kinds.ranks.rank import merged
from torchmark.report.flags import pills
from torchmark.report.scaling import straggler
from torchmark.results import Result, Work


def spread(median: float, rel: float = 0.01, n: int = 20) -> list[float]:
    """n samples evenly over median ± rel: relative IQR ~ rel (deterministic)."""
    return [float(x) for x in median * (1 + np.linspace(-rel, rel, n))]


def distributed(*ranks: list[float]) -> Result:
    """Rank 0's result (its samples the lockstep step times) with every rank's samples."""
    per: list[dict[str, Any]] = [
        {"rank": i, "status": "ok", "reason": None, "samples_s": s} for i, s in enumerate(ranks)
    ]
    return Result(
        workload="simplenet",
        variant="train",
        device="cpu",
        params={"batch": 8},
        samples_s=[max(x) for x in zip(*ranks, strict=True)],
        work=Work(items=8, item_unit="samples"),
        extra={"world_size": len(ranks), "per_rank": per},
    )


def test_a_straggling_rank_warns_with_its_numbers() -> None:
    r = distributed(spread(0.0101), spread(0.0123), spread(0.0101))
    v = judge(r)
    assert v.level == "warn"
    assert v.reasons == [
        "rank 1 straggles: step p50 12.3 ms vs 10.1 ms on the others (+21.8 %, beyond the "
        "2.00 % noise)"
    ]
    # the same rule, the same numbers, as the scaling ladder names it
    assert straggler(stragglers.rank_times(r)) == (
        "rank 1: step p50 12.3 ms vs 10.1 ms on the others (+21.8 %, noise 2.00 %)"
    )


def test_equal_ranks_give_no_reason() -> None:
    r = distributed(spread(0.0101), spread(0.0101))
    assert stragglers.of_result(r) is None
    assert judge(r).reasons == []


def test_noise_larger_than_the_gap_gives_no_reason() -> None:
    # rank 1 is 22 % slower, but each rank's own steps spread ~40 %: can't tell
    r = distributed(spread(0.0101, 0.4), spread(0.0123, 0.4))
    assert stragglers.of_result(r) is None
    assert not any("straggles" in w for w in judge(r).reasons)
    # the same gap with 30 % noise on one rank only: the largest noise still decides
    r = distributed(spread(0.0101, 0.3), spread(0.0123))
    assert stragglers.of_result(r) is None


def test_one_process_has_no_straggler() -> None:
    r = distributed(spread(0.0101))
    assert stragglers.of_result(r) is None


def test_merged_flags_the_straggler_and_judges_every_rank() -> None:
    ranks = [spread(0.0101), spread(0.0123)]
    rank0 = distributed(ranks[0]).model_copy(update={"extra": {}})
    rank0 = rank0.model_copy(update={"verdict": judge(rank0)})
    assert rank0.verdict is not None and rank0.verdict.level == "ok"
    per = [{"rank": i, "status": "ok", "reason": None, "samples_s": s} for i, s in enumerate(ranks)]
    out = merged(None, rank0, per, "gloo")
    assert "straggler" in out.flags
    assert out.verdict is not None and out.verdict.level == "warn"
    assert out.verdict.reasons[0].startswith("rank 1 straggles: step p50 12.3 ms")
    # the HTML/Markdown pill carries the verdict's reason, not left over as loose text
    shown, loose = pills(out)
    assert {"text": "straggler", "title": out.verdict.reasons[0]} in shown
    assert loose == []
    # equal ranks: no flag, no reason
    even = merged(None, rank0, [{**per[0]}, {**per[0], "rank": 1}], "gloo")
    assert "straggler" not in even.flags and even.verdict is not None
    assert even.verdict.reasons == []
