"""The two answers of a serving run, from its stored fleets: the model's **capacity** (in
process, no front end: the bound no server exceeds) and the model **as served** (over
HTTP behind an Open Inference Protocol server). The verdict, the device count and the cost
are the as-served answer's where the run has one; the gap between the two is the front
end's share. One function for the run (``kind``) and the board (``web.serving``), which
re-derives every answer from the points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from torchmark.kinds.serving import answer
from torchmark.results.serving import DeviceAnswer, FleetDoc, ServingPayload


def analyse(p: ServingPayload, prices: Mapping[str, float]) -> ServingPayload:
    """``p`` with its answers, capacity, front end's share and verdict from its fleets."""
    capacity = answers(p, prices, served=False)
    served = answers(p, prices, served=True)
    if served:
        p.answers, p.capacity = served, capacity
        p.front_end = front_end(served, capacity)
    else:
        p.answers, p.capacity, p.front_end = capacity, [], {}
    p.verdict = answer.verdict(p.answers, p.rate, p.bound_s)
    return p


def answers(p: ServingPayload, prices: Mapping[str, float], served: bool) -> list[DeviceAnswer]:
    """One answer per device from its fleets served one way: in process or over HTTP;
    each answer's ``fleet`` indexes ``p.fleets``."""
    by_device: dict[str, list[tuple[int, FleetDoc]]] = {}
    for i, f in enumerate(p.fleets):
        if bool(f.served) == served:
            by_device.setdefault(f.device, []).append((i, f))
    both = any(f.served for f in p.fleets)
    out = []
    for dev, fs in by_device.items():
        a = answer.device_answer(
            dev, fs[0][1].label, fs, p.bound_s, p.rate, prices.get(dev), p.energy_price
        )
        chosen = p.fleets[a.fleet] if a.fleet is not None else fs[0][1]
        if chosen.served == "endpoint":
            a.batching = "the server's own batching"
        how = chosen.served_as or "model capacity (in process)"
        if both and a.sentence.startswith(f"{dev}: "):
            a.sentence = f"{dev} {how}: {a.sentence[len(dev) + 2 :]}"
        out.append(a)
    return out


def front_end(served: Sequence[DeviceAnswer], capacity: Sequence[DeviceAnswer]) -> dict[str, float]:
    """Per device, the share of the model's capacity the front end takes: 1 - the rate
    within the bound as served / the rate within it in process (negative: as served came
    out above, the two brackets overlap)."""
    cap = {a.device: a.max_rate for a in capacity}
    out = {}
    for a in served:
        c = cap.get(a.device)
        if a.max_rate is not None and c:
            out[a.device] = 1 - a.max_rate / c
    return out
