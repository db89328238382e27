"""What a run must be to enter the board, in one place: the server's ``POST /api/v1/runs``
and ``/place``, ``torchmark submit --dry-run`` and ``torchmark import`` all ask it, so a
bound the board keeps is the bound this machine keeps (MLPerf's submission checker: one
checker, run by submitters and reviewers alike).

    parse(body)     the JSON text, refused before any walk: nesting past MAX_DEPTH, NaN or
                    Infinity (JSON has neither), an integer past 64 bits
    refusal(run)    why a parsed run is refused (one line), else None: every check of
                    ``serving.refusal``, then names that spell a built-in case with
                    look-alike letters, samples that sum past the run's own duration, and
                    device records the hardware catalogue says are not that device
    checked(doc)    the run as sent, fit to store: stripped, checked, its serving answers
                    made again, its error maps bounded

Torch-free, like the whole server.
"""

from __future__ import annotations

import json
import unicodedata
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

from torchmark.errors import InputError
from torchmark.hardware import catalog
from torchmark.results import RunRecord
from torchmark.results.serving import bound_errors, read, write
from torchmark.store.exchange import parse_document
from torchmark.web.ranking import TUNED

# Integers a run document holds (counts, bytes, ids) fit 64 bits; a 5,001-digit one made
# Python's int parser raise past its 4,300-digit limit (a 500 where a 422 was due).
MAX_INT_DIGITS = 19
# The run's samples are timed inside the run: their sum (x calls per sample) on one device
# cannot pass the time from created_utc to finished_utc (or to now, where it has not
# finished). One second of slack covers clock rounding of the two stamps.
DURATION_SLACK_S = 1.0

# Latin look-alikes from Unicode's confusables.txt (UTS #39) among the Cyrillic and Greek
# letters: enough to fold a case name typed with them to the Latin name it imitates.
_LOOKALIKE = str.maketrans(
    "аеорсухіјѕԁԛԝһӏАВЕКМНОРСТХІЈЅοαντικρυχεΑΒΕΖΗΙΚΜΝΟΡΤΥΧ",
    "aeopcyxijsdqwhlABEKMHOPCTXIJSoavtikpuxeABEZHIKMNOPTYX",
)


class Refused(InputError):
    """A submission the board refuses; its message is the one line a submitter sees."""


def parse(body: bytes | str, what: str) -> Any:
    """The JSON in ``body``; Refused (one line) past the depth, for NaN or Infinity, or an
    integer of more than MAX_INT_DIGITS digits."""
    from torchmark.web.plausible import too_deep

    raw = body.encode() if isinstance(body, str) else body
    deep = too_deep(raw)
    if deep:
        raise Refused(f"{what} is refused: {deep}")
    try:
        return json.loads(body, parse_constant=_no_constant, parse_int=_bounded_int)
    except Refused as e:
        raise Refused(f"{what} is refused: {e}") from None
    except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError too
        raise Refused(f"{what} is not valid JSON: {e}") from None


def _no_constant(name: str) -> Any:
    raise Refused(f"{name} is no number a run holds (JSON has no {name}; export it again)")


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise Refused(
            f"an integer of {len(text.lstrip('-')):,} digits; a run's integers fit 64 bits"
        )
    return int(text)


def refusal(run: RunRecord) -> str | None:
    """Why the board refuses ``run`` (one line naming the field and the bound), else None."""
    from torchmark.web import serving

    return (
        serving.refusal(run)
        or confusable(run)
        or over_duration(run)
        or catalog.claim_refusal(run.environment.get("devices") or {})
    )


def checked(doc: Any, what: str) -> RunRecord:
    """The run in ``doc`` as sent, made fit to store: the client's identifiers stripped
    again (never trust its stripping), parsed strictly, checked (``refusal``), its serving
    answers made again from its points and each point's error map bounded. Refused naming
    the first fault. (What makes two submissions the same run: judged later, a run sent
    again under a newer judge is still its twin.)"""
    from torchmark.web import plausible, serving
    from torchmark.web.strip import prepare

    if not isinstance(doc, dict):
        raise Refused(f"{what} is not a torchmark run: not a JSON object")
    doc, _ = prepare(doc)
    shape = plausible.environment_shape(doc)
    if shape:
        raise Refused(f"{what} is not a torchmark run: {shape}")
    try:
        run = parse_document(doc, what, strict=True)
    except Refused:
        raise
    except InputError as e:
        raise Refused(str(e)) from None
    bad = refusal(run)
    if bad:
        raise Refused(f"{what} is refused: {bad}")
    return user_cases(bounded_errors(serving.rederive(run)))


