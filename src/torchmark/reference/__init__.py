"""Reference data: other machines' results a user's run can be placed among.

Each ``*.json`` file in this folder is one reference set, listed by ``names()``:

- ``"kind": "table"``: a published table copied as printed (``seed-2023``: the seed blog's
  11 rows in it/s), with its provenance. What each figure really measured (implied GB/s,
  % of the datasheet bandwidth, plausibility) is derived here from the it/s and the byte
  count of one iteration, never typed in.
- ``"kind": "run"``: a run measured by this project on real hardware: ``{"name", "title",
  "command", "run": <RunRecord JSON>}``, ``command`` being what made it. Its ``seed-add``
  ``as-published`` results join the placement table like the published rows.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from torchmark.errors import InputError, StoreError, UnknownNameError
from torchmark.judge import verdicts
from torchmark.results import Result, RunRecord, is_host

HERE = Path(__file__).parent
SEED_WORKLOAD, SEED_VARIANT = "seed-add", "as-published"
SEED_SET = "seed-2023"  # the blog's table, which these results are placed in


@dataclass(frozen=True)
class ReferenceRow:
    hardware: str
    value: float  # it/s of the published loop
    device_type: str = "unknown"  # cpu | gpu | unknown
    implied_bytes_per_s: float | None = None
    datasheet_bytes_per_s: float | None = None
    note: str = ""
    implausible: str | None = None  # why the figure cannot be taken at face value
    source: str = ""  # reference set name, or "this machine"
    this_machine: bool = False
    measured: bool = False  # measured by torchmark (else copied from a published table)
    rankable: bool = True  # False: its verdict keeps it off rankings (verdicts): drawn, unranked

    @property
    def pct_of_datasheet(self) -> float | None:
        if self.implied_bytes_per_s is None or not self.datasheet_bytes_per_s:
            return None
        return 100 * self.implied_bytes_per_s / self.datasheet_bytes_per_s


@dataclass(frozen=True)
class ReferenceSet:
    name: str
    kind: str  # table | run
    title: str
    provenance: str
    rows: tuple[ReferenceRow, ...]
    unit: str = "it/s"
    command: str | None = None  # for runs: the command that made it
    what: str = ""  # what one iteration really does
    run: RunRecord | None = None
    bytes_per_iteration: float | None = None  # memory traffic of one published iteration
    tensor_bytes: float | None = None  # size of the one tensor that iteration adds to itself


def _table(name: str, d: dict[str, Any]) -> ReferenceSet:
    m = d["measured"]
    per_it = float(math.prod(m["shape"]) * m["dtype_bytes"] * m["passes"])
    rows = []
    for r in d["rows"]:
        ds = r.get("datasheet_bandwidth_gbs")
        row = ReferenceRow(
            hardware=r["hardware"],
            value=float(r["it_per_s"]),
            device_type=r.get("device_type", "unknown"),
            implied_bytes_per_s=r["it_per_s"] * per_it,
            datasheet_bytes_per_s=ds * 1e9 if ds else None,
            note=r.get("note", ""),
            implausible=r.get("implausible"),
            source=name,
        )
        p = row.pct_of_datasheet
        if p is not None and p > 100:
            # Above the memory's physical limit: the label or the measurement is wrong.
            row = replace(row, implausible=f"{p:.0f} % of its datasheet bandwidth")
        rows.append(row)
    return ReferenceSet(
        name=name,
        kind="table",
        title=d["title"],
        provenance=d["provenance"],
        rows=tuple(rows),
        unit=d.get("unit", "it/s"),
        what=m.get("what", ""),
        bytes_per_iteration=per_it,
        tensor_bytes=per_it / m["passes"],
    )


def seed_rows(
    record: RunRecord, source: str = "this machine", mine: bool = True
) -> list[ReferenceRow]:
    """A run's ``seed-add`` ``as-published`` results as rows of the seed table."""
    rows = []
    for r in seed_results(record):
        value = r.rate("items")
        if value is None:
            continue
        ceiling = r.ceiling
        rankable = verdicts.may(r, "rank")
        above = "above the measured ceiling" if "above_ceiling" in r.flags else None
        rows.append(
            ReferenceRow(
                hardware=device_label(record, r.device),
                value=value,
                device_type="cpu" if is_host(r.device) else "gpu",
                implied_bytes_per_s=r.rate("bytes"),
                datasheet_bytes_per_s=ceiling.theoretical if ceiling else None,
                note=_run_note(r),
                implausible=above if rankable else verdicts.says(r),
                source=source,
                this_machine=mine,
                measured=True,
                rankable=rankable,
            )
        )
    return rows


def seed_results(record: RunRecord) -> list[Result]:
    """``as-published`` results whose iteration is the blog's (same bytes: a 12288^2 tensor
    added to itself). Another ``--size``, or a torch that stops folding ``foo()``, does other
    work per "it" and has no place in that table."""
    per_it = load(SEED_SET).bytes_per_iteration
    return [
        r
        for r in record.results
        if r.workload == SEED_WORKLOAD
        and r.variant == SEED_VARIANT
        and r.ok
        and r.work.bytes == per_it
    ]


