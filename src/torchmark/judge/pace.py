"""The host's pace: how long one fixed piece of pure-Python work takes, measured when a
fleet's search starts and when it ends.

A serving answer near saturation is the machine's of that moment. On the 2-core VM behind
docs/serving.md the same command gave 3,090, 2,502 and 2,109 requests/s as served within
an hour, with the VM's own load average under 2 and nothing else running in it: the host
under it (other VMs on the same cores) ran the front end's Python slower, and one request
alone went from 1.27 ms to 1.81 ms. No search inside the VM can see that from its own load
average, so each fleet times this work before and after its search: a change beyond its
noise says the host changed under the answer, and ``compare`` says "can't tell" where two
runs' hosts ran at different paces, not that the serving got slower.

Pure Python because the front end is (HTTP parsing, JSON, the event loop) and it takes no
device; a fixed loop (no allocation that grows, no I/O) of about a millisecond, repeated,
so that its median's interval is a few percent wide on a quiet host.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

from torchmark.stats.order import quantile_ci

# Paces apart by less than this are the same pace whatever their intervals say: a host
# whose Python runs 5 % slower moves no serving answer beyond its search's own 5 % steps.
SAME_WITHIN = 0.10


def changed(before: Sequence[float], after: Sequence[float]) -> float | None:
    """``after``'s median over ``before``'s where the two differ beyond noise (their
    medians' 95 % intervals apart, and by more than SAME_WITHIN); None where they do not
    or either is too short to say."""
    if len(before) < 10 or len(after) < 10:
        return None
    lo_a, hi_a = quantile_ci(before, 0.5)
    lo_b, hi_b = quantile_ci(after, 0.5)
    if not (hi_a < lo_b or hi_b < lo_a):  # NaN compares False: no interval, no claim
        return None
    ratio = median(after) / median(before)
    return ratio if abs(ratio - 1) > SAME_WITHIN else None


def sentence(before: Sequence[float], after: Sequence[float], first: str, then: str) -> str:
    """What a change of pace means, in words (``changed`` has found it)."""
    a, b = median(before), median(after)
    word = "slower" if b > a else "faster"
    return (
        f"the host ran {100 * abs(b / a - 1):.0f} % {word} {then} than {first} (a fixed "
        f"piece of Python took {1e3 * a:.3g} ms, then {1e3 * b:.3g} ms; medians, their 95 % "
        "intervals apart)"
    )
