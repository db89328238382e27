"""NVIDIA's clock-event ("throttle") reasons: the bits NVML reports, in words, and which of them
mean heat or power holds the GPU below the clock it would otherwise run at."""

from __future__ import annotations

# Clock-event reason bits (nvml.h, nvmlClocksEventReason*). ``True``: the GPU is held below
# the clock it would otherwise run at by heat or power - samples taken then are throttled.
REASONS: tuple[tuple[int, str, bool], ...] = (
    (0x001, "GPU idle", False),
    (0x002, "applications clocks setting", False),
    (0x004, "SW power cap", True),
    (0x008, "HW slowdown", True),
    (0x010, "sync boost", False),
    (0x020, "SW thermal slowdown", True),
    (0x040, "HW thermal slowdown", True),
    (0x080, "HW power brake", True),
    (0x100, "display clock setting", False),
    (0x200, "board limit", False),
    (0x400, "reliability", False),
)
THROTTLE_REASONS = frozenset(words for _, words, throttle in REASONS if throttle)
THERMAL_REASONS = frozenset({"SW thermal slowdown", "HW thermal slowdown"})
POWER_REASONS = frozenset({"SW power cap", "HW power brake"})


def decode_reasons(mask: int) -> list[str]:
    """Bitmask -> words, e.g. 0x44 -> ["SW power cap", "HW thermal slowdown"]."""
    return [words for bit, words, _ in REASONS if mask & bit]
