"""The figures session 5 on a lent GPU must put in its notes, read from what came back.

    python benchmarks/gpu_session5_check.py FOLDER_OR_FILE... [--no-estimate]

Give it the folders the two device calls of ``benchmarks/gpu_session5.sh`` returned (their
``files_at``) or the files themselves; it reads what is there and says what is missing:

- steps.tsv: each step's exit status and wall time against its limit;
- tune.json: the fp32 baseline (never WRONG), the candidates, the recommendation and its
  measured gain, the throughput answer (the batch with the most items/s);
- serving-*.json: each device's highest rate within the bound, devices needed, cost, and
  the verdict;
- standard.json + standard.log: the run's status, its wall time per part against
  ``gpu_standard_estimate.py``'s estimate (read from the log's time stamps), how its cases
  stopped, the verdict kinds, where its ceilings came from, and the make-reference command;
- seed-add-cpu.json: the CPU seed-add's verdict (issue 25: no longer invalid), its ceiling;
- model-cpu.json and session5.log: the model command's forked child on the 16-core host,
  the standard plan's buffer sizes and torchmark's own estimate on the real GPU.

Reads documents of schema 1 (``extra``) and 2 (``payload``); verdict kinds are the rule's
own (``torchmark.judge.verdicts.kind_of_doc``). Torch is imported only for the estimate.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections import Counter, defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

from torchmark.judge.verdicts import RULES, kind_of_doc

HERE = Path(__file__).resolve().parent
NAMES = ("steps.tsv", "tune.json", "standard.json", "standard.log", "seed-add-cpu.json",
         "model-cpu.json", "session5.log")  # fmt: skip
CASE_LINE = re.compile(r"^\[(\d+)/(\d+)\] ([^/ ]+)/")
START = "start-up (interpreter, torch, CUDA context)"  # as gpu_standard_estimate.py names it
CEILINGS = "ceilings (+ the first case after them)"
END = "end (tables, store; a case cut short)"


def gather(paths: list[Path]) -> dict[str, list[Path]]:
    """Every file by name, from the folders and files given (a name may come twice: the
    steps of both calls)."""
    found: dict[str, list[Path]] = defaultdict(list)
    for p in paths:
        for f in sorted(p.iterdir()) if p.is_dir() else [p]:
            if f.is_file():
                found[f.name].append(f)
    return found


def payload(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    """A run's own findings: schema 2's ``payload``, schema 1's ``extra`` (serving kept
    them one level down, under its kind)."""
    p: dict[str, Any] = doc.get("payload") or doc.get("extra") or {}
    inner = p.get(kind)
    return inner if isinstance(inner, dict) else p


def ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.3g} ms"


def kind_word(r: dict[str, Any]) -> str:
    """The result's verdict kind as tables say it, with its first reason."""
    kind = kind_of_doc(r)
    reasons = (r.get("verdict") or {}).get("reasons") or ([r["reason"]] if r.get("reason") else [])
    word = RULES[kind].word
    return f"{word}: {reasons[0]}" if reasons and kind != "ok" else word


def head(title: str) -> None:
    print(f"\n== {title}")


def say(text: str, indent: int = 0) -> None:
    """One paragraph in 80 columns, its continuation lines indented two more."""
    pad = " " * indent
    print(textwrap.fill(text, 80, initial_indent=pad, subsequent_indent=pad + "  "))


def opened(f: Path, title: str) -> dict[str, Any]:
    """A returned run document, under its heading and the line that names the run."""
    head(title)
    doc: dict[str, Any] = json.loads(f.read_text())
    print(
        f"run {doc.get('run_id')} ({doc.get('kind')}, {doc.get('status')}), schema "
        f"{doc.get('schema_version')}, torchmark {doc.get('tool_version')}"
    )
    return doc


def steps(files: list[Path]) -> None:
    head("steps (exit 124/137: stopped by its limit)")
    for f in files:
        print(f"{f.parent.name}/{f.name}:")
        for row in f.read_text().splitlines():
            name, rc, limit, wall = [*row.split("\t"), "", "", ""][:4]
            what = {"0": "ok", "skipped": "SKIPPED", "124": "STOPPED at its limit",
                    "137": "KILLED at its limit"}.get(rc, f"FAILED (exit {rc})")  # fmt: skip
            print(f"  {name[:40]:40} {what:18} {wall:>6} s of {limit}")


