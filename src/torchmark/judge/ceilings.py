"""One ceiling set per comparison: % of ceiling read across runs divides by the same
measured peak, or the reader says it can't.

Two runs of one machine each measured their own ceilings; one measured while other
processes used the machine reads a low peak, so its cases read a high % of ceiling for
reasons unrelated to them (a matmul fell from 41.9 % to 18.8 % of "its ceiling" while its
speed rose). ``one_set`` holds every run of a machine against the first quiet set among
them, and names the runs whose only sets were measured under load.
"""

from __future__ import annotations

from collections.abc import Sequence

from torchmark import format as fmt
from torchmark.results import Ceiling, RunRecord

__all__ = ["loaded_set", "one_set"]


def loaded_set(ceilings: Sequence[Ceiling]) -> float | None:
    """The other load (cores) a ceiling set was measured under, where it was loaded; None
    for a quiet set (the runner marks each ceiling of a loaded set)."""
    for c in ceilings:
        cores = c.details.get("competing_load_cores")
        if isinstance(cores, int | float):
            return float(cores)
    return None


def _names(idx: Sequence[int]) -> str:
    said = [f"{fmt.run_letter(i)}'s" for i in idx]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]


def one_set(runs: Sequence[RunRecord]) -> tuple[list[RunRecord], list[str]]:
    """``runs`` with each machine's device held against one ceiling set (the first quiet
    one among them: its results' % of ceiling re-read against it), and a line per device
    saying which set, or that % of ceiling is not compared (every set of that machine's
    runs measured under load). One run, or sets already the same: unchanged, no line."""
    out = list(runs)
    if len(out) < 2:
        return out, []
    notes: list[str] = []
    devices = dict.fromkeys(c.device for r in out for c in r.ceilings)
    for dev in devices:
        sets = {i: [c for c in r.ceilings if c.device == dev] for i, r in enumerate(out)}
        sets = {i: s for i, s in sets.items() if s}
        if len(sets) < 2 or len({_values(s) for s in sets.values()}) == 1:
            continue
        machines: dict[str, list[int]] = {}
        for i in sets:
            machines.setdefault(out[i].fingerprint or f"run {i}", []).append(i)
        cannot: list[int] = []
        for idx in machines.values():
            quiet = [i for i in idx if loaded_set(sets[i]) is None]
            if not quiet:
                cannot += [i for i in idx if loaded_set(sets[i]) is not None]
                continue
            q = quiet[0]
            moved = [i for i in idx if i != q and _values(sets[i]) != _values(sets[q])]
            if not moved:
                continue
            for i in moved:
                out[i] = _held_against(out[i], dev, sets[q])
            who = _names([q, *moved]).replace("'s", "")
            notes.append(
                f"% of ceiling on {dev}: {who} against {fmt.run_letter(q)}'s quiet ceilings, one "
                "set for all"
            )
        if cannot:
            were = "was" if len(cannot) == 1 else "were"
            notes.append(
                f"% of ceiling on {dev} not compared: {_names(cannot)} ceilings {were} "
                "measured under load"
            )
    return out, notes


def _values(s: Sequence[Ceiling]) -> frozenset[tuple[str, float]]:
    return frozenset((c.key, c.value) for c in s)


def _held_against(run: RunRecord, device: str, chosen: Sequence[Ceiling]) -> RunRecord:
    """``run`` with its ``device`` ceilings replaced by ``chosen`` and each result of that
    device re-pointed to the chosen ceiling of the same key (kept where none is chosen)."""
    by_key = {c.key: c for c in chosen}
    results = [
        r.model_copy(update={"ceiling": by_key[r.ceiling.key]})
        if r.device == device and r.ceiling is not None and r.ceiling.key in by_key
        else r
        for r in run.results
    ]
    ceilings = [c for c in run.ceilings if c.device != device] + list(chosen)
    return run.model_copy(update={"results": results, "ceilings": ceilings})
