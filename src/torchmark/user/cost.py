"""Cost per million items from ``--price cpu=0.10,cuda=2.50`` (currency per device-hour).

cost per million items = price / 3600 s * seconds per item * 1e6, with seconds per item
from the end-to-end median (what a service pays for: transfers included).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torchmark.errors import InputError
from torchmark.results import Result
from torchmark.user.breakeven import by_batch

if TYPE_CHECKING:  # devices import torch: the board prices stored serving runs without it
    from torchmark.devices import Device

PRICE_EXAMPLE = "--price cpu=0.10,cuda=2.50 (currency per device-hour)"


def parse_price(text: str | None) -> dict[str, float]:
    """'cpu=0.10,cuda=2.50' -> {'cpu': 0.1, 'cuda': 2.5}; keys are device kinds or names."""
    if not text or not text.strip():
        return {}
    out: dict[str, float] = {}
    for part in (p.strip() for p in text.split(",")):
        key, sep, value = part.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = -1.0
        if not sep or not key.strip() or not price >= 0 or price == float("inf"):
            raise InputError(f"--price {text!r}: bad entry {part!r}; write e.g. {PRICE_EXAMPLE}")
        out[key.strip().lower()] = price
    return out


def device_prices(prices: Mapping[str, float], devices: Sequence[Device]) -> dict[str, float]:
    """Price per device name; a device name beats a kind (``cuda:1=3`` over ``cuda=2``).
    Keys naming no device of this run are ignored: the same command works on any machine."""
    from torchmark.devices import resolve

    out: dict[str, float] = {}
    ranked = sorted(prices.items(), key=lambda kv: ":" in kv[0])  # kinds first, names win
    for key, price in ranked:
        try:
            chosen = resolve(key, found=list(devices))
        except InputError:
            continue
        for d in chosen:
            out[d.name] = price
    return out


def cost_per_million(price_per_hour: float, seconds_per_item: float) -> float:
    return price_per_hour / 3600.0 * seconds_per_item * 1e6


def cost_table(results: Sequence[Result], prices: Mapping[str, float]) -> dict[str, Any]:
    """Rows per (batch, priced device) and the cheaper device at each batch."""
    rows: list[dict[str, Any]] = []
    for device, price in prices.items():
        for b, r in sorted(by_batch(results, device, "e2e").items()):
            spi = (r.median_s or 0.0) / b
            energy = r.extra.get("energy") or {}
            rows.append(
                {
                    "batch": b,
                    "device": device,
                    "price_per_hour": price,
                    "seconds_per_item": spi,
                    "cost_per_million": cost_per_million(price, spi),
                    "j_per_item": energy.get("j_per_item") if energy.get("available") else None,
                }
            )
    cheaper: dict[str, str] = {}
    for b in sorted({row["batch"] for row in rows}):
        at_b = [row for row in rows if row["batch"] == b]
        if len(at_b) > 1:
            cheaper[str(b)] = min(at_b, key=lambda row: row["cost_per_million"])["device"]
    return {
        "prices": dict(prices),
        "unit": "currency per device-hour",
        "rows": rows,
        "cheaper": cheaper,
    }
