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
from torchmark.reference import device_label
from torchmark.report import charts as charts_mod
from torchmark.report import format as fmt
from torchmark.report.rows import ceiling_rows
from torchmark.report.table import (
    case_key,
    ceiling_cell,
    devices_of,
    flag_words,
    seed_placement,
    speedup,
    spread_cell,
    status_cell,
)
from torchmark.results import Result, RunRecord

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
                "flags": flag_words(r, verbose=True),
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
            "method": c.method,
            "source": c.source,
        }
        for c in ceiling_rows(run)
    ]


def context(runs: Sequence[RunRecord]) -> dict[str, Any]:
    charts = [
        {"key": c.key, "title": c.title, "svg": Markup(c.svg) if c.svg else None, "note": c.note}
        for c in charts_mod.all_charts(runs)
    ]
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
                "devices": [device_label(run, d) for d in devices_of(run)],
            }
            for run in runs
        ],
        "charts": charts,
    }


def render(runs: Sequence[RunRecord]) -> str:
    return _ENV.get_template("report.html").render(**context(runs))
