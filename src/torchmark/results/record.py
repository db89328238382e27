"""Value objects that are stored, exported and reported.

A Result keeps every raw sample; median, spread, throughput and % of ceiling are derived
from them (computed fields in the JSON, re-derived on import, never trusted from a file).
A RunRecord holds its results and what its kind of run found beside them: a typed payload,
discriminated by the run's ``kind`` (``results.payloads``). A document of an older schema
is upgraded as it is read (``results.schema``), whichever way it comes in.
"""

from __future__ import annotations

import functools
import json
import math
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    SerializeAsAny,
    ValidationInfo,
    computed_field,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from typing_extensions import Self

from torchmark.results.cache import CacheFit, fit
from torchmark.results.extra import ResultExtra
from torchmark.results.payloads import PAYLOADS, Payload
from torchmark.results.schema import SCHEMA_VERSION, empty_payload, schema_2

if TYPE_CHECKING:
    from torchmark.stats.measurement import Measurement

Headline = Literal["items", "bytes", "flops"]
Status = Literal["ok", "skipped", "wrong"]


# What a Result keeps of its Measurement: the raw samples and how they were taken. The
# sequences are lists in a Result (JSON) and tuples in a Measurement (frozen).
SAMPLE_FIELDS = (
    "samples_s",
    "calls_per_sample",
    "first_call_s",
    "warmup_calls",
    "stop_reason",
    "rule",
    "timing",
    "excluded",
)


def sample_fields(m: Measurement) -> dict[str, Any]:
    """``m``'s ``SAMPLE_FIELDS`` as a Result keeps them (``Result.measurement`` gives them back)."""
    kept = ((k, getattr(m, k)) for k in SAMPLE_FIELDS)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in kept}


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


# Checks for documents from outside (import, a JSON file given to report/compare): pass
# ``context=IMPORTED`` to ``model_validate``. Values measured here are not re-checked: a run
# must never be lost to a check on its own numbers.
IMPORTED = {"imported": True}
# One call taking over 11 days is not a measurement: 1e308 s would overflow the statistics.
MAX_SAMPLE_S = 1e6


def _imported(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("imported"))


# ``strict=True`` given to ``RunRecord.model_validate``/``_json`` reaches the payload's own
# validation through the context (a function validator is told the mode, not strictness).
_STRICT = "strict"


def _strict(kwargs: dict[str, Any]) -> dict[str, Any]:
    if kwargs.get("strict"):
        kwargs["context"] = {**(kwargs.get("context") or {}), _STRICT: True}
    return kwargs


def _of_its_kind(value: Any, info: ValidationInfo) -> Payload:
    """A run's payload validated by its kind's class alone: reading a run builds that class's
    validator, not every kind's (a union of all eight: ~0.01 s more of every command that
    shows a run). Its errors are the class's own, under ``payload``."""
    if isinstance(value, Payload):
        return value
    kind = value.get("kind") if isinstance(value, dict) else None
    cls = PAYLOADS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise PydanticCustomError(
            "payload_kind",
            "a payload is an object whose kind is one of {kinds}",
            {"kinds": ", ".join(PAYLOADS)},
        )
    context = info.context
    strict = bool(context and context.get(_STRICT))
    if strict and info.mode == "json":  # as JSON, whose strict pass takes ISO times as text
        return cls.model_validate_json(json.dumps(value), strict=True, context=context)
    # lax, a JSON document's values validate alike as Python: no second encode and parse
    return cls.model_validate(value, strict=strict, context=context)


def _amount(value: float, info: ValidationInfo) -> float:
    if _imported(info) and not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{value!r} is not a finite amount >= 0")
    return value


# A median this far above the ceiling is a measurement error; closer is a tie. The ceiling
# is the best sample of a seconds-long sweep, and on an H100 the int8 GEMM workload, timed
# on the same kernel, read 100.2 % and 101 % of it: the same speed measured twice.
ABOVE_CEILING_PCT = 102.0


