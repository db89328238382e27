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
                  other machines of the model; held out of the ranking, shown with why.
    uncatalogued  a device the catalogue does not know is never ranked above every
                  catalogued one on its own claim: held out until confirmed.
    measured      a rate more than catalog.MEASURED_SLACK above what torchmark measured on
                  the same catalogued model (its reference run's ceilings): held out until
                  confirmed (a forged figure under the datasheet's peak is still above it).
    confirmed     another submitter (another token, another machine) has a time of the
                  same model within CONFIRM of it: the figure is ranked.
    provisional   no other machine of its model has this case: ranked, marked.
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

    def confirmed(i: int) -> bool:
        e = entries[i]
        return any(
            o.model == e.model
            and o.machine != e.machine
            and not (o.submitters & e.submitters)
            and abs(logs[j] - logs[i]) <= CONFIRM
            for j, o in enumerate(entries)
        )

    for i, e in enumerate(entries):
        peers = [
            logs[j] for j, o in enumerate(entries) if o.model == e.model and o.machine != e.machine
        ]
        if not peers:
            out[i] = (False, f"provisional: no other machine with a {e.model} has this case yet")
            continue
        if len(peers) < PEERS:
            continue
        mid = statistics.median(peers)
        scale = max(MAD_SIGMA * statistics.median(abs(x - mid) for x in peers), FLOOR)
        z = (logs[i] - mid) / scale
        if abs(z) > THRESHOLD and not confirmed(i):
            factor = math.exp(abs(logs[i] - mid))
            way = "faster" if z < 0 else "slower"
            out[i] = (
                True,
                f"unconfirmed: {factor:.3g}x {way} than the median of {len(peers)} other "
                f"{e.model} machines (past {THRESHOLD:g} robust deviations); ranked once "
                "another submitter's result confirms it",
            )
    for i, e in enumerate(entries):
        if i in out and out[i][0]:
            continue
        above = _above_measured(e)
        if above and not confirmed(i):
            out[i] = (
                True,
                f"unconfirmed: {above}; ranked once another submitter's result confirms it",
            )
    known = [catalog.known({"model": e.model}, _accelerator(e.device)) for e in entries]
    best = min(
        (e.seconds for i, e in enumerate(entries) if known[i] and not out.get(i, (False,))[0]),
        default=None,
    )
    if best is None:
        return out
    for i, e in enumerate(entries):
        if known[i] or out.get(i, (False,))[0] or e.seconds >= best or confirmed(i):
            continue
        out[i] = (
            True,
            f"unconfirmed: {e.model} is not in the hardware catalogue and would rank above "
            "every catalogued device; ranked once another submitter's result confirms it",
        )
    return out


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
