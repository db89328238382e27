"""The ``input`` and ``input-tokens`` workloads' breakdown and advice, pure functions of
their stored results.

The table: per loader configuration, images/s (or tokens/s), the share of a step spent
waiting for data, copying it and computing, and the ratio to the same step fed from
device memory. The advice: the best configuration and its measured gain over DataLoader's
defaults, where adding workers stops helping, what the pipeline costs against
device-resident data, and the code to apply it. Gains are judged against the noise
(``comparison.independent``): an effect the noise covers is "can't tell", never "same"."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.console import RenderableType

from torchmark import format as fmt
from torchmark import verdicts
from torchmark.loaders import INPUT_WORKLOADS, LOADER, RESIDENT, YOURS, LoaderConfig, config_of
from torchmark.report.layout import Alt, Col, FitTable, lines
from torchmark.results import Ceiling, Result, RunRecord, link_ceiling
from torchmark.stats.comparison import Change, Comparison, independent


def config_cell(r: Result) -> Alt:
    if r.variant == RESIDENT:
        return Alt("device-resident", "resident")
    if r.params.get(YOURS):
        return Alt("your loader, as given", "yours")
    c = config_of(r.params)
    if c == LoaderConfig():
        return Alt("defaults (workers=0)", "w=0")
    words = [f"w={c.workers}"]
    words += ["pin"] if c.pin else []
    words += [f"prefetch={c.prefetch}"] if c.prefetch is not None else []
    words += ["persistent"] if c.persistent else []
    words += ["side-stream"] if c.side_stream else ["non_blocking"] if c.non_blocking else []
    short = " ".join(words).replace("prefetch=", "pf=").replace("persistent", "pers")
    short = short.replace("non_blocking", "nb").replace("side-stream", "side")
    return Alt(" ".join(words), short)


def share(part: float | None, step: float | None) -> str:
    if part is None or not step:
        return "none" if part is None and step else fmt.DASH
    return f"{round(100 * part / step)} %"


def unit_of(rs: Sequence[Result]) -> str:
    return next((r.work.item_unit for r in rs if r.work is not None), "items")


HEADERS = ("loader", "device", "step", "wait", "copy", "compute", "vs resident")


def breakdown_cells(r: Result, resident: Result | None) -> list[str]:
    """One configuration's step, its wait / copy / compute shares and its ratio to the
    device-resident step: the cells every view of the breakdown prints."""
    b = r.extra.get("input", {})
    step = b.get("step_s")
    vs = rate(r) / rate(resident) if resident and r.ok and rate(resident) else None
    if r.variant == RESIDENT:
        cells = [fmt.duration(r.median_s), "0 %", "0 %", "100 %"]
    elif not r.ok:
        cells = [r.status, "", "", ""]
    else:
        cells = [
            fmt.duration(step),
            share(b.get("wait_s"), step),
            share(b.get("copy_s"), step),
            share(b.get("compute_s"), step),
        ]
    return [*cells, f"{round(100 * vs)} %" if vs is not None else ""]


def by_device(record: RunRecord, workload: str) -> list[tuple[str, list[Result], Result | None]]:
    """(device, its results of ``workload`` in run order, its resident case if it ran)."""
    rs = [r for r in record.results if r.workload == workload]
    out = []
    for device in dict.fromkeys(r.device for r in rs):
        mine = [r for r in rs if r.device == device]
        resident = next((r for r in mine if r.variant == RESIDENT and r.ok), None)
        out.append((device, mine, resident))
    return out


def breakdown_table(record: RunRecord, workload: str = "input") -> FitTable | None:
    rs = [r for r in record.results if r.workload == workload]
    if not rs:
        return None
    groups = by_device(record, workload)
    table = FitTable(
        Col("loader", wrap=10),
        Col("device", show=len(groups) > 1),
        Col(f"{unit_of(rs)}/s", justify="right"),
        Col("step", justify="right", drop=2),
        Col("wait", justify="right"),
        Col("copy", justify="right", drop=1),
        Col("compute", justify="right"),
        Col("vs resident", justify="right", short_header="vs res."),
        title=f"{workload} pipeline · share of each step (wait / copy / compute)",
    )
    for _, mine, resident in groups:
        for r in mine:
            table.row(
                config_cell(r),
                r.device,
                fmt.sig(rate(r)) if r.ok else r.status,
                *breakdown_cells(r, resident),
            )
    return table


def advice_lines(record: RunRecord, workload: str) -> list[str]:
    """The advice for ``workload``'s cases, one line each, with the CPU's missing copy said."""
    text: list[str] = []
    for a in advice_of(record, workload):
        text += [f"{workload} on {a.device}: {line}" for line in a.lines]
    mine = [r for r in record.results if r.workload == workload]
    # the resident case copies nothing by design: only a fed case without a copy says CPU
    fed = [r for r in mine if r.ok and r.variant != RESIDENT]
    if any(r.extra.get("input", {}).get("copy_s") is None for r in fed):
        text.append("copy: none on the CPU (the batch is already in its memory)")
    return text


def advice_of(record: RunRecord, workload: str) -> list[Advice]:
    """``advise`` on ``workload``'s results alone: a caller per workload does not advise
    on every input workload each time."""
    return advise([r for r in record.results if r.workload == workload], record.ceilings)


def workloads_in(record: RunRecord) -> list[str]:
    return [w for w in INPUT_WORKLOADS if any(r.workload == w for r in record.results)]


def markdown_lines(record: RunRecord, cell: Callable[[str], str]) -> list[str]:
    """The breakdown as a Markdown table per input workload, then its advice as a list;
    ``cell`` escapes a stored string for a table cell (Markdown's own rules)."""
    out: list[str] = []
    for workload in workloads_in(record):
        rs = [r for r in record.results if r.workload == workload]
        out += [
            "",
            f"**{workload} pipeline**: share of each step spent waiting for the next batch, "
            "copying it to the device and computing",
            "",
            f"| Loader | Device | {unit_of(rs)}/s | Step | Wait | Copy | Compute | vs resident |",
            "|---|---|---:|---:|---:|---:|---:|---:|",
        ]
        for _, mine, resident in by_device(record, workload):
            for r in mine:
                full = config_cell(r).full
                row = [
                    str(full),
                    r.device,
                    fmt.sig(rate(r)) if r.ok else r.status,
                    *breakdown_cells(r, resident),
                ]
                out.append("| " + " | ".join(cell(x) for x in row) + " |")
        out += ["", *(f"- {cell(line)}" for line in advice_lines(record, workload))]
    return out


def pipeline_tables(record: RunRecord) -> list[RenderableType]:
    out: list[RenderableType] = []
    for workload in workloads_in(record):
        table = breakdown_table(record, workload)
        if table is not None:
            out += [table, lines(advice_lines(record, workload))]
    return out


@dataclass(frozen=True)
class Advice:
    device: str
    lines: list[str]
    best: LoaderConfig | None
    gain: float | None  # best items/s over the default's
    cost: float | None  # 1 - best / resident: the share of the possible throughput lost
    plateau: int | None  # the smallest worker count no larger count measurably beat
    workload: str = "input"


def advise(results: Sequence[Result], ceilings: Sequence[Ceiling] = ()) -> list[Advice]:
    """One Advice per device and batch the ``input`` workload ran on; ``ceilings``: the
    run's measured ones (each copy is read against the link's limit, ``link_ceiling``)."""
    groups: dict[tuple[str, str, object], list[Result]] = {}
    for r in results:
        if r.workload in INPUT_WORKLOADS:
            groups.setdefault((r.workload, r.device, r.params.get("batch")), []).append(r)
    return [
        dataclasses.replace(
            _one(device, rs, [c for c in ceilings if c.device == device]), workload=workload
        )
        for (workload, device, _), rs in groups.items()
    ]


def rate(r: Result) -> float:
    return r.rate("items") or 0.0


def _one(device: str, rs: list[Result], ceilings: Sequence[Ceiling] = ()) -> Advice:
    resident = next((r for r in rs if r.variant == RESIDENT and r.ok), None)
    loaders = [
        (config_of(r.params), r)
        for r in rs
        if r.variant == LOADER and r.ok and not r.params.get(YOURS)
    ]
    yours = next((r for r in rs if r.params.get(YOURS) and r.ok), None)
    wrong = [r for r in rs if r.status == "wrong"]
    lines = [f"{config_of(r.params).label()}: wrong batches, left out ({r.reason})" for r in wrong]
    unit = unit_of(rs)
    default = next((r for c, r in loaders if c.is_default), None)
    rebuilt_any = any(r.variant == LOADER and not r.params.get(YOURS) for r in rs)
    if yours is not None and not rebuilt_any:  # not a DataLoader: nothing was rebuilt
        loaders = [(LoaderConfig(), yours)]
        lines.append("your loader is not a DataLoader: it was measured as given only")
    if not loaders:
        return Advice(device, [*lines, "no loader configuration ran"], None, None, None, None)
    # a configuration its own verdict keeps from being recommended (verdicts: invalid,
    # unreliable) is named with why, never picked as the best
    refused = [(c, r) for c, r in loaders if not verdicts.may(r, "recommend")]
    lines += [f"{c.label()}: left out, {verdicts.says(r)}" for c, r in refused]
    loaders = [(c, r) for c, r in loaders if verdicts.may(r, "recommend")]
    if not loaders:
        return Advice(
            device,
            [*lines, "no loader configuration can be recommended: each one's verdict rejects it"],
            None,
            None,
            None,
            None,
        )
    if default is not None and all(r is not default for _, r in loaders):
        default = None  # the defaults' own figure is rejected: no gain is read off it
    best_cfg, best = max(loaders, key=lambda cr: rate(cr[1]))
    gain: float | None = None
    faster = False
    if default is not None and best is not default:
        gain = rate(best) / rate(default)
        j = independent(default.measurement, best.measurement)
        faster = not isinstance(j, str) and j.verdict == "FASTER"
        lines.append(
            f"best: {best_cfg.label()}: {rate(best):,.0f} {unit}/s, {gain:.2f}x the "
            f"DataLoader defaults ({rate(default):,.0f} {unit}/s)"
            + ("" if faster else "; can't tell it from the noise")
        )
    elif default is not None:
        lines.append(f"best: DataLoader's defaults ({rate(default):,.0f} {unit}/s)")
    if yours is not None and rate(yours) > 0 and best is not yours:
        j = independent(yours.measurement, best.measurement)
        told = not isinstance(j, str) and j.verdict in ("FASTER", "SLOWER")
        lines.append(
            f"your loader as given: {rate(yours):,.0f} {unit}/s; the best setting is "
            f"{rate(best) / rate(yours):.2f}x it" + ("" if told else " (can't tell from the noise)")
        )
    plateau, most = _plateau(loaders)
    if plateau is not None and plateau == most and most > 0:
        lines.append(f"workers: still helping at {most}, the most tried (the cores it may use)")
    elif plateau is not None and most > 0:
        lines.append(f"workers: no count above {plateau} measurably beat {plateau}")
    cost: float | None = None
    if resident is not None and rate(resident) > 0:
        sides = (("step fed from device memory", resident), ("best fed step", best))
        if bad := next(((what, why) for what, r in sides if (why := _invalid(r))), None):
            # a cost read off an invalid figure is a verdict its own table denies
            lines.append(f"pipeline cost: can't tell; the {bad[0]} measured invalid ({bad[1]})")
        elif rate(best) > rate(resident):
            # the fed step cannot beat the same step with no loading: the machine's
            # speed changed between the cases (other load), so no cost can be read off
            lines.append(
                f"pipeline cost: can't tell; the best fed step measured faster than the "
                f"same step fed from device memory ({rate(best):,.0f} vs "
                f"{rate(resident):,.0f} {unit}/s): the machine's load changed between them"
            )
        else:
            cost = 1 - rate(best) / rate(resident)
            lines.append(
                f"your pipeline costs {round(100 * cost)} % of the possible throughput: best "
                f"{rate(best):,.0f} vs {rate(resident):,.0f} {unit}/s fed from device memory"
            )
    lines += _contention(loaders, resident)
    lines += _copies(loaders, ceilings)
    lines += _side_stream(loaders)
    bound = best.extra.get("input", {}).get("input_bound")
    if bound is not None:
        lines.append(f"input-bound: {round(100 * bound)} % of each step waits for data (best)")
    if faster:
        lines.append(f"apply: DataLoader(dataset, batch_size=..., {best_cfg.code()})")
        if (copy := best_cfg.copy_code()) is not None:
            lines.append(f"apply: and {copy}")
    elif default is not None:
        lines.append("apply: nothing; no configuration measurably beat DataLoader's defaults")
    return Advice(device, lines, best_cfg, gain, cost, plateau)


def _invalid(r: Result) -> str | None:
    """The first reason ``r``'s verdict gives for being invalid; None when it is not."""
    if verdicts.kind_of(r) != "invalid":
        return None
    return (verdicts.reasons(r) or ["invalid"])[0]


# Compute per step this much above the resident step's is worth a line: below it, the
# two are within this machine's run-to-run spread (5-15 % under other helpers' load).
SLOWER_COMPUTE = 1.25


def _contention(loaders: list[tuple[LoaderConfig, Result]], resident: Result | None) -> list[str]:
    """Workers that slow the step itself: on a CPU they decode on the cores the step
    computes on (2 loaded cores here: compute per step rose 1.5-2x with 1-2 workers and
    one torch thread, and 35x with torch's 2 OpenMP threads spinning against them)."""
    if resident is None or resident.median_s is None:
        return []
    slowed = [
        (c, b["compute_s"])
        for c, r in loaders
        if c.workers
        and (b := r.extra.get("input", {})).get("compute_s") is not None
        and b["compute_s"] > SLOWER_COMPUTE * resident.median_s
    ]
    if not slowed:
        return []
    c, t = max(slowed, key=lambda ct: ct[1])
    return [
        f"contention: with {c.label()} the step's compute took {t * 1e3:.3g} ms vs "
        f"{resident.median_s * 1e3:.3g} ms fed from device memory: the workers take the "
        "cores or memory bandwidth the step needs"
    ]


def _plateau(loaders: list[tuple[LoaderConfig, Result]]) -> tuple[int | None, int]:
    """(the smallest plain worker count that no larger count measurably beats, the largest
    count tried). Each larger count is judged against it, not only the next one: a noisy
    middle point must not hide a gain further up."""
    plain = [(c.workers, r) for c, r in loaders if LoaderConfig(c.workers) == c]
    curve = sorted(plain, key=lambda wr: wr[0])
    if not curve:
        return None, 0
    for i, (w, r) in enumerate(curve):
        beaten = False
        for _, up in curve[i + 1 :]:
            j = independent(r.measurement, up.measurement)
            beaten = beaten or (not isinstance(j, str) and j.verdict == "FASTER")
        if not beaten:
            return w, curve[-1][0]
    return None, curve[-1][0]  # unreachable: the last count has nothing above it


def _copy_rate(r: Result) -> float | None:
    b = r.extra.get("input", {})
    copy, size = b.get("copy_device_s"), b.get("batch_bytes")
    return size / copy if copy and size else None


def _copies(loaders: list[tuple[LoaderConfig, Result]], ceilings: Sequence[Ceiling]) -> list[str]:
    """The fastest in-line copy from pinned and from pageable memory, each against the
    link's limit (``link_ceiling``: the pinned rate, as the transfer workload reads every
    copy), so the gap of pageable is what pinning would win. Side-stream copies are left
    out: they share the device with the compute beside them."""
    parts = []
    for pinned, memory in ((True, "h2d:pinned"), (False, "h2d:pageable")):
        key = link_ceiling(memory)
        rates = [
            rate_
            for c, r in loaders
            if c.pin == pinned and not c.side_stream and (rate_ := _copy_rate(r)) is not None
        ]
        if not rates:
            continue
        best = max(rates)
        part = f"{'pinned' if pinned else 'pageable'} {best / 1e9:.3g} GB/s"
        ceiling = next((c for c in ceilings if c.key == key), None)
        if ceiling is not None and ceiling.value > 0:
            part += f" ({round(100 * best / ceiling.value)} % of the measured {key}, "
            part += f"{ceiling.value / 1e9:.3g} GB/s)"
        parts.append(part)
    if not parts:
        return []
    return ["host-to-device copy of a batch (fastest): " + "; ".join(parts)]


def _side_stream(loaders: list[tuple[LoaderConfig, Result]]) -> list[str]:
    """What the side stream hid of the copy, against what it could hide, and its gain
    over the same loader copying in line (pinned, non_blocking)."""
    out = []
    for c, r in loaders:
        b = r.extra.get("input", {})
        if not c.side_stream or b.get("overlap") is None:
            continue
        line = (
            f"side stream: hid {round(100 * b['overlap'])} % of the copy time behind the "
            f"compute (ideal {round(100 * b['overlap_ideal'])} %: the copy can hide only "
            "behind as much compute)"
        )
        twin = LoaderConfig(c.workers, c.pin, c.prefetch, c.persistent, non_blocking=True)
        base = next((r2 for c2, r2 in loaders if c2 == twin), None)
        if base is not None and rate(base) > 0:
            j = independent(base.measurement, r.measurement)
            told = not isinstance(j, str) and j.verdict in ("FASTER", "SLOWER")
            line += f"; {rate(r) / rate(base):.2f}x the same loader copying in line" + (
                "" if told else " (can't tell it from the noise)"
            )
        out.append(line)
    return out


def _shares(r: Result) -> tuple[float, float, float] | None:
    """(wait, copy, compute) as fractions of the step; the resident step computes only."""
    parts = step_parts(r)
    if parts is None:
        return None
    step: float = (r.median_s if r.variant == RESIDENT else r.extra["input"]["step_s"]) or 1.0
    return (parts[0] / step, parts[1] / step, parts[2] / step)


def step_parts(r: Result) -> tuple[float, float, float] | None:
    """(wait, copy, compute) seconds of the median step; the resident step computes only."""
    if r.variant == RESIDENT and r.ok and r.median_s is not None:
        return (0.0, 0.0, r.median_s)
    b = r.extra.get("input", {})
    if not r.ok or not b.get("step_s"):
        return None
    return (b.get("wait_s") or 0.0, b.get("copy_s") or 0.0, b.get("compute_s") or 0.0)


def _moved(a: Result, b: Result, k: int) -> str:
    sa, sb = _shares(a), _shares(b)
    if sa is None or sb is None:
        return ""
    x, y = round(100 * sa[k]), round(100 * sb[k])
    return f"{x} %" if x == y else f"{x}→{y} %"


def _said(c: Change) -> str:
    return {"UNCLEAR": "can't tell", None: "not comparable"}.get(c.verdict, str(c.verdict))


def comparison_parts(cmp: Comparison, names: Sequence[str]) -> list[RenderableType]:
    """Per later run: each input configuration's items/s in A and in it, the ratio and the
    verdict the main table gave (``comparison.independent``), how the step's wait / copy /
    compute shares moved, and one line per configuration that changed. ``names``: the
    runs' letters (A, B, ...)."""
    out: list[RenderableType] = []
    for i, changes in enumerate(cmp.changes, start=1):
        x = names[i]
        for workload in INPUT_WORKLOADS:
            mine = [c for c in changes if c.a.workload == workload]
            if not mine:
                continue
            unit = unit_of([c.a for c in mine])
            table = FitTable(
                Col("loader", wrap=10, shorten=1),
                Col("device", show=len({c.a.device for c in mine}) > 1),
                Col(f"A {unit}/s", justify="right", short_header="A"),
                Col(f"{x} {unit}/s", justify="right", short_header=x),
                Col(f"{x}/A", justify="right"),
                Col(f"{x} vs A"),
                Col("wait", justify="right"),
                Col("copy", justify="right", drop=1),
                Col("compute", justify="right", drop=2),
                title=f"{workload} pipeline, A → {x}: items/s and share of each step",
            )
            text: list[str] = []
            for c in mine:
                a, b = c.a, c.b
                table.row(
                    config_cell(a),
                    a.device,
                    fmt.sig(rate(a)) if a.ok else a.status,
                    fmt.sig(rate(b)) if b.ok else b.status,
                    fmt.ratio(c.speed) if c.speed else "",
                    _said(c),
                    _moved(a, b, 0),
                    _moved(a, b, 1),
                    _moved(a, b, 2),
                )
                label = f"{config_cell(a).full} on {a.device}"
                if c.verdict in ("FASTER", "SLOWER") and c.speed:
                    text.append(
                        f"changed: {label}: {rate(a):,.0f} → {rate(b):,.0f} {unit}/s "
                        f"({c.speed:.2f}x, {c.verdict}); wait {_moved(a, b, 0)} of the step"
                    )
                elif c.verdict is None:
                    text.append(f"not comparable: {label}: {c.why}")
            unclear = [str(config_cell(c.a).short) for c in mine if c.verdict == "UNCLEAR"]
            if unclear:
                text.append(
                    "can't tell (the noise is larger than the change; reasons above): "
                    + ", ".join(unclear)
                )
            if not any(c.verdict in ("FASTER", "SLOWER") for c in mine):
                text.append(f"no input configuration measurably changed from A to {x}")
            text += _best_moved(cmp.runs[0], cmp.runs[i], workload, x)
            out += [table, lines(text)]
    return out


def _best_moved(ra: RunRecord, rb: RunRecord, workload: str, x: str) -> list[str]:
    """Which configuration each run's advice names best, where the two differ."""
    best = [{a.device: a.best for a in advice_of(r, workload)} for r in (ra, rb)]
    out = []
    for device, cfg in best[0].items():
        other = best[1].get(device)
        if cfg is not None and other is not None and cfg != other:
            # "fastest measured", not "best": the two may sit within each other's noise
            out.append(
                f"fastest measured on {device}: A {cfg.label()}; {x} {other.label()} "
                "(each run's advice says whether it beat the defaults beyond the noise)"
            )
    return out