def tune(f: Path) -> None:
    doc = opened(f, f"1 tune: {f.name}")
    p = payload(doc, "tune")
    by_dev: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in p.get("candidates", []):
        by_dev[c.get("device", "?")].append(c)
    for dev, cands in by_dev.items():
        base = next((c for c in cands if c.get("stage") == "baseline"), None)
        if base is None:
            print(f"{dev}: no baseline measured")
        elif base.get("status") == "baseline":
            print(
                f"{dev}: fp32 baseline {base.get('latency_ms', 0):.3g} ms, spread "
                f"{base.get('rel_iqr', 0):.0%}, max error {base.get('max_error')}: not WRONG"
            )
        else:
            why = base.get("reason") or base.get("why")
            say(f"{dev}: FAIL: the fp32 baseline is {base.get('status')}: {why}")
        for c in cands:
            err = c.get("max_error")
            tol = c.get("tolerance")
            error = "" if err is None else f" error {err:.2g}"
            error += "" if err is None or tol is None else f" (tol {tol:g})"
            gain = "" if c.get("speedup") is None else f" {c['speedup']:.2f}x"
            print(f"  {c.get('name', '?')[:30]:30} {c.get('status', ''):10}{gain}{error}")
            why = c.get("reason") or c.get("why")
            if why and c.get("status") in ("rejected", "skipped", "over-budget"):
                say(why, 6)
    for dev, rec in (p.get("recommendation") or {}).items():
        if rec.get("speedup"):
            print(f"recommended on {dev}: {rec['name']}, measured gain {rec['speedup']:.2f}x")
        else:
            say(f"recommended on {dev}: {rec.get('name')} ({rec.get('reason')})")
    for dev, best in (p.get("throughput") or {}).items():
        gain = "" if best.get("speedup") is None else f", {best['speedup']:.2f}x per item"
        name = str(best.get("name"))
        if "batch" not in name:
            name += f" at batch {best.get('batch')}"
        say(
            f"most items/s on {dev}: {name}: {best.get('items_per_s') or 0:,.0f}/s, "
            f"{best.get('latency_ms', 0):.3g} ms a call{gain}"
        )
    if not p.get("throughput"):
        print("throughput answer: none in the run (the search stopped before it)")
    for note in p.get("notes", []):
        say(f"note: {note}", 2)


def serving(f: Path) -> None:
    doc = opened(f, f"2 serving: {f.name}")
    p = payload(doc, "serving")
    bound = p.get("bound_s")
    print(f"{p.get('model')} ({p.get('inputs')}), p99 <= {ms(bound)}, rate {p.get('rate')}/s")
    for a in p.get("answers", []):
        say(str(a.get("sentence")), 2)
    say(f"verdict: {p.get('verdict')}")
    gen = (p.get("generator") or {}).get("sentence")
    if gen:
        say(gen, 2)
    for fleet in p.get("fleets", []):
        split = f" {fleet.get('processes')}x{fleet.get('threads')}" if fleet.get("threads") else ""
        say(
            f"{fleet.get('device')}{split}: {len(fleet.get('points', []))} points, "
            f"ended: {fleet.get('stop_reason')}",
            2,
        )


def seed_add(f: Path) -> None:
    doc = opened(f, f"4 CPU seed-add: {f.name} (issue 25: no longer invalid)")
    for r in doc.get("results", []):
        rate = (r.get("throughput") or {}).get("value")
        pct = r.get("pct_of_ceiling")
        said = f"{rate:,.1f} it/s" if rate else "no rate"
        if pct is not None:
            said += f", {pct:.1f} % of its ceiling"
        mark = "FAIL" if kind_of_doc(r) == "invalid" and r["variant"] == "as-published" else ""
        print(f"{mark:4} {r['variant']} {r.get('params')} on {r['device']}: {said}")
        say(kind_word(r), 5)
    for c in doc.get("ceilings", []):
        if c.get("key") == "bandwidth":
            d = c.get("details") or {}
            was = d.get("raised_from")
            raised = "" if was is None else f", raised from {was / 1e9:.1f} GB/s"
            say(f"bandwidth ceiling {c['value'] / 1e9:.1f} GB/s{raised}; {c.get('method')}")