class Work(BaseModel):
    """What one call does: FLOPs, compulsory bytes moved, items processed."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    flops: float = 0.0
    bytes: float = 0.0
    items: float = 1.0
    item_unit: str = "it"

    _check = field_validator("flops", "bytes", "items")(_amount)


class Throughput(BaseModel):
    model_config = ConfigDict(defer_build=True)
    value: float
    unit: str


class CeilingSource(BaseModel):
    """Where a ceiling came from: when, by which run, under what load and which software
    it was measured. A run that reuses cached ceilings carries them with the source of the
    run that measured them (``measured_utc`` before the run started: reused)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    measured_utc: datetime
    run_id: str | None = None  # the run that measured it (None: a run with no store)
    other_cores: float | None = None  # other processes' CPU load while it was measured
    torch: str | None = None
    tool_version: str | None = None


class Ceiling(BaseModel):
    """A measured physical limit of one device, in SI units (B/s, FLOP/s or s)."""

    model_config = ConfigDict(frozen=True, defer_build=True)
    device: str
    key: str  # "bandwidth", "matmul:bfloat16", "h2d:pinned", "dispatch", ...
    value: float
    unit: Literal["B/s", "FLOP/s", "s"]
    method: str  # how it was measured, in words
    theoretical: float | None = None  # datasheet or clock-derived, same unit
    theoretical_source: str | None = None
    details: dict[str, Any] = {}  # per-kernel figures, samples
    provenance: CeilingSource | None = None  # None: measured before torchmark recorded it

    _check = field_validator("value")(_amount)

    @field_validator("theoretical")
    @classmethod
    def _check_theoretical(cls, value: float | None, info: ValidationInfo) -> float | None:
        return None if value is None else _amount(value, info)

    @property
    def pct_of_theoretical(self) -> float | None:
        return 100 * self.value / self.theoretical if self.theoretical else None


def link_ceiling(key: str) -> str:
    """The ceiling a host-device copy is judged against: the pinned rate of its direction,
    the link's limit (``h2d:pageable`` -> ``h2d:pinned``). One rule for every copy, so the
    transfer workload and the input pipeline never print two percentages for one copy.

    The ``h2d:pageable`` ceiling is one large size's figure (256 MiB), and a pageable copy
    of a few MiB, staged by the host from its cache, beats it: on an H100 host 12.7 GB/s at
    16 MiB against 10.1 GB/s at 256 MiB, which read 126 % of "the ceiling". Against the link
    the same copy reads 23 %, which is what a user deciding to pin memory needs to see."""
    return key.split(":")[0] + ":pinned"


class Verdict(BaseModel):
    model_config = ConfigDict(defer_build=True)
    level: Literal["ok", "warn", "invalid"] = "ok"
    reasons: list[str] = []


