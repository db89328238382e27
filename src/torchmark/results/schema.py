"""The run document's schema version and the steps that upgrade an older document.

``SCHEMA_VERSION`` is stored as ``schema_version`` in every run document (exported JSON, and
the JSON kept inside the database). An older version is upgraded one step at a time
(``DOC_STEPS[v]`` turns version ``v`` into ``v + 1``); a newer one is refused with a message
that says to upgrade torchmark, because guessing at a future layout could lose data.
Pure dict -> dict functions: ``RunRecord`` (``schema_2``) and the store use them, no SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from pydantic import ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from torchmark.errors import InputError
from torchmark.results.payloads import KINDS, PAYLOADS, RunPayload

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


def empty_payload(kind: Any) -> Any:
    """An empty payload of ``kind`` (a run's, for a kind pydantic will refuse)."""
    known = isinstance(kind, str) and kind in PAYLOADS
    return PAYLOADS[kind].model_validate({"kind": kind}) if known else RunPayload()


def schema_2(data: Any) -> Any:
    """``data`` (a run document as a dict) as schema 2 has it: an older schema upgraded
    (``results.schema``), a newer one refused (an InputError saying to upgrade), and the
    payload tagged with the run's kind; anything not a dict unchanged. A kind this
    torchmark does not know, or schema 1's ``extra`` in a schema-2 document, is a
    ValidationError naming the field, as pydantic's own."""
    if not isinstance(data, dict):
        return data
    if data.get("schema_version", SCHEMA_VERSION) != SCHEMA_VERSION:
        data = migrate_document(data)
    elif "extra" in data:
        _refuse("extra", data["extra"], "`extra` is schema 1's field; since schema 2 a run's "
                "findings are its `payload`")  # fmt: skip
    kind = data.get("kind", "run")
    if isinstance(kind, str) and kind not in PAYLOADS:  # another type: pydantic says so
        _refuse(
            "kind",
            kind,
            f"kind {kind!r} is not a kind of run this torchmark knows ({', '.join(KINDS)}): "
            "a newer torchmark wrote it; upgrade torchmark (pip install -U torchmark)",
        )
    payload = data.get("payload")
    if isinstance(payload, dict) and "kind" not in payload:
        return {**data, "payload": {**payload, "kind": kind}}
    return data


def _refuse(field: str, value: Any, why: str) -> NoReturn:
    error = InitErrorDetails(type=PydanticCustomError("schema_2", why), loc=(field,), input=value)
    raise ValidationError.from_exception_data("RunRecord", [error])