def model_cpu(f: Path) -> None:
    doc = opened(f, f"5 model on the CPU (forked child): {f.name}")
    for r in doc.get("results", []):
        rate = (r.get("throughput") or {}).get("value")
        shown = "-" if rate is None else f"{rate:,.0f}"
        say(f"batch {r.get('params', {}).get('batch')}: {shown} items/s, {kind_word(r)}", 2)


def plan_lines(f: Path) -> None:
    """The standard plan's sizes and torchmark's own estimate, from the call-1 log."""
    head(f"5 the standard plan on the device: {f.name}")
    text = f.read_text()
    at = text.find("=== 5a")
    block = text[at:] if at >= 0 else ""
    hits = [ln for ln in block.splitlines() if ln.startswith(("sizes:", "estimate of", "==="))]
    for line in hits[:6] or ["not in the log"]:
        say(line)


def stamped(f: Path) -> list[tuple[float, str]]:
    rows = []
    for ln in f.read_text().splitlines():
        t, _, line = ln.partition("\t")
        try:
            rows.append((float(t), line))
        except ValueError:
            continue
    return rows


def measured_parts(log: Path, part_of: Any) -> tuple[dict[str, list[float]], list[str]]:
    """Seconds per part from a stamped log, one entry per case: a case's time runs from the
    line before it (the previous case's, or the plan's) to its own line. The first case
    after "measuring ceilings" carries the ceilings: its time goes to CEILINGS (an entry of
    0 s keeps its count in its part); START and END are the rest of the run's time."""
    parts: dict[str, list[float]] = defaultdict(list)
    said: list[str] = []
    prev: float | None = None
    after_ceilings = False
    for t, line in stamped(log):
        if line.startswith("=== standard suite: starting") or "resuming run" in line:
            prev, after_ceilings = t, False
            said.append(line.removeprefix("=== "))
        elif prev is None:
            continue
        elif line.startswith("Planned "):
            parts[START].append(t - prev)
            prev = t
            said.append(line)
        elif line.startswith("measuring ceilings"):
            after_ceilings = True
        elif m := CASE_LINE.match(line):
            took = t - prev
            if after_ceilings:
                parts[CEILINGS].append(took)
                took, after_ceilings = 0.0, False
            parts[part_of(m.group(3))].append(took)
            prev = t
        elif line.startswith("exit "):
            parts[END].append(t - prev)
            said.append(line)
            prev = None
    return parts, said


def standard(doc_file: Path | None, log: Path | None, with_estimate: bool) -> None:
    head("3 the standard suite: time per part (standard.log)")
    part_of: Any = _workload  # without the estimate: one row per workload
    est = None
    if with_estimate:
        sys.path.insert(0, str(HERE))
        from gpu_standard_estimate import estimate, part_of

        est = estimate("standard")
    planned = None
    if log is None:
        print("standard.log: missing (no time per part)")
    else:
        parts, said = measured_parts(log, part_of)
        for line in said:
            say(line)
        planned = next((int(m[1]) for s in said if (m := re.match(r"Planned (\d+)", s))), None)
        guess: dict[str, tuple[int | str, float]] = dict(est.parts) if est else {}
        if est:
            guess[START] = ("", est.start_s)
            guess[CEILINGS] = (est.ceilings, est.ceiling_s)
        print(f"\n{'part':44} {'cases':>5} {'seconds':>8} | {'estimate':>8} {'cases':>5}")
        for name in sorted(set(parts) | set(guess), key=lambda n: -sum(parts.get(n, [0]))):
            n: int | str = len(parts[name]) if name in parts and name not in (START, END) else ""
            if name == CEILINGS:
                n = ""
            took = f"{sum(parts[name]):7.0f}s" if name in parts else "-"
            g_n, g_s = guess.get(name, ("", None))
            shown = "" if g_s is None else f"{g_s:7.0f}s"
            print(f"{name[:44]:44} {n!s:>5} {took:>8} | {shown:>8} {g_n!s:>5}")
        total = sum(sum(v) for v in parts.values())
        e_total = f"{est.total_s:7.0f}s" if est else ""
        e_cases = est.cases if est else ""
        print(f"{'total':44} {'':>5} {total:7.0f}s | {e_total:>8} {e_cases!s:>5}")
        if est:
            say(
                "estimate: gpu_standard_estimate.py, for an H100. The ceilings' row also "
                "holds the first case measured after them (counted in its own part)"
            )
    if doc_file is None:
        print("standard.json: missing")
        return
    doc = opened(doc_file, f"3 the standard suite: {doc_file.name}")
    results = doc.get("results", [])
    wall = _wall_s(doc)
    of = f" of {planned} planned" if planned else ""
    print(f"{len(results)} results{of}; stored wall time {wall or 0:.0f} s")
    kinds = Counter(kind_of_doc(r) for r in results)
    print("verdicts: " + ", ".join(f"{RULES[k].word} {n}" for k, n in kinds.most_common()))
    stops: dict[str, Counter[str]] = defaultdict(Counter)
    for r in results:
        stops[part_of(r["workload"])][r.get("stop_reason") or r.get("status", "?")] += 1
    for name, c in stops.items():
        say(f"stopped, {name}: " + ", ".join(f"{k} {n}" for k, n in c.most_common()), 2)
    ceilings(doc)
    if doc.get("status") == "complete":
        gpu = "H200" if "H200" in json.dumps(doc.get("environment", {})) else "H100"
        say(
            f"complete: scripts/make-reference {doc_file} {gpu.lower()}-standard --title "
            f'"..." --where "lent {gpu}, {doc.get("created_utc", "")[:10]}"'
        )
    else:
        print("not complete: not a reference run; the time per part above is the answer")


