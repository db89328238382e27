"""Ranking machines on one case, honestly: the pooled median with its 95 % CI, and a shared
rank wherever ``comparison.independent`` cannot tell two neighbours apart.

Also the server's checks beyond the import validators (bounds that only make sense for a
shared table) and how a submission is classed (division, machine fingerprint).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchmark.judge import verdicts
from torchmark.results import Result, RunRecord
from torchmark.results.serving import KIND
from torchmark.web import population
from torchmark.web.plausible import unverified

MAX_RESULTS = 10_000  # per run: the built-in suite has ~100 cases
MAX_SAMPLES = 100_000  # per result: the stopping rules stop far below
# A case's name is indexed (PostgreSQL refuses a b-tree entry over ~2,700 bytes); the
# built-in suite's longest is under 100.
MAX_CASE_BYTES = 2_000
CEILING_SLACK = 1.05  # a result may exceed its run's measured ceiling by 5 % (noise), no more
DATASHEET_SLACK = 1.5  # a measured ceiling above 1.5x the datasheet figure is not physical
# Kinds whose results come from the built-in suite; `model`/`tune` time the user's own code.
STANDARD_KINDS = ("run",)
SERVING = KIND  # the kind (serving.payload's), and the division of its own it is ranked in
# `torchmark run`'s options that change how a case is measured or which cases exist, at their
# defaults (RunConfig's; a test holds them equal, and the server need not import torch for
# them). Options that only choose among the suite's cases (--device, -w, --scenario,
# --precision) or skip ceilings or telemetry leave a run standard.
STANDARD_CONFIG: dict[str, Any] = {
    "suite": "standard",
    "timing": "device",
    "rule": None,
    "threads": None,
    "batches": [],
    "sizes": [],
    "extra": {},
}

Case = tuple[str, str, str]  # workload, variant, params as sorted JSON
TUNED = "tuned"  # a tune run's one case per device: its pick (``admission.user_cases``)


def listed_only(run: RunRecord) -> set[int]:
    """Results (by place) that are no case of the board: a tune run's candidates other than
    its pick, kept in its document and on its page, never a case of their own."""
    if run.kind != "tune" or not any(r.variant == TUNED for r in run.results):
        return set()
    return {i for i, r in enumerate(run.results) if r.variant != TUNED}


def case_of(r: Result) -> Case:
    return (r.workload, r.variant, json.dumps(r.params, sort_keys=True, default=str))


def case_label(case: Case) -> str:
    """The case as the CLI's tables name it: its workload, then ``format.case_label``
    (``add fp32 n=268M``, ``simplenet infer fp32 b=64``)."""
    from torchmark.format import case_label as label

    params = json.loads(case[2])
    known = [k for k in PARAM_ORDER if k in params]
    ordered = [(k, params[k]) for k in [*known, *sorted(set(params) - set(known))]]
    return f"{case[0]} {label(case[1], ordered)}".strip()


# The order workloads plan their params in (models: Sizes' fields; input: loaders.params):
# the index keeps them sorted, the CLI prints them in this order.
PARAM_ORDER = (
    "scenario", "precision", "dtype", "batch", "seq", "new_tokens", "layers", "vocab",
    "image", "n", "size", "bytes", "ranks", "workers", "pin", "prefetch", "persistent",
    "non_blocking", "side_stream", "images",
)  # fmt: skip


def case_key(case: Case) -> str:
    """A case in a URL, plainly: ``matmul/float32/n=512`` (``/?case=...``); read back by
    matching the board's own cases (``case_from_key``)."""
    params = json.loads(case[2])
    knobs = ",".join(f"{k}={v}" for k, v in sorted(params.items()))
    return "/".join(x for x in (case[0], case[1], knobs) if x)


def case_from_key(key: str, known: Iterable[Case]) -> Case | None:
    return next((c for c in known if case_key(c) == key), None)


