"""A result's flags as words for reports with room: one per flag, each with its reason.

The terminal lists a flag and, in a footnote, the verdict reason behind it; reports that
can show a tooltip (HTML) or have a free column (Markdown) show each flag once with its
reason attached, and only the reasons no flag explains as text.
"""

from __future__ import annotations

from torchmark.results import Result
from torchmark.stats.measurement import (
    FEW_SAMPLES,
    MIN_WARMUP_CALLS,
    NOISY_REL_IQR,
    UNRELIABLE_REL_IQR,
)

# What each flag means, shown on hover when the verdict gives no reason of its own.
FLAG_HELP = {
    "noisy": f"spread (IQR) at least {NOISY_REL_IQR:.0%} of the median",
    "unreliable": f"spread (IQR) at least {UNRELIABLE_REL_IQR:.0%} of the median",
    "timed_out": "stopped at its time limit before the stopping rule was met",
    "out_of_reach": "stopped early: its confidence target could not be met by its time limit",
    "few_samples": f"fewer than {FEW_SAMPLES} samples",
    "short_warmup": f"fewer than {MIN_WARMUP_CALLS} warm-up calls",
    "all_excluded": "every sample was set aside (throttled)",
    "competing_load": "other processes were busy during the measurement",
    "throttled": "samples taken while the device throttled",
    "above_ceiling": "more than 2 % above the measured ceiling: a measurement error",
    "in_cache": "the working set fits the last-level cache: cache bandwidth, not DRAM's",
    "out_of_memory": "ran out of memory",
    "straggler": "one rank's step p50 slower than the others' by more than the noise",
}
# The verdict reason (judge/validity.py's words) that explains each flag.
FLAG_REASON = {
    "noisy": "spread ",
    "unreliable": "spread ",
    "timed_out": "timed out",
    "out_of_reach": "out of reach",
    "few_samples": "samples: the spread",
    "competing_load": "other processes",
    "throttled": "throttl",
    "all_excluded": "throttl",
    "above_ceiling": "above 100 %",
    "in_cache": "in cache",
    "straggler": "straggles",
}


def pills(r: Result) -> tuple[list[dict[str, str]], list[str]]:
    """One pill per flag with its reason on hover, and the reasons no pill explains, to be
    shown once as text (the terminal's ``flag_words`` lists a flag and its reason both)."""
    if r.status in ("skipped", "wrong"):
        word = "skipped" if r.status == "skipped" else "WRONG"
        why = r.reason or ("no reason given" if word == "skipped" else "correctness check failed")
        return [{"text": word, "title": why}], [why]
    reasons = list(r.verdict.reasons) if r.verdict is not None else []
    used: set[str] = set()
    pills = []
    if r.verdict is not None and r.verdict.level == "invalid" and reasons:
        pills.append({"text": "invalid", "title": reasons[0]})
    for flag in r.flags:
        match = FLAG_REASON.get(flag)
        found = next((w for w in reasons if match and match in w), None)
        if found:
            used.add(found)
        title = found or FLAG_HELP.get(flag, flag)
        pills.append({"text": flag.replace("_", " "), "title": title})
    if pills and pills[0]["text"] == "invalid":
        used.discard(reasons[0])  # why a number is invalid is never left to a hover
    return pills, [w for w in reasons if w not in used]
