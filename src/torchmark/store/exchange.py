"""Export a run as JSON (lossless) or CSV (for spreadsheets); import a JSON run.

JSON is the whole ``RunRecord`` including derived fields (median_s, throughput,
pct_of_ceiling, flags, ...) for readers; on import those are ignored and re-derived from the
raw samples, so a hand-edited median cannot pass for a measurement. Floats are written with
``repr`` precision, so export -> import -> export gives the same text and the same samples.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from torchmark.errors import InputError, UnknownNameError
from torchmark.results import IMPORTED, Result, RunRecord
from torchmark.results.schema import migrate_document

FORMATS: tuple[str, ...] = ("json", "csv")
# Fields every exported run has; without them a JSON object is not taken for a run (all
# RunRecord fields have defaults, so `{}` alone would otherwise validate).
REQUIRED = ("schema_version", "created_utc", "results")
CSV_COLUMNS = (
    "run_id",
    "created_utc",
    "workload",
    "variant",
    "device",
    "params",
    "status",
    "reason",
    "median_s",
    "iqr_s",
    "min_s",
    "n",
    "throughput",
    "throughput_unit",
    "pct_of_ceiling",
    "ceiling_key",
    "flags",
    "verdict",
    "verdict_reasons",
    "samples_s",
)


def unsafe_text(value: Any, where: str = "") -> str | None:
    """Where in a parsed JSON document a text (key or value) cannot be stored and shown: a
    lone surrogate (JSON's ``"\\udfff"`` is valid JSON but no UTF-8) or a NUL character
    (PostgreSQL's text refuses it): ``results.0.notes.0: a lone surrogate ...``, else None."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, at = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                path = f"{at}.{k}" if at else str(k)
                bad = _bad_text(k) if isinstance(k, str) else None
                if bad:
                    return f"{at or '(top level)'}: a key holds {bad}"
                stack.append((v, path))
        elif isinstance(item, list):
            stack.extend((v, f"{at}.{i}") for i, v in enumerate(item))
        elif isinstance(item, str):
            bad = _bad_text(item)
            if bad:
                return f"{at or '(top level)'}: the text holds {bad}"
    return None


def _bad_text(text: str) -> str | None:
    if "\x00" in text:
        return "a NUL character (\\u0000), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"a lone surrogate ({text[e.start]!a}), which is not UTF-8 text"
    return None


def escape_text(value: Any) -> Any:
    """``value`` with every text made printable and storable: lone surrogates and NUL as
    backslash escapes (``\\udfff``). For readers of runs stored before such text was
    refused: a page must not fail on one note."""
    if isinstance(value, str):
        if _bad_text(value) is None:
            return value
        return value.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")
    if isinstance(value, dict):
        return {escape_text(k): escape_text(v) for k, v in value.items()}
    if isinstance(value, list):
        return [escape_text(v) for v in value]
    return value


def is_file_spec(spec: str) -> bool:
    """Whether a run argument names a JSON file (else a stored run id, or ``latest``).

    By its spelling only, never by what exists on disk: a file that happens to be named
    like a run id must not be read in its place. A file is ``*.json`` or has a directory
    part (``./run``); stored run ids never look like that (``usable_run_id``)."""
    return spec.lower().endswith(".json") or "/" in spec or "\\" in spec


def finite_json(value: Any) -> Any:
    """``value`` with NaN and infinities as null: JSON has no spelling for them."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_json(v) for v in value]
    return value


def export_run(record: RunRecord, fmt: str = "json") -> str:
    if fmt == "json":
        doc = finite_json(record.model_dump(mode="json"))
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"
    if fmt == "csv":
        return _to_csv(record)
    raise UnknownNameError("format", fmt, FORMATS)


def _num(x: float | int | None) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return ""
    return repr(x)  # repr: the shortest text that reads back exactly


# A spreadsheet runs a cell that starts with one of these as a formula (`=HYPERLINK(...)` in
# a shared run's workload name): such a text cell is written with a leading ' (OWASP's
# advice for CSV injection), which spreadsheets show as text. Numbers are written by _num.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _text(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_START) else value


def _csv_row(record: RunRecord, r: Result) -> dict[str, Any]:
    tp = r.throughput
    return {
        "run_id": _text(record.run_id or ""),
        "created_utc": record.created_utc.isoformat(),
        "workload": _text(r.workload),
        "variant": _text(r.variant),
        "device": _text(r.device),
        "params": _text(json.dumps(r.params, sort_keys=True)),
        "status": r.status,
        "reason": _text(r.reason or ""),
        "median_s": _num(r.median_s),
        "iqr_s": _num(r.iqr_s),
        "min_s": _num(r.min_s),
        "n": r.n,
        "throughput": _num(tp.value if tp else None),
        "throughput_unit": _text(tp.unit if tp else ""),
        "pct_of_ceiling": _num(r.pct_of_ceiling),
        "ceiling_key": _text(r.ceiling.key if r.ceiling else ""),
        "flags": _text(";".join(r.flags)),
        "verdict": r.verdict.level if r.verdict else "",
        "verdict_reasons": _text(";".join(r.verdict.reasons) if r.verdict else ""),
        "samples_s": ";".join(repr(s) for s in r.samples_s),
    }


def _to_csv(record: RunRecord) -> str:
    out = io.StringIO()
    from torchmark.results.serving import POINT_COLUMNS, point_rows, read

    payload = read(record)
    if payload is not None:  # a serving run has no cases: a row per load point
        writer = csv.DictWriter(out, fieldnames=POINT_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in point_rows(payload, record.run_id or ""):
            writer.writerow({k: _num(v) if isinstance(v, float) else v for k, v in row.items()})
        return out.getvalue()
    writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in record.results:
        writer.writerow(_csv_row(record, r))
    return out.getvalue()


def import_run(source: str | Path) -> RunRecord:
    """A run from a JSON file (a ``Path``, or a ``str`` path) or JSON text; a ``str`` that
    starts with ``{`` or ``[`` is taken as text. Messages call it by its path, or "the input"."""
    if isinstance(source, str) and source.lstrip()[:1] in ("{", "["):
        text, label = source, "the input"
    else:
        path = Path(source)
        label = str(path)
        if path.suffix.lower() == ".csv":
            raise InputError(
                f"{label}: CSV exports leave out the run's environment, work and ceilings, "
                f"so they cannot be imported; export with --format json"
            )
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"{label}: no such file") from None
        except UnicodeDecodeError:
            raise InputError(f"{label} is not valid JSON (it is not UTF-8 text)") from None
        except OSError as e:
            raise InputError(f"cannot read {label} ({e.strerror or e})") from None
    return parse_run(text, label)


def parse_run(text: str, label: str = "the input", *, strict: bool = False) -> RunRecord:
    """The run in the JSON ``text``; InputError in one line naming the field. ``strict``
    (the leaderboard server): no value of another type taken for the one a field holds
    (``"12"`` or ``12.0`` calls, ``5`` for a time)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(
            f"{label} is not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}"
        ) from None
    return parse_document(doc, label, strict=strict)


def parse_document(doc: Any, label: str = "the input", *, strict: bool = False) -> RunRecord:
    """``parse_run`` of a document already read from its JSON (the server's, which strips
    it first): the same checks and messages, without writing and reading it again."""
    if not isinstance(doc, dict):
        raise InputError(
            f"{label} is not a torchmark run: expected a JSON object, got {json_kind(doc)}"
        )
    if (
        "schema_version" not in doc
        and doc.get("kind") == "run"
        and isinstance(doc.get("run"), dict)
    ):
        doc = doc["run"]  # a reference run (src/torchmark/reference/NAME.json) wraps its run
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        raise InputError(f"{label} is not a torchmark run: no {missing[0]!r} field")
    bad = unsafe_text(doc)
    if bad:
        raise InputError(f"{label} is refused: {bad}; fix the text and try again")
    doc = migrate_document(doc, what=label)
    try:
        run = RunRecord.model_validate(doc, context=IMPORTED)
        if strict:  # after the lax pass, whose messages name a bad sample the same way
            RunRecord.model_validate_json(json.dumps(doc), strict=True, context=IMPORTED)
        return run
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        msg = first["msg"].removeprefix("Value error, ")
        raise InputError(f"{label} is not a torchmark run: {where}: {msg}") from None


def json_kind(value: object) -> str:
    """How an error names the JSON type of a value that is not an object."""
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")
