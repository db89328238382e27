"""What a serving run stores: every load point with its raw latencies, each fleet's search,
and the answer per device. Pydantic only (no torch, no numpy): ``show``, ``export``,
``report`` and the board read it without loading either.

The percentiles stored beside ``latency_us`` are derived from it at run time (numpy's
``inverted_cdf`` order statistic and the binomial interval of ``stats.order``); a test
derives them again from the stored latencies and checks they agree.

Schema 2 stores, per point, its duration, its VALID/INVALID in MLPerf LoadGen's sense (and
why), LoadGen's early-stopping estimate of the p99, the p99 of each third of the point,
and whether it re-confirmed the answer; per fleet and answer, what the re-confirmation
found. A schema-1 run is migrated as it is read: those fields stay None ("not judged"),
and a note says the run was stored before points were judged so.
"""

from __future__ import annotations

import re
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

SERVING_SCHEMA = 2
# a search's stop reason where the fleet answered no request at all (``cli.serving`` exits 1)
FAILED_ALL = "every request failed one at a time"
MIGRATED_NOTE = (
    "stored by an earlier torchmark (serving schema 1): its points were judged on their "
    "last three windows, with no minimum duration, no VALID/INVALID in LoadGen's sense "
    "and no re-confirmation of the answer"
)


def ms(seconds: float) -> str:
    """A latency as said everywhere in serving: ``50 ms``, ``4.92 ms``, ``2,160 ms``."""
    v = 1e3 * seconds
    return f"{v:,.0f} ms" if abs(v) >= 100 else f"{v:.3g} ms"