class Result(BaseModel):
    # every model here builds its validator on first use: `history` validates none
    model_config = ConfigDict(extra="ignore", defer_build=True)

    workload: str
    variant: str
    device: str
    params: dict[str, Any] = {}
    status: Status = "ok"
    reason: str | None = None  # why skipped / wrong

    samples_s: list[float] = []
    calls_per_sample: int = 1
    first_call_s: float | None = None
    warmup_calls: int = 0
    stop_reason: str = ""
    rule: str = ""
    timing: str = "e2e"  # "device" (events) or "e2e" (host clock + sync)
    excluded: list[int] = []  # sample indices set aside (throttled)

    work: Work = Field(default_factory=Work)
    headline: Headline = "items"
    ceiling: Ceiling | None = None
    notes: list[str] = []
    extra_flags: list[str] = []
    # peak memory, compile time, every rank's samples...: typed keys, others kept as they are
    extra: ResultExtra = Field(default_factory=lambda: ResultExtra())
    telemetry: dict[str, Any] | None = None
    verdict: Verdict | None = None

    @field_validator("samples_s")
    @classmethod
    def _check_samples(cls, samples: list[float], info: ValidationInfo) -> list[float]:
        if _imported(info):
            for i, x in enumerate(samples):
                if not (math.isfinite(x) and 0 < x <= MAX_SAMPLE_S):
                    raise ValueError(
                        f"sample {i} is {x!r}; a time must be a finite number of seconds, "
                        f"> 0 and <= {MAX_SAMPLE_S:g}"
                    )
        return samples

    @field_validator("calls_per_sample")
    @classmethod
    def _check_calls(cls, n: int, info: ValidationInfo) -> int:
        if _imported(info) and n < 1:
            raise ValueError(f"{n} calls per sample; a sample times at least 1 call")
        return n

    @field_validator("warmup_calls")
    @classmethod
    def _check_warmup(cls, n: int, info: ValidationInfo) -> int:
        if _imported(info) and n < 0:
            raise ValueError(f"{n} warm-up calls; must be >= 0")
        return n

    @field_validator("first_call_s")
    @classmethod
    def _check_first(cls, t: float | None, info: ValidationInfo) -> float | None:
        if _imported(info) and t is not None and not (math.isfinite(t) and t >= 0):
            raise ValueError(f"{t!r} is not a finite time >= 0")
        return t

    @field_validator("excluded")
    @classmethod
    def _check_excluded(cls, idx: list[int], info: ValidationInfo) -> list[int]:
        n = len(info.data.get("samples_s") or [])
        if _imported(info) and "samples_s" in info.data:  # else samples_s failed already
            bad = [i for i in idx if not 0 <= i < n]
            if bad or len(set(idx)) != len(idx):
                what = f"index {bad[0]}" if bad else "a repeated index"
                raise ValueError(f"{what}; excluded holds distinct sample indices 0..{n - 1}")
        return idx

    @functools.cached_property
    def measurement(self) -> Measurement:
        # numpy (~0.1 s to import) only when a statistic is asked for: `history` lists runs
        # without one.
        from torchmark.stats.measurement import Measurement

        kept = ((k, getattr(self, k)) for k in SAMPLE_FIELDS)
        fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in kept}
        return Measurement(**fields)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.samples_s)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def median_s(self) -> float | None:
        return self.measurement.median if self.ok else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def iqr_s(self) -> float | None:
        return self.measurement.iqr if self.ok else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def min_s(self) -> float | None:
        return self.measurement.min if self.ok else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ci_median_s(self) -> list[float] | None:
        if not self.ok:
            return None
        lo, hi = self.measurement.ci
        return [lo, hi] if math.isfinite(lo) and math.isfinite(hi) else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def n(self) -> int:
        return self.measurement.n if self.ok else 0

    def rate(self, what: Headline, best: bool = False) -> float | None:
        """Per-second rate of items, bytes or FLOPs (median time, or best sample)."""
        if not self.ok:
            return None
        t = self.measurement.min if best else self.measurement.median
        amount = {"items": self.work.items, "bytes": self.work.bytes, "flops": self.work.flops}
        value = amount[what]
        return value / t if value and t > 0 else None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def throughput(self) -> Throughput | None:
        r = self.rate(self.headline)
        if r is None:
            return None
        if self.headline == "bytes":
            return Throughput(value=r / 1e9, unit="GB/s")
        if self.headline == "flops":
            return Throughput(value=r / 1e12, unit="TFLOP/s")
        return Throughput(value=r, unit=f"{self.work.item_unit}/s")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pct_of_ceiling(self) -> float | None:
        """Median rate as % of the device's measured ceiling (``ceiling.key`` says which)."""
        if self.ceiling is None or not self.ceiling.value:
            return None
        r = self.rate("bytes" if self.ceiling.unit == "B/s" else "flops")
        return None if r is None else 100 * r / self.ceiling.value

    @computed_field  # type: ignore[prop-decorator]
    @property
    def flags(self) -> list[str]:
        out = list(self.measurement.flags) if self.ok else []
        pct = self.pct_of_ceiling
        if self.ok and self.in_cache is not None:
            out.append("in_cache")  # measures the cache: above the memory's ceiling is no error
        elif pct is not None and pct > ABOVE_CEILING_PCT:
            out.append("above_ceiling")
        # telemetry's own flags ("throttled", "competing_load") travel with the number
        extra = self.extra_flags + list((self.telemetry or {}).get("flags", []))
        return out + [f for f in dict.fromkeys(extra) if f not in out]

    @property
    def in_cache(self) -> CacheFit | None:
        """The working set and the last-level cache it fits in, where this memory-bound
        result measured the cache rather than memory (``results.cache``); else None."""
        c = self.ceiling
        if c is None:
            return None
        return fit(c.key, c.unit, c.details, self.extra, self.work.bytes)

    @property
    def key(self) -> tuple[str, str, str, tuple[tuple[str, str], ...]]:
        """Identity of the case across runs: workload, variant, device, params."""
        return (
            self.workload,
            self.variant,
            self.device,
            tuple(sorted((k, str(v)) for k, v in self.params.items())),
        )