def fingerprint(run: RunRecord) -> str | None:
    """The user's model as the board keys its cases: its architecture's work and size
    (parameter count and FLOPs per item, with the input shape, from ``model``'s record;
    a tune run records no parameter count: its FLOPs per item alone), never the file name
    two people's ``model.py:make_model`` share. None: nothing to key by."""
    payload = run.payload
    info = getattr(payload, "model", None) if run.kind == "model" else None
    if info is not None and info.parameters and info.flops_per_item:
        inputs = f" on {info.inputs_at_smallest_batch}" if info.inputs_at_smallest_batch else ""
        return f"model {info.parameters:,} params, {info.flops_per_item:.4g} FLOP/item{inputs}"
    if run.kind == "tune":
        per = {r.work.flops / r.work.items for r in run.results if r.work.items and r.work.flops}
        if len(per) == 1:
            return f"model {per.pop():.4g} FLOP/item"
    return None


def user_cases(run: RunRecord) -> RunRecord:
    """A ``model`` or ``tune`` run's results keyed by the model's ``fingerprint`` (the file
    name kept in ``extra.spec``); a tune run's recommended setting on each device (its
    baseline where it recommends none) becomes its one case, ``tuned`` at its batch: one
    search of 15 candidates made 15 cases (the rest stay in the run, listed, never ranked:
    ``ranking.listed_only``)."""
    key = fingerprint(run) if run.kind in ("model", "tune") else None
    if key is None:
        return run
    chosen: dict[str, str] = {}
    if run.kind == "tune":
        recs = getattr(run.payload, "recommendation", {}) or {}
        for r in run.results:
            rec = recs.get(r.device)
            best = rec.name if rec is not None and rec.speedup is not None else None
            if r.device not in chosen and (best is None or r.variant == best):
                chosen[r.device] = best or r.variant  # the first result: the baseline
    results = []
    for r in run.results:
        update: dict[str, Any] = {"workload": key, "extra": r.extra | {"spec": r.workload}}
        if chosen.get(r.device) == r.variant:
            update |= {
                "variant": TUNED,
                "params": {k: v for k, v in r.params.items() if k == "batch"},
                "notes": [*r.notes, f"tune's pick: {r.variant}"],
            }
            chosen[r.device] = ""  # one per device
        results.append(r.model_copy(update=update))
    return run.model_copy(update={"results": results})


def bounded_errors(run: RunRecord) -> RunRecord:
    """The run with each serving point's error map cut to its first distinct messages and
    a count of the rest (``results.serving.bound_errors``): a model whose error text varies
    made 8,328 entries (3.19 MB) in one 29 s search. ``run``: a copy (``rederive``'s)."""
    p = read(run)
    if p is None or not any(len(pt.errors) > 0 for f in p.fleets for pt in f.points):
        return run
    for f in p.fleets:  # rederive's own copy: changed in place
        for pt in f.points:
            pt.errors = bound_errors(pt.errors)
    write(run, p)
    return run


def skeleton(name: str) -> str:
    """``name`` as it reads: NFKC (full-width and compatibility forms folded), then the
    Cyrillic and Greek letters that imitate Latin ones replaced by those."""
    return unicodedata.normalize("NFKC", name).translate(_LOOKALIKE)


def confusable(run: RunRecord) -> str | None:
    """Why a result's workload, variant or parameter name is refused: it is not what it
    reads as (``аdd`` with a Cyrillic а ranked as a case of its own beside ``add``)."""
    for i, r in enumerate(run.results):
        for field, text in (
            ("workload", r.workload),
            ("variant", r.variant),
            *(("params", k) for k in r.params),
        ):
            folded = skeleton(text)
            if folded != text and (folded.isascii() or _mixed(text)):
                odd = next(c for c in text if skeleton(c) != c)
                return (
                    f"results.{i}.{field} {text!r} reads as {folded!r} but is spelt with "
                    f"U+{ord(odd):04X} {unicodedata.name(odd, '?')}; use {folded!r}"
                )
    return None


def _mixed(text: str) -> bool:
    """Latin letters beside Cyrillic or Greek ones in one name (UTS #39's mixed script):
    a name wholly in one script (``модель``) is a name, not an imitation."""
    scripts = {unicodedata.name(c, "").split(" ")[0] for c in text if c.isalpha()}
    return "LATIN" in scripts and bool(scripts & {"CYRILLIC", "GREEK"})


def over_duration(run: RunRecord) -> str | None:
    """Why the run's samples cannot have been timed within it (one line), else None: on
    each device the samples of every result, each of ``calls_per_sample`` calls, add up to
    at most the run's duration (created to finished, or to now)."""
    created = run.created_utc
    # a finish stamped at the very start records no duration (hand-made and converted
    # documents): bounded by now, as one without a finish
    finished = run.finished_utc if run.finished_utc != run.created_utc else None
    end = finished or datetime.now(timezone.utc)
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    if end.tzinfo is None:
        end = end.replace(tzinfo=timezone.utc)
    took = max(0.0, (end - created).total_seconds())
    spent: dict[str, float] = defaultdict(float)
    for r in run.results:
        spent[r.device] += sum(r.samples_s) * r.calls_per_sample
    for device, seconds in spent.items():
        if seconds > took + DURATION_SLACK_S:
            return (
                f"results on {device}: their samples add up to {seconds:.3g} s, more than "
                f"the run's own {took:.3g} s (created_utc to "
                f"{'finished_utc' if finished else 'now'})"
            )
    return None