def per_s(rate: float) -> str:
    """A request rate as said everywhere in serving: ``1,242``, ``38.1``."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def batch_wait(max_batch: int, max_wait_s: float) -> str:
    """``batch 1``, ``batch <= 32, wait 5 ms``: a batching setting as said everywhere."""
    if max_batch == 1:
        return "batch 1"
    return f"batch <= {max_batch}, wait {1e3 * max_wait_s:g} ms"


def core_list(cores: list[int]) -> str:
    """``core 15``, ``cores 0-14``, ``cores 2-3,7,9``: runs of cores as taskset writes them."""
    runs: list[list[int]] = []
    for c in sorted(set(cores)):
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    said = ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)
    return f"core{'s' if len(set(cores)) != 1 else ''} {said}"


class _Doc(BaseModel):
    # validators built on first use: the commands that list runs never validate one
    model_config = ConfigDict(extra="ignore", defer_build=True)


class PointDoc(_Doc):
    """One load point: a rate x batching x split, measured window by window."""

    rate: float  # offered arrivals per second
    max_batch: int
    max_wait_s: float
    processes: int = 1
    threads: int | None = None
    outcome: Literal["within", "over", "generator_behind"]
    why: str
    flags: list[str] = []
    stop_reason: str = ""
    stable: bool = False
    window_p99_s: list[float | None] = []  # every window's p99
    window_rate: list[float | None] = []  # finished per second
    n: int = 0  # requests kept (the last 3 windows)
    needed: int = 0  # requests the p99's interval asks for (stats.min_requests)
    failed: int = 0
    errors: dict[str, int] = {}  # first error line -> requests
    over_bound: int = 0
    late: int = 0  # arrivals the loop woke for late (> max(100 µs, 1 % of the bound))
    achieved_rate: float | None = None
    p50_s: float | None = None
    p90_s: float | None = None
    p99_s: float | None = None
    p999_s: float | None = None
    p99_ci_s: tuple[float | None, float | None] = (None, None)
    mean_s: float | None = None
    wait_mean_s: float | None = None
    lateness_median_s: float | None = None
    lateness_p99_s: float | None = None
    utilisation: float | None = None
    mean_batch: float | None = None
    energy: dict[str, object] | None = None
    # schema 2 (None: a schema-1 run's point, not judged so)
    duration_s: float | None = None  # the point's schedule span
    min_duration_s: float | None = None
    valid: bool | None = None  # MLPerf LoadGen's VALID (Server scenario rules)
    invalid_why: list[str] = []
    loadgen_p99_s: float | None = None  # LoadGen's percentile: sorted[floor(0.99 n)]
    early_p99_s: float | None = None  # LoadGen's early-stopping estimate of the p99
    early_needed: int | None = None  # requests early stopping asks, with over_bound over
    parts_p99_s: list[float | None] = []  # each third's p99
    holds: bool | None = None  # no third surely over the bound
    confirm: bool = False  # the answer's re-confirmation
    # raw: every kept request's latency (a seeded uniform sample of 20,000 beyond that: n
    # says how many there were; the percentiles above are of them all)
    latency_us: list[int] = []

    @property
    def loadgen(self) -> str:
        """VALID / INVALID as LoadGen would say it; '' for a point not judged so."""
        return "" if self.valid is None else ("VALID" if self.valid else "INVALID")


class FleetDoc(_Doc):
    """One device's search with one split of it (a CPU: processes x threads)."""

    device: str
    label: str
    processes: int = 1
    threads: int | None = None
    single_n: int = 0
    single_p50_s: float | None = None
    single_p99_s: float | None = None
    single_mean_s: float | None = None  # schema 2: what one-at-a-time's rate follows
    offline: dict[str, float] = {}  # max batch -> requests/s
    # the host's pace (``judge.pace``): seconds of one fixed piece of Python, raw, timed as
    # the search started and as it ended (empty: not timed, a run stored before it was)
    pace_s: list[float] = []
    pace_end_s: list[float] = []
    points: list[PointDoc] = []
    stop_reason: str = ""
    elapsed_s: float = 0.0
    best: int | None = None  # index into points: the highest rate within the bound
    top: float | None = None  # the lowest rate above it measured over (None: none)
    generator_bound: bool = False
    confirmation: str = ""  # what the answer's re-confirmation found, in words
    # where its figures disagree with each other, in words (``answer.consistency``)
    notes: list[str] = []
    load_changed: bool = False  # p99 fell as the rate rose, beyond both intervals
    # where the model was served: "" in this process (its capacity, no front end), "oip"
    # behind torchmark's Open Inference Protocol server, "endpoint" the user's server
    served: str = ""
    endpoint: str = ""  # "endpoint": the URL driven
    model_workers: int | None = None  # "oip" on a CPU: model processes (0: in the server's)
    model_threads: int | None = None  # ... and each one's threads
    # "oip": the cores the load generator's process and the server's (its front end and
    # model workers) could run on, read from each once started (None: not known; equal:
    # not pinned, the two shared them)
    client_cores: list[int] | None = None
    server_cores: list[int] | None = None

    @property
    def cores(self) -> str:
        """``client on core 15, server on cores 0-14`` (``client and server share cores
        0-1`` where not pinned; empty where not known)."""
        if self.client_cores is None or self.server_cores is None:
            return ""
        if self.client_cores == self.server_cores:
            return f"client and server share {core_list(self.server_cores)}"
        return f"client on {core_list(self.client_cores)}, server on {core_list(self.server_cores)}"

    @property
    def served_as(self) -> str:
        """How this fleet was served, in words (empty for the in-process capacity)."""
        if self.served == "endpoint":
            return f"at {self.endpoint}"
        if self.served != "oip":
            return ""
        if self.model_workers is None:
            return "as served"
        t = self.model_threads or 1
        threads = f"{t} thread{'s' if t != 1 else ''}"
        if not self.model_workers:
            return f"as served (model in the front end's process, {threads})"
        w = self.model_workers
        return f"as served (front end + {w} model worker{'s' if w != 1 else ''} x {threads})"

    @property
    def split(self) -> str:
        if self.threads is None:
            return ""
        return f"{self.processes} x {self.threads}"

    @property
    def best_point(self) -> PointDoc | None:
        return self.points[self.best] if self.best is not None else None


class DeviceAnswer(_Doc):
    """One device's answer: the best of its fleets, and what it means for the user."""

    device: str
    label: str
    max_rate: float | None = None  # None: no rate met the bound
    top: float | None = None  # the bracket's top (None: not measured)
    generator_bound: bool = False
    why_none: str = ""
    fleet: int | None = None  # index into ServingPayload.fleets
    batching: str = ""
    split: str = ""
    p99_s: float | None = None
    p99_ci_s: tuple[float | None, float | None] = (None, None)
    flags: list[str] = []  # the max-rate point's: they travel with it
    confirmed: bool | None = None  # the rate held its re-confirmation (None: schema 1)
    valid: bool | None = None  # its point VALID in LoadGen's sense (None: schema 1)
    duration_s: float | None = None  # how long that point ran
    confirmation: str = ""
    needed: int | None = None  # devices for --rate (at the bracket's bottom)
    needed_range: tuple[int, int] | None = None  # (at the top, at the bottom)
    price_per_hour: float | None = None
    cost_per_million: float | None = None  # at max_rate, the device fully used
    cost_range: tuple[float, float] | None = None  # (at the top, at the bottom)
    j_per_request: float | None = None
    energy_note: str = ""
    # --energy-price: the energy each request used, at that price per kWh (in cost_per_million)
    energy_cost_per_million: float | None = None
    energy_cost_note: str = ""  # why an energy price was given but no energy cost counted
    sentence: str = ""


