"""Figures for the user-model commands on this machine (not a test).

    python benchmarks/user_model.py [--skip-tune]

Times `torchmark model` on the small CNN fixture with a 5-size batch sweep (target <= 60 s)
and `torchmark tune` on it (target <= 3 min), each as a fresh process (start-up included),
and prints the speedup tune found. Timings on a loaded machine vary from run to run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CNN = str(ROOT / "tests" / "fixtures" / "user_models" / "cnn.py") + ":make_model"


def timed(argv: list[str]) -> tuple[float, dict, str]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.json"
        db = f"sqlite:///{Path(tmp) / 'results.db'}"
        cmd = [sys.executable, "-m", "torchmark", *argv, "--json", str(out), "--db", db]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            sys.exit(f"{' '.join(argv[:2])} failed ({proc.returncode}):\n{proc.stderr}")
        return wall, json.loads(out.read_text()), proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--skip-tune", action="store_true")
    args = ap.parse_args()

    wall, doc, _ = timed(
        ["model", CNN, "--input", "3x32x32", "--batch", "1,2,4,8,16", "--price", "cpu=0.10"]
    )
    print(f"torchmark model, small CNN, 5 batch sizes: {wall:.1f} s wall (target <= 60 s)")
    for r in doc["results"]:
        tp = r["throughput"]
        print(
            f"  {r['device']:6} {r['variant']:6} batch {r['params']['batch']:>3}: "
            + (f"{r['median_s'] * 1e3:8.3f} ms {tp['value']:10,.0f} items/s" if tp else r["reason"])
            + (f"  [{', '.join(r['flags'])}]" if r.get("flags") else "")
        )
    print(f"  break-even: {doc['payload'].get('break_even_note') or doc['payload']['break_even']}")

    if args.skip_tune:
        return
    wall, doc, _ = timed(["tune", CNN, "--input", "3x32x32", "--batch", "1"])
    print(f"\ntorchmark tune, small CNN, batch 1: {wall:.1f} s wall (target <= 180 s)")
    for c in doc["payload"]["candidates"]:
        sp = "-" if c["speedup"] is None else f"{c['speedup']:.2f}x"
        err = "-" if c["max_error"] is None else f"{c['max_error']:.1g}"
        extra = f"compile {c['compile_s']:.1f} s" if c.get("compile_s") else (c["reason"] or "")
        print(f"  {c['name']:28} {c['status']:9} {sp:>9}  err {err:>6}  {extra}")
    for note in doc["payload"].get("notes", []):
        print(f"  note: {note}")
    for dev, rec in doc["payload"]["recommendation"].items():
        sp = rec.get("speedup") or 1.0
        print(f"  recommended on {dev}: {rec['name']} ({sp:.2f}x the baseline)")


if __name__ == "__main__":
    main()
