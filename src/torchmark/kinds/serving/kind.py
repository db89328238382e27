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
import os
import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from torchmark.devices import Device, resolve
from torchmark.devices.host import available_cores
from torchmark.errors import InputError
from torchmark.kinds.serving import answer, deployed, generator, pace, stats
from torchmark.kinds.serving.client import ClientError
from torchmark.kinds.serving.clock import Clock, RealClock
from torchmark.kinds.serving.cores import CorePlan
from torchmark.kinds.serving.cores import plan as plan_cores
from torchmark.kinds.serving.fleet import Fleet, ForwardStuck, Local
from torchmark.kinds.serving.model import ModelExecutor, Recipe, is_builtin
from torchmark.kinds.serving.point import MIN_DURATION_S, MIN_POINT_S, LoadPoint, PointPlan
from torchmark.kinds.serving.search import Search, SearchPlan, search
from torchmark.kinds.serving.served import (
    Endpoint,
    ServerError,
    as_served,
    missing,
    served_splits,
)
from torchmark.kinds.serving.workers import Processes, splits
from torchmark.results import RunRecord
from torchmark.results import serving as stored
from torchmark.results.serving import KIND, FleetDoc, ServingPayload
from torchmark.run import watchdog
from torchmark.run.record import open_run
from torchmark.run.session import Events, Session
from torchmark.store.base import ResultStore
from torchmark.user.cost import device_prices
from torchmark.workloads import Case

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
    # as served: each device's model also behind torchmark's OIP server, driven over HTTP
    as_served: bool = True
    endpoint: str | None = None  # the user's OIP server: it alone is driven
    model_name: str | None = None  # the model's name on the endpoint (None: ``model``)

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
    if cfg.endpoint is not None:
        from urllib.parse import urlsplit

        u = urlsplit(cfg.endpoint)
        try:
            port = u.port
        except ValueError:
            port = None
        if u.scheme != "http" or not u.hostname or not port:
            raise InputError(
                f"--endpoint {cfg.endpoint!r}: give http://HOST:PORT of an Open Inference "
                "Protocol server, e.g. http://127.0.0.1:8000"
            )


@dataclass
class _Live:
    """The payload as the run goes: each point lands in it and is stored."""

    payload: ServingPayload
    session: Session

    def save(self) -> None:
        stored.write(self.session.record, self.payload)
        self.session.checkpoint()