# The loop woke late by more than this share of the bound at its p99: the host's timing,
# not the device, decides the tail there (a load point is then marked generator_behind, and
# a rate the generator checks is not kept time with).
BEHIND_SHARE = 0.25


class GeneratorDoc(_Doc):
    """The load generator's own limit (``serving.generator``): each rate it was checked at,
    with the loop's median and p99 lateness there."""

    limit: float = 0.0
    sentence: str = ""  # as said when the run was measured (runs stored before ``load``)
    rates: list[dict[str, float]] = []  # per rate tried
    load: float | None = None  # the 1-minute load average when it was checked
    p99_max_s: float | None = None  # the p99 lateness a rate kept time within (None: median)

    def judged(self, bound_s: float | None = None) -> GeneratorDoc:
        """The limit judged on the p99 lateness against ``BEHIND_SHARE`` of the bound, the
        share at which a load point is marked generator_behind: a document stored with its
        limit judged on the median lateness (schema 1) judged again from its checks."""
        if self.p99_max_s is not None or bound_s is None or not self.rates:
            return self
        p99_max = BEHIND_SHARE * bound_s
        ok = [r["rate"] for r in self.rates if r["p99_s"] <= p99_max]
        return self.model_copy(update={"limit": max(ok, default=0.0), "p99_max_s": p99_max})

    def said(self, bound_s: float | None = None) -> str:
        """The limit in words, from the stored checks. Where every rate checked kept time the
        limit lies above the highest checked, which is not a rate the run's load points went
        to: "up to 100,000 arrivals/s (the highest rate tried)" read as the run's highest
        beside load points that stopped at 35,896/s. Lateness in ms as every serving
        latency is ("p99 13930 µs" read beside "p99 4.92 ms")."""
        if not self.rates:
            return self.sentence
        if bound_s is not None and self.p99_max_s is None:
            return self.judged(bound_s).said()
        load = self.load if self.load is not None else _load_in(self.sentence)
        tail = f" (load average {load:.2f})" if load is not None else ""
        at = next((r for r in self.rates if self.limit and r["rate"] == self.limit), None)
        if at is None:
            worst = min(self.rates, key=lambda r: r["rate"])
            within = f" (p99 lateness within {ms(self.p99_max_s)})" if self.p99_max_s else ""
            return (
                f"the load generator kept time{within} at none of the rates it was checked "
                f"at: p99 {ms(worst['p99_s'])} at {per_s(worst['rate'])} arrivals/s{tail}"
            )
        how = f"median lateness {ms(at['median_s'])}, p99 {ms(at['p99_s'])}"
        if self.p99_max_s is not None:
            how = (
                f"p99 lateness {ms(at['p99_s'])} <= {ms(self.p99_max_s)}, a quarter of the "
                f"bound; median {ms(at['median_s'])}"
            )
        above = sorted(r["rate"] for r in self.rates if r["rate"] > at["rate"])
        if not above:
            return (
                f"the load generator kept time at every rate it was checked at, up to "
                f"{per_s(at['rate'])} arrivals/s ({how}): its own limit is higher{tail}"
            )
        late = next(r for r in self.rates if r["rate"] == above[0])
        return (
            f"the load generator keeps time up to {per_s(at['rate'])} arrivals/s on this host "
            f"({how}), not at {per_s(above[0])} (p99 {ms(late['p99_s'])}){tail}"
        )


def _load_in(sentence: str) -> float | None:
    """The load average a run stored before ``GeneratorDoc.load`` said in its sentence."""
    found = re.search(r"\(load average ([0-9.]+)\)", sentence)
    return float(found.group(1)) if found else None


