"""Which rows of one case the board ranks, judged against the population of the same
hardware (OpenBenchmarking.org's way: many results per model, each seen against their
distribution) and the hardware catalogue; a figure is only trusted once another submitter
reproduces it (MLPerf's review).

    unconfirmed   a machine's time is far from the other machines of its model: more than
                  THRESHOLD robust deviations from their median, on the log of the time
                  (rates are multiplicative: 2x faster and 2x slower lie equally far).
                  The median and the MAD (x 1.4826, the normal's sigma) are the statistic
                  because one forged figure cannot move them, where it drags a mean and a
                  standard deviation towards itself; 3.5 is Iglewicz and Hoaglin's cut for
                  the modified z-score. The deviation is at least FLOOR: machines of one
                  model differ by their memory, clocks and neighbours, so a tight
                  population must not make a 1.5x difference an outlier. Needs PEERS
                  other machines of the model; with one, the faster of two machines more
                  than exp(THRESHOLD x FLOOR) = 2.2x apart is held (an error or a forgery
                  makes a figure faster; an idle-less VM or a throttled chip, slower).
                  Held out of the ranking, shown with why.
    uncatalogued  a device the catalogue does not know is never ranked above every
                  catalogued one on its own claim: held out until confirmed.
    measured      a rate more than catalog.MEASURED_SLACK above what torchmark measured on
                  the same catalogued model (its reference run's ceilings): held out until
                  confirmed (a forged figure under the datasheet's peak is still above it).
    confirmed     another submitter (another token, another machine) has a time of the
                  same model within CONFIRM of it: the figure is ranked.
    provisional   no other machine of its model has this case: ranked, marked; but never
                  above a row that another machine of its model or the catalogue's
                  measurement of its model vouches for (held out until confirmed).
    first place   the fastest row, where it is faster than every other machine of its
                  model by more than CONFIRM, waits for another submitter's reproduction
                  (and the next fastest is asked the same).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from torchmark.hardware import catalog

THRESHOLD = 3.5
MAD_SIGMA = 1.4826
FLOOR = math.log(1.25)  # the least robust deviation: 3.5 of it is a 2.2x departure
PEERS = 2
CONFIRM = math.log(1.2)  # a reproduction within 20 % confirms


@dataclass(frozen=True)
class Entry:
    """One machine's device on the case: what the population check reads."""

    machine: str
    device: str
    model: str
    seconds: float  # its pooled median time
    submitters: frozenset[str]
    variant: str = ""
    flops: float = 0.0  # per call, as declared (checked against the catalogue of cases)
    bytes: float = 0.0


def _accelerator(device: str) -> bool:
    return device.split(":")[0] != "cpu"


def standing(entries: Sequence[Entry]) -> dict[int, tuple[bool, str]]:
    """For each entry (by place) that is not simply ranked: (held out, why)."""
    out: dict[int, tuple[bool, str]] = {}
    logs = [math.log(e.seconds) if e.seconds > 0 else -math.inf for e in entries]
    by_model: dict[str, list[int]] = {}
    for i, e in enumerate(entries):
        by_model.setdefault(e.model, []).append(i)
    # O(n x machines of its model) per case: 50 machines of one model, 2,500 comparisons
    peers = [[j for j in by_model[e.model] if entries[j].machine != e.machine] for e in entries]
    until = "ranked once another submitter's result confirms it"

    def confirmed(i: int) -> bool:
        e = entries[i]
        return any(
            not (entries[j].submitters & e.submitters) and abs(logs[j] - logs[i]) <= CONFIRM
            for j in peers[i]
        )

    def hold(i: int, why: str) -> None:
        if not confirmed(i):
            out[i] = (True, f"unconfirmed: {why}; {until}")

    for i, e in enumerate(entries):
        mine = [logs[j] for j in peers[i]]
        if not mine:
            out[i] = (False, f"provisional: no other machine with a {e.model} has this case yet")
        elif len(mine) < PEERS:  # one other machine: the faster claim is the one to confirm
            factor = math.exp(min(mine) - logs[i])
            if factor > math.exp(THRESHOLD * FLOOR):
                hold(i, f"{factor:.3g}x faster than the one other {e.model} machine")
        else:
            mid = statistics.median(mine)
            scale = max(MAD_SIGMA * statistics.median(abs(x - mid) for x in mine), FLOOR)
            z = (logs[i] - mid) / scale
            if abs(z) > THRESHOLD:
                factor = math.exp(abs(logs[i] - mid))
                way = "faster" if z < 0 else "slower"
                hold(
                    i,
                    f"{factor:.3g}x {way} than the median of {len(mine)} other {e.model} "
                    f"machines (past {THRESHOLD:g} robust deviations)",
                )
    for i, e in enumerate(entries):
        above = None if _held(out, i) else _above_measured(e)
        if above:
            hold(i, above)
    # first place is earned: a row nothing vouches for (no other machine of its model, no
    # measurement of the model in the catalogue) never ranks above one something does
    vouched = [
        i
        for i, e in enumerate(entries)
        if not _held(out, i)
        and (peers[i] or catalog.measured(e.model, _accelerator(e.device)) is not None)
    ]
    best = min((entries[i].seconds for i in vouched), default=None)
    known = [catalog.known({"model": e.model}, _accelerator(e.device)) for e in entries]
    best_known = min(
        (e.seconds for i, e in enumerate(entries) if known[i] and not _held(out, i)),
        default=None,
    )
    for i, e in enumerate(entries):
        if _held(out, i):
            continue
        if not known[i] and best_known is not None and e.seconds < best_known:
            hold(
                i,
                f"{e.model} is not in the hardware catalogue and would rank above every "
                "catalogued device",
            )
        elif not peers[i] and best is not None and e.seconds < best and i not in vouched:
            hold(i, f"would take first place with no other {e.model} machine to vouch for it")
    # and a first place faster than every other machine of its model by more than CONFIRM
    # waits for another submitter's reproduction: the next fastest is then asked the same
    for i in sorted(range(len(entries)), key=lambda k: entries[k].seconds):
        if _held(out, i):
            continue
        ahead = min((logs[j] for j in peers[i]), default=logs[i]) - logs[i]
        if ahead <= CONFIRM or confirmed(i):
            break
        hold(
            i,
            f"would take first place {math.exp(ahead):.3g}x faster than every other "
            f"{entries[i].model} machine",
        )
    return out


def _held(out: dict[int, tuple[bool, str]], i: int) -> bool:
    return out.get(i, (False, ""))[0]


def _above_measured(e: Entry) -> str | None:
    """How ``e``'s rate passes what torchmark measured on its model, else None."""
    accelerator = _accelerator(e.device)
    m = catalog.measured(e.model, accelerator)
    if m is None or e.seconds <= 0:
        return None
    slack = catalog.MEASURED_SLACK
    dtype = e.variant if e.variant in ("float32", "tf32", "float16", "bfloat16") else None
    keys = [f"matmul:{dtype}"] + (["matmul:tf32"] if dtype == "float32" else []) if dtype else []
    peak = max((m.ceilings[k] for k in keys if k in m.ceilings), default=None)
    rate = e.flops / e.seconds
    if peak and rate > slack * peak:
        return f"{rate:.3g} FLOP/s is above the {peak:.3g} torchmark measured on a {m.model}"
    bw = m.ceilings.get("bandwidth")
    rate = e.bytes / e.seconds
    if bw and e.bytes > 8 * m.cache_bytes and rate > slack * bw:
        return f"{rate:.3g} B/s is above the {bw:.3g} torchmark measured on a {m.model}"
    return None