class RunRecord(BaseModel):
    """One stored run: self-describing (schema, tool, time, machine, software), with its
    results and its kind's typed ``payload`` (``payload.kind == kind``, always)."""

    # built on first use, with the payloads: `history` lists runs without validating one
    model_config = ConfigDict(extra="ignore", defer_build=True)

    schema_version: int = SCHEMA_VERSION
    tool_version: str = ""
    run_id: str | None = None
    kind: str = "run"  # one of payloads.KINDS: run | model | tune | soak | profile
    created_utc: datetime = Field(default_factory=utcnow)
    finished_utc: datetime | None = None
    status: Literal["running", "complete", "incomplete"] = "running"
    command: str = ""
    config: dict[str, Any] = {}
    environment: dict[str, Any] = {}
    fingerprint: str = ""
    ceilings: list[Ceiling] = []
    results: list[Result] = []
    telemetry: dict[str, Any] | None = None
    verdict: Verdict | None = None
    # an empty payload of the run's own kind (kind is validated first)
    payload: Annotated[Payload, PlainValidator(_of_its_kind), SerializeAsAny()] = Field(
        default_factory=lambda data: empty_payload(data.get("kind"))
    )

    # schema 1's field: refused where given, never dropped in silence (and never written)
    extra: None = Field(default=None, exclude=True)

    # A document (a file, a stored row, a reference run, a test's dict) goes through
    # `schema_2`: an older schema is upgraded, a newer one refused (an InputError naming the
    # fix). Not a mode="before" validator: one makes pydantic validate the fields of a JSON
    # document as Python objects, and the leaderboard's strict pass (`model_validate_json(...,
    # strict=True)`) then refused every ISO time; nor an __init__: pydantic then loses the
    # validation context (IMPORTED) in nested models. Keywords (`RunRecord(kind=...)`) are
    # schema 2 already: a payload given as a dict names its kind.
    @field_validator("extra", mode="before")
    @classmethod
    def _no_extra(cls, value: Any) -> None:
        if value is not None:
            raise ValueError(
                "`extra` is schema 1's field; since schema 2 a run's findings are its `payload`"
            )
        return None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Self:
        return super().model_validate(schema_2(obj), *args, **_strict(kwargs))

    @classmethod
    def model_validate_json(
        cls, json_data: str | bytes | bytearray, *args: Any, **kwargs: Any
    ) -> Self:
        try:
            doc = json.loads(json_data)
        except ValueError:
            doc = None  # pydantic says where the JSON breaks
        new = schema_2(doc)
        if new is not doc:
            json_data = json.dumps(new)
        return super().model_validate_json(json_data, *args, **_strict(kwargs))

    @model_validator(mode="after")
    def _payload_of_kind(self) -> RunRecord:
        if self.payload.kind != self.kind:
            raise ValueError(f"a {self.kind!r} run holds a {self.payload.kind!r} payload")
        return self

    def ceiling(self, device: str, key: str) -> Ceiling | None:
        return next((c for c in self.ceilings if c.device == device and c.key == key), None)


def is_host(name: str) -> bool:
    """Whether a stored device name (``cpu``, ``cuda:0`` in a RunRecord) is the host CPU:
    reports use it to compute each accelerator's speedup over the CPU."""
    return name.partition(":")[0] == "cpu"  # CPUDevice.kind, without importing torch
