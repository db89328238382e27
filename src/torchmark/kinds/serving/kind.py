"""The `serving` kind: requests arrive at random at R per second, each must be answered
within L ms at the p99: which device serves that, how many of them, at what cost.

    config (frozen, validated)  ->  the model's recipe (built-in or the user's SPEC)
    the load generator's own limit on this host, measured first
    one run: record + session (stored as it lands; SIGTERM keeps every finished point)
    for device:
        for split (a CPU: processes x threads, 1 x N .. N x 1; else one instance):
            fleet (this process, or worker processes) -> search -> each point stored
    analyse (complete or not): the answer per device and the verdict

The serving kind has its own loop, not ``run_planned``'s: a load point is not a case of
timed calls (it runs window by window until its p99 is stable, on a loop of its own
clock), and which point comes next depends on the last one's outcome (the search). What it
shares is the run: its record and session come from ``run.open_run`` like every kind's.
"""

from __future__ import annotations

import contextlib
import math
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torchmark.devices import Device, resolve
from torchmark.errors import InputError
from torchmark.kinds.serving import answer, generator, stats
from torchmark.kinds.serving.clock import Clock, RealClock
from torchmark.kinds.serving.fleet import Fleet, Local
from torchmark.kinds.serving.model import ModelExecutor, Recipe
from torchmark.kinds.serving.point import MIN_DURATION_S, MIN_POINT_S, LoadPoint, PointPlan
from torchmark.kinds.serving.search import Search, SearchPlan, search
from torchmark.kinds.serving.workers import Processes, splits, usable_cores
from torchmark.results import RunRecord
from torchmark.results import serving as stored
from torchmark.results.serving import FleetDoc, ServingPayload
from torchmark.run.record import open_run
from torchmark.run.session import Events, Session
from torchmark.store.base import ResultStore
from torchmark.workloads import Case

KIND = "serving"
CPU_BATCHES = (1, 8, 32)
GPU_BATCHES = (1, 16, 64, 256)
WAIT_SHARES = (0.0, 0.1)  # max wait tried: none, and a tenth of the bound


@dataclass(frozen=True)
class ServingConfig:
    """What `torchmark serving` was asked; plain data (the CLI reads the environment)."""

    model: str  # a built-in model's name or the user's SPEC
    p99_ms: float
    rate: float | None = None  # the traffic to size for, requests per second
    devices: tuple[str, ...] = ()  # () = every device found
    batches: tuple[int, ...] = ()  # max batch sizes tried; () = per device kind
    max_wait_ms: tuple[float, ...] = ()  # () = 0 and a tenth of the bound
    budget_s: float = 120.0  # per device
    point_s: float = 30.0  # per load point, at most
    min_duration_s: float = MIN_DURATION_S  # per load point judged within, at least
    split: bool = True  # a CPU: also try processes x threads
    max_procs: int | None = None
    threads: int | None = None  # without the split: the one process's threads (None: all)
    prices: tuple[tuple[str, float], ...] = ()
    energy_price: float | None = None  # currency per kWh: the energy each request used
    energy: bool = True
    min_requests: int = 0  # 0: the p99's 95 % interval within p98.5 .. p99.5
    inputs: tuple[str, ...] | str | None = None  # the user's --input shapes / --inputs
    sizes: tuple[tuple[str, int], ...] = ()  # a built-in model's sizes (tests: tiny ones)
    seed: int = 0
    generator_s: float | None = None  # per rate measuring the generator (None: its default)

    @property
    def bound_s(self) -> float:
        return self.p99_ms / 1e3

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["prices"] = dict(self.prices)
        d["sizes"] = dict(self.sizes)
        return d


