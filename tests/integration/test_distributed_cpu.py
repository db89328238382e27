"""Real 2-rank gloo runs on loopback through torchrun's launcher (tiny sizes: 2 shared
cores), and the faults: one rank, an unreachable rendezvous, a rank killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from torchmark.launch.env import joined

pytestmark = pytest.mark.slow

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID")


def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in RANK_VARS}


def torchmark(tmp: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "torchmark", *args, "--db", f"sqlite:///{tmp / 'r.db'}"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env(), cwd=tmp)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SMALL = ("-w", "collectives", "--stopping", "test", "--no-telemetry", "--size", "1024,65536")


def test_two_ranks_measure_and_check_every_collective(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    p = torchmark(tmp_path, "run", *SMALL, "--nproc-per-node", "2", "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    rec = json.loads(out.read_text())
    assert rec["status"] == "complete"
    assert rec["config"]["distributed"]["world_size"] == 2
    assert rec["config"]["distributed"]["backend"] == "gloo"
    by_op: dict[str, list[dict]] = {}
    for r in rec["results"]:
        by_op.setdefault(r["variant"], []).append(r)
    assert set(by_op) == {
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "all_to_all",
        "send_recv",
    }
    for op, results in by_op.items():
        for r in results:
            if r["status"] == "skipped":  # a backend without the op says why
                assert "cannot" in r["reason"], r
                continue
            assert r["status"] == "ok", r
            e = r["extra"]
            assert [x["rank"] for x in e["per_rank"]] == [0, 1]
            assert all(len(x["samples_s"]) == len(r["samples_s"]) for x in e["per_rank"])
            # every sample is the slowest rank's
            for i, s in enumerate(r["samples_s"]):
                assert s == pytest.approx(max(x["samples_s"][i] for x in e["per_rank"]))
            assert e["busbw_Bps"] == pytest.approx(e["algbw_Bps"] * e["bus_factor"])
            assert e["bus_factor"] == (
                0.5 if op in ("all_gather", "reduce_scatter", "all_to_all") else 1.0
            )
    assert "busbw" in p.stdout and "collectives over 2 ranks" in p.stdout


def test_one_rank_skips_collectives_with_the_reason(tmp_path: Path) -> None:
    p = torchmark(
        tmp_path, "run", "-w", "collectives", "--no-telemetry", "--no-ceilings", "--json", "o.json"
    )
    assert p.returncode == 0, p.stderr
    (r,) = json.loads((tmp_path / "o.json").read_text())["results"]
    assert r["status"] == "skipped" and "needs >= 2 ranks" in r["reason"]


def test_unreachable_rendezvous_is_one_line_in_bounded_time(tmp_path: Path) -> None:
    port = free_port()  # nobody listens there
    t0 = time.monotonic()
    p = torchmark(
        tmp_path,
        "run",
        *SMALL,
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-timeout",
        "2",
        timeout=60,
    )
    took = time.monotonic() - t0
    assert p.returncode == 1
    errors = [line for line in p.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"cannot join rendezvous 127.0.0.1:{port}" in errors[0]
    assert "--rdzv-timeout 2 s" in errors[0]
    assert took < 40  # two 2 s tries, a pause and the start-up; not torchrun's 900 s


def test_two_nodes_on_loopback(tmp_path: Path) -> None:
    port = free_port()
    args = [
        "run", "-w", "collectives", "--stopping", "test", "--no-telemetry", "--size", "4096",
        "--precision", "all_reduce", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}",
        "--rdzv-timeout", "60",
    ]  # fmt: skip
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torchmark",
                *args,
                "--node-rank",
                str(k),
                "--db",
                f"sqlite:///{tmp_path / f'n{k}.db'}",
                "--json",
                str(tmp_path / f"n{k}.json"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(),
            cwd=tmp_path,
        )
        for k in (0, 1)
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    for p in procs:
        p.__exit__(None, None, None)
    assert [p.returncode for p in procs] == [0, 0], outs
    # the node hosting rank 0 writes the run; the other's rank printed nothing of it
    (r,) = json.loads((tmp_path / "n0.json").read_text())["results"]
    assert r["status"] == "ok" and len(r["extra"]["per_rank"]) == 2
    assert not (tmp_path / "n1.json").exists()


def test_a_killed_rank_stops_the_run_and_keeps_what_finished(tmp_path: Path) -> None:
    out = tmp_path / "k.json"
    sizes = "1024,2048,4096,8192,16384,32768,65536,131072"
    cmd = [
        sys.executable, "-m", "torchmark", "run", "-w", "collectives", "--nproc-per-node", "2",
        "--stopping", "quick", "--no-telemetry", "--precision", "all_reduce", "--size", sizes,
        "--db", f"sqlite:///{tmp_path / 'k.db'}", "--json", str(out),
    ]  # fmt: skip
    lines, killed_at = [], None
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env(), cwd=tmp_path
    ) as p:
        assert p.stdout is not None
        for line in p.stdout:
            lines.append(line)
            if killed_at is None and "[2/8]" in line:
                for c in psutil.Process(p.pid).children(recursive=True):
                    try:
                        if c.environ().get("RANK") == "1":
                            c.send_signal(signal.SIGKILL)
                            killed_at = time.monotonic()
                    except psutil.Error:
                        pass
        p.wait(timeout=60)
    text = "".join(lines)
    assert killed_at is not None, text
    # the others stop, with no 30-minute gloo wait: a rank that notices the dead peer stops in
    # seconds; one blocked in a collective gets torchrun's SIGTERM, then its SIGKILL 30 s later
    # (a loaded CI machine took 30.3 s once), so the bound is that grace with room to spare
    assert time.monotonic() - killed_at < 75, text
    assert p.returncode != 0
    assert "rank 1 was killed by SIGKILL" in text
    assert out.exists(), text
    rec = json.loads(out.read_text())
    assert rec["status"] == "incomplete"
    done = [r for r in rec["results"] if r["status"] == "ok"]
    assert 2 <= len(done) < 8, text


def test_the_test_process_is_no_rank() -> None:
    assert joined(env()) is None


def test_simplenet_trains_under_ddp_on_two_ranks(tmp_path: Path) -> None:
    out = tmp_path / "ddp.json"
    args = ["-w", "simplenet", "--scenario", "train", "--precision", "fp32", "--batch", "8"]
    p = torchmark(
        tmp_path,
        "run",
        *args,
        "--threads",
        "1",
        "--stopping",
        "test",
        "--no-telemetry",
        "--nproc-per-node",
        "2",
        "--json",
        str(out),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    (r,) = json.loads(out.read_text())["results"]
    assert r["status"] == "ok", r
    assert [x["rank"] for x in r["extra"]["per_rank"]] == [0, 1]
    assert r["extra"]["total_items_per_s"] == pytest.approx(2 * 8 / r["median_s"], rel=1e-6)
    ddp = r["extra"]["ddp"]
    assert ddp["backward_comm_s"] > 0 and ddp["bucket_sizes_bytes"]
    assert ddp["exposed_comm_s"] == pytest.approx(
        max(0.0, ddp["backward_comm_s"] - ddp["overlap_s"])
    )
    # all_reduce timed alone at the model's own buckets, after the samples, on both ranks
    alone = ddp["alone"]
    assert alone["sizes_bytes"] == ddp["bucket_sizes_bytes"] and alone["dtype"] == "float32"
    assert len(alone["samples_s"]) >= 5 and min(alone["samples_s"]) > 0
    said = " ".join(p.stdout.split())
    assert "rank 0: DDP says backward comm" in said
    assert f"all_reduce of its {len(alone['sizes_bytes'])} bucket" in said


def test_scaling_ladder_no_ddp_then_ddp_x1_and_x2(tmp_path: Path) -> None:
    """One command: no DDP here, then DDP x1 and x2 through the launcher, then DataParallel
    (skipped on a CPU with the reason); each rung stored."""
    from torchmark.store import open_store

    args = ["-w", "simplenet", "--scenario", "train", "--precision", "fp32", "--batch", "8"]
    more = ["--threads", "1", "--stopping", "test", "--no-telemetry", "--scaling", "1,2"]
    more += ["--strategy", "ddp,dp"]
    p = torchmark(tmp_path, "run", *args, *more, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    # --nproc-per-node 1 runs under DDP, and says so (not as a plain run)
    assert "DDP x1: world size 1, backend gloo" in out
    assert "DDP x2: world size 2, backend gloo" in out
    assert "scaling of simplenet/train fp32 b=8: samples/s, weak (8 per rank a step), gloo" in out
    assert "DDP x2 step p50/p95 per rank: r0 " in out and " · r1 " in out
    assert "JSON written to" not in out  # the rungs' files are the ladder's own
    assert "DDP x2: DDP says backward comm" in " ".join(out.split())
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    runs = [store.load(s.run_id) for s in reversed(store.list_runs())]
    assert [r.config.get("distributed", {}).get("world_size") for r in runs] == [None, 1, 2, None]
    (plain,), (one,), (two,), (dp,) = (r.results for r in runs)
    assert dp.status == "skipped" and dp.params["batch"] == 16  # 2 GPUs x 8 each
    assert "DP x2 skipped: nn.DataParallel splits a batch over CUDA GPUs; cpu is not one" in out
    assert "ddp" not in plain.extra and "world_size" not in plain.extra
    for r, n in ((one, 1), (two, 2)):
        assert r.status == "ok" and r.extra["world_size"] == n
        assert r.extra["ddp"]["backward_comm_s"] > 0  # DDP's own timers: it was wrapped
        assert r.extra["total_items_per_s"] == pytest.approx(n * 8 / r.median_s, rel=1e-6)


def test_ranks_that_disagree_are_refused_at_start(tmp_path: Path) -> None:
    """Two "nodes" on loopback whose command lines differ (--batch): both refuse, naming it."""
    port = free_port()
    base = [
        "run", "-w", "simplenet", "--scenario", "train", "--precision", "fp32", "--threads",
        "1", "--stopping", "test", "--no-telemetry", "--nnodes", "2",
        "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-timeout", "60",
    ]  # fmt: skip
    node = [sys.executable, "-m", "torchmark", *base]
    procs = [
        subprocess.Popen(
            [*node, "--node-rank", str(k), "--batch", b, "--db", f"sqlite:///{tmp_path}/{k}.db"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env(),
            cwd=tmp_path,
        )
        for k, b in ((0, "8"), (1, "16"))
    ]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    for p in procs:
        p.__exit__(None, None, None)
    assert [p.returncode for p in procs] == [2, 2], outs
    said = "rank 1 disagrees with rank 0 on the option batches: (16,) on rank 1, (8,) on rank 0"
    assert said in outs[0] and said in outs[1], outs
    assert "Planned" not in outs[0]  # refused before anything was measured


def test_fsdp_trains_on_two_ranks(tmp_path: Path) -> None:
    out = tmp_path / "fsdp.json"
    args = ["-w", "simplenet", "--scenario", "train", "--precision", "fp32", "--batch", "8"]
    more = ["--threads", "1", "--stopping", "test", "--no-telemetry", "--strategy", "fsdp"]
    p = torchmark(tmp_path, "run", *args, *more, "--nproc-per-node", "2", "--json", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "FSDP x2: world size 2, backend gloo" in p.stdout
    (r,) = json.loads(out.read_text())["results"]
    assert r["status"] == "ok" and r["extra"]["strategy"] == "fsdp", r
    assert len(r["extra"]["per_rank"]) == 2
    assert "ddp" not in r["extra"]  # sharded, not wrapped in DDP: no DDP timers
