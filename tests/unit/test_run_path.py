"""The one run path, as a checked contract: every new run is opened by ``run.open_run`` (its
record built in one place), and one loop walks planned cases (``run.runner.run_planned``);
kinds with a loop of their own (tune, soak) say why in their docstrings."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "torchmark"


def modules() -> dict[str, ast.Module]:
    return {
        str(p.relative_to(SRC)): ast.parse(p.read_text(encoding="utf-8"))
        for p in sorted(SRC.rglob("*.py"))
    }


def called(node: ast.AST) -> str | None:
    """The name a call calls: ``f(...)`` -> f, ``x.f(...)`` -> f."""
    if not isinstance(node, ast.Call):
        return None
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def places(name: str) -> set[str]:
    return {path for path, tree in modules().items() for n in ast.walk(tree) if called(n) == name}


def test_a_run_record_is_built_in_one_place() -> None:
    # before: runner, user/bench, user/tune, profile/run, soak, launch/rank and
    # workloads/pipeline/user each built theirs by hand
    assert places("new_record") == {"run/record.py"}


def test_a_session_is_made_by_open_run_or_reopened_by_resume() -> None:
    # open_run's factory builds each new run's Session (a rank's RankSession included);
    # a resumed run reopens the record it loaded from the store
    assert places("Session") == {"run/resume.py"}
    assert places("open_run") == {
        "run/runner.py",
        "kinds/model/kind.py",
        "kinds/loader/kind.py",
        "kinds/tune/kind.py",
        "kinds/soak/kind.py",
        "kinds/profile/kind.py",
        "kinds/ranks/kind.py",
        "kinds/serving/kind.py",
        "kinds/predict/kind.py",
    }


def loops_over_cases(tree: ast.Module) -> int:
    """``for`` loops that start cases one after another (``session.case_started``)."""
    return sum(
        any(called(n) == "case_started" for n in ast.walk(loop))
        for loop in ast.walk(tree)
        if isinstance(loop, ast.For)
    )


def test_one_loop_walks_the_planned_cases() -> None:
    found = {path: n for path, tree in modules().items() if (n := loops_over_cases(tree))}
    # model's sweep goes through run_planned with its hook; its copied loop is gone
    assert found == {"run/runner.py": 1}


def test_kinds_with_a_loop_of_their_own_say_why() -> None:
    for path in ("kinds/tune/kind.py", "kinds/soak/kind.py", "kinds/serving/kind.py"):
        doc = ast.get_docstring(modules()[path]) or ""
        assert "its own loop, not ``run_planned``'s" in doc.replace("\n", " "), path
