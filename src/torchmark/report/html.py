"""One self-contained HTML file per report: inline CSS and SVG, no script, no network.

A pure function of RunRecords (``render``): the template only lays out what is built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jinja2
from markupsafe import Markup

from torchmark import __version__
from torchmark import format as fmt
from torchmark.errors import TorchmarkError
from torchmark.reference import device_label, seed_results
from torchmark.report import charts as charts_mod
from torchmark.report.flags import pills as _pills
from torchmark.report.parts import parts_note
from torchmark.report.rows import ceiling_rows, devices_of
from torchmark.report.table import (
    case_key,
    ceiling_cell,
    seed_placement,
    speedup,
    spread_cell,
    status_cell,
)
from torchmark.results import Result, RunRecord, is_host
from torchmark.results.payloads import BreakEvenFindings, ModelPayload, TunePayload

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
                "case": fmt.case_label(r.variant, r.params),
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
    return [
        {
            "device": device_label(run, c.device),
            "key": c.key,
            "measured": c.measured,
            "theoretical": c.theoretical,
            "pct": c.pct,
            "method": c.method + (f"; {c.origin}" if c.origin else ""),
            "source": c.source,
        }
        for c in ceiling_rows(run)
    ]


def _chart(c: charts_mod.Chart) -> dict[str, Any]:
    # The SVG is matplotlib's own output with every text escaped by it: safe to inline.
    return {"key": c.key, "title": c.title, "svg": Markup(c.svg) if c.svg else None, "note": c.note}


def _num(x: Any, spec: str, suffix: str = "") -> str:
    return fmt.DASH if not isinstance(x, int | float) else f"{x:{spec}}{suffix}"


def _tune(run: RunRecord) -> dict[str, Any] | None:
    """``tune``'s recommendation per device (its code as printed) and the ranked candidates."""
    p = run.payload
    if not isinstance(p, TunePayload) or not (p.recommendation or p.candidates):
        return None
    recommendations = [
        {
            "device": device_label(run, dev),
            "name": rec.name,
            "speedup": _num(rec.speedup, ".2f", "×"),
            "reason": rec.reason or "",
            "config": _kv({k: v for k, v in (rec.config or {}).items() if v is not None}),
            "code": "\n".join(rec.code),
        }
        for dev, rec in p.recommendation.items()
    ]
    candidates = [
        {
            "device": c.device,
            "name": c.name,
            "status": c.status,
            "speedup": _num(c.speedup, ".2f", "×"),
            "latency": _num(c.latency_ms, ".3g", " ms"),
            "spread": fmt.DASH if c.rel_iqr is None else fmt.pct(100 * c.rel_iqr, digits=2),
            "error": "" if c.max_error is None else f"{c.max_error:.2g} (tol {c.tolerance or 0:g})",
            "notes": c.reason or "",
        }
        for c in p.candidates
    ]
    from torchmark.report.tune import throughput_words

    best_rates = [
        {
            "device": device_label(run, dev),
            "words": throughput_words(best),
            "code": "\n".join(best.code),
        }
        for dev, best in p.throughput.items()
    ]
    return {
        "recommendations": recommendations,
        "throughput": best_rates,
        "candidates": candidates,
        "notes": p.notes,
    }


def _serving(run: RunRecord) -> dict[str, Any] | None:
    """A serving run's answer per device, its sentences and the latency-vs-rate curve."""
    from torchmark.report.charts.serving import hockey_stick
    from torchmark.report.serving import html_context, payload

    ctx = html_context(run)
    p = payload(run)
    if ctx is None or p is None:
        return None
    return {**ctx, "chart": _chart(hockey_stick(p))}