def newest_placeable(store: Any) -> RunRecord:
    """The newest finished run with a result ``seed_results`` can place: what ``compare
    --reference`` takes when no run is named. Not ``latest``: that may be a tune or model
    run, and telling the user to run seed-add again when one is stored is wrong."""
    for run_id in store.runs_holding(SEED_WORKLOAD, SEED_VARIANT):
        try:
            record = store.load(run_id)
        except StoreError:  # a damaged run places nothing: the one before it may
            continue
        if seed_results(record):
            return record
    raise InputError(
        f"no stored run has a {SEED_WORKLOAD} {SEED_VARIANT} result at the blog's size to "
        f"place; run `torchmark run --workload {SEED_WORKLOAD}` first (or name a run)"
    )


def _run_note(r: Result) -> str:
    parts = [f"median of {r.n} samples"]
    if r.pct_of_ceiling is not None and r.ceiling is not None:
        parts.append(f"{r.pct_of_ceiling:.0f} % of measured {r.ceiling.key}")
    parts += r.flags
    return ", ".join(parts)


def device_label(record: RunRecord, device: str) -> str:
    """The device's model name as recorded in the run's environment, else its id."""
    info = record.environment.get("devices", {}).get(device, {})
    model = info.get("model") if isinstance(info, dict) else None
    return f"{model} ({device})" if model else device


def _run(name: str, d: dict[str, Any]) -> ReferenceSet:
    record = RunRecord.model_validate(d["run"])
    return ReferenceSet(
        name=name,
        kind="run",
        title=d.get("title", name),
        provenance=d.get("provenance", f"measured by torchmark: {d.get('command', '?')}"),
        rows=tuple(seed_rows(record, source=name, mine=False)),
        command=d.get("command"),
        run=record,
    )


def _files(directory: Path | None) -> dict[str, Path]:
    folder = HERE if directory is None else Path(directory)
    return {p.stem: p for p in sorted(folder.glob("*.json"))}


def names(directory: Path | None = None) -> list[str]:
    return list(_files(directory))


@functools.cache  # reference sets are package data: read and parse each once per process
def load(name: str, directory: Path | None = None) -> ReferenceSet:
    files = _files(directory)
    if name not in files:
        raise UnknownNameError("reference set", name, files)
    try:
        d = json.loads(files[name].read_text())
        return _table(name, d) if d.get("kind") == "table" else _run(name, d)
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(f"reference set {name!r} ({files[name]}) is not usable: {e}") from e


def runs(directory: Path | None = None) -> list[ReferenceSet]:
    """Every committed reference run (kind ``run``)."""
    sets = [load(n, directory) for n in names(directory)]
    return [s for s in sets if s.kind == "run"]


def ranked(rows: list[ReferenceRow] | tuple[ReferenceRow, ...]) -> list[ReferenceRow]:
    """Fastest first; equal rates keep their order."""
    return sorted(rows, key=lambda r: -r.value)


def neighbours(
    rows: tuple[ReferenceRow, ...] | list[ReferenceRow], value: float
) -> tuple[ReferenceRow | None, ReferenceRow | None, int]:
    """The nearest slower and faster published rows around ``value``, and its rank (1 = fastest)."""
    others = ranked(list(rows))
    faster = [r for r in others if r.value > value]
    slower = [r for r in others if r.value <= value]
    return (slower[0] if slower else None, faster[-1] if faster else None, len(faster) + 1)


def placed(ref: ReferenceSet, mine: list[ReferenceRow]) -> list[ReferenceRow]:
    """The rows ``mine`` are placed among, fastest first: the set's own rows, for a table
    the committed reference runs too, and ``mine``."""
    extra = [] if ref.kind == "run" else [r for s in runs() for r in s.rows]
    return ranked([*ref.rows, *extra, *mine])


@dataclass(frozen=True)
class Placement:
    """Where one of this machine's rows stands: among the published table alone (the
    blog's rows), and among every row the chart and ``compare --reference`` draw (the
    table, the committed reference runs and this run's rows). Every view says both."""

    row: ReferenceRow
    rank: int | None  # 1 = fastest, among the table's rows and this row (None: unranked)
    of: int
    rank_all: int | None  # among ``placed``'s rankable rows
    of_all: int
    slower: ReferenceRow | None  # the table's nearest rows around it
    faster: ReferenceRow | None


def placements(ref: ReferenceSet, mine: list[ReferenceRow]) -> list[Placement]:
    """``mine`` placed in ``ref``: the one ranking every view of the seed table reads."""
    drawn = [r for r in placed(ref, mine) if r.rankable]
    out = []
    for row in mine:
        slower, faster, rank = neighbours(ref.rows, row.value)
        if not row.rankable:  # its own verdict keeps it off the table (verdicts)
            out.append(Placement(row, None, len(ref.rows), None, len(drawn), slower, faster))
            continue
        at = next(i for i, r in enumerate(drawn) if r is row)
        out.append(Placement(row, rank, len(ref.rows) + 1, at + 1, len(drawn), slower, faster))
    return out


def shown_name(row: ReferenceRow, ref: ReferenceSet, mine: list[ReferenceRow]) -> str:
    """A row's name as a placement shows it: a reference run's row with its set's name, and
    said to be another machine's where it bears the name of one of this machine's devices
    (the H100 box's host CPU and yours can share a model name: it is not your CPU)."""
    if row.this_machine or row.source in (ref.name, "this machine"):
        return row.hardware
    other = ", another machine" if any(m.hardware == row.hardware for m in mine) else ""
    return f"{row.hardware}  [{row.source}{other}]"
