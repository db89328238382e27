"""Numbers and names as people read them: three significant digits, SI prefixes, durations,
and the one way a case is named (``case_label``). Pure text, no view layer: reports, the
CLI and library code (case labels, verdict reasons) share it."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchmark.results import Ceiling, Result

SI_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
# Units that take an SI prefix glued to them (812 GB/s); item units are counted things and
# read better as plain numbers up to a million (2,510 it/s), then 1.23 M img/s.
PREFIXED_UNITS = ("B/s", "FLOP/s", "B", "FLOP", "Hz")
DASH = "—"


def sig(x: float, digits: int = 3) -> str:
    """``x`` rounded to ``digits`` significant digits, thousands separated, no exponent."""
    if x is None or not math.isfinite(x):
        return DASH if x is None or math.isnan(x) else ("∞" if x > 0 else "-∞")
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    rounded = round(x, decimals)
    # Rounding can carry into a new digit (9.996 -> 10.0): recompute the decimals once.
    if rounded and math.floor(math.log10(abs(rounded))) != math.floor(math.log10(abs(x))):
        decimals = max(0, decimals - 1)
        rounded = round(x, decimals)
    if decimals == 0:
        return f"{round(rounded):,}"
    return f"{rounded:,.{decimals}f}"


def _rounded(x: float, digits: int) -> float:
    """``x`` to ``digits`` significant digits, so a prefix is chosen for the number shown:
    0.9996 s is "1.00 s", not "1,000 ms"."""
    return float(f"{x:.{digits}g}") if x else 0.0


def si(x: float | None, unit: str = "", digits: int = 3) -> str:
    """``si(8.12e11, "B/s") == "812 GB/s"``; item units: ``si(2510, "it/s") == "2,510 it/s"``."""
    if x is None or not math.isfinite(x):
        return DASH
    glued = unit in PREFIXED_UNITS or not unit
    threshold = 1e3 if glued else 1e6
    a = abs(_rounded(x, digits))
    for scale, prefix in SI_PREFIXES:
        if a >= scale and a >= threshold:
            v = sig(x / scale, digits)
            return f"{v} {prefix}{unit}" if glued else f"{v} {prefix} {unit}"
    return f"{sig(x, digits)} {unit}".rstrip()


def duration(seconds: float | None, digits: int = 3) -> str:
    """Seconds as ns / µs / ms / s with ``digits`` significant digits."""
    if seconds is None or not math.isfinite(seconds):
        return DASH
    a = abs(_rounded(seconds, digits))
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if a >= scale:
            return f"{sig(seconds / scale, digits)} {unit}"
    return f"{sig(seconds / 1e-9, digits)} ns"


def round_up(n: int, multiple: int) -> int:
    """``n`` rounded up to a multiple of ``multiple``: 50,257 -> 50,304 for 64."""
    return -(-n // multiple) * multiple


def binary_bytes(n: float) -> str:
    """A buffer's size in powers of two: ``256 MiB``, ``4 KiB``, ``512 B``."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def pct(x: float | None, digits: int = 3) -> str:
    return DASH if x is None or not math.isfinite(x) else f"{sig(x, digits)} %"


def signed_pct(x: float | None) -> str:
    """A relative change with its sign: ``+4.2 %``, ``-13 %``; ``?`` where unknown."""
    return "?" if x is None else f"{'+' if x >= 0 else '-'}{pct(100 * abs(x))}"


def spread(rel_iqr: float | None) -> str:
    """A relative spread (IQR / median) in %, two digits; past the median itself, said so:
    "±1,077 %" of a time reads as a negative time, and says no more than "> 100 %"."""
    if rel_iqr is None or not math.isfinite(rel_iqr):
        return DASH if rel_iqr is None or math.isnan(rel_iqr) else "> 100 %"
    return "> 100 %" if rel_iqr > 1 else pct(100 * rel_iqr, digits=2)


def run_letter(i: int) -> str:
    """The ``i``-th run of a comparison as every table names it: A ... Z, then R27, R28."""
    return chr(ord("A") + i) if i < 26 else f"R{i + 1}"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``plural(1, "sample") == "1 sample"``, ``plural(4, "sample") == "4 samples"``."""
    return f"{n:,} {noun if n == 1 else (nouns or noun + 's')}"


def ratio(x: float | None) -> str:
    """A speedup: ``52.0×``, ``0.45×`` (slower)."""
    return DASH if x is None or not math.isfinite(x) else f"{sig(x, 3)}×"


def param_value(v: Any) -> str:
    """Compact parameter value: big counts get an SI suffix (16777216 -> 16.8M)."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int) and abs(v) >= 100_000:
        return si(float(v)).replace(" ", "")
    if isinstance(v, float):
        return sig(v)
    if isinstance(v, list | tuple):
        return "x".join(param_value(i) for i in v)
    return str(v)


def params(p: Mapping[str, Any]) -> str:
    return " ".join(
        f"{k}={DTYPE_SHORT.get(v, v) if k in PRECISION_KEYS else param_value(v)}"
        for k, v in p.items()
    )


# Parameter names shortened in case labels; every other name is kept as written.
KEY_SHORT = {"batch": "b"}


def case_label(
    variant: str,
    params: Mapping[str, Any] | Iterable[tuple[str, Any]] = (),
    workload: str | None = None,
    device: str | None = None,
) -> str:
    """The one name of a case, each parameter said once: ``infer fp32 b=64`` (a parameter
    equal to the variant is left out; a precision is its short name alone);
    ``simplenet/infer fp32 b=64 on cpu`` with the workload and the device."""
    items = list(params.items() if isinstance(params, Mapping) else params)
    words = [DTYPE_SHORT.get(variant, variant)] if variant else []
    for k, v in items:
        if str(v) == variant:
            continue
        if k in PRECISION_KEYS:
            words.append(DTYPE_SHORT.get(str(v), str(v)))
        else:
            words.append(f"{KEY_SHORT.get(k, k)}={param_value(v)}")
    label = " ".join(dict.fromkeys(words))
    if workload:
        label = f"{workload}/{label}" if label else workload
    return f"{label} on {device}" if device else label


def result_label(r: Result, workload: bool = True, device: bool = True) -> str:
    return case_label(
        r.variant, r.params, r.workload if workload else None, r.device if device else None
    )


def base_unit(result: Result) -> str:
    """Unit of the headline rate in SI base form (``rate()`` returns per-second amounts)."""
    if result.headline == "bytes":
        return "B/s"
    if result.headline == "flops":
        return "FLOP/s"
    return f"{result.work.item_unit}/s"


def throughput(result: Result) -> str:
    return si(result.rate(result.headline), base_unit(result))


# Parameters that name a numeric precision.
PRECISION_KEYS = ("precision", "dtype")
# Short names for precisions, used in ceiling labels and precision columns.
DTYPE_SHORT = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float64": "fp64",
    "tensorfloat32": "tf32",
    "tf32": "tf32",
    "int8": "int8",
    "float8_e4m3fn": "fp8",
}


def ceiling_label(c: Ceiling) -> str:
    """What a percentage is of: ``bw``, ``fp32 peak``, ``h2d pinned``, ``dispatch``."""
    kind, _, detail = c.key.partition(":")
    if kind == "bandwidth":
        return "bw"
    if kind == "matmul":
        return f"{DTYPE_SHORT.get(detail, detail)} peak"
    return f"{kind} {detail}".strip()


def ceiling_value(c: Ceiling | None, value: float | None = None) -> str:
    if c is None:
        return DASH
    v = c.value if value is None else value
    return duration(v) if c.unit == "s" else si(v, c.unit)