@dataclass
class Serving:
    """The kind's run: its config, model and devices, ready to ``run()``."""

    cfg: ServingConfig
    recipe: Recipe | None  # None: the user's endpoint serves the model
    devices: list[Device]
    store: ResultStore | None = None
    events: Events | None = None
    on_point: Callable[[FleetDoc, LoadPoint], None] | None = None
    clock: Clock = field(default_factory=RealClock)
    # times the host's pace around each search (``pace.measure``; None: not timed). Timed
    # by default only on the real clock: a fake clock's run has no host to pace
    pace: Callable[[], list[float]] | None = None
    model_name: str = ""
    inputs: str = ""
    # as served: the load generator's and the server's cores (None: planned from this
    # process's affinity when the run starts)
    cores: CorePlan | None = None

    def run(self) -> RunRecord:
        validate(self.cfg)
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
            endpoint=self.cfg.endpoint or "",
        )
        # the in-process loop's own limit (an endpoint's points judge the HTTP client's
        # lateness, per point)
        if not self.cfg.endpoint:
            gen = generator.measure(seconds=self.cfg.generator_s, bound_s=self.cfg.bound_s)
            payload.generator = gen.doc()
        busy = _other_load()
        if busy:
            payload.notes.append(busy)
        absent = missing() if self.cfg.as_served and not self.cfg.endpoint else None
        if absent:
            payload.notes.append(f"as served: not available, {absent}: in process only")
        prices = device_prices(dict(self.cfg.prices), self.devices)
        if self.cores is None:
            self.cores = plan_cores()
        plan = self._fleets()
        if self.cores.note and any(f.served == "oip" for f in plan):
            payload.notes.append(self.cores.note)
        session, live = self._open(payload, prices)
        session.planned([f.case for f in plan])
        spent: dict[str, float] = {}  # per device: the search time its fleets took
        with session:
            for f in plan:
                # --budget is the device's: each fleet gets an equal share of what is left,
                # so one that finishes early leaves its time to the next
                fleets = [x for x in plan if x.device == f.device]
                left = len(fleets) - fleets.index(f)
                budget = max(0.0, self.cfg.budget_s - spent.get(f.device.name, 0.0)) / left
                took = self._search(live, f, budget)
                spent[f.device.name] = spent.get(f.device.name, 0.0) + took
        return session.record

    def _open(self, payload: ServingPayload, prices: dict[str, float]) -> tuple[Session, _Live]:
        """The run's session, opened as every run's is (``run.open_run``); its analysis
        (the answers and the verdict) runs at the end, complete or not."""

        def analyse(rec: RunRecord) -> None:
            p = deployed.analyse(live.payload, prices)
            stored.write(rec, p)

        session = open_run(KIND, self.cfg, self.devices, self.store, self.events, analyse=analyse)
        live = _Live(payload, session)
        live.save()
        return session, live

    def _fleets(self) -> list[_Planned]:
        """Per device: its capacity in process, one fleet per split of its cores, then
        (``as_served``) the model behind torchmark's server, per split of the cores
        between front end and model workers; or the user's endpoint alone."""
        out = []
        bound: tuple[tuple[str, Any], ...] = (("p99_ms", self.cfg.p99_ms),)
        if self.cfg.endpoint:
            d = self.devices[0]  # the host driving it
            params = (*bound, ("endpoint", self.cfg.endpoint))
            return [
                _Planned(Case(self.model_name, "endpoint", d, params), d, (1, None), "endpoint")
            ]
        for d in self.devices:
            for procs, threads in self._splits(d):
                params = bound
                if threads is not None:
                    params += (("split", f"{procs}x{threads}"),)
                out.append(
                    _Planned(Case(self.model_name, "server", d, params), d, (procs, threads))
                )
            if not self.cfg.as_served or self.recipe is None or missing():
                continue
            if not _picklable(self.recipe):  # the server's process rebuilds the model
                continue
            for workers, threads in self._served_splits(d):
                params = (*bound, ("served", f"{workers}x{threads}"))
                case = Case(self.model_name, "as-served", d, params)
                out.append(_Planned(case, d, (workers, threads), "oip"))
        return out

    def _served_splits(self, device: Device) -> list[tuple[int, int]]:
        """Over the server's cores: those the load generator's core leaves it."""
        if device.is_accelerator:
            return [(0, 1)]
        cores = (self.cores or plan_cores()).server_cores
        if not self.cfg.split:
            return [(0, self.cfg.threads or cores)]
        return served_splits(cores)[: (self.cfg.max_procs or cores) + 1]

    def _splits(self, device: Device) -> list[tuple[int, int | None]]:
        if device.is_accelerator:
            return [(1, None)]
        cores = available_cores()
        if not self.cfg.split or self.recipe is None or not _picklable(self.recipe):
            return [(1, self.cfg.threads or cores)]
        return list(splits(cores, self.cfg.max_procs))

    def _search(self, live: _Live, planned: _Planned, budget_s: float) -> float:
        """One fleet (a device, or one split of a CPU) searched; each point stored."""
        case, served = planned.case, planned.served
        live.session.case_started(case)
        device, (procs, threads), cfg = case.device, planned.split, self.cfg
        batches = cfg.batches or (GPU_BATCHES if device.is_accelerator else CPU_BATCHES)
        waits = tuple(w / cfg.p99_ms for w in cfg.max_wait_ms) or WAIT_SHARES
        if served == "endpoint":  # the server batches as it is configured: one setting
            batches, waits = (1,), (0.0,)
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
        name = device.name
        if served:  # one front end over the model's processes: no processes x threads
            procs, threads = 1, None
        if served == "endpoint":
            name, label = "endpoint", cfg.endpoint or ""
        where = _where(planned, cfg)
        doc = FleetDoc(device=name, label=label, processes=procs, threads=threads, **where)
        live.payload.fleets.append(doc)
        index = len(live.payload.fleets) - 1

        def landed(p: LoadPoint) -> None:
            doc.points.append(answer.point_doc(p, procs, threads))
            answer.refresh(doc)  # a stop now still answers from the points so far
            live.save()
            if self.on_point is not None:
                self.on_point(doc, p)

        # the host's pace, timed with none of the fleet's processes alive: before it
        # starts and after it has closed (inside, its server draining a queue and its
        # workers importing torch would be read as the host)
        timer = self.pace or (pace.measure if isinstance(self.clock, RealClock) else None)
        paced = timer() if timer is not None else []
        try:
            with self._fleet(device, planned, max(batches)) as fleet:
                cores = _cores_of(fleet) if served == "oip" else {}
                where.update(cores)
                for k, v in cores.items():  # stored from the first point on
                    setattr(doc, k, v)
                s: Search = search(
                    fleet,
                    plan,
                    self.clock,
                    label=doc.split,
                    seed=cfg.seed,
                    on_point=landed,
                    energy=self._energy(device) if cfg.energy else None,
                )
                said = fleet.said() if isinstance(fleet, Endpoint) else ""
                if s.best is None and said:  # what the endpoint answered, word for word
                    s.stop_reason += f": {said}"
        except ForwardStuck as e:  # the fleet's verdict; its points kept, the run goes on
            doc.stop_reason = f"stuck: {e}"
        except (ServerError, ClientError) as e:
            if served != "oip":  # the user's endpoint or the in-process run: the run's error
                raise
            # torchmark's server or client failed for this split: said, the run goes on
            doc.stop_reason = f"not served: {e}"
        else:
            s.pace, s.pace_end = paced, (timer() if timer is not None else [])
            done = answer.fleet_doc(s, name, label, procs, threads)
            live.payload.fleets[index] = done.model_copy(update=where)
            live.save()
            return s.elapsed_s
        answer.refresh(doc)
        live.save()
        return 0.0

    @contextlib.contextmanager
    def _fleet(self, device: Device, planned: _Planned, max_batch: int) -> Iterator[Fleet]:
        procs, threads = planned.split
        if planned.served == "endpoint":
            assert self.cfg.endpoint
            model = self.cfg.model_name or self.cfg.model
            with Endpoint(self.cfg.endpoint, model, self.cfg.bound_s) as ep:
                yield ep
            return
        assert self.recipe is not None
        if planned.served == "oip":
            with as_served(
                self.recipe,
                self.model_name,
                self.cfg.bound_s,
                procs,
                threads or 1,
                device.name,
                forward_bound_s=self._forward_bound_s(),
                cores=self.cores,
            ) as ep:
                yield ep
            return
        import torch

        bound = self._forward_bound_s()
        if procs > 1 or (not is_builtin(self.recipe) and _picklable(self.recipe)):
            # the user's forward runs in worker processes only, never in this one: one that
            # never returns (holding the GIL or not) is ended at the bound, where it stuck
            n = threads or torch.get_num_threads()
            with Processes(
                self.recipe, device.name, procs, n, max_batch, forward_bound_s=bound
            ) as fleet:
                yield fleet
            return

        before = torch.get_num_threads()
        if threads is not None:
            device.set_threads(threads)
        try:
            yield Local(ModelExecutor(self.recipe(), device, max_batch), self.clock)
        finally:
            if threads is not None:
                device.set_threads(before)

    def _forward_bound_s(self) -> float:
        """How long one forward may run in a worker before it is called stuck: a load
        point's own time limit (a forward that outlasts a whole point serves no request
        within it), at least the bound ``model`` gives a call."""
        return max(watchdog.MIN_CALL_BOUND_S, self.cfg.point_s)

    @staticmethod
    def _energy(device: Device) -> Callable[[], Any]:
        from torchmark.telemetry import energy

        return lambda: energy.Region(energy.for_region(device))


