"""torchmark's as-served answer checked by MLPerf LoadGen: its Server scenario (Poisson
arrivals, a p99 bound, early stopping for the tail) drives torchmark's Open Inference
Protocol server over HTTP, at torchmark's answer and at the top of its bracket.

    pip install 'torchmark[loadgen]'
    python benchmarks/serving_loadgen.py [--model simplenet] [--p99-ms 50] [--budget 2m]
                                         [--seconds S] [--from-json RUN.json]
                                         [--rounds 2] [--ladder 0.8,0.9]

1. the answer: `torchmark serving MODEL --p99-ms L --budget B` is run (or a stored run's
   JSON read): its as-served answer R (the highest rate within the bound), the lowest
   rate above it measured over (the bracket's top T), and the split and batching found
2. torchmark's server is started with that split and batching
3. at R, then at min(T, 1.1 R), `--rounds` times (default 2), LoadGen's Server scenario
   and torchmark's own client take turns on the same server, the order flipped each round
   (torchmark, LoadGen; LoadGen, torchmark; ...: ABBA), `--seconds` each (default: as long
   as torchmark's answer held in its re-confirmation, the claim checked; LoadGen's own
   minimum is 600 s: shorter here, and said). A host whose pace drifts (a VM's neighbours)
   then moves both tools alike, and each pair says whether the two instruments agree at
   that moment, whatever the host did between pairs. The host's pace (``judge.pace``) is
   timed before each turn and printed beside it.
   LoadGen's latencies run from its scheduled times to each answer decoded here; its
   requests go out on keep-alive connections from an event loop in this process
   (torchmark's client, ``serving.client``); torchmark's client runs in its own process,
   judged as its search judges a point (``serving.point.run_point``: held, VALID)
4. prints each turn's verdict, p99 and pace, then per rate how often each tool passed;
   with `--ladder 0.8,0.9` (more rates, as fractions of the answer) each tool's own max
   rate in each round, so that the two tools' limits are compared at the same moments

Where torchmark's run pinned its client to a core of its own and the server to the rest
(3 or more cores), both tools' clients (and LoadGen's process) take the client's core and
the server the same rest.

The two max rates agree within 10 % when LoadGen calls R VALID and min(T, 1.1 R) INVALID
in every round: LoadGen's own limit then lies within 10 % above R. Exits 1 otherwise (or
on any failed request). The pairs where the two tools disagree are counted apart: they
are the instrument's disagreement, not the host's drift. The load average is printed at
the start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import math
import multiprocessing as mp
import os
import re
import resource
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import psutil

AGREE = 0.10


SWITCH_S = 0.0002
MIN_SECONDS = 10


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} cores"


def torchmark_answer(args: argparse.Namespace) -> dict[str, Any]:
    """The stored run's as-served answer: rate, top, split, batching."""
    from torchmark.results import RunRecord
    from torchmark.results.serving import read

    path = args.from_json
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="loadgen-")) / "run.json"
        cmd = [sys.executable, "-m", "torchmark", "serving", args.model, "--p99-ms"]
        cmd += [str(args.p99_ms), "--budget", args.budget, "--json", str(path)]
        cmd += ["--db", f"sqlite:///{path.parent / 'r.db'}", *args.extra]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)
    p = read(RunRecord.model_validate(json.loads(Path(path).read_text())))
    if p is None or not p.capacity:
        sys.exit(f"{path}: no as-served answer in this run (a run with --as-served)")
    a = next((x for x in p.answers if x.max_rate is not None), None)
    if a is None or a.fleet is None:
        sys.exit(f"{path}: as served, no rate met the bound: nothing to check")
    f = p.fleets[a.fleet]
    best = f.best_point
    assert best is not None
    return {
        "model": p.model,
        "bound_s": p.bound_s,
        "rate": a.max_rate,
        "top": None if a.generator_bound else a.top,
        "workers": f.model_workers or 0,
        "threads": f.model_threads or 1,
        "max_batch": best.max_batch,
        "max_wait_s": best.max_wait_s,
        "sentence": a.sentence,
        "held_s": best.duration_s if a.confirmed else None,
        # where torchmark's run pinned its client and server (None or equal: it did not)
        "client_cores": f.client_cores,
        "server_cores": f.server_cores,
        "cores": f.cores,
    }