def case_from_json(text: str) -> Case | None:
    """A case as the board's URLs spelt it before (a JSON array: ``["add", "seed",
    "{\"n\": 1000}"]``), for their redirect; None when it is not one."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, str) for v in value)):
        return None
    return (value[0], value[1], value[2])


# Why a run is custom, in the words of the options that made it so.
OPTION_OF = {
    "suite": "--suite {value}",
    "timing": "--timing {value}",
    "rule": "--stopping {value}",
    "threads": "--threads {value}",
    "batches": "--batch {value}",
    "sizes": "--size {value}",
    "extra": "extra options {value}",
}


def why_custom(run: RunRecord) -> list[str]:
    """Why ``run`` is not in the standard division, in one phrase per reason (none for a
    standard run): the options that differ from `torchmark run`'s defaults, or its kind."""
    if run.kind not in STANDARD_KINDS:
        return [f"a `torchmark {run.kind}` run (its own cases, not the built-in suite)"]
    out = []
    for flag in nonstandard_flags(run):
        key, _, value = flag.partition("=")
        if key == "world_size":
            out.append(f"{value} ranks (--nproc-per-node/--nnodes)")
            continue
        shown = value.strip("'") if value.startswith("'") else value
        if isinstance(STANDARD_CONFIG.get(key), list):
            shown = ",".join(str(v) for v in json.loads(value.replace("'", '"')))
        if key == "suite" and shown == "quick":
            out.append("--quick")
            continue
        out.append(OPTION_OF.get(key, f"{key} {{value}}").format(value=shown))
    return out


def machine_label(run: RunRecord) -> str:
    """A machine as people name it: its devices' models and its torch (``Intel Xeon +
    NVIDIA H100 80GB HBM3 · torch 2.13.0``); its fingerprint (``machine_of``) is the id."""
    devices = run.environment.get("devices") or {}
    models = [
        str(info.get("model") or name) if isinstance(info, dict) else str(name)
        for name, info in devices.items()
    ]
    sw = run.environment.get("software") or {}
    parts = [" + ".join(dict.fromkeys(models)) or "unknown devices"]
    if isinstance(sw, dict) and sw.get("torch"):
        parts.append(f"torch {sw['torch']}")
    return " · ".join(parts)


def check_bounds(run: RunRecord) -> str | None:
    """Why the server refuses ``run`` (one line naming the field), else None."""
    if len(run.results) > MAX_RESULTS:
        return f"results: {len(run.results)} results; at most {MAX_RESULTS} per run"
    for c in run.ceilings:
        if c.theoretical and c.value > DATASHEET_SLACK * c.theoretical:
            return (
                f"ceilings ({c.device} {c.key}): measured {c.value:.4g} {c.unit} is above "
                f"{DATASHEET_SLACK}x the datasheet figure {c.theoretical:.4g}"
            )
    for i, r in enumerate(run.results):
        where = f"results.{i} ({r.workload} {r.variant} on {r.device})"
        name = sum(len(x.encode()) for x in case_of(r))
        if name > MAX_CASE_BYTES:
            return (
                f"results.{i}: workload, variant and params take {name} bytes; "
                f"at most {MAX_CASE_BYTES}"
            )
        if len(r.samples_s) > MAX_SAMPLES:
            return f"{where}: {len(r.samples_s)} samples; at most {MAX_SAMPLES}"
        if r.status == "ok" and not r.samples_s:
            return f"{where}: status ok but no samples"
        if r.ok and not (r.median_s is not None and math.isfinite(r.median_s) and r.median_s > 0):
            return f"{where}: median {r.median_s!r} s is not a finite time > 0"
        pct = r.pct_of_ceiling
        # a working set in the cache beats the memory's ceiling by right: its verdict says
        # "in cache" (never ranked) and plausible.check bounds its rate by the cores' own
        # A result its own verdict already keeps off rankings (the client judged it a
        # measurement error, as it does past 100 %) is stored with that verdict: refusing
        # the run lost its other results (a loaded VM's quick run, its ceiling measured low)
        rankable = r.verdict is None or verdicts.may(r, "rank")
        if pct is not None and pct > 100 * CEILING_SLACK and r.in_cache is None and rankable:
            return (
                f"{where}: {pct:.0f} % of its run's measured ceiling "
                f"({r.ceiling.key if r.ceiling else '?'}); at most {100 * CEILING_SLACK:.0f} %"
            )
    return None


