"""One self-contained HTML file per report: inline CSS and SVG, no script, no network.

A pure function of RunRecords (``render``): the template only lays out what is built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jinja2
from markupsafe import Markup

from torchmark import __version__
from torchmark.devices import is_host
from torchmark.reference import device_label, seed_results
from torchmark.report import charts as charts_mod
from torchmark.report import format as fmt
from torchmark.report.table import (
    case_key,
    ceiling_cell,
    devices_of,
    seed_placement,
    speedup,
    spread_cell,
    status_cell,
)
from torchmark.results import Result, RunRecord
from torchmark.timing.stats import (
    FEW_SAMPLES,
    MIN_WARMUP_CALLS,
    NOISY_REL_IQR,
    UNRELIABLE_REL_IQR,
)

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("torchmark.report", "templates"),
    autoescape=True,
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)


def _level(r: Result) -> str:
    """CSS class of a row: how much to trust its number."""
    invalid = r.verdict is not None and r.verdict.level == "invalid"
    # Above 100 % of a measured ceiling is impossible: a measurement error, shown as such.
    if r.status == "wrong" or invalid or "above_ceiling" in r.flags:
        return "bad"
    if r.status == "skipped":
        return "skip"
    if r.flags or (r.verdict is not None and r.verdict.level == "warn"):
        return "warn"
    return "ok"


# What each flag means, shown on hover when the verdict gives no reason of its own.
FLAG_HELP = {
    "noisy": f"spread (IQR) at least {NOISY_REL_IQR:.0%} of the median",
    "unreliable": f"spread (IQR) at least {UNRELIABLE_REL_IQR:.0%} of the median",
    "timed_out": "stopped at its time limit before the stopping rule was met",
    "few_samples": f"fewer than {FEW_SAMPLES} samples",
    "short_warmup": f"fewer than {MIN_WARMUP_CALLS} warm-up calls",
    "all_excluded": "every sample was set aside (throttled)",
    "competing_load": "other processes were busy during the measurement",
    "throttled": "samples taken while the device throttled",
    "above_ceiling": "above 100 % of the measured ceiling: a measurement error",
    "out_of_memory": "ran out of memory",
}
# The verdict reason (telemetry/verdict.py's words) that explains each flag.
FLAG_REASON = {
    "noisy": "spread ",
    "unreliable": "spread ",
    "timed_out": "timed out",
    "few_samples": "samples: the spread",
    "competing_load": "other processes",
    "throttled": "throttl",
    "all_excluded": "throttl",
    "above_ceiling": "above 100 %",
}


def _pills(r: Result) -> tuple[list[dict[str, str]], list[str]]:
    """One pill per flag with its reason on hover, and the reasons no pill explains, to be
    shown once as text (the terminal's ``flag_words`` lists a flag and its reason both)."""
    if r.status in ("skipped", "wrong"):
        word = "skipped" if r.status == "skipped" else "WRONG"
        why = r.reason or ("no reason given" if word == "skipped" else "correctness check failed")
        return [{"text": word, "title": why}], [why]
    reasons = list(r.verdict.reasons) if r.verdict is not None else []
    used: set[str] = set()
    pills = []
    if r.verdict is not None and r.verdict.level == "invalid" and reasons:
        pills.append({"text": "invalid", "title": reasons[0]})
    for flag in r.flags:
        match = FLAG_REASON.get(flag)
        found = next((w for w in reasons if match and match in w), None)
        if found:
            used.add(found)
        title = found or FLAG_HELP.get(flag, flag)
        pills.append({"text": flag.replace("_", " "), "title": title})
    if pills and pills[0]["text"] == "invalid":
        used.discard(reasons[0])  # why a number is invalid is never left to a hover
    return pills, [w for w in reasons if w not in used]


def _rows(run: RunRecord) -> list[dict[str, Any]]:
    order = {d: i for i, d in enumerate(devices_of(run))}
    hosts = {case_key(r): r for r in run.results if is_host(r.device)}
    # Keep each workload's cases in run order, devices side by side within a case.
    firsts: dict[Any, int] = {}
    for i, r in enumerate(run.results):
        firsts.setdefault(case_key(r), i)
    results = sorted(run.results, key=lambda r: (firsts[case_key(r)], order[r.device]))
    out = []
    for r in results:
        s = speedup(r, hosts.get(case_key(r)))
        pills, reasons = _pills(r)
        out.append(
            {
                "workload": r.workload,
                "case": charts_mod.case_words(r).removeprefix(r.workload).strip(),
                "device": r.device,
                "throughput": status_cell(r),
                "median": fmt.duration(r.median_s),
                "spread": spread_cell(r),
                "n": r.n or "",
                "ceiling": ceiling_cell(r),
                "speedup": fmt.ratio(s) if s else "",
                "pills": pills,
                "reasons": reasons,
                "level": _level(r),
                "notes": r.notes,
            }
        )
    return out


def _kv(d: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in d.items()) if isinstance(d, dict) else ""


def _environment(run: RunRecord) -> list[tuple[str, str]]:
    env = run.environment
    sw = env.get("software", {})
    items = [
        ("host", env.get("host")),
        ("os", env.get("os")),
        ("python", sw.get("python")),
        ("torch", sw.get("torch")),
        ("CUDA runtime", sw.get("cuda_runtime")),
        ("cuDNN", sw.get("cudnn")),
        ("driver", sw.get("driver")),
        ("threads", _kv(env.get("threads"))),
        ("precision flags", _kv(env.get("precision"))),
        (
            "environment variables",
            _kv(env.get("env_vars")),
        ),
        ("load at start", _kv(env.get("load_at_start"))),
        ("fingerprint", run.fingerprint),
        ("command", run.command),
        ("torchmark", run.tool_version),
    ]
    for d in devices_of(run):
        info = env.get("devices", {}).get(d, {})
        if isinstance(info, dict) and info:
            facts = ", ".join(
                f"{k}={fmt.si(v, 'B') if k.endswith('_bytes') and v else v}"
                for k, v in info.items()
                if k not in ("model", "kind")
            )
            items.append((f"device {d}", f"{info.get('model', d)}: {facts}"))
    return [(k, str(v)) for k, v in items if v not in (None, "", "None")]


def _ceilings(run: RunRecord) -> list[dict[str, str]]:
    order = {d: i for i, d in enumerate(devices_of(run))}
    return [
        {
            "device": device_label(run, c.device),
            "key": c.key,
            "measured": fmt.ceiling_value(c),
            "theoretical": fmt.ceiling_value(c, c.theoretical) if c.theoretical else fmt.DASH,
            "pct": fmt.pct(c.pct_of_theoretical),
            "method": c.method,
            "source": c.theoretical_source or "",
        }
        for c in sorted(run.ceilings, key=lambda c: (order.get(c.device, 99), c.key))
    ]


def _chart(c: charts_mod.Chart) -> dict[str, Any]:
    # The SVG is matplotlib's own output with every text escaped by it: safe to inline.
    return {"key": c.key, "title": c.title, "svg": Markup(c.svg) if c.svg else None, "note": c.note}


def _num(x: Any, spec: str, suffix: str = "") -> str:
    return fmt.DASH if not isinstance(x, int | float) else f"{x:{spec}}{suffix}"


def _tune(run: RunRecord) -> dict[str, Any] | None:
    """``tune``'s recommendation per device (its code as printed) and the ranked candidates."""
    recs = run.extra.get("recommendation")
    cands = run.extra.get("candidates")
    if not recs and not cands:
        return None
    recommendations = [
        {
            "device": device_label(run, dev),
            "name": str(rec.get("name", "?")),
            "speedup": _num(rec.get("speedup"), ".2f", "×"),
            "reason": str(rec.get("reason") or ""),
            "config": _kv({k: v for k, v in (rec.get("config") or {}).items() if v is not None}),
            "code": "\n".join(map(str, rec.get("code") or [])),
        }
        for dev, rec in (recs or {}).items()
        if isinstance(rec, dict)
    ]
    candidates = [
        {
            "device": str(c.get("device", "")),
            "name": str(c.get("name", "")),
            "status": str(c.get("status", "")),
            "speedup": _num(c.get("speedup"), ".2f", "×"),
            "latency": _num(c.get("latency_ms"), ".3g", " ms"),
            "spread": fmt.DASH
            if not isinstance(c.get("rel_iqr"), int | float)
            else fmt.pct(100 * c["rel_iqr"], digits=2),
            "error": ""
            if c.get("max_error") is None
            else f"{c['max_error']:.2g} (tol {c.get('tolerance') or 0:g})",
            "notes": str(c.get("reason") or ""),
        }
        for c in cands or []
        if isinstance(c, dict)
    ]
    return {
        "recommendations": recommendations,
        "candidates": candidates,
        "notes": [str(n) for n in run.extra.get("notes", [])],
    }


def _break_even_note(run: RunRecord) -> str | None:
    """Why a user-model run has no break-even, and how to get one (``model`` on a CPU-only
    machine): said in the run's section, where its reader looks for the answer."""
    return None if run.extra.get("break_even") else run.extra.get("break_even_note")


def context(runs: Sequence[RunRecord]) -> dict[str, Any]:
    charts = [_chart(c) for c in charts_mod.all_charts(runs)]
    if all(_break_even_note(r) for r in runs):  # each run's section says it: once is enough
        for c in charts:
            if c["key"] == "break_even" and c["svg"] is None:
                c["note"] = "see the break-even note in the run's section above"
    return {
        "version": __version__,
        "runs": [
            {
                "id": run.run_id or "(file)",
                "created": f"{run.created_utc:%Y-%m-%d %H:%M} UTC",
                "status": run.status,
                "kind": run.kind,
                "environment": _environment(run),
                "ceilings": _ceilings(run),
                "rows": _rows(run),
                "placement": seed_placement(run),
                # drawn only when there is something to place: the lines above say so
                "seed_chart": _chart(charts_mod.seed_table(run)) if seed_results(run) else None,
                "tune": _tune(run),
                "break_even_note": _break_even_note(run),
                "devices": [device_label(run, d) for d in devices_of(run)],
            }
            for run in runs
        ],
        "charts": charts,
    }


def render(runs: Sequence[RunRecord]) -> str:
    return _ENV.get_template("report.html").render(**context(runs))
