"""A result above its measured ceiling but plausible raises the ceiling (METHOD.md §3).

A measured rate is itself proof that the machine reaches it. A result still above its
ceiling after the second look (the ceilings measured again, the better of each kept) is
therefore a question about the ceiling first: where the rate is below the physical peak
(the datasheet figure), or, with no datasheet figure, within ``PLAUSIBLE_MARGIN`` of the
measured ceiling, the ceiling is raised to the result's rate and the run says so in one
line. Beyond that the number cannot be true: it stays ``invalid`` (``telemetry.verdict``).

The case that set the rule: the lent H200's 16-core Xeon host ran the seed's self-add at
157 GB/s against a 146 GB/s bandwidth ceiling (its best kernel, mul_, on 2.34 GiB; the
self_add_ kernel itself read 139 GB/s), and the run called the measurement invalid: the
ceiling was low. A CPU has no datasheet bandwidth (it depends on the DIMMs fitted), so the
margin decides: 8 % above is inside it.
"""

from __future__ import annotations

from torchmark import format as fmt
from torchmark.results import ABOVE_CEILING_PCT, Ceiling, CeilingSource, Result, RunRecord

# With no datasheet figure, a rate up to 25 % above the measured ceiling is taken as the
# machine's own: a ceiling is the best sample of a few seconds of kernels, and on quiet
# hardware a workload's access pattern can beat them by a few percent (the H200 host's
# self-add: +8 %). A rate further above, with nothing physical to bound it, stays invalid;
# on a VM whose bandwidth drifts 2x within seconds (this project's dev machine) that is the
# drift, and `--remeasure-ceilings` is the fix the verdict names.
PLAUSIBLE_MARGIN = 0.25


def raised(
    result: Result, ceiling: Ceiling, source: CeilingSource | None = None
) -> tuple[Ceiling, str] | None:
    """``ceiling`` raised to ``result``'s rate, and the line that says so, where the result
    is above the ceiling (past the ``ABOVE_CEILING_PCT`` tie) but plausible; None where it
    is not above it, or cannot be true (above the datasheet; with none, past the margin).
    ``source``: the raised ceiling's (the run raising it, now); default: the ceiling's own."""
    rate = result.rate("bytes" if ceiling.unit == "B/s" else "flops")
    if rate is None or not ceiling.value > 0 or rate <= ceiling.value * ABOVE_CEILING_PCT / 100:
        return None
    if ceiling.theoretical:
        if rate > ceiling.theoretical:
            return None
        bound = f"below the datasheet's {fmt.ceiling_value(ceiling, ceiling.theoretical)}"
    elif rate > (1 + PLAUSIBLE_MARGIN) * ceiling.value:
        return None
    else:
        bound = f"no datasheet figure; within {PLAUSIBLE_MARGIN:.0%} of the measured one"
    was, now = fmt.ceiling_value(ceiling), fmt.ceiling_value(ceiling, rate)
    label = fmt.result_label(result)
    line = (
        f"above the measured {ceiling.key} ceiling ({was}) but plausible ({bound}): the "
        f"ceiling is raised to this result's {now}, which proves the machine reaches it"
    )
    up = ceiling.model_copy(
        update={
            "value": rate,
            "method": f"{ceiling.method}; raised to {now} by {label} (measured {was})",
            "details": {**ceiling.details, "raised_from": ceiling.value, "raised_by": label},
            "provenance": source or ceiling.provenance,
        }
    )
    return up, line


def replay(record: RunRecord) -> RunRecord:
    """``record`` with the rule applied to a run measured before it (a committed reference
    run, ``scripts/make-reference``): each result above its ceiling but plausible raises
    the run's ceiling, in the run's order, and is judged again; nothing else changes."""
    from torchmark.judge.validity import judge, judge_run

    run = record.model_copy(deep=True)
    by_key = {(c.device, c.key): i for i, c in enumerate(run.ceilings)}
    changed = False
    for k, r in enumerate(run.results):
        if "above_ceiling" not in r.flags or r.ceiling is None:
            continue
        at = by_key.get((r.device, r.ceiling.key))
        current = run.ceilings[at] if at is not None else r.ceiling
        found = raised(r, current if current.value >= r.ceiling.value else r.ceiling)
        if found is None:
            continue
        up, line = found
        if at is not None:
            run.ceilings[at] = up
        fixed = r.model_copy(update={"ceiling": up, "notes": [*r.notes, line]})
        fixed.verdict = judge(fixed)
        run.results[k] = fixed
        changed = True
    if changed and run.verdict is not None:
        run.verdict = judge_run(run)
    return run