def nonstandard_flags(run: RunRecord) -> list[str]:
    """The run's options that differ from ``torchmark run``'s defaults (``--threads 4``...).
    A key the run does not record counts as its default: documents made before the config
    was recorded carry none."""
    out = []
    for key, default in STANDARD_CONFIG.items():
        value = run.config.get(key, default)
        if isinstance(value, tuple):
            value = list(value)
        if value != default:
            out.append(f"{key}={value!r}")
    # a distributed run (--nproc-per-node, --nnodes) times the slowest of its ranks
    ranks = [r.extra.get("world_size") for r in run.results]
    world = max((n for n in ranks if isinstance(n, int)), default=1)
    if world > 1:
        out.append(f"world_size={world}")
    return out


def division_of(run: RunRecord) -> str:
    """``standard`` for the built-in suite at default flags, ``serving`` for a serving run
    (no timed cases: a max rate within a p99 bound, ranked only among its own kind, see
    ``web.serving``), ``custom`` for anything else (user models, tuning, another suite,
    timing, stopping rule, thread count, batch or size)."""
    if run.kind == SERVING:
        return SERVING
    standard = run.kind in STANDARD_KINDS and not nonstandard_flags(run)
    return "standard" if standard else "custom"


def machine_of(run: RunRecord) -> str:
    """Hardware + software fingerprint without the host: runs with the same one pool."""
    env = run.environment
    sw = env.get("software") or {}
    keep = {
        "devices": env.get("devices"),
        "software": {k: sw.get(k) for k in ("torch", "cuda_runtime", "hip", "driver", "python")},
        "threads": env.get("threads"),
    }
    text = json.dumps(keep, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def device_model(run: RunRecord, device: str) -> str:
    info = (run.environment.get("devices") or {}).get(device) or {}
    model = info.get("model") if isinstance(info, dict) else None
    return str(model or device)


@dataclass
class Row:
    machine: str
    device: str  # cpu, cuda:0...
    model: str  # what the device is, as the run recorded it
    runs: list[str]
    result: Result  # the pooled samples of every run
    unit: str
    rate: float  # items (or bytes, FLOPs) per second at the median
    rate_ci: tuple[float, float] | None  # the same at the median's CI bounds
    rank: str = ""
    vs_above: str = ""  # how this row compares with the one above
    speedup: str = ""  # an accelerator row: its speed over the same machine's CPU, with CI
    speedup_x: float | None = None  # the same speed, for sorting
    # population.standing: "provisional: ..." (ranked) or "unconfirmed: ..." (held: never
    # ranked, listed after the ranked rows with its reason)
    standing: str = ""
    held: bool = False


@dataclass
class Group:
    """One machine's device on one case: the runs that pool and their kept samples."""

    machine: str
    device: str
    model: str
    runs: list[str]
    samples: list[float]  # every member's kept samples, pooled
    first: Result  # the first member: work, headline and unit of the pooled result
    submitters: set[str] = field(default_factory=set)  # tokens that sent its runs


def _pooled(first: Result, samples: list[float]) -> Result:
    # Built anew, not first.model_copy(update=...): a copy carries first's cached
    # `measurement`, so the pooled row showed the first run's median, CI and n alone.
    doc = first.model_dump(exclude=set(Result.model_computed_fields))
    return Result.model_validate(
        {**doc, "samples_s": samples, "excluded": [], "calls_per_sample": 1}
    )


def rank(
    runs: Iterable[RunRecord], case: Case, machines: Mapping[str, str] | None = None
) -> list[Row]:
    """Rows for ``case``, fastest first. ``machines`` maps run id -> machine fingerprint
    (default: computed). Results the verdict rule keeps off rankings (``verdicts``:
    invalid, WRONG, skipped), or whose work is not their case's (``plausible.unverified``),
    are never ranked."""
    groups: dict[tuple[str, str], Group] = {}
    for run in runs:
        machine = (machines or {}).get(run.run_id or "") or machine_of(run)
        skip = unverified(run).keys() | listed_only(run)
        for i, r in enumerate(run.results):
            if not r.ok or case_of(r) != case or not verdicts.may(r, "rank") or i in skip:
                continue
            g = groups.get((machine, r.device))
            if g is None:
                g = Group(machine, r.device, device_model(run, r.device), [], [], r)
                groups[(machine, r.device)] = g
            g.runs.append(run.run_id or "")
            g.samples.extend(r.measurement.kept)
    return rank_groups(list(groups.values()))


def rank_groups(groups: list[Group]) -> list[Row]:
    """Rows for the groups of one case (in first-submitted order), fastest first; then the
    rows held out against their model's population or the catalogue (``population``),
    unranked, with why."""
    from torchmark.judge.comparison import ci_text, independent

    rows: list[Row] = []
    for g in groups:
        pooled = _pooled(g.first, g.samples)
        tp = pooled.throughput
        median = pooled.measurement.median
        lo, hi = pooled.measurement.ci
        scale = (tp.value * median) if tp else 0.0  # throughput = scale / time
        ci = (scale / hi, scale / lo) if tp and math.isfinite(lo) and lo > 0 else None
        rows.append(
            Row(
                machine=g.machine,
                device=g.device,
                model=g.model,
                runs=g.runs,
                result=pooled,
                unit=tp.unit if tp else "",
                rate=tp.value if tp else 0.0,
                rate_ci=ci,
            )
        )
    entries = [
        population.Entry(
            g.machine,
            g.device,
            g.model,
            row.result.measurement.median,
            frozenset(g.submitters),
            g.first.variant,
            g.first.work.flops or 0.0,
            g.first.work.bytes or 0.0,
        )
        for g, row in zip(groups, rows, strict=True)
    ]
    for i, (held, why) in population.standing(entries).items():
        rows[i].held, rows[i].standing = held, why
    rows.sort(key=lambda row: row.result.measurement.median)
    held_rows = [row for row in rows if row.held]
    rows = [row for row in rows if not row.held]
    cpu = {row.machine: row for row in rows if row.device == "cpu"}
    for row in rows:
        base = cpu.get(row.machine)
        if base is not None and row is not base:
            j = independent(base.result.measurement, row.result.measurement)
            if not isinstance(j, str):
                row.speedup = f"{j.speed:.3g}x ({ci_text(j.ci)}) vs its CPU"
                row.speedup_x = j.speed
    for i, row in enumerate(rows):
        if i == 0:
            row.rank = "1"
            continue
        above = rows[i - 1]
        j = independent(above.result.measurement, row.result.measurement)
        if isinstance(j, str) or j.verdict in ("SAME", "UNCLEAR"):
            # cannot be told apart from the row above: they share its rank, never a false order
            above.rank = above.rank if above.rank.startswith("=") else f"={above.rank}"
            row.rank = above.rank
            row.vs_above = (
                "same" if not isinstance(j, str) and j.verdict == "SAME" else "can't tell"
            )
        else:
            row.rank = str(i + 1)
            row.vs_above = f"{j.verdict.lower()} ({j.why})"
    return rows + held_rows


def cases(runs: Iterable[RunRecord]) -> list[Case]:
    found = {case_of(r) for run in runs for r in run.results if r.ok}
    return sorted(found)


def row_json(row: Row) -> dict[str, Any]:
    return {
        "rank": row.rank,
        "machine": row.machine,
        "device": row.device,
        "model": row.model,
        "runs": row.runs,
        "n_samples": row.result.measurement.n,
        "median_s": row.result.measurement.median,
        "ci_median_s": list(row.result.measurement.ci),
        "throughput": row.rate,
        "throughput_ci": list(row.rate_ci) if row.rate_ci else None,
        "unit": row.unit,
        "vs_above": row.vs_above,
        "speedup": row.speedup,
        "standing": row.standing,
        "held": row.held,
    }