# the hot path's records: (LoadGen's query id, its issue time) out; (query id, failed) back
ISSUED = struct.Struct("=Qd")
ANSWERED = struct.Struct("=Q?")


def _sender(ctl: Connection, issued: Connection, answered: Connection, target: Any) -> None:
    """The harness's client process: LoadGen's queries, read from ``issued``, sent as OIP
    requests over keep-alive connections (torchmark's client, ``serving.client``); each
    answer's query id written back on ``answered`` as it is decoded."""
    import signal

    from torchmark.kinds.serving import client

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    ids: list[int] = []
    errors: dict[str, int] = {}

    def on_done(i: int, error: str | None) -> None:  # each request's first answer or failure
        if error is not None:
            errors[error] = errors.get(error, 0) + 1
        answered.send_bytes(ANSWERED.pack(ids[i], error is not None))

    pool = client.Pool(target)
    pool.run = client.Ledger(on_done)

    def on_issued() -> None:
        data = issued.recv_bytes()
        now = time.perf_counter()
        for qid, t in ISSUED.iter_unpack(data):
            i = pool.run.add(t, now - t)
            ids.append(qid)
            pool.submit(i)

    def on_ctl() -> None:
        cmd = ctl.recv()
        if cmd == "reset":
            pool.reset()  # the last run's waiting requests and connections in flight
            pool.run = client.Ledger(on_done)
            ids.clear()
            errors.clear()
            ctl.send("ok")
        elif cmd == "record":
            run = pool.run
            os.set_blocking(ctl.fileno(), True)  # the loop made it non-blocking; it is large
            ctl.send((run.requests(0, len(run.arrival)), dict(errors)))
            os.set_blocking(ctl.fileno(), False)
        else:
            loop.stop()

    loop.add_reader(issued.fileno(), on_issued)
    loop.add_reader(ctl.fileno(), on_ctl)
    watch = loop.create_task(client.watch_timeouts(pool))
    gc.collect()
    gc.freeze()  # its start-up objects are never walked again by the collector
    ctl.send("ready")
    loop.run_forever()
    watch.cancel()


class ProcessSut:
    """LoadGen's system under test: each query an OIP request over HTTP, sent from a
    client process of its own; LoadGen hears each answer as it is decoded there.

    LoadGen's process does no more than hand each query's id to a pipe and, on a thread
    of its own, each answered id to LoadGen: a harness that sent the requests from an
    event loop in LoadGen's process made LoadGen's issuing thread and the loop share the
    GIL, and its requests left 2-73 ms (p99) after LoadGen issued them at 1,800-2,500/s
    on the 2-core VM (2026-12-07), where torchmark's client process sends on time."""

    def __init__(self, lg: Any, target: Any) -> None:
        ctx = mp.get_context("spawn")
        self.lg = lg
        self.ctl, ctl = ctx.Pipe()
        issued_r, self.issued = ctx.Pipe(duplex=False)
        self.answered, answered_w = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=_sender, args=(ctl, issued_r, answered_w, target), daemon=True
        )
        self.proc.start()
        for c in (ctl, issued_r, answered_w):
            c.close()
        if not self.ctl.poll(60) or self.ctl.recv() != "ready":
            sys.exit("the harness's client process did not start")
        self.completer = threading.Thread(target=self._complete, daemon=True)
        self.completer.start()
        gc.collect()
        gc.freeze()
        # LoadGen's issuing thread and the completer share the GIL: each hands it on
        # within 0.2 ms rather than Python's 5 ms
        sys.setswitchinterval(SWITCH_S)
        self.errors: dict[str, int] = {}
        self.issued_n = 0

    def cpu_s(self) -> float:
        """CPU time of LoadGen's process and the harness's client process so far."""
        me = resource.getrusage(resource.RUSAGE_SELF)
        child = psutil.Process(self.proc.pid).cpu_times()
        return me.ru_utime + me.ru_stime + child.user + child.system

    def _complete(self) -> None:
        lg = self.lg
        while True:
            try:
                data = self.answered.recv_bytes()
            except (EOFError, OSError):
                return
            lg.QuerySamplesComplete(
                [lg.QuerySampleResponse(qid, 0, 0) for qid, _ in ANSWERED.iter_unpack(data)]
            )

    def reset(self) -> None:
        self.ctl.send("reset")
        self.ctl.recv()
        self.issued_n = 0

    def record(self) -> Any:
        """The last run's requests (as the client timed them) and errors."""
        self.ctl.send("record")
        reqs, self.errors = self.ctl.recv()
        return reqs

    def issue(self, samples: list[Any]) -> None:
        now = time.perf_counter()  # CLOCK_MONOTONIC: the same clock in both processes
        self.issued.send_bytes(b"".join(ISSUED.pack(s.id, now) for s in samples))
        self.issued_n += len(samples)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.ctl.send("close")
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()


