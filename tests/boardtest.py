"""Run documents for the leaderboard tests: small, made here, with identifiers to strip."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from torchmark.results import Ceiling, Result, RunRecord, Verdict, Work
from torchmark.store.exchange import export_run


def make_run(
    model: str = "Test CPU 9000",
    scale: float = 1.0,
    n: int = 12,
    *,
    spread: float = 0.01,
    pct_of_bw: float | None = None,
    verdict: str | None = None,
    note: str = "",
) -> RunRecord:
    """One result of case add/seed on cpu; median time ``scale`` ms (spread relative)."""
    samples = [scale * 1e-3 * (1 + spread * ((i * 7) % n - n / 2) / n) for i in range(n)]
    ceiling = None
    work = Work(items=1000.0)
    if pct_of_bw is not None:
        bw = 1e10
        # bytes per call such that the median rate is pct_of_bw % of the ceiling
        work = Work(items=1000.0, bytes=pct_of_bw / 100 * bw * scale * 1e-3)
        ceiling = Ceiling(device="cpu", key="bandwidth", value=bw, unit="B/s", method="mul_")
    result = Result(
        workload="add",
        variant="seed",
        device="cpu",
        params={"n": 1000},
        samples_s=samples,
        work=work,
        ceiling=ceiling,
        notes=[note] if note else [],
        verdict=Verdict(level=verdict) if verdict else None,  # type: ignore[arg-type]
    )
    return RunRecord(
        tool_version="0.test",
        run_id=None,
        status="complete",
        command="torchmark run --output /home/alice/runs/x.json",
        environment={
            "host": "alice-laptop",
            "pid": 4242,
            "python_executable": "/home/alice/.venv/bin/python",
            "software": {"torch": "2.13.0", "python": "3.12"},
            "devices": {"cpu": {"kind": "cpu", "model": model, "physical_cores": 8,
                                "uuid": "GPU-1234-secret", "serial_number": "SN99"}},
            "env_vars": {"OMP_NUM_THREADS": "8", "HOME": "/home/alice", "AWS_SECRET": "xyz"},
        },
        fingerprint="0123456789abcdef",
        ceilings=[ceiling] if ceiling else [],
        results=[result],
    )  # fmt: skip


def builtin_run(model: str = "Xeon Test CPU", scale: float = 1.0) -> RunRecord:
    """make_run's machine with one case of the built-in suite (matmul float32 n=512 on cpu,
    its median ``scale`` ms), declaring the work the server's catalogue derives."""
    run = make_run(model, scale)
    n = 512
    run.results[0] = run.results[0].model_copy(
        update={
            "workload": "matmul",
            "variant": "float32",
            "params": {"n": n},
            "work": Work(flops=2.0 * n**3, bytes=n * n * 12, items=1, item_unit="matmul"),
            "headline": "flops",
        }
    )
    return run


def body(run: RunRecord) -> bytes:
    return export_run(run).encode()


def doc(run: RunRecord) -> dict[str, Any]:
    return dict(json.loads(export_run(run)))


START_S = 60.0  # uvicorn + FastAPI import in ~2 s; a loaded 2-core machine needs more


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(
    db: str, log: Path, extra: Sequence[str] = (), start_s: float = START_S
) -> tuple[subprocess.Popen[bytes], str]:
    """`torchmark serve` (with ``extra`` options) on a free loopback port, answering:
    (process, URL); RuntimeError with the log's tail when it does not start in time."""
    port = free_port()
    with log.open("ab") as sink:  # a file, not a pipe: uvicorn's log cannot fill and block it
        proc = subprocess.Popen(
            [sys.executable, "-m", "torchmark", "board", "--db", db, "--port", str(port), *extra],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=os.environ.copy(),
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + start_s
    while True:
        try:
            urllib.request.urlopen(url + "/api/v1/runs", timeout=2).close()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                stop(proc)
                raise RuntimeError(
                    f"torchmark serve did not start: {log.read_text()[-2000:]}"
                ) from None
            time.sleep(0.2)


def cli_token(db: str, name: str) -> str:
    """A new token ``name`` on ``db`` made by `torchmark serve token create` (a benchmark
    serves the store from another process, so it makes its token the user's way)."""
    out = subprocess.run(
        [sys.executable, "-m", "torchmark", "board", "token", "create", name, "--db", db],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.strip().splitlines()[-1]


def p50_p95(times: list[float]) -> str:
    """Latencies (s) as the benchmarks print them."""
    p95 = statistics.quantiles(times, n=20)[-1] if len(times) > 1 else times[0]
    return f"p50 {statistics.median(times) * 1e3:6.0f} ms, p95 {p95 * 1e3:6.0f} ms (n={len(times)})"


def start_server(db: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`torchmark serve` on a free loopback port, answering: (process, URL)."""
    try:
        return serve(db, log)
    except RuntimeError as e:
        pytest.fail(str(e))


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def survives_sigkill(db: str, token: str, log: Path) -> None:
    """`torchmark serve` on ``db`` killed with SIGKILL while 8 threads submit: after a
    restart every run it acknowledged is readable, none twice, and the database opens."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from torchmark.cli.submit import post
    from torchmark.errors import ServerError

    proc, url = start_server(db, log)
    acked: list[str] = []
    enough = threading.Event()

    def send(i: int) -> None:
        try:
            acked.append(
                post(url, token, export_run(make_run(scale=1 + i / 100)).encode())["run_id"]
            )
        except ServerError:
            return  # sent while the server died: not acknowledged, so nothing is owed
        if len(acked) >= 10:
            enough.set()

    try:
        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(send, i) for i in range(50)]
            assert enough.wait(timeout=60)
            proc.kill()  # SIGKILL: no shutdown handler runs
            proc.wait(timeout=10)
            for f in futures:
                f.result(timeout=120)
    finally:
        stop(proc)
    assert len(acked) >= 10
    proc, url = start_server(db, log)
    try:
        runs = json.loads(urllib.request.urlopen(url + "/api/v1/runs", timeout=10).read())
    finally:
        stop(proc)
    stored = {r["run_id"] for r in runs}
    assert set(acked) <= stored
    assert len(stored) == len(runs)


def draw_for_ever(run: RunRecord) -> bytes:
    """A report drawing that never ends (module level: a spawned drawing process runs it)."""
    time.sleep(3600)
    return b""


@contextlib.contextmanager
def serving(app) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """``app`` on uvicorn at 127.0.0.1 (a free port) in a thread; yields its URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def submit(url: str, token: str, body: bytes) -> str:
    from torchmark.cli.submit import post

    return str(post(url, token, body)["run_id"])
