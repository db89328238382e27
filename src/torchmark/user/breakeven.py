"""CPU-vs-GPU break-even over a batch sweep, and the noise-aware comparison it rests on.

Pure functions of Results: the runner measures, these only read. For each accelerator and
each view of time (``e2e``: host tensors in, host results out; ``device``: inputs resident),
the break-even batch is the smallest batch from which the accelerator is faster than the
CPU at every larger batch tried; ``"always"`` / ``"never"`` when it is faster at all / none;
``"unclear"`` when the batches judged UNCLEAR (too noisy to tell) decide the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchmark.judge import verdicts
from torchmark.results import Result

if TYPE_CHECKING:
    from torchmark.judge.comparison import Verdict

MODES = ("e2e", "device")
# `compare` cannot stand in: it pairs results of the same device, so a CPU-only run set
# against a GPU run shares no case with it.
NO_GPU = (
    "no GPU on this machine, so no break-even here. To get it, run the same `torchmark "
    "model` command on a machine with a GPU: it measures that machine's CPU and GPU batch "
    "by batch and prints the batch from which the GPU wins. `torchmark export` that run "
    "and `torchmark import` it here to keep it beside this one."
)


def gpu_verdict(gpu: Result, cpu: Result) -> tuple[Verdict | None, str]:
    """The GPU result against the CPU's beyond the noise of both (``comparison.judge``:
    Mann-Whitney plus a practical threshold), and the verdict in words. The test imports
    numpy; the readers of a stored break-even (``show``, ``report``) do not."""
    from torchmark.judge.comparison import judge

    change = judge(cpu, gpu)  # B (the GPU) against A (the CPU)
    return change.verdict, (change.verdict or "n/a").lower()


def by_batch(results: Sequence[Result], device: str, variant: str) -> dict[int, Result]:
    """The results of one device and one view of time that their verdict lets be compared
    and recommended (``verdicts``: not invalid, WRONG or skipped), by batch size. An invalid
    GPU result was listed with its speedup and counted as "not faster", which moved the
    break-even, and the cost table called the cheaper device from it."""
    return {
        int(r.params["batch"]): r
        for r in results
        if r.ok
        and verdicts.may(r, "compare")
        and verdicts.may(r, "recommend")
        and r.device == device
        and r.variant == variant
        and "batch" in r.params
    }


def _crossing(faster: Mapping[int, bool]) -> tuple[int | str, str | None]:
    bs = sorted(faster)
    if all(faster[b] for b in bs):
        return "always", None
    if not any(faster[b] for b in bs):
        return "never", None
    for i, b in enumerate(bs):
        if all(faster[x] for x in bs[i:]):
            return b, None
    wins = [b for b in bs if faster[b]]
    return wins[0], f"faster only at batch {', '.join(map(str, wins))} of the range tried"


def crossing(verdicts: Mapping[int, Verdict | None]) -> tuple[int | str, str | None]:
    """Smallest batch from which every larger batch is FASTER, and a note when the sweep
    is not monotone (faster in the middle of the range only) or cannot be told.

    An UNCLEAR batch is neither faster nor not: the crossing is read both ways, and when
    the two readings differ the answer is ``"unclear"`` ("never" would claim what the
    noise hides).
    """
    bs = sorted(verdicts)
    if not bs:
        return "not measured", None
    hopeful = _crossing({b: verdicts[b] in ("FASTER", "UNCLEAR") for b in bs})
    doubtful = _crossing({b: verdicts[b] == "FASTER" for b in bs})
    if hopeful == doubtful:
        return doubtful
    unclear = [b for b in bs if verdicts[b] == "UNCLEAR"]
    return "unclear", (
        f"too noisy to tell at batch {', '.join(map(str, unclear))}: the break-even is "
        f"{describe(doubtful[0])} or {describe(hopeful[0])}; measure again on a quiet machine"
    )


def break_even(
    results: Sequence[Result],
    cpu: str,
    accelerators: Sequence[str],
    labels: Mapping[str, str] | None = None,
) -> dict[str, dict[str, Any]]:
    """{gpu: {"e2e": batch|"never"|"always", "device": ..., "range": [min, max], ...}}.

    The CPU has one view of time (its inputs are already in host memory), so both of a
    GPU's views are compared with the CPU's end-to-end results.
    """
    cpu_rows = by_batch(results, cpu, "e2e")
    out: dict[str, dict[str, Any]] = {}
    for gpu in accelerators:
        entry: dict[str, Any] = {"label": (labels or {}).get(gpu, gpu), "cpu": cpu}
        per_batch: list[dict[str, Any]] = []
        tried: set[int] = set()
        notes: list[str] = []
        for mode in MODES:
            rows = by_batch(results, gpu, mode)
            common = sorted(set(rows) & set(cpu_rows))
            tried |= set(common)
            faster: dict[int, Verdict | None] = {}
            for b in common:
                faster[b], v = gpu_verdict(rows[b], cpu_rows[b])
                per_batch.append(
                    {
                        "batch": b,
                        "mode": mode,
                        "gpu_s": rows[b].median_s,
                        "cpu_s": cpu_rows[b].median_s,
                        "speedup": _ratio(cpu_rows[b].median_s, rows[b].median_s),
                        "verdict": v,
                    }
                )
            entry[mode], note = crossing(faster)
            if note:
                notes.append(f"{mode}: {note}")
        entry["range"] = [min(tried), max(tried)] if tried else None
        entry["per_batch"] = per_batch
        entry["notes"] = notes
        out[gpu] = entry
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def describe(value: int | str) -> str:
    """Words for one break-even value, for tables."""
    if value == "always":
        return "always (at every batch tried)"
    if value == "never":
        return "never in the range tried"
    if value == "unclear":
        return "can't tell (too noisy)"
    if isinstance(value, int):
        return f"from batch {value}"
    return str(value)
