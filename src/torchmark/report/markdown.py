"""Markdown for pasting into an issue or a blog post: a table like the seed's, with units,
spreads and the ceiling each percentage is of."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from torchmark import format as fmt
from torchmark.reference import device_label
from torchmark.report.flags import pills
from torchmark.report.parts import parts_note
from torchmark.report.pipeline import markdown_lines
from torchmark.report.rows import ceiling_rows, reuse_notes
from torchmark.report.table import ceiling_cell, spread_cell, status_cell
from torchmark.results import Result, RunRecord


def _text(text: object) -> str:
    """A stored string as Markdown text: GitHub and most renderers pass raw HTML through, so
    a workload named ``<img src=x onerror=...>`` must arrive as text, not as markup."""
    return html.escape(str(text), quote=False).replace("\n", " ")


def _cell(text: str) -> str:
    return _text(text).replace("|", "\\|")


def _code(text: str) -> str:
    """An inline code span that holds any text: HTML is inert there, and a backtick inside
    gets a longer fence (CommonMark)."""
    text = text.replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _flags(r: Result) -> str:
    """Each flag once, in words: its verdict reason where it has one (Markdown has no hover),
    else its name; then the reasons no flag names."""
    marks, rest = pills(r)
    if r.status in ("skipped", "wrong"):
        return f"{marks[0]['text']}: {rest[0]}"
    reasons = set(r.verdict.reasons) if r.verdict is not None else set()
    words = [p["title"] if p["title"] in reasons else p["text"] for p in marks]
    said = list(dict.fromkeys([*words, *rest]))  # each reason once, however many flags name it
    if marks and marks[0]["text"] == "invalid":  # the verdict itself, then why
        said[0] = f"invalid: {said[0]}"
    return "; ".join(said)


def render(runs: Sequence[RunRecord]) -> str:
    from torchmark.judge.ceilings import one_set

    runs, ceiling_notes = one_set(runs)  # % of ceiling read across runs: one set, or said
    lines: list[str] = [*(_text(f"Note: {n}.") for n in ceiling_notes)]
    lines += [""] if ceiling_notes else []
    for run in runs:
        sw = run.environment.get("software", {})
        lines += [
            # the command's name, as `show` titles it: a tune run is not "torchmark run ID"
            f"### torchmark {_text(run.kind)} {_text(run.run_id or '(file)')} "
            f"({_text(run.status)})",
            "",
            f"{run.created_utc:%Y-%m-%d %H:%M} UTC · host "
            f"{_text(run.environment.get('host', '?'))} · torch {_text(sw.get('torch', '?'))} · "
            f"torchmark {_text(run.tool_version or '?')} · {_code(run.command or '?')}",
            "",
            *([_text(split), ""] if (split := parts_note(run)) else []),  # a resumed run
        ]
        if run.kind == "predict":  # no results: its predicted cases, marked so
            from torchmark.report.predict import markdown_lines as predicted_lines

            lines += [*predicted_lines(run, _cell, _text), ""]
            continue
        if run.kind == "serving":  # no cases: its answer per device instead
            from torchmark.report.serving import markdown_lines as serving_lines

            lines += [*serving_lines(run, _cell, _text), ""]
            continue
        lines += [
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
                        _flags(r),
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
            lines += ["", "Measured ceilings: " + _text("; ".join(parts)) + "."]
            lines += [_text(f"Note: {n}.") for n in reuse_notes(run)]
        lines += markdown_lines(run, _cell)  # the input workloads' breakdown, if they ran
        lines.append("")
    lines.append(
        "Throughput uses the median sample; spread is the interquartile range relative to the "
        "median; % of ceiling is against this machine's *measured* ceiling (bw: memory "
        "bandwidth, peak: matmul FLOP/s of that precision)."
    )
    return "\n".join(lines) + "\n"
