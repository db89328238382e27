"""The run document's schema version and the steps that upgrade an older document.

``SCHEMA_VERSION`` is stored as ``schema_version`` in every run document (exported JSON, and
the JSON kept inside the database). An older version is upgraded one step at a time
(``DOC_STEPS[v]`` turns version ``v`` into ``v + 1``); a newer one is refused with a message
that says to upgrade torchmark, because guessing at a future layout could lose data.
Pure dict -> dict functions: ``RunRecord`` and the store both use them, without SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from torchmark.errors import InputError

SCHEMA_VERSION = 2

Doc = dict[str, Any]
DocStep = Callable[[Doc], Doc]


def _doc_v1_to_v2(doc: Doc) -> Doc:
    """Schema 1 kept what each kind of run found in an untyped ``extra`` dict; schema 2
    keeps it in ``payload``, typed per kind and discriminated by ``kind``, under the same
    keys: ``payload = {"kind": kind, **extra}``. Results are unchanged (their ``extra`` is
    typed where it is: no key moves)."""
    if "extra" not in doc and "payload" in doc:
        return dict(doc)  # payload-shaped already (written as a later schema, relabelled)
    out = {k: v for k, v in doc.items() if k != "extra"}
    extra = doc.get("extra")
    out["payload"] = {**(extra if isinstance(extra, dict) else {}), "kind": doc.get("kind", "run")}
    return out


DOC_STEPS: dict[int, DocStep] = {1: _doc_v1_to_v2}


class NewerSchemaError(InputError):
    """Written by a newer torchmark: this one cannot read it without losing data."""


def _check_version(version: object, what: str) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InputError(f"{what} has an invalid schema_version {version!r}")
    return version


def migrate_document(
    doc: Doc,
    *,
    what: str = "this document",
    target: int = SCHEMA_VERSION,
    steps: Mapping[int, DocStep] | None = None,
) -> Doc:
    """Upgrade a run document to ``target`` one registered step at a time (a new dict)."""
    steps = DOC_STEPS if steps is None else steps
    version = _check_version(doc.get("schema_version"), what)
    if version > target:
        raise NewerSchemaError(
            f"{what} was written by schema version {version}; this torchmark reads up to "
            f"version {target}: upgrade torchmark (pip install -U torchmark)"
        )
    out = dict(doc)
    while version < target:
        step = steps.get(version)
        if step is None:
            raise InputError(f"{what} has schema version {version}, which cannot be migrated")
        out = step(out)
        version += 1
        out["schema_version"] = version
    return out
