"""`torchmark list` (the workloads and the devices found) and `torchmark env` (the
environment record stored with every run): what this machine has, nothing measured."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.text import Text

from torchmark.cli.app import AsJsonOption, app, console


@app.command(name="list")
def list_(
    as_json: AsJsonOption = False,
) -> None:
    """Workloads (with their facts) and the devices found on this machine."""
    from torchmark.cli import catalog

    # the workloads and their facts as kept once per install; the devices without torch
    # where this torch can only see the CPU (cli/catalog.py)
    workloads, devices = catalog.workloads(), catalog.devices()
    if as_json:
        console.print_json(json.dumps({"workloads": workloads, "devices": devices}))
        return
    from torchmark.report.layout import Col, FitTable

    t = FitTable(
        Col("name"),
        Col("group"),
        Col("quick"),
        Col("summary", wrap=24),
        Col("facts", wrap=18, drop=1),
        title="Workloads",
    )
    for w in workloads:
        facts = {k: v for k, v in w.items() if k not in ("name", "group", "summary", "quick")}
        t.row(
            w["name"],
            w["group"],
            "yes" if w["quick"] else "",
            w["summary"],
            ", ".join(f"{k}={_fmt(v)}" for k, v in facts.items()),
        )
    console.print(t)
    d = FitTable(Col("name"), Col("device", wrap=16), Col("accelerator"), title="Devices")
    for dev in devices:
        d.row(str(dev["name"]), str(dev["label"]), "yes" if dev["accelerator"] else "no")
    console.print(d)


def _fmt(v: Any) -> str:
    if isinstance(v, list | tuple):
        return "/".join(map(str, v))
    return f"{v:,}" if isinstance(v, int) else (f"{v:.4g}" if isinstance(v, float) else str(v))


def in_words(v: object, key: str = "") -> str:
    """A stored value as a person reads it: ``none`` for None, ``yes``/``no``, sizes in
    binary units (keys ending ``_bytes``), numbers to 3 significant figures, lists joined
    by commas, a mapping as ``key value`` pairs (``cuda_runtime None`` and ``loadavg
    [2.1484375, ...]`` were printed raw)."""
    from torchmark.format import binary_bytes

    if v is None:
        return "none"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int) and key.endswith("_bytes"):
        return binary_bytes(v)
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list | tuple):
        return ", ".join(in_words(x, key) for x in v) if v else "none"
    if isinstance(v, dict):
        return "; ".join(f"{k} {in_words(x, str(k))}" for k, x in v.items()) if v else "none"
    return str(v)


@app.command()
def env(
    as_json: AsJsonOption = False,
    refresh: Annotated[
        bool,
        typer.Option(
            "--refresh",
            help="Read torch's facts from torch itself (~3 s) instead of those kept by the "
            "last command that imported it.",
        ),
    ] = False,
) -> None:
    """The environment record stored with every run: versions, devices, threads, flags, load."""
    from torchmark.run import environment

    # torch's own facts as the last run (or env, doctor) kept them: no torch import (~3 s)
    record = None if refresh else environment.collect_kept()
    if record is None:
        from torchmark.devices import available

        record = environment.collect(available())
    record["fingerprint"] = environment.machine_fingerprint(record)
    if as_json:
        console.print_json(json.dumps(record, default=str))
        return
    from torchmark.report.layout import Col, FitTable

    for section, value in record.items():
        if section == "facts_from":
            continue  # said in words below
        if isinstance(value, dict):
            t = FitTable(Col("key", style="bold"), Col("value", wrap=20), title=section)
            t.show_header = False
            for k, v in value.items():
                t.row(str(k), in_words(v, str(k)))
            console.print(t)
        else:
            console.print(Text.assemble((section, "bold"), f": {value}"))
    kept = record.get("facts_from")
    if kept:
        console.print(
            f"software, devices, threads and precision as `{kept['by']}` read them from torch "
            f"at {kept['written_utc']} (kept in {kept['file']}); `torchmark env --refresh` "
            "reads them again",
            style="dim",
        )