def ceilings(doc: dict[str, Any]) -> None:
    """Where the run's ceilings came from (this run, or reused from which), one line per
    device; a raised ceiling or a second look said one by one."""
    by_dev: dict[str, Counter[str]] = defaultdict(Counter)
    for c in doc.get("ceilings", []):
        src = c.get("provenance") or {}
        run = src.get("run_id")
        where = "this run" if run == doc.get("run_id") else f"reused from run {run}"
        by_dev[c["device"]][f"{where}, other cores {src.get('other_cores')}"] += 1
        d = c.get("details") or {}
        if "raised_from" in d:
            say(f"{c['device']} {c['key']} RAISED: {c.get('method')}", 2)
        if "first_look" in d:
            say(f"{c['device']} {c['key']}: second look (first {d['first_look']:.4g})", 2)
    for dev, sources in by_dev.items():
        said = "; ".join(f"{n} {w}" for w, n in sources.most_common())
        say(f"ceilings {dev}: {said}", 2)


def _workload(name: str) -> str:
    return name


def _wall_s(doc: dict[str, Any]) -> float | None:
    try:
        a = datetime.fromisoformat(doc["created_utc"].replace("Z", "+00:00"))
        b = datetime.fromisoformat(doc["finished_utc"].replace("Z", "+00:00"))
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    return (b - a).total_seconds()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path)
    ap.add_argument("--no-estimate", action="store_true", help="skip the estimate (~40 s)")
    args = ap.parse_args()
    missing = [p for p in args.paths if not p.exists()]
    if missing:
        print(f"no such file or folder: {missing[0]}; give the files_at of each call")
        return 2
    found = gather(args.paths)
    if "steps.tsv" in found:
        steps(found["steps.tsv"])
    if "tune.json" in found:
        tune(found["tune.json"][-1])
    for name in sorted(n for n in found if n.startswith("serving-") and n.endswith(".json")):
        serving(found[name][-1])
    if "standard.json" in found or "standard.log" in found:
        doc = found.get("standard.json", [None])[-1]
        log = found.get("standard.log", [None])[-1]
        standard(doc, log, not args.no_estimate)
    if "seed-add-cpu.json" in found:
        seed_add(found["seed-add-cpu.json"][-1])
    if "model-cpu.json" in found:
        model_cpu(found["model-cpu.json"][-1])
    if "session5.log" in found:
        plan_lines(found["session5.log"][-1])
    absent = [n for n in NAMES if n not in found]
    if not any(n.startswith("serving-") for n in found):
        absent.append("serving-*.json")
    if absent:
        print(f"\nnot given: {', '.join(absent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
