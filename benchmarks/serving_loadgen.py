"""torchmark's as-served answer checked by MLPerf LoadGen: its Server scenario (Poisson
arrivals, a p99 bound, early stopping for the tail) drives torchmark's Open Inference
Protocol server over HTTP, at torchmark's answer and at the top of its bracket.

    pip install 'torchmark[loadgen]'
    python benchmarks/serving_loadgen.py [--model simplenet] [--p99-ms 50] [--budget 2m]
                                         [--seconds S] [--from-json RUN.json]

1. the answer: `torchmark serving MODEL --p99-ms L --budget B` is run (or a stored run's
   JSON read): its as-served answer R (the highest rate within the bound), the lowest
   rate above it measured over (the bracket's top T), and the split and batching found
2. torchmark's server is started with that split and batching
3. LoadGen's Server scenario at R, then at min(T, 1.1 R), `--seconds` each (default: as long
   as torchmark's answer held in its re-confirmation, the claim checked; LoadGen's own
   minimum is 600 s: shorter here, and said), latencies from LoadGen's scheduled times
   to each answer decoded here; the requests go out on keep-alive connections from an
   event loop in this process (torchmark's client, ``serving.client``), the server in its
   own process
4. prints LoadGen's VALID / INVALID per rate, its p99 and early-stopping estimate

Where torchmark's run pinned its client to a core of its own and the server to the rest
(3 or more cores), LoadGen's process takes the client's core and the server the same rest.

The two max rates agree within 10 % when LoadGen calls R VALID and min(T, 1.1 R) INVALID:
LoadGen's own limit then lies within 10 % above R. Exits 1 otherwise (or on any failed
request). On a loaded host both move: the load average is printed at the start and end.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import re
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

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


class HttpSut:
    """LoadGen's system under test: each query an OIP request over HTTP, sent from an
    event loop thread; LoadGen hears each answer as it is decoded."""

    def __init__(self, lg: Any, target: Any) -> None:
        from torchmark.kinds.serving import client

        self.lg, self.client = lg, client
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.pool = client._Pool(target)
        self.errors: dict[str, int] = {}
        self.ids: list[int] = []
        self._reset()
        asyncio.run_coroutine_threadsafe(client._watch(self.pool), self.loop)
        # LoadGen's process times every answer: its start-up objects are never walked again
        # by the collector (a full walk here stalled every query 183 ms, as in the server)
        gc.collect()
        gc.freeze()
        # LoadGen's issuing thread and this loop's thread share the GIL: at Python's 5 ms
        # switch interval each query could wait that long to be sent, and the p99 at
        # 2,200/s read 220-247 ms here; at 0.2 ms, 60-94 ms (the 2-core VM, 2026-12-06)
        sys.setswitchinterval(SWITCH_S)

    def _reset(self) -> None:
        """A fresh record (and LoadGen's ids) for the next run, made on the loop's thread."""
        sut = self

        class Run(self.client._Run):  # type: ignore[name-defined,misc]
            def done(self, i: int, error: str | None, batch: int = 0) -> None:
                first = self.finish[i] != self.finish[i]  # NaN: not answered before
                super().done(i, error, batch)
                if first:
                    if error is not None:
                        sut.errors[error] = sut.errors.get(error, 0) + 1
                    resp = sut.lg.QuerySampleResponse(sut.ids[i], 0, 0)
                    sut.lg.QuerySamplesComplete([resp])

        async def make() -> None:
            self.pool.reset()  # the last run's waiting requests and connections in flight
            self.pool.run = Run()
            self.ids = []

        asyncio.run_coroutine_threadsafe(make(), self.loop).result()

    def issue(self, samples: list[Any]) -> None:
        now = time.perf_counter()
        items = [(s.id, now) for s in samples]
        self.loop.call_soon_threadsafe(self._send, items)

    def _send(self, items: list[tuple[int, float]]) -> None:
        for qid, t in items:
            i = self.pool.run.add(t)
            self.ids.append(qid)
            self.pool.submit(i)

    def flush(self) -> None:
        pass


def loadgen_server(lg: Any, sut: HttpSut, rate: float, bound_s: float, seconds: float) -> dict:
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
    sut.errors.clear()
    sut._reset()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    handle = lg.ConstructSUT(sut.issue, sut.flush)
    qsl = lg.ConstructQSL(1024, 1024, lambda s: None, lambda s: None)
    lg.StartTestWithLogSettings(handle, qsl, settings, log_settings)
    lg.DestroyQSL(qsl)
    lg.DestroySUT(handle)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    text = (out / "mlperf_log_summary.txt").read_text()

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
        # this process's CPU a query (LoadGen, its binding, the HTTP client): on a host whose
        # cores the server also uses, the generator's cost is taken from the server
        "cpu_us": 1e6 * cpu_s / max(1, len(sut.ids)),
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
    ap.add_argument("extra", nargs="*", help="more `torchmark serving` options, after --")
    args = ap.parse_args()
    try:
        import mlperf_loadgen as lg
    except ImportError:
        sys.exit("MLPerf LoadGen is not installed: pip install 'torchmark[loadgen]'")
    from torchmark.kinds.serving.cores import pin
    from torchmark.kinds.serving.model import builtin
    from torchmark.kinds.serving.served import Endpoint, OwnServer, _post, url_name

    print(f"start: {load()}", flush=True)
    ans = torchmark_answer(args)
    print(f"torchmark: {ans['sentence']}")
    rate, top = float(ans["rate"]), ans["top"]
    if args.seconds is None:  # the claim checked: it held this long in torchmark's run
        args.seconds = max(MIN_SECONDS, math.ceil(ans["held_s"] or 0))
    check = min(float(top), (1 + AGREE) * rate) if top else (1 + AGREE) * rate
    name = url_name(ans["model"])
    # pinned as torchmark's run was: LoadGen (this process) on its client's core, the
    # server on the rest, so that the two generators are checked on the same cores
    client_cores, server_cores = ans["client_cores"], ans["server_cores"]
    pinned = client_cores is not None and client_cores != server_cores
    try:
        pin(client_cores if pinned else ())
    except OSError as e:
        sys.exit(f"this host cannot run on the run's cores ({ans['cores']}): {e}")
    print(f"cores: {ans['cores'] or 'not stored'} (LoadGen in the client's place)", flush=True)
    with OwnServer(
        builtin(ans["model"]),
        name,
        ans["workers"],
        ans["threads"],
        cores=tuple(server_cores) if pinned else (),
    ) as srv:
        batching = {"max_batch": ans["max_batch"], "max_wait_s": ans["max_wait_s"]}
        _post(f"{srv.url}/torchmark/batching", batching)
        with Endpoint(srv.url, name, ans["bound_s"]) as ep:  # the request, as torchmark's
            sut = HttpSut(lg, ep.target)
        print(
            f"server: {ans['workers']} model worker(s) x {ans['threads']} thread(s), "
            f"max batch {ans['max_batch']}, wait {1e3 * ans['max_wait_s']:g} ms; LoadGen "
            f"{args.seconds:g} s a rate (its own minimum is 600 s)",
            flush=True,
        )
        results = [loadgen_server(lg, sut, r, ans["bound_s"], args.seconds) for r in (rate, check)]
    for r, what in zip(results, ("the answer", "above it"), strict=True):
        print(
            f"LoadGen at {r['rate']:,.0f}/s ({what}): {r['valid']}; scheduled "
            f"{r['scheduled']}/s, completed {r['completed']}/s, p99 {r['p99_ms']} ms, "
            f"p99 within the bound: {r['constraints']}; early stopping: {r['early']}; "
            f"errors {r['errors'] or 'none'}; this process's CPU {r['cpu_us']:.0f} µs a query"
        )
    low, high = results
    valid = low["valid"] == "VALID" and not low["errors"]
    # INVALID for the tail itself, not only for too few queries to prove it (early stopping)
    over = high["valid"] == "INVALID" and (high["constraints"] == "NO" or high["errors"])
    if valid and over:
        verdict = "agree"
    elif valid and high["valid"] == "INVALID":
        verdict = (
            "can't be told apart: above it LoadGen's INVALID is early stopping's (too few "
            "queries to prove the tail) with the p99 itself within the bound; a longer "
            "--seconds says more. They do not yet agree"
        )
    else:
        verdict = "do not agree"
    print(
        f"torchmark's {rate:,.0f}/s and LoadGen's max rate {verdict} within {AGREE:.0%} "
        f"(agreeing needs LoadGen VALID at {rate:,.0f}, INVALID at {check:,.0f})"
    )
    ok = verdict == "agree"
    print(f"end: {load()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
