"""Command-line interface: thin commands (parse -> config -> library call -> render).

Each command lives in one module below, which adds it to ``app`` when imported. The table
here names every command with its one-line help, so ``torchmark --help`` lists them and
``torchmark history`` parses its argv without importing the other modules (``run`` needs
torch, ~2 s; ``history`` must start in well under a second).
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

from torchmark.cli.app import app, main

__all__ = ["COMMANDS", "app", "main"]


class CommandEntry(NamedTuple):
    module: str  # torchmark.cli.<module> defines the command
    help: str  # the first line of its docstring (a test keeps the two equal)
    # it only reads stored runs: it runs no user code and starts no process (``main``
    # turns pydantic's plugin search off for it)
    reads_runs: bool = False


RUNS_CODE = (  # model, tune and profile warn with it (cli/target.py)
    "WARNING: loading SPEC imports or runs the named Python file and calls its factory; "
    "only load models you trust."
)
COMMANDS: dict[str, CommandEntry] = {
    "run": CommandEntry(
        "run", "Measure every workload on every device, against the machine's measured ceilings."
    ),
    "list": CommandEntry(
        "machine", "Workloads (with their facts) and the devices found on this machine."
    ),
    "env": CommandEntry(
        "machine",
        "The environment record stored with every run: versions, devices, threads, flags, load.",
    ),
    "history": CommandEntry("history", "List stored runs, newest first.", reads_runs=True),
    "show": CommandEntry(
        "show",
        "A stored run in the terminal: the tables and verdicts its command printed at its end.",
        reads_runs=True,
    ),
    "export": CommandEntry(
        "history",
        "Write a stored run as JSON (lossless, re-importable) or CSV (for spreadsheets).",
        reads_runs=True,
    ),
    "import": CommandEntry(
        "history", "Store a run exported as JSON (keeps its id unless that id is already taken)."
    ),
    "doctor": CommandEntry(
        "doctor",
        "Check the install and the machine: each check ok / warn / fail (or skip) with its fix.",
    ),
    "soak": CommandEntry(
        "soak",
        "Repeat a heavy workload: throughput over time with clocks, heat, power and throttling.",
    ),
    "compare": CommandEntry(
        "report",
        "Compare runs case by case (FASTER / SLOWER / SAME / UNCLEAR against their noise).",
        reads_runs=True,
    ),
    "report": CommandEntry(
        "report",
        "A report of stored runs: HTML with charts, or a Markdown table for an issue.",
        reads_runs=True,
    ),
    "board": CommandEntry(
        "serve",
        "Serve a shared leaderboard of submitted runs (JSON API, HTML pages, raw data).",
    ),
    "serve": CommandEntry("serve", "The old name of `board`: says so, then runs it."),
    "submit": CommandEntry(
        "submit",
        "Send a run to a shared leaderboard, without host or user identifiers "
        "(--dry-run shows it).",
    ),
    "model": CommandEntry(
        "model",
        "Benchmark your own model over a batch sweep on every device: latency, throughput, "
        "CPU/GPU break-even, energy and cost per item. " + RUNS_CODE,
    ),
    "profile": CommandEntry(
        "profile",
        "Where one case's step time goes: categories that add up, top ops against the ceilings.",
    ),
    "serving": CommandEntry(
        "serving",
        "Load-test a model as a service: the most requests/s each device answers within a p99 "
        "bound, the devices your traffic needs, the cost (`board` is the leaderboard server). "
        + RUNS_CODE,
    ),
    "predict": CommandEntry(
        "predict",
        "Your model on a machine you don't have (an H100, an H200): its step time predicted "
        "from its op profile here and a measured run of that machine, with an interval and "
        "the term that sets it; --here measures this CPU beside it. " + RUNS_CODE,
    ),
    "tune": CommandEntry(
        "tune",
        "Find the settings that make your model faster on each device, each one checked "
        "against the fp32 output, and print the code that applies the best. " + RUNS_CODE,
    ),
}
COMMAND_MODULES = tuple(dict.fromkeys(e.module for e in COMMANDS.values()))


def load_commands() -> None:
    """Import every command module (docs, tests); the CLI itself loads one on demand."""
    for name in COMMAND_MODULES:
        importlib.import_module(f"torchmark.cli.{name}")
