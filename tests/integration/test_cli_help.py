"""Every command's --help reads in an 80-column terminal and in a CI log: no line wider than
80, no ``<bool>`` after a flag, each value named for what it is (``--workload NAME``, not
typer's ``<list[str]>``), and each flag in the form its default needs."""

from __future__ import annotations

import re

import pytest

from clitest import cli
from torchmark.cli import COMMANDS


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_fits_80_columns_and_names_no_bool(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("TERM", "dumb")  # a CI log: no colour, no terminal behind it
    code, out, err = cli(capsys, *([command] if command else []), "--help")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) > 5
    wide = [line for line in lines if len(line) > 80]
    assert not wide, f"torchmark {command} --help overflows 80 columns: {wide[0]!r}"
    assert "<bool>" not in out
    assert "\x1b[" not in out  # no escape codes in a log
    assert "--help" in out
    # typer's type placeholders (<str>, <list[str]>, <path>) and usage names ({spec})
    typed = re.findall(r"<[a-z]+(?:\[[a-z]+\])?>|\{[a-z_]+\}", out)
    assert not typed, f"torchmark {command} --help names a type, not a value: {typed}"


def test_help_paragraphs_are_wrapped_as_wholes() -> None:
    """typer keeps a docstring's line breaks after its first paragraph: `show --help` read
    "... a `run --scaling` ladder" / "given" / "together end with ..." in 80 columns."""
    import click
    import typer

    from torchmark.cli.app import app

    group = typer.main.get_command(app)
    ctx = click.Context(group)
    for name in COMMANDS:
        help_text = group.get_command(ctx, name).help or ""
        broken = [p for p in help_text.split("\n\n") if "\n" in p and not p.startswith("\b")]
        assert not broken, f"torchmark {name} --help keeps a line break in: {broken[0][:80]!r}"


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("tune", ["Usage: torchmark tune [OPTIONS] SPEC", "--budget", "DURATION", "--batch"]),
        ("run", ["--workload", "NAME", "--device", "DEVICE", "--db", "URL", "--json", "FILE"]),
        ("model", ["--input ", "SHAPE", "--inputs ", "FILE.py:FUNC", "N[,N...]"]),
        ("compare", ["Usage: torchmark compare [OPTIONS] [RUNS]...", "PCT"]),
        ("export", ["Usage: torchmark export [OPTIONS] RUN"]),
    ],
)
def test_help_names_each_value(
    command: str,
    named: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one option a line: its name beside its value
    code, out, _ = cli(capsys, command, "--help")
    assert code == 0
    for word in named:
        assert word in out, (command, word)
    if command == "tune":  # an int here, a comma list in run: each named for its own
        assert re.search(r"--batch +N +The batch size", out)


def test_flags_have_the_form_their_default_needs() -> None:
    """A flag on by default needs its --no- form to be turned off; one off by default is
    ``--flag`` alone (``--no-dry-run`` would only be noise)."""
    import typer

    from torchmark.cli import app, load_commands

    load_commands()
    group = typer.main.get_command(app)
    ctx = group.make_context("torchmark", ["--help"], resilient_parsing=True)
    flags = 0
    for name in COMMANDS:
        cmd = group.get_command(ctx, name)
        for p in cmd.get_params(ctx):
            if not getattr(p, "is_flag", False) or p.name == "help":
                continue
            flags += 1
            form = "/".join([*p.opts, *p.secondary_opts])
            if p.default:
                assert p.secondary_opts, f"torchmark {name} {form}: on by default, no --no- form"
            else:
                assert not p.secondary_opts, f"torchmark {name} {form}: off by default"
    assert flags > 10


def test_run_and_profile_declare_their_selectors_once() -> None:
    """The options that pick cases read the same in both commands' help."""
    import typer

    from torchmark.cli import app, load_commands

    load_commands()
    group = typer.main.get_command(app)
    ctx = group.make_context("torchmark", ["--help"], resilient_parsing=True)

    def options(name: str) -> dict[str, tuple[object, ...]]:
        cmd = group.get_command(ctx, name)
        return {
            p.name: (tuple(p.opts), p.help, p.multiple, p.default)
            for p in cmd.get_params(ctx)
            if p.name
        }

    run, profile = options("run"), options("profile")
    shared = ("workload", "device", "scenario", "precision", "batch", "size", "stopping")
    for name in shared:
        assert run[name] == profile[name], name
    for name in ("input", "inputs"):
        assert options("model")[name] == profile[name] == options("tune")[name], name


def test_every_value_has_a_chosen_name_and_a_time_is_a_duration() -> None:
    """No name made from the option's own (``--p99-ms P99-MS``), and one spelling per idea:
    every option that takes a time reads DURATION and parses 90s / 2m / 1h alike."""
    import typer

    from torchmark.cli import app, load_commands
    from torchmark.cli.app import METAVARS

    load_commands()
    group = typer.main.get_command(app)
    ctx = group.make_context("torchmark", ["--help"], resilient_parsing=True)
    durations = []
    for name in COMMANDS:
        for p in group.get_command(ctx, name).get_params(ctx):
            if p.param_type_name != "option" or getattr(p, "is_flag", False) or p.hidden:
                continue
            long = max(p.opts, key=len)
            assert "-" not in p.metavar.strip("-"), f"torchmark {name} {long} {p.metavar}"
            assert p.metavar != long.lstrip("-").upper() or long in METAVARS, (name, long)
            assert not long.endswith("-s"), f"torchmark {name} {long}: a time is a DURATION"
            if p.metavar == "DURATION":
                durations.append(f"{name} {long}")
    assert {"tune --budget", "serving --budget", "soak --duration"} <= set(durations)