def _model(run: RunRecord) -> dict[str, Any] | None:
    """A ``model`` run as ``torchmark model`` printed it: the sweep with MFU, energy and cost
    per item, the notes under it, the break-even per GPU and the cheaper device per batch,
    from the same pure functions as the terminal view (``report.model``)."""
    from dataclasses import asdict

    from torchmark.report.model import (
        BREAKEVEN_TITLE,
        breakeven_lines,
        cost_line,
        sweep_notes,
        sweep_rows,
    )
    from torchmark.report.table import flag_words

    p = run.payload
    if run.kind != "model" or "loader" in run.config:  # a --loader run: its own view
        return None
    rows = sweep_rows(run)
    named = p.model.name if isinstance(p, ModelPayload) and p.model is not None else None
    return {
        "name": named or str(run.config.get("model") or "batch sweep"),
        "columns": {
            "device": len({r.device for r in rows}) > 1,
            "mfu": any(r.mfu for r in rows),
            "energy": any(r.j_per_item for r in rows),
            "cost": any(r.cost for r in rows),
        },
        "rows": [
            {
                **{k: v for k, v in asdict(r).items() if k != "result"},
                "flags": ", ".join(flag_words(r.result)),
                "level": _level(r.result),
            }
            for r in rows
        ],
        "notes": sweep_notes(run),
        "breakeven_title": BREAKEVEN_TITLE,
        "breakeven": [asdict(line) for line in breakeven_lines(run)],
        "cost_line": cost_line(run),
    }


def _inputs(run: RunRecord) -> list[dict[str, Any]]:
    """Per input workload that ran: the stacked breakdown, the workers curve (or why
    either is missing) and the advice, as the terminal prints it."""
    from torchmark.report.pipeline import advice_lines, workloads_in

    return [
        {
            "workload": w,
            "charts": [
                _chart(charts_mod.input_breakdown(run, w)),
                _chart(charts_mod.workers_curve(run, w)),
            ],
            "advice": advice_lines(run, w),
        }
        for w in workloads_in(run)
    ]


def _break_even_note(run: RunRecord) -> str | None:
    """Why a user-model run has no break-even, and how to get one (``model`` on a CPU-only
    machine): said in the run's section, where its reader looks for the answer."""
    p = run.payload
    return p.break_even_note if isinstance(p, BreakEvenFindings) and not p.break_even else None


def _comparison(runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """Each later run against the first, case by case, with ``compare``'s own verdict
    (FASTER / SLOWER / SAME / UNCLEAR, or not comparable) and why, load included: a report
    of two runs showed % of ceiling falling while the speed rose, and no verdict at all."""
    if len(runs) < 2:
        return []
    from torchmark.judge.comparison import compare

    try:
        cmp = compare(runs)
    except TorchmarkError:
        return []  # runs with nothing in common: their own sections say what they hold
    out = []
    for i, changes in enumerate(cmp.changes, start=1):
        for c in changes:
            out.append(
                {
                    "vs": f"{fmt.run_letter(i)} vs A",
                    "case": fmt.case_label(c.a.variant, c.a.params, c.a.workload),
                    "device": c.a.device,
                    "ratio": fmt.ratio(c.speed) if c.speed else fmt.DASH,
                    "verdict": c.verdict or "not comparable",
                    "why": c.why,
                }
            )
    return out


def context(runs: Sequence[RunRecord]) -> dict[str, Any]:
    from torchmark.judge.ceilings import one_set
    from torchmark.report.predict import html_context as predict_context
    from torchmark.report.profile import html_context as profile_context

    runs, ceiling_notes = one_set(runs)  # % of ceiling read across runs: one set, or said
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
                "rows": (rows := _rows(run)),
                # no accelerator result beside a CPU one: a column of blanks says nothing
                "vs_cpu": any(r["speedup"] for r in rows),
                "placement": seed_placement(run),
                # drawn only when there is something to place: the lines above say so
                "seed_chart": _chart(charts_mod.seed_table(run)) if seed_results(run) else None,
                "tune": _tune(run),
                "serving": _serving(run),
                "profile": profile_context(run),
                "model": _model(run),
                "predict": predict_context(run),
                "inputs": _inputs(run),
                "break_even_note": _break_even_note(run),
                "parts": parts_note(run),  # a resumed run: measured in N parts, the gaps
                "devices": [device_label(run, d) for d in devices_of(run)],
            }
            for run in runs
        ],
        "charts": charts,
        "comparison": _comparison(runs),
        "ceiling_notes": ceiling_notes,
    }


def render(runs: Sequence[RunRecord]) -> str:
    return _ENV.get_template("report.html").render(**context(runs))
