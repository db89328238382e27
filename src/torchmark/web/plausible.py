"""What the server checks of a submission beyond the import validators, independently of what
the client sent (MLPerf's submission checker is the model): the document's shape (nesting,
the environment's types, its date), each sample's physics and each rate against the
device's peak (``check``: a violation refuses the whole submission with one line naming
the result and the bound; nothing is stored), and the work of each built-in case
(``unverified``: derived from the ``catalogue``, never trusted; a result declaring other
work is stored, labelled and never ranked) and each result's verdict (``rejudged``: judged
again from its samples, never better than the client's). A case the catalogue does not
know (a plugin's) ranks only against itself, its declared rates bounded by the device's peak.
Torch-free, like the whole server.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from torchmark.hardware import catalog, datasheet
from torchmark.hardware.physical import ACCELERATOR_BPS, ACCELERATOR_FLOPS, IN_CACHE_FACTOR
from torchmark.judge.validity import ORDER, judge, judge_run
from torchmark.results import Result, RunRecord, Verdict
from torchmark.store.exchange import json_kind
from torchmark.web import catalogue

# JSON nested deeper than this is refused before it is parsed: a run document is ~6 levels
# deep (results.N.telemetry.series.N...); 500 levels reached Python's recursion limit in the
# server's own walks (a 500 where a 422 was due).
MAX_DEPTH = 32
# A sample is the time of calls_per_sample calls together: below 1 us no timer torchmark
# uses resolves it (CUDA events: ~0.5 us; perf_counter: ~0.1 us plus the call).
MIN_SAMPLE_S = 1e-6
# timing/loop.py's MAX_CALLS_PER_SAMPLE (a test holds them equal): more calls than that in
# one sample are no torchmark measurement.
MAX_CALLS_PER_SAMPLE = 1 << 20
# A sample of several calls is grouped to ~10 ms (CPU) or ~1 ms (GPU), so it never outlasts
# the stopping rule's time-out (max_time_s in Result.rule); 600 s where the rule names none
# (the Fixed rule's default, the longest).
LONGEST_RULE_S = 600.0
# A rate this far above the device's peak is not a measurement. The margin covers boost
# clocks above the datasheet's and convolutions that cuDNN runs with fewer multiplies than
# the direct algorithm counted (Winograd, FFT); a forged figure is off by orders of
# magnitude (1e9 TFLOP/s was submitted for a Xeon).
RATE_MARGIN = 1.5
# The earliest a run can be: the seed blog's year (torchmark's own documents are younger);
# the latest: a day ahead of the server's clock (a submitter's clock may run fast).
EARLIEST = datetime(2023, 1, 1, tzinfo=timezone.utc)
AHEAD = timedelta(days=1)
LOW_PRECISION = re.compile(r"bf16|bfloat16|fp16|float16|half|int8|fp8|amp", re.IGNORECASE)

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


def too_deep(body: bytes) -> str | None:
    """Why ``body`` nests too deep to parse (one line), else None. Scans the brackets
    outside strings without parsing, so a 500-level document costs nothing but the scan."""
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub(b'""', body)):
        depth += 1 if m.group() in (b"[", b"{") else -1
        if depth > MAX_DEPTH:
            return f"the JSON nests deeper than {MAX_DEPTH} levels; a run document is ~6"
    return None


def environment_shape(doc: dict[str, Any]) -> str | None:
    """Why the document's environment has the wrong types (one line), else None: readers
    call ``.get`` on each device record (``"devices": "cpu"`` was a 500)."""
    env = doc.get("environment", {})
    if not isinstance(env, dict):
        return "environment: an object is needed"
    kinds = {"devices": dict, "software": dict, "env_vars": dict, "precision": dict}
    for key, kind in kinds.items():
        if key in env and env[key] is not None and not isinstance(env[key], kind):
            return f"environment.{key}: an object is needed, not {json_kind(env[key])}"
    for name, info in (env.get("devices") or {}).items():
        if not isinstance(info, dict):
            return f"environment.devices.{name}: an object is needed, not {json_kind(info)}"
        for key in ("model", "kind"):
            if key in info and info[key] is not None and not isinstance(info[key], str):
                return f"environment.devices.{name}.{key}: a string is needed"
        for key in ("physical_cores", "logical_cores", "memory_bytes", "l2_bytes", "llc_bytes"):
            value = info.get(key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                return f"environment.devices.{name}.{key}: an integer is needed"
    for name, value in (env.get("software") or {}).items():
        if value is not None and not isinstance(value, str | int | float | bool):
            return f"environment.software.{name}: a string is needed"
    threads = env.get("threads")
    if threads is not None and not isinstance(threads, int | dict):
        return "environment.threads: a number or an object is needed"
    return None


def check(run: RunRecord) -> str | None:
    """Why ``run`` is refused (one line naming the result and the bound), else None."""
    created = run.created_utc
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    if not EARLIEST <= created <= datetime.now(timezone.utc) + AHEAD:
        return (
            f"created_utc {created.isoformat()} is not a time a run was made "
            f"({EARLIEST.date()} to a day after the server's clock); export the run again"
        )
    for i, r in enumerate(run.results):
        bad = _sampling(r) or (_physics(run, r) if r.ok else None)
        if bad:
            return f"results.{i} ({r.workload} {r.variant} on {r.device}): {bad}"
    return None


def rejudged(run: RunRecord) -> RunRecord:
    """The run with each result's verdict judged again here from what it stores (its
    samples, flags, telemetry): a client's verdict could say ``ok`` beside samples that
    scatter 60 % and be ranked unmarked. Where the server's level is worse, its reasons come
    first and the client's follow; otherwise the client's verdict stands as sent (a level
    the client raised is never lowered, and an older client's words for the same finding
    are not doubled by this server's). The run's verdict is judged again where a result's
    changed. An honest client's verdicts are unchanged: ``judge`` is a pure function of the
    stored result. The run's verdict is judged again from its results, never better than
    sent. Copied no deeper than what changes (the run's results list and the results
    judged worse): a deep copy of a 100-case run was 95 % of this function."""
    results: list[Result] = []
    for r in run.results:
        here = judge(r)
        if r.verdict is None or ORDER[here.level] > ORDER[r.verdict.level]:
            r = r.model_copy(update={"verdict": _worse(here, r.verdict)})
        results.append(r)
    out = run.model_copy(update={"results": results})
    # the run's verdict from its results, always: `ok` was stored as sent beside a result
    # the client itself had judged invalid
    out.verdict = _worse(judge_run(out), out.verdict)
    return out


def _worse(here: Verdict, sent: Verdict | None) -> Verdict:
    """The worse of the two: the server's where it is worse, its reasons first."""
    if sent is None:
        return here
    if ORDER[here.level] <= ORDER[sent.level]:
        return sent
    return Verdict(level=here.level, reasons=list(dict.fromkeys([*here.reasons, *sent.reasons])))


def _sampling(r: Result) -> str | None:
    k = r.calls_per_sample
    if not 1 <= k <= MAX_CALLS_PER_SAMPLE:
        return f"calls_per_sample {k}: at most {MAX_CALLS_PER_SAMPLE:,} calls in one sample"
    if not r.samples_s:
        return None
    shortest = min(r.samples_s) * k
    if shortest < MIN_SAMPLE_S:
        return (
            f"a sample of {k} call(s) took {shortest:.3g} s; no timer resolves less than "
            f"{MIN_SAMPLE_S:g} s"
        )
    longest = max(r.samples_s) * k
    bound = rule_bound_s(r.rule)
    if k > 1 and longest > bound:
        return (
            f"a sample of {k} calls took {longest:.3g} s, above its stopping rule's "
            f"{bound:g} s time-out (samples of several calls are grouped to ~10 ms)"
        )
    return None


def rule_bound_s(rule: str) -> float:
    """The time-out of the stopping rule a result names (``max_time_s=2.0``), at most
    LONGEST_RULE_S."""
    m = re.search(r"max_time_s=([0-9.eE+]+)", rule or "")
    try:
        value = float(m.group(1)) if m else LONGEST_RULE_S
    except ValueError:
        value = LONGEST_RULE_S
    return min(value, LONGEST_RULE_S) if math.isfinite(value) and value > 0 else LONGEST_RULE_S


def _device(run: RunRecord, r: Result) -> tuple[dict[str, Any], bool]:
    """The device record of ``r`` (empty where the run has none) and whether it is an
    accelerator."""
    info = (run.environment.get("devices") or {}).get(r.device)
    info = info if isinstance(info, dict) else {}
    return info, (info.get("kind") or r.device.split(":")[0]) != "cpu"


def unverified(run: RunRecord) -> dict[int, str]:
    """Results of built-in cases whose declared work is not the catalogue's, by their
    place in the run: why each is never ranked. Such a result is kept (an older torchmark,
    a hand-made document) and shown with the reason, but its rate is not the case's."""
    out = {}
    for i, r in enumerate(run.results):
        if not r.ok:
            continue
        _, accelerator = _device(run, r)
        derived = catalogue.work(r.workload, r.variant, r.params, accelerator)
        declared = r.work.model_dump()
        if derived is not None and not any(catalogue.matches(declared, w) for w in derived):
            out[i] = (
                f"unverified: declares work {catalogue.describe(declared)}, not "
                f"this case's {' or '.join(catalogue.describe(w) for w in derived)} (the "
                "server derives the work of built-in cases itself), so it is never ranked"
            )
    return out


def _physics(run: RunRecord, r: Result) -> str | None:
    info, accelerator = _device(run, r)
    best = min(r.measurement.kept)  # the fastest kept sample: the highest rate claimed
    flops_peak, bytes_peak, source = peaks(info, r, accelerator)
    for amount, peak, unit in (
        (r.work.flops, flops_peak, "FLOP/s"),
        (r.work.bytes, bytes_peak, "B/s"),
    ):
        rate = amount / best if best > 0 else math.inf
        if amount and rate > RATE_MARGIN * peak:
            return (
                f"{rate:.3g} {unit} at its fastest sample is above {RATE_MARGIN}x the "
                f"device's peak {peak:.3g} {unit} ({source})"
            )
    return None


def peaks(info: dict[str, Any], r: Result, accelerator: bool) -> tuple[float, float, str]:
    """(FLOP/s, B/s, where they come from) that no result of ``r``'s case on this device
    can exceed: the catalogue's row for its model (``hardware.catalog``; GPUs:
    ``datasheet``), else the fastest device of its kind."""
    low = bool(LOW_PRECISION.search(" ".join([r.variant, *map(str, r.params.values())])))
    working_set = r.work.bytes
    if not accelerator:
        # the catalogue's model, never the cores or cache the document claims (a forged
        # `physical_cores: 100000` raised the old bound with it); unknown: the fastest known
        row = catalog.cpu(str(info.get("model") or ""))
        cpu = row or catalog.any_cpu()
        # a working set past the caches has its excess read from memory each call at least
        # (streamed through an LRU cache, nearly all of it is), so the rate is at most the
        # memory's x working set / excess; one the caches hold: the cores' L1 bound
        llc = cpu.cache_total
        in_cache = working_set <= llc
        nbytes = cpu.cache_bps
        if not in_cache:
            nbytes = min(nbytes, cpu.dram_bps * working_set / (working_set - llc))
        where = "its caches" if in_cache else "memory"
        named = (
            f"{cpu.model} in the hardware catalogue"
            if row
            else f"{info.get('model') or 'this CPU'!r} is not in the hardware catalogue: the "
            "fastest catalogued CPU"
        )
        return cpu.flops(low), nbytes, f"{named}, from {where}"
    spec = datasheet.lookup(str(info.get("model") or ""), info.get("memory_bytes"))
    if spec is None:
        return ACCELERATOR_FLOPS, ACCELERATOR_BPS, "no datasheet row: the fastest accelerator"
    dense = [spec.float32, spec.tf32, spec.float16, spec.bfloat16]
    if "int8" in r.variant or "int8" in str(r.params.get("precision", "")):
        dense.append(spec.int8)
    if r.workload == "matmul" and spec.peak(f"matmul:{r.variant}"):
        flops = spec.peak(f"matmul:{r.variant}") or 0.0
    else:
        flops = max(x for x in dense if x)
    l2 = datasheet.L2_MIB.get(spec.model, 0) * 2**20  # the catalogue's, not the document's
    in_cache = not l2 or working_set < 8 * l2
    nbytes = spec.bandwidth * (IN_CACHE_FACTOR if in_cache else 1.0)
    return flops, nbytes, f"{spec.model}: {spec.source}"
