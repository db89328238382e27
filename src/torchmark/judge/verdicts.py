"""What a reader may do with a result, by its verdict: the one rule every reader follows.

The measuring core judges each result (``telemetry.verdict.judge``); every command that
reads results (compare and its gate, history, show, report, the board, submit, tune's and
the input pipeline's advice) asks this module what that judgement allows, so that no reader
ranks, compares, counts, averages or recommends a number its own verdict rejects::

    kind        rank  compare  average  count ok  recommend  the server
    ok          yes   yes      yes      yes       yes        ranks it
    warn        yes   yes      yes      yes       yes        ranks it, marked
    noisy       yes   yes      yes      yes       yes        ranks it, marked
    timed out   yes   yes      yes      yes       yes        ranks it, marked
    unreliable  yes   yes      no       yes       yes        ranks it, marked
    in cache    no    yes      no       yes       yes        lists it, never ranks it
    invalid     no    no       no       no        no         lists it, never ranks it
    WRONG       no    no       no       no        no         lists it, never ranks it
    skipped     no    no       no       no        no         lists it (nothing measured)
    predicted   no    no       no       no        no         refuses it (not a measurement)

- *rank*: placed among other results (the board, the seed table, a "best" row);
- *compare*: called FASTER / SLOWER / SAME / UNCLEAR against another result; the test
  weighs both spreads, so a noisy or unreliable one mostly reads UNCLEAR ("can't tell");
- *average*: enters a mean over several results (the speedup chart's geometric mean): a
  spread of 25 % or more would be averaged in unseen;
- *count ok*: counted in ``history``'s ok/total (a number, however wide its spread, that
  its verdict does not reject);
- *recommend*: what tune, ``profile --check`` or the input advice may name as the thing to
  do; each recommends only what its comparison calls FASTER beyond both spreads.

*In cache*: a memory-bound result whose working set fits the last-level cache (``results.
cache``) measured the cache, not memory: above the memory's ceiling is expected, so never
invalid for that (only above what a cache could move), and never ranked or averaged among
results that measured memory; the same case in two runs still compares.

*Predicted*: a figure ``torchmark predict`` worked out for a machine it did not run on
(METHOD.md §5). Its run (kind ``predict``) holds no result at all, a Result being a
measurement with samples, so nothing that reads results finds one; the rule is said here
once for the readers that meet the run itself: ``submit`` and the board refuse it,
``compare`` shows it beside a measured run as a column marked predicted, whose one verdict is
whether the measured time falls inside its interval (``prediction_refusal``).

An *incomplete run* (stopped by Ctrl-C or a time limit) is read result by result under the
same rule; the cases it never reached are "not measured", which a regression gate cannot
pass (``compare --fail-on-regression``: exit 3).

A result stored without a verdict (hand-made documents) is read from its status and flags.
Torch- and numpy-free at import: ``history``, ``show``, ``compare`` and the board use it
(a result's flags, read for the noise kinds, load numpy on first use).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from torchmark.results import Result, RunRecord

# A result stopped at its time-out whose median is known to within +-2 % (the model suite's
# target) is a usable number: its verdict stays ok, and readers say why its flag is harmless.
TIMED_OUT_OK_PCT = 2.0

Kind = Literal[
    "ok", "warn", "noisy", "timed_out", "unreliable", "in_cache", "invalid", "wrong", "skipped"
]
Use = Literal["rank", "compare", "average", "count_ok", "recommend"]
USES: tuple[Use, ...] = ("rank", "compare", "average", "count_ok", "recommend")


@dataclass(frozen=True)
class Rule:
    """What one kind of result allows, and the words that say it."""

    word: str  # as tables print it
    allowed: frozenset[Use]
    server: str  # what the leaderboard does with it

    def allows(self, use: Use) -> bool:
        return use in self.allowed


_ALL = frozenset(USES)
_NONE: frozenset[Use] = frozenset()
RULES: dict[Kind, Rule] = {
    "ok": Rule("ok", _ALL, "ranked"),
    "warn": Rule("warn", _ALL, "ranked, marked warn"),
    "noisy": Rule("noisy", _ALL, "ranked, marked noisy"),
    "timed_out": Rule("timed out", _ALL, "ranked, marked timed out"),
    "unreliable": Rule(
        "unreliable",
        frozenset({"rank", "compare", "count_ok", "recommend"}),
        "ranked with its spread, marked",
    ),
    "in_cache": Rule(
        "in cache",
        frozenset({"compare", "count_ok", "recommend"}),
        "listed, marked in cache, never ranked",
    ),
    "invalid": Rule("invalid", _NONE, "listed, never ranked"),
    "wrong": Rule("WRONG", _NONE, "listed, never ranked"),
    "skipped": Rule("skipped", _NONE, "listed as skipped (nothing measured)"),
}
# A predicted figure (a run of kind "predict"): allows nothing a measurement allows.
PREDICTED = Rule("predicted", _NONE, "refused: a prediction, not a measurement")
PREDICTION_KINDS = frozenset({"predict"})
# The kinds ``history`` counts as ok (its SQL reads the stored kind of each result).
COUNTED: tuple[Kind, ...] = tuple(k for k, rule in RULES.items() if rule.allows("count_ok"))
# What a kind that may not be used for something is called when a reader says so.
USE_WORDS: dict[Use, str] = {
    "rank": "ranked",
    "compare": "compared",
    "average": "averaged",
    "count_ok": "counted as ok",
    "recommend": "recommended",
}


def kind_of(r: Result) -> Kind:
    """The result's kind under the rule: its status, else its verdict (the worst reason's
    level; among warnings the noise kinds, which a reader names)."""
    v = r.verdict
    flags = r.flags if r.status == "ok" and r.samples_s else []
    return classify(
        r.status,
        bool(r.samples_s),
        None if v is None else v.level,
        [] if v is None else v.reasons,
        flags,
    )


def kind_of_doc(doc: dict[str, Any]) -> Kind:
    """``kind_of`` of a stored result document (its dump holds the derived ``flags``): the
    store fills its verdict column from it without validating the whole result."""
    v = doc.get("verdict") if isinstance(doc.get("verdict"), dict) else None
    return classify(
        str(doc.get("status", "ok")),
        bool(doc.get("samples_s")),
        None if v is None else v.get("level"),
        [] if v is None else [str(x) for x in v.get("reasons") or []],
        [str(x) for x in doc.get("flags") or []],
    )


def classify(
    status: str, measured: bool, level: str | None, said: Sequence[str], flags: Sequence[str]
) -> Kind:
    """The kind from a result's status, whether it has samples, its verdict's level and
    reasons (None: stored without a verdict) and its flags."""
    if status == "wrong":
        return "wrong"
    if status == "skipped" or not measured:
        return "skipped"
    if level is not None:
        if level == "invalid":
            return "invalid"
        if level == "ok":
            return "ok"
        timed_out = any(w.startswith("timed out") for w in said)
    else:  # stored without a verdict: its flags say what the measurement knew
        if not flags:
            return "ok"
        timed_out = "timed_out" in flags
    if "in_cache" in flags:  # the strictest of the warnings: unranked, unaveraged
        return "in_cache"
    if "unreliable" in flags:
        return "unreliable"
    if timed_out:
        return "timed_out"
    if "noisy" in flags:
        return "noisy"
    return "warn"


def kind_of_answer(run_level: str | None, measured: bool, flags: Sequence[str]) -> Kind:
    """A serving run's answer for one device (its max rate within the p99 bound) under the
    same rule: no rate within the bound is nothing measured (skipped), a run judged invalid
    keeps it off rankings, and the flags of the point it rests on (unstable,
    few_requests) mark it."""
    level = "invalid" if run_level == "invalid" else None
    return classify("ok", measured, level, [], flags)


def rule_of(r: Result) -> Rule:
    return RULES[kind_of(r)]


def may(r: Result, use: Use) -> bool:
    """Whether a reader may ``use`` this result (rank, compare, average, count_ok,
    recommend)."""
    return rule_of(r).allows(use)


def reasons(r: Result) -> list[str]:
    """Why the result is what it is, in words: the skip or WRONG reason, else its verdict's
    reasons (most severe first), else its flags."""
    if r.status in ("skipped", "wrong"):
        default = "no reason given" if r.status == "skipped" else "correctness check failed"
        return [r.reason or default]
    if not r.samples_s:
        return [r.reason or "no samples"]
    if r.verdict is not None:
        return list(r.verdict.reasons)
    return [f.replace("_", " ") for f in r.flags]


def says(r: Result) -> str:
    """``invalid: above 100 % of the measured ceiling ...``: the kind's word and its first
    reason; ``ok`` alone for a clean result."""
    word = rule_of(r).word
    why = reasons(r)
    if not why or kind_of(r) == "ok":
        return word
    return why[0] if why[0].startswith(f"{word}:") else f"{word}: {why[0]}"


def refusal(r: Result, use: Use) -> str | None:
    """None when the rule allows ``use``; else why not, in words (``WRONG: max error 0.02
    > tolerance 0.0001; not compared``)."""
    if may(r, use):
        return None
    return f"{says(r)}; not {USE_WORDS[use]}"


def counted(results: list[Result]) -> int:
    """How many results count as ok (``history``'s ok)."""
    return sum(1 for r in results if may(r, "count_ok"))


def answers_counted(header: Any) -> tuple[int, int] | None:
    """(ok, total) of a stored serving run's answers, one per device, each counted as ok by
    the verdict rule (``kind_of_answer``): what ``history`` says of a run whose
    findings are answers, not results (it said "0/0"). None: not a readable serving header.
    """
    from torchmark.results.serving import KIND

    if not isinstance(header, dict) or header.get("kind") != KIND:
        return None
    # run.payload.serving (``read``); schema 1 kept it in extra.serving
    held = header.get("payload") or header.get("extra")
    doc = held.get(KIND) if isinstance(held, dict) else None
    answers = doc.get("answers") if isinstance(doc, dict) else None
    if not isinstance(answers, list):
        return None
    verdict = header.get("verdict")
    level = verdict.get("level") if isinstance(verdict, dict) else None
    kinds = [
        kind_of_answer(level, a.get("max_rate") is not None, [str(f) for f in a.get("flags") or []])
        for a in answers
        if isinstance(a, dict)
    ]
    return sum(k in COUNTED for k in kinds), len(kinds)


def is_prediction(kind: str) -> bool:
    """Whether a run of this kind holds predicted figures (``PREDICTED``), not measured."""
    return kind in PREDICTION_KINDS


def prediction_refusal(record: RunRecord, use: Use | Literal["submit"]) -> str | None:
    """None for a run of measurements; for a prediction, why it may not be ``use``d (or
    submitted to a leaderboard), in one line naming what may: the run measured on the
    machine it predicts."""
    if not is_prediction(record.kind) or (use != "submit" and PREDICTED.allows(use)):
        return None
    said = "submitted to a leaderboard" if use == "submit" else USE_WORDS[use]
    payload = record.payload
    target = getattr(getattr(payload, "target", None), "name", None)
    of = f" of {target}" if target else ""
    return (
        f"run {record.run_id or '(file)'} is a prediction{of}, not a measurement: it is never "
        f"{said}; measure the model on that machine and use that run"
    )