def loadgen_server(lg: Any, sut: ProcessSut, rate: float, bound_s: float, seconds: float) -> dict:
    """One LoadGen Server-scenario run at ``rate``: its summary's verdict and figures."""
    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = rate
    settings.server_target_latency_ns = int(bound_s * 1e9)
    settings.server_target_latency_percentile = 0.99
    settings.min_duration_ms = int(seconds * 1e3)
    settings.max_duration_ms = int(seconds * 1e3 * 3)
    settings.min_query_count = 1  # the duration decides (LoadGen's early stopping judges)
    out = Path(tempfile.mkdtemp(prefix="loadgen-"))
    log = lg.LogOutputSettings()
    log.outdir = str(out)
    log.copy_summary_to_stdout = False
    log_settings = lg.LogSettings()
    log_settings.log_output = log
    sut.reset()
    cpu0 = sut.cpu_s()
    handle = lg.ConstructSUT(sut.issue, sut.flush)
    qsl = lg.ConstructQSL(1024, 1024, lambda s: None, lambda s: None)
    lg.StartTestWithLogSettings(handle, qsl, settings, log_settings)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(handle)
    cpu_s = sut.cpu_s() - cpu0
    text = (out / "mlperf_log_summary.txt").read_text()
    # the same queries timed here, from LoadGen's issue call on: what LoadGen's p99 has
    # above these is LoadGen's own path to the call (its thread's wake-up, the GIL)
    reqs = sut.record()
    here = {
        "issue_p99_ms": f"{1e3 * float(np.nanpercentile(reqs.finish - reqs.arrival, 99)):.2f}",
        "send_p99_ms": f"{1e3 * float(np.nanpercentile(reqs.start - reqs.arrival, 99)):.2f}",
    }

    def grab(pattern: str) -> str:
        m = re.search(pattern, text)
        return m.group(1).strip() if m else "?"

    return {
        "rate": rate,
        "valid": grab(r"Result is\s*:\s*(\w+)"),
        "scheduled": grab(r"Scheduled samples per second\s*:\s*([\d.]+)"),
        "completed": grab(r"Completed samples per second\s*:\s*([\d.]+)"),
        "p99_ms": _ns_ms(grab(r"99.00 percentile latency \(ns\)\s*:\s*(\d+)")),
        "constraints": grab(r"Performance constraints satisfied\s*:\s*(\w+)"),
        "early": " ".join(
            x.strip(" *") for x in grab(r"Early Stopping Result:\s*\n((?:\s*\*.*\n)+)").splitlines()
        ),
        "errors": dict(sut.errors),
        # the harness's CPU a query (LoadGen, its binding, the HTTP client): on a host whose
        # cores the server also uses, the generator's cost is taken from the server
        "cpu_us": 1e6 * cpu_s / max(1, sut.issued_n),
        **here,
    }