def validate(cfg: ServingConfig) -> None:
    """One clear line per bad value, before anything is built or measured."""
    if not (math.isfinite(cfg.p99_ms) and 0 < cfg.p99_ms <= stored.MAX_LATENCY_S * 1e3):
        # the board refuses a bound past an hour: a run made here must be one it takes
        raise InputError(
            f"--p99-ms {cfg.p99_ms:g}: give the latency bound in ms, > 0 and at most "
            f"{stored.MAX_LATENCY_S * 1e3:.0f} (an hour), e.g. 50"
        )
    if cfg.rate is not None and not (math.isfinite(cfg.rate) and cfg.rate > 0):
        raise InputError(f"--rate {cfg.rate:g}: give requests per second > 0, e.g. 1000")
    if not cfg.budget_s > 0 or not cfg.point_s >= MIN_POINT_S:
        raise InputError(
            f"--budget takes a time > 0 and --point one >= {MIN_POINT_S:g}s (4 windows), "
            "e.g. --budget 2m --point 10s"
        )
    if not cfg.min_duration_s >= MIN_POINT_S or cfg.min_duration_s > cfg.point_s:
        raise InputError(
            f"--min-duration takes a time >= {MIN_POINT_S:g}s and <= --point, e.g. "
            "--min-duration 5s --point 30s"
        )
    if any(b < 1 for b in cfg.batches):
        raise InputError(f"--batch {cfg.batches}: max batch sizes are >= 1, e.g. 1,8,32")
    if any(not (math.isfinite(w) and w >= 0) for w in cfg.max_wait_ms):
        raise InputError(f"--max-wait-ms {cfg.max_wait_ms}: waits are >= 0 ms, e.g. 0,5")
    if cfg.max_procs is not None and cfg.max_procs < 1:
        raise InputError(f"--max-procs {cfg.max_procs}: give 1 or more")
    if cfg.threads is not None and (cfg.threads < 1 or cfg.split):
        raise InputError(f"--threads {cfg.threads}: give 1 or more, with --no-split")
    if cfg.energy_price is not None and not (
        math.isfinite(cfg.energy_price) and cfg.energy_price >= 0
    ):
        raise InputError(f"--energy-price {cfg.energy_price:g}: give currency per kWh, e.g. 0.25")
    if cfg.min_requests < 0:
        raise InputError(f"--min-requests {cfg.min_requests}: give 0 (the default) or more")


@dataclass
class _Live:
    """The payload as the run goes: each point lands in it and is stored."""

    payload: ServingPayload
    record: RunRecord
    session: Session | None = None

    def save(self) -> None:
        stored.write(self.record, self.payload)
        if self.session is not None:
            self.session.checkpoint()


@dataclass
class Serving:
    """The kind's run: its config, model and devices, ready to ``run()``."""

    cfg: ServingConfig
    recipe: Recipe
    devices: list[Device]
    store: ResultStore | None = None
    events: Events | None = None
    on_point: Callable[[FleetDoc, LoadPoint], None] | None = None
    clock: Clock = field(default_factory=RealClock)
    model_name: str = ""
    inputs: str = ""

    def run(self) -> RunRecord:
        validate(self.cfg)
        gen = generator.measure(seconds=self.cfg.generator_s, bound_s=self.cfg.bound_s)
        payload = ServingPayload(
            model=self.model_name or self.cfg.model,
            inputs=self.inputs,
            bound_s=self.cfg.bound_s,
            rate=self.cfg.rate,
            energy_price=self.cfg.energy_price,
            confidence=stats.CONFIDENCE,
            margin=stats.MARGIN,
            min_requests=self.cfg.min_requests or stats.min_requests(),
            min_duration_s=self.cfg.min_duration_s,
            generator=gen.doc(),
        )
        busy = _other_load()
        if busy:
            payload.notes.append(busy)
        prices = _prices(self.cfg, self.devices)
        session, live = self._open(payload, prices)
        plan = self._fleets()
        session.planned([case for case, _, _ in plan])
        spent: dict[str, float] = {}  # per device: the search time its splits took
        with session:
            for case, device, (procs, threads) in plan:
                # --budget is the device's: each split gets an equal share of what is left,
                # so a split that finishes early leaves its time to the next
                todo = [x for x in _splits_of(plan, device) if x[0] == case]
                splits = _splits_of(plan, device)
                left = len(splits) - splits.index(todo[0])
                budget = max(0.0, self.cfg.budget_s - spent.get(device.name, 0.0)) / left
                took = self._search(live, case, (procs, threads), budget)
                spent[device.name] = spent.get(device.name, 0.0) + took
        return session.record

    def _open(self, payload: ServingPayload, prices: dict[str, float]) -> tuple[Session, _Live]:
        """The run's session, opened as every run's is (``run.open_run``); its analysis
        (the answers and the verdict) runs at the end, complete or not."""

        def analyse(rec: RunRecord) -> None:
            p = live.payload
            p.answers = answer.answers(p.fleets, p.bound_s, p.rate, prices, p.energy_price)
            p.verdict = answer.verdict(p.answers, p.rate, p.bound_s)
            stored.write(rec, p)

        session = open_run(KIND, self.cfg, self.devices, self.store, self.events, analyse=analyse)
        live = _Live(payload, session.record, session)
        live.save()
        return session, live

    def _fleets(self) -> list[tuple[Case, Device, tuple[int, int | None]]]:
        out = []
        for d in self.devices:
            for procs, threads in self._splits(d):
                params: tuple[tuple[str, Any], ...] = (("p99_ms", self.cfg.p99_ms),)
                if threads is not None:
                    params += (("split", f"{procs}x{threads}"),)
                out.append((Case(self.model_name, "server", d, params), d, (procs, threads)))
        return out

    def _splits(self, device: Device) -> list[tuple[int, int | None]]:
        if device.is_accelerator:
            return [(1, None)]
        cores = usable_cores()
        if not self.cfg.split or not _picklable(self.recipe):
            return [(1, self.cfg.threads or cores)]
        return list(splits(cores, self.cfg.max_procs))

    def _search(
        self, live: _Live, case: Case, split: tuple[int, int | None], budget_s: float
    ) -> float:
        """One fleet (a device, or one split of a CPU) searched; each point stored."""
        assert live.session is not None
        live.session.case_started(case)
        device, (procs, threads), cfg = case.device, split, self.cfg
        batches = cfg.batches or (GPU_BATCHES if device.is_accelerator else CPU_BATCHES)
        waits = tuple(w / cfg.p99_ms for w in cfg.max_wait_ms) or WAIT_SHARES
        plan = SearchPlan(
            PointPlan(
                cfg.bound_s,
                max_point_s=cfg.point_s,
                min_requests=cfg.min_requests,
                min_duration_s=cfg.min_duration_s,
            ),
            batches=tuple(batches),
            wait_shares=waits,
            budget_s=budget_s,
        )
        label = device.label()
        doc = FleetDoc(device=device.name, label=label, processes=procs, threads=threads)
        live.payload.fleets.append(doc)
        index = len(live.payload.fleets) - 1

        def landed(p: LoadPoint) -> None:
            doc.points.append(answer.point_doc(p, procs, threads))
            answer.refresh(doc)  # a stop now still answers from the points so far
            live.save()
            if self.on_point is not None:
                self.on_point(doc, p)

        with self._fleet(device, procs, threads, max(batches)) as fleet:
            s: Search = search(
                fleet,
                plan,
                self.clock,
                label=doc.split,
                seed=cfg.seed,
                on_point=landed,
                energy=self._energy(device) if cfg.energy else None,
            )
        live.payload.fleets[index] = answer.fleet_doc(s, device.name, label, procs, threads)
        live.save()
        return s.elapsed_s

    @contextlib.contextmanager
    def _fleet(
        self, device: Device, procs: int, threads: int | None, max_batch: int
    ) -> Iterator[Fleet]:
        if procs > 1:
            assert threads is not None
            with Processes(self.recipe, device.name, procs, threads, max_batch) as fleet:
                yield fleet
            return
        import torch

        before = torch.get_num_threads()
        if threads is not None:
            device.set_threads(threads)
        try:
            yield Local(ModelExecutor(self.recipe(), device, max_batch), self.clock)
        finally:
            if threads is not None:
                device.set_threads(before)

    @staticmethod
    def _energy(device: Device) -> Callable[[], Any]:
        from torchmark.telemetry import energy

        return lambda: energy.Region(energy.for_region(device))