def _other_load() -> str | None:
    """A note when the machine was busy with other work as the run began (METHOD 2.11): a
    CPU's serving figures move with it (three runs minutes apart on a 2-core VM at load 5-6
    found 352, 13,137 and 17,289 req/s for one model and bound)."""
    if not hasattr(os, "getloadavg"):
        return None
    load, cores = os.getloadavg()[0], available_cores()
    if load < cores:
        return None
    return (
        f"other load on the machine: load average {load:.1f} on {cores} cores as the run "
        "began; CPU serving figures move with it (the CPU's threads and the loop's wake-ups "
        "wait for the scheduler)"
    )


@dataclass(frozen=True)
class _Planned:
    """One fleet to search: its case, device, split and where the model is served ("" in
    this process, "oip" behind torchmark's server, "endpoint" the user's)."""

    case: Case
    device: Device
    split: tuple[int, int | None]
    served: str = ""


def _where(planned: _Planned, cfg: ServingConfig) -> dict[str, Any]:
    """The fleet document's fields that say where its model was served."""
    if planned.served == "endpoint":
        return {"served": "endpoint", "endpoint": cfg.endpoint or ""}
    if planned.served == "oip":
        workers, threads = planned.split
        return {"served": "oip", "model_workers": workers, "model_threads": threads}
    return {}


def _cores_of(fleet: Fleet) -> dict[str, Any]:
    """The fleet document's fields that say the cores its client and server ran on."""
    client = getattr(fleet, "client_cores", None)
    server = getattr(fleet, "server_cores", None)
    return {
        "client_cores": list(client) if client is not None else None,
        "server_cores": list(server) if server is not None else None,
    }


def _picklable(recipe: Recipe) -> bool:
    """Worker processes rebuild the model from the recipe: it must cross to them."""
    try:
        pickle.dumps(recipe)
    except Exception:
        return False
    return True


def serve(
    cfg: ServingConfig,
    recipe: Recipe | None,
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
    if devices is not None:
        devs = list(devices)
    else:  # an endpoint is driven from this host: its CPU runs the client
        devs = resolve(["cpu"] if cfg.endpoint else (list(cfg.devices) or None))
    return Serving(
        cfg, recipe, devs, store, events, on_point, model_name=name or cfg.model, inputs=inputs
    ).run()