def _ns_ms(x: str) -> str:
    return f"{int(x) / 1e6:.2f}" if x.isdigit() else x


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="simplenet")
    ap.add_argument("--p99-ms", type=float, default=50.0)
    ap.add_argument("--budget", default="2m", help="torchmark's search time per device")
    ap.add_argument(
        "--seconds",
        type=float,
        default=None,
        help="LoadGen's time per rate (default: as long as the answer held, at least 10 s)",
    )
    ap.add_argument("--from-json", type=Path, default=None, help="a stored run's JSON")
    ap.add_argument(
        "--rounds", type=int, default=2, help="turns of each tool at each rate, order flipped"
    )
    ap.add_argument(
        "--ladder",
        type=lambda x: [float(f) for f in x.split(",")],
        default=None,
        help="more rates, as fractions of the answer (0.8,0.9,1.1): each tool's own max rate "
        "in each round is then printed",
    )
    ap.add_argument("extra", nargs="*", help="more `torchmark serving` options, after --")
    args = ap.parse_args()
    try:
        import mlperf_loadgen as lg
    except ImportError:
        sys.exit("MLPerf LoadGen is not installed: pip install 'torchmark[loadgen]'")
    from torchmark.kinds.serving import pace
    from torchmark.kinds.serving.cores import pin
    from torchmark.kinds.serving.model import builtin
    from torchmark.kinds.serving.served import Endpoint, OwnServer, url_name
    from torchmark.kinds.serving.server import Batching

    print(f"start: {load()}", flush=True)
    ans = torchmark_answer(args)
    print(f"torchmark: {ans['sentence']}")
    rate, top = float(ans["rate"]), ans["top"]
    if args.seconds is None:  # the claim checked: it held this long in torchmark's run
        args.seconds = max(MIN_SECONDS, math.ceil(ans["held_s"] or 0))
    check = min(float(top), (1 + AGREE) * rate) if top else (1 + AGREE) * rate
    name = url_name(ans["model"])
    batching = Batching(ans["max_batch"], ans["max_wait_s"])
    ladder = tuple(f * rate for f in args.ladder) if args.ladder else ()
    rates = (rate, check, *(r for r in ladder if r not in (rate, check)))
    turns: list[dict[str, Any]] = []
    # pinned as torchmark's run was: both tools' clients (and LoadGen, this process, whose
    # sender process inherits it) on its client's core, the server on the rest
    client_cores, server_cores = ans["client_cores"], ans["server_cores"]
    pinned = client_cores is not None and client_cores != server_cores
    try:
        pin(client_cores if pinned else ())
    except OSError as e:
        sys.exit(f"this host cannot run on the run's cores ({ans['cores']}): {e}")
    print(f"cores: {ans['cores'] or 'not stored'} (LoadGen in the client's place)", flush=True)
    client = tuple(client_cores) if pinned else ()
    with (
        OwnServer(
            builtin(ans["model"]),
            name,
            ans["workers"],
            ans["threads"],
            cores=tuple(server_cores) if pinned else (),
        ) as srv,
        Endpoint(srv.url, name, ans["bound_s"], own=True, client_cores=client) as ep,
    ):
        sut = ProcessSut(lg, ep.target)  # the same request, from a process of its own
        print(
            f"server: {ans['workers']} model worker(s) x {ans['threads']} thread(s), "
            f"max batch {ans['max_batch']}, wait {1e3 * ans['max_wait_s']:g} ms; "
            f"{args.rounds} round(s) of torchmark's client and LoadGen in turn (ABBA), "
            f"{args.seconds:g} s a turn (LoadGen's own minimum is 600 s)",
            flush=True,
        )
        for k in range(args.rounds):
            order = ("torchmark", "LoadGen") if k % 2 == 0 else ("LoadGen", "torchmark")
            for r in sorted(rates):
                for tool in order:
                    pace_ms = 1e3 * statistics.median(pace.measure())
                    if tool == "LoadGen":
                        t = loadgen_server(lg, sut, r, ans["bound_s"], args.seconds)
                    else:
                        t = torchmark_point(ep, r, batching, ans["bound_s"], args.seconds, k)
                    t.update(round=k + 1, tool=tool, pace_ms=pace_ms)
                    turns.append(t)
                    print(turn_line(t), flush=True)
        sut.close()
    if ladder:
        limits(turns, rates)
    return verdict(turns, (rate, check))


def torchmark_point(
    ep: Any, rate: float, batching: Any, bound_s: float, seconds: float, seed: int
) -> dict[str, Any]:
    """One point of torchmark's own client at ``rate``, held for ``seconds`` and judged
    as its search judges one (within: it held; VALID in LoadGen's sense)."""
    from torchmark.kinds.serving.point import PointPlan, run_point

    p = run_point(ep, rate, batching, PointPlan(bound_s).longer(seconds), seed=seed)
    return {
        "rate": rate,
        "passed": p.outcome == "within",
        "valid": "VALID" if p.valid else "INVALID",
        "p99_ms": f"{1e3 * p.loadgen_p99_s:.2f}",
        "said": f"{'held' if p.outcome == 'within' else p.outcome}: {p.why}",
        "errors": dict(p.errors),
        "seconds": p.span_s,
    }


