"""Markdown for pasting into an issue or a blog post: a table like the seed's, with units,
spreads and the ceiling each percentage is of."""

from __future__ import annotations

from collections.abc import Sequence

from torchmark.reference import device_label
from torchmark.report import format as fmt
from torchmark.report.rows import ceiling_rows
from torchmark.report.table import ceiling_cell, flag_words, spread_cell, status_cell
from torchmark.results import RunRecord


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(runs: Sequence[RunRecord]) -> str:
    lines: list[str] = []
    for run in runs:
        sw = run.environment.get("software", {})
        lines += [
            f"### torchmark run {run.run_id or '(file)'} ({run.status})",
            "",
            f"{run.created_utc:%Y-%m-%d %H:%M} UTC · host {run.environment.get('host', '?')} · "
            f"torch {sw.get('torch', '?')} · torchmark {run.tool_version or '?'} · "
            f"`{run.command or '?'}`",
            "",
            "| Hardware | Workload | Throughput | Median | Spread (IQR) | % of ceiling | Flags |",
            "|---|---|---:|---:|---:|---:|---|",
        ]
        for r in run.results:
            case = fmt.result_label(r, device=False)
            lines.append(
                "| "
                + " | ".join(
                    _cell(x)
                    for x in (
                        device_label(run, r.device),
                        case,
                        status_cell(r),
                        fmt.duration(r.median_s),
                        spread_cell(r),
                        ceiling_cell(r),
                        ", ".join(flag_words(r, verbose=True)),
                    )
                )
                + " |"
            )
        if run.ceilings:
            parts = [
                f"{c.device} {c.key} {c.measured}"
                + (f" ({c.pct} of datasheet)" if c.theoretical != fmt.DASH else "")
                for c in ceiling_rows(run)
            ]
            lines += ["", "Measured ceilings: " + "; ".join(parts) + "."]
        lines.append("")
    lines.append(
        "Throughput uses the median sample; spread is the interquartile range relative to the "
        "median; % of ceiling is against this machine's *measured* ceiling (bw: memory "
        "bandwidth, peak: matmul FLOP/s of that precision)."
    )
    return "\n".join(lines) + "\n"
