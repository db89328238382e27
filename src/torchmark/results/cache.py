"""Whether a memory-bound result measured the cache, not memory (METHOD.md §2.9).

A bandwidth ceiling is measured over buffers far beyond the last-level cache: it is the
memory's (DRAM's, HBM's) limit. A case whose working set fits that cache moves its bytes
between the cores and the cache, so its "% of the bandwidth ceiling" compares two different
things: the seed's self-add at the blog's own 2048 (a 16 MiB tensor, within the 32 MiB
counted of this 2-core VM's cache) read 255 % of the ceiling and was called a measurement
error. The cache it is held against is the one counted when the ceiling was measured
(``devices.cache.estimate``: bounded, a VM reports its host's whole L3), stored in the
bandwidth ceiling's details; with no reported size (an assumed fallback) nothing is said.

Pure and torch-free: ``Result.flags`` and the verdict (``telemetry.verdict``) read it, so
every reader (report, compare, history, board, tune) sees one answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CacheFit:
    """A working set (bytes) and the last-level cache (bytes, as counted) it fits in."""

    working_set: int
    cache: int


def fit(
    key: str, unit: str, details: Mapping[str, Any], extra: Mapping[str, Any], work_bytes: float
) -> CacheFit | None:
    """The fit of a result judged against the ceiling ``key`` (``unit``, ``details``), with
    its ``extra`` and bytes per call; None where it is no memory-bandwidth case, its working
    set does not fit, or the cache size is unknown.

    The working set is the one the workload declares (``extra["working_set_bytes"]``), else
    the bytes one call moves: compulsory traffic touches every byte of the working set at
    least once, so traffic that fits means a working set that fits."""
    if unit != "B/s" or key.partition(":")[0] != "bandwidth":
        return None  # a link's copy or a FLOP/s peak: no cache changes what it means
    cache = details.get("llc_counted_bytes") if details.get("llc_bytes") else None
    if not cache and extra.get("llc_bytes"):
        cache = extra.get("llc_counted_bytes")
    working_set = extra.get("working_set_bytes") or work_bytes
    if not cache or not working_set or working_set > cache:
        return None
    return CacheFit(int(working_set), int(cache))