def turn_line(t: dict[str, Any]) -> str:
    if t["tool"] == "LoadGen":
        said = (
            f"from its issue call, timed here: p99 {t['issue_p99_ms']} ms (of it to the send "
            f"{t['send_p99_ms']} ms); "
            f"scheduled {t['scheduled']}/s, completed {t['completed']}/s, p99 within the bound: "
            f"{t['constraints']}; early stopping: {t['early']}; the harness's CPU "
            f"{t['cpu_us']:.0f} µs a query"
        )
    else:
        said = f"{t['said']} ({t['seconds']:.3g} s)"
    errors = f"; errors {t['errors']}" if t["errors"] else ""
    return (
        f"round {t['round']} {t['tool']:9} at {t['rate']:,.0f}/s: {t['valid']}, p99 "
        f"{t['p99_ms']} ms, host pace {t['pace_ms']:.2f} ms; {said}{errors}"
    )


def passed(t: dict[str, Any]) -> bool:
    """A turn's verdict: LoadGen's VALID, torchmark's client's held; no failed request."""
    ok = t["valid"] == "VALID" if t["tool"] == "LoadGen" else t["passed"]
    return bool(ok) and not t["errors"]


def limits(turns: list[dict[str, Any]], rates: tuple[float, ...]) -> None:
    """Each tool's own max rate in each round: the highest rate it passed below the lowest
    it failed (its turns at all rates of a round lie within minutes of the other tool's)."""
    for k in sorted({t["round"] for t in turns}):
        said = []
        for tool in ("torchmark", "LoadGen"):
            mine = {t["rate"]: passed(t) for t in turns if t["round"] == k and t["tool"] == tool}
            failed = min((r for r, ok in mine.items() if not ok), default=math.inf)
            best = max((r for r, ok in mine.items() if ok and r < failed), default=None)
            top = "" if failed == math.inf else f", failed {failed:,.0f}"
            said.append(f"{tool} held {best:,.0f}{top}" if best else f"{tool} held none{top}")
        print(
            f"round {k}, the ladder {', '.join(f'{r:,.0f}' for r in sorted(rates))}: "
            + "; ".join(said)
        )


def verdict(turns: list[dict[str, Any]], rates: tuple[float, float]) -> int:
    """Per rate, how often each tool passed; the pairs that disagree; the check's verdict."""
    rate, check = rates
    for r, what in zip(rates, ("the answer", "above it"), strict=True):
        at = [t for t in turns if t["rate"] == r]
        lg_ok = sum(t["valid"] == "VALID" and not t["errors"] for t in at if t["tool"] == "LoadGen")
        tm_ok = sum(t["passed"] for t in at if t["tool"] == "torchmark")
        n = len(at) // 2
        print(
            f"at {r:,.0f}/s ({what}): LoadGen VALID {lg_ok} of {n}, torchmark's client held "
            f"{tm_ok} of {n}"
        )
    pairs: dict[tuple[int, float], list[bool]] = {}
    for t in turns:
        pairs.setdefault((t["round"], t["rate"]), []).append(passed(t))
    split = sum(len(set(v)) > 1 for v in pairs.values())
    print(
        f"the two tools, back to back on one server: same verdict in {len(pairs) - split} of "
        f"{len(pairs)} pairs"
        + (f" ({split} where one passed and the other did not)" if split else "")
    )
    lg = [t for t in turns if t["tool"] == "LoadGen"]
    low = [t for t in lg if t["rate"] == rate]
    high = [t for t in lg if t["rate"] == check]
    valid = all(t["valid"] == "VALID" and not t["errors"] for t in low)
    # INVALID for the tail itself, not only for too few queries to prove it (early stopping)
    over = all(t["valid"] == "INVALID" and (t["constraints"] == "NO" or t["errors"]) for t in high)
    if valid and over:
        said = "agree"
    elif valid and all(t["valid"] == "INVALID" for t in high):
        said = (
            "can't be told apart: above it LoadGen's INVALID is early stopping's (too few "
            "queries to prove the tail) with the p99 itself within the bound; a longer "
            "--seconds says more. They do not yet agree"
        )
    else:
        said = "do not agree"
    print(
        f"torchmark's {rate:,.0f}/s and LoadGen's max rate {said} within {AGREE:.0%} "
        f"(agreeing needs LoadGen VALID at {rate:,.0f} and INVALID at {check:,.0f} in every "
        "round)"
    )
    print(f"end: {load()}")
    return 0 if said == "agree" else 1


if __name__ == "__main__":
    sys.exit(main())
