"""The README and the pages in docs/ hold true: every relative link resolves (its file, and
its #anchor to a heading there), and every `torchmark ...` command they show parses against
the real CLI: the command exists, every option it names exists for that command, and in a
code block its values convert to the option's type. Parsing runs no command: nothing is
measured, so this is fast and deterministic."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer.main

from torchmark.cli import COMMANDS, app, load_commands

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks/README.md"]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```(\w*)\s*$")
# A value written in capitals stands for any value (`--p99-ms L`, `RUN`, `N[,N...]`).
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\[,[A-Z]+\.\.\.\])?$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    out, fenced = set(), False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def split(page: Path) -> tuple[list[str], str]:
    """(command lines in its code blocks, the prose outside them)."""
    lines, prose, lang = [], [], None
    for line in page.read_text().splitlines():
        m = FENCE.match(line)
        if m:
            lang = None if lang is not None else m.group(1)
            continue
        if lang is None:
            prose.append(line)
        elif lang not in ("python", "json"):
            lines.append(line)
    return lines, "\n".join(prose)


def commands_in(page: Path) -> list[tuple[str, bool]]:
    """Every `torchmark ...` command the page shows: (its words after `torchmark`, whether
    from a code block). A code block's line may start with a prompt or variables
    (`node0$ `, `srun `, `TORCHMARK_TOKEN=... `) and end in a comment or `&`."""
    lines, prose = split(page)
    found = []
    for line in lines:
        m = re.search(r"(?:^|[\s$])torchmark (.*)$", line)
        if m and not line.lstrip().startswith("#"):
            found.append((re.sub(r"\s+#\s.*$|\s*&$", "", m.group(1)), True))
    for span in re.findall(r"`([^`]+)`", prose):
        span = " ".join(span.split())
        if span.startswith("torchmark "):
            found.append((span[len("torchmark ") :], False))
    return found


@pytest.fixture(scope="module")
def cli():  # type: ignore[no-untyped-def]
    load_commands()
    group = typer.main.get_command(app)
    return group, group.make_context("torchmark", [], resilient_parsing=True)


def _param(cmd, opt):  # type: ignore[no-untyped-def]
    for p in cmd.params:
        if opt in p.opts or opt in getattr(p, "secondary_opts", ()):
            return p
    return None


def check(cli, words: str, whole: bool) -> str | None:  # type: ignore[no-untyped-def]
    """None if `torchmark WORDS` parses, else why not. Brackets around optional parts and
    `...` are the page's notation, not the command's; a placeholder in capitals stands for
    a value of the option's type; outside a code block a required argument may be left
    out (`torchmark model` in a sentence)."""
    group, parent = cli
    tokens = [t.strip("[]") for t in shlex.split(words) if t.strip("[]") not in ("", "...")]
    name, args = tokens[0], tokens[1:]
    if name.startswith("-"):  # the group's own: --help, --version
        known = name in parent.help_option_names or _param(group, name) is not None
        return None if known else f"`torchmark` has no option {name}"
    if name not in COMMANDS:
        return f"no command {name!r}"
    cmd = group.get_command(parent, name)
    values, i = [], 0
    while i < len(args):
        token = args[i]
        values.append(token)
        i += 1
        if not token.startswith("-") or token == "-":
            continue
        opt = token.split("=", 1)[0]
        p = _param(cmd, opt)
        if p is None:
            return f"`torchmark {name}` has no option {opt}"
        if not p.is_flag and "=" not in token and i < len(args):
            value = args[i]
            if PLACEHOLDER.match(value) and p.bare_type() in ("int", "float"):
                value = "1"
            values.append(value)
            i += 1
    try:
        cmd.make_context(name, values, parent=parent, resilient_parsing=not whole)
    except Exception as e:  # the vendored click's usage errors
        return e.format_message() if hasattr(e, "format_message") else str(e)
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    assert not broken, broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_shown_parses(cli, page: Path) -> None:  # type: ignore[no-untyped-def]
    shown = commands_in(page)
    bad = [f"torchmark {w}: {why}" for w, whole in shown if (why := check(cli, w, whole))]
    assert not bad, bad


def test_the_check_refuses_what_the_cli_refuses(cli) -> None:  # type: ignore[no-untyped-def]
    assert check(cli, "run --quick -w add -d cpu", True) is None
    assert check(cli, "serving simplenet --p99-ms L --rate 5000", True) is None
    assert "no option --quik" in (check(cli, "run --quik", True) or "")
    assert "no command" in (check(cli, "benchmark --quick", True) or "")
    assert check(cli, "--version", True) is None
    assert check(cli, "--verbose", True) is not None
    assert check(cli, "serving simplenet --p99-ms fifty", True) is not None
    assert check(cli, "model", False) is None  # a command named in a sentence
    assert check(cli, "model", True) is not None  # in a code block, SPEC is missing
    assert check(cli, "compare --fail-on-regression", True) is not None  # its value missing


def test_a_broken_link_and_a_wrong_command_are_found(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(
        "# Title\n\nSee [a](missing.md), [b](#title), [c](#nowhere).\n\n"
        "```\ntorchmark run --quick   # a comment\n```\n\nThen `torchmark show latest`.\n"
    )
    assert [t for t in LINK.findall(page.read_text())] == ["missing.md", "#title", "#nowhere"]
    assert anchors(page) == {"title"}
    assert commands_in(page) == [("run --quick", True), ("show latest", False)]