def _other_load() -> str | None:
    """A note when the machine was busy with other work as the run began (METHOD 2.11): a
    CPU's serving figures move with it (three runs minutes apart on a 2-core VM at load 5-6
    found 352, 13,137 and 17,289 req/s for one model and bound)."""
    import os

    if not hasattr(os, "getloadavg"):
        return None
    load, cores = os.getloadavg()[0], usable_cores()
    if load < cores:
        return None
    return (
        f"other load on the machine: load average {load:.1f} on {cores} cores as the run "
        "began; CPU serving figures move with it (the CPU's threads and the loop's wake-ups "
        "wait for the scheduler)"
    )


def _splits_of(plan: Sequence[tuple[Case, Device, Any]], device: Device) -> list[Any]:
    return [x for x in plan if x[1] == device]


def _picklable(recipe: Recipe) -> bool:
    """Worker processes rebuild the model from the recipe: it must cross to them."""
    try:
        pickle.dumps(recipe)
    except Exception:
        return False
    return True


def _prices(cfg: ServingConfig, devices: Sequence[Device]) -> dict[str, float]:
    from torchmark.user.cost import device_prices

    return device_prices(dict(cfg.prices), devices)


def serve(
    cfg: ServingConfig,
    recipe: Recipe,
    *,
    devices: Sequence[Device] | None = None,
    store: ResultStore | None = None,
    events: Events | None = None,
    on_point: Callable[[FleetDoc, LoadPoint], None] | None = None,
    name: str = "",
    inputs: str = "",
) -> RunRecord:
    """Run the serving search for ``recipe``'s model on ``devices`` (default: the config's).
    Ctrl-C / SIGTERM keep every finished point: ``RunInterrupted`` carries the run."""
    validate(cfg)
    devs = list(devices) if devices is not None else resolve(list(cfg.devices) or None)
    return Serving(
        cfg, recipe, devs, store, events, on_point, model_name=name or cfg.model, inputs=inputs
    ).run()