class ServingPayload(_Doc):
    kind: Literal["serving"] = "serving"
    schema_version: int = SERVING_SCHEMA
    model: str
    inputs: str = ""
    bound_s: float
    rate: float | None = None  # --rate: the traffic to size for
    energy_price: float | None = None  # --energy-price: currency per kWh
    confidence: float = 0.95
    margin: float = 0.005
    min_requests: int = 0
    min_duration_s: float | None = None  # schema 2: the shortest point judged within
    generator: GeneratorDoc = Field(default_factory=GeneratorDoc)
    fleets: list[FleetDoc] = []
    # the answer per device: as served where the run served the model over HTTP (then the
    # verdict, counts and costs are from it), else in process (runs that served no other way)
    answers: list[DeviceAnswer] = []
    verdict: str = ""
    # model capacity (in process, no front end) per device, where ``answers`` are as served
    capacity: list[DeviceAnswer] = []
    front_end: dict[str, float] = {}  # device -> 1 - served/capacity
    endpoint: str = ""  # --endpoint: the user's server, the only fleet
    notes: list[str] = []


POINT_COLUMNS = (
    "run_id",
    "device",
    "processes",
    "threads",
    "rate",
    "max_batch",
    "max_wait_s",
    "outcome",
    "best",
    "achieved_rate",
    "n",
    "failed",
    "over_bound",
    "p50_s",
    "p90_s",
    "p99_s",
    "p99_ci_low_s",
    "p99_ci_high_s",
    "p999_s",
    "duration_s",
    "loadgen",
    "early_p99_s",
    "confirm",
    "flags",
    "why",
)


def point_rows(p: ServingPayload, run_id: str) -> list[dict[str, object]]:
    """One row per load point, in the order measured (``export -f csv`` of a serving run);
    a column named as a ``PointDoc`` field is that field."""
    rows: list[dict[str, object]] = []
    for f in p.fleets:
        for i, pt in enumerate(f.points):
            own = {
                "run_id": run_id,
                "device": f.device,
                "processes": f.processes,
                "threads": "" if f.threads is None else f.threads,
                "best": int(i == f.best),
                "p99_ci_low_s": pt.p99_ci_s[0],
                "p99_ci_high_s": pt.p99_ci_s[1],
                "confirm": int(pt.confirm),
                "flags": ";".join(pt.flags),
            }
            rows.append({c: own[c] if c in own else getattr(pt, c) for c in POINT_COLUMNS})
    return rows


KIND = "serving"


class _Run(Protocol):
    """A ``RunRecord``, by what is used of it: ``results.payloads`` holds this module's
    documents in its union (``ServingRunPayload.serving``), so this one does not import it."""

    kind: str
    payload: Any


# The longest latency a stored run holds, and so the loosest p99 bound: an hour (the board
# refuses more; `serving --p99-ms` takes no more).
MAX_LATENCY_S = 3600.0
# Distinct error messages a point keeps: a model whose error text varies (an id, a shape in
# the message) made 8,328 entries, 3.19 MB, in one 29 s search; the first few say what
# failed, the count says how often.
MAX_ERRORS = 20
OTHER_ERRORS = "(other messages)"


def bound_errors(errors: dict[str, int], keep: int = MAX_ERRORS) -> dict[str, int]:
    """``errors`` (message -> requests) cut to its first ``keep`` distinct messages, the
    requests of the rest counted under OTHER_ERRORS."""
    if len(errors) <= keep:
        return errors
    items = list(errors.items())
    out = dict(items[:keep])
    out[OTHER_ERRORS] = out.get(OTHER_ERRORS, 0) + sum(n for _, n in items[keep:])
    return out


def read(run: _Run) -> ServingPayload | None:
    """The serving document a run holds (None for another kind of run): the one place it
    is read from the record, ``run.payload.serving``."""
    found = getattr(run.payload, KIND, None) if run.kind == KIND else None
    if not isinstance(found, ServingPayload):
        return None
    return migrate(found)


def migrate(p: ServingPayload) -> ServingPayload:
    """A schema-1 document as schema 2 (the module docstring): a copy, the stored run
    untouched."""
    if p.schema_version >= SERVING_SCHEMA:
        return p
    return p.model_copy(
        update={"schema_version": SERVING_SCHEMA, "notes": [*p.notes, MIGRATED_NOTE]}
    )


def write(run: _Run, payload: ServingPayload) -> None:
    """The one place the document is written into the record's payload."""
    if run.kind != KIND:
        raise ValueError(f"a {run.kind!r} run holds no serving document")
    run.payload.serving = payload
