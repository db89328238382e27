"""`torchmark show RUN`: each kind of stored run printed by the very printer its measuring
command used (same function, same text), golden text at 80 columns as a CI log reads it,
and one clear line for a run that cannot be found.

Regenerate the golden files with ``TORCHMARK_UPDATE_GOLDEN=1`` and read the diff."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from test_profile_report import gpu_profile
from test_report_table import matches_golden

from clitest import cli
from torchmark.cli import printers
from torchmark.results import Result, RunRecord, Work
from torchmark.results.payloads import ModelPayload, ProfilePayload
from torchmark.store import open_store

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"


def fixture(name: str) -> str:
    return str(RUNS / f"{name}.json")


def load(name: str) -> RunRecord:
    return RunRecord.model_validate_json(Path(fixture(name)).read_text())


def soak() -> RunRecord:
    wins = [
        {"t0_s": 30 * i, "t1_s": 30 * (i + 1), "rate": 300.0 - 5 * i, "clock_mhz": 1980.0,
         "temp_c": 70.0 + i, "power_w": None, "throttle": {}}
        for i in range(4)
    ]  # fmt: skip
    info = {"case": "matmul/bf16 n=8192 on cuda:0", "elapsed_s": 120.0, "unit": "TFLOP/s"}
    return RunRecord(
        run_id="fixture-soak", kind="soak", status="complete",
        payload={"kind": "soak", "soak": {**info, "windows": wins}},
    )  # fmt: skip


def profiled() -> RunRecord:
    run = load("cpu-gpu")
    return run.model_copy(
        update={
            "run_id": "fixture-profile",
            "kind": "profile",
            "payload": ProfilePayload(profile=gpu_profile()),
        }
    )


def distributed() -> RunRecord:
    run = load("cpu-gpu")
    collectives = [
        Result(
            workload="collectives", variant=op, device="cpu", params={"bytes": size},
            samples_s=[size / rate] * 5, work=Work(bytes=size, items=1, item_unit="call"),
            headline="bytes",
            extra={"op": op, "ranks": 2, "algbw_Bps": rate, "busbw_Bps": rate * factor,
                   "backend": "gloo"},
        )
        for op, factor in (("all_reduce", 2 * (2 - 1) / 2), ("broadcast", 1.0))
        for size, rate in ((1024, 1e8), (1 << 20, 5e9))
    ]  # fmt: skip
    config = {**run.config, "distributed": {"world_size": 2, "strategy": "ddp", "backend": "gloo"}}
    return run.model_copy(
        update={"run_id": "fixture-ddp", "config": config, "results": run.results + collectives}
    )


def with_loader() -> RunRecord:
    run = load("input-h100")
    config = {**run.config, "loader": "l.py:f"}
    return run.model_copy(update={"kind": "model", "payload": ModelPayload(), "config": config})


def the_printer(kind: str) -> tuple[Callable[[RunRecord], None], RunRecord]:
    """The printer each measuring command prints its run with, under the name it uses."""
    from torchmark.cli import loader, model, profile, ranks, run, tune
    from torchmark.cli import soak as soak_cli

    return {
        "run": (run.show, load("cpu-gpu")),
        "run -w input": (run.show, load("input-h100")),
        "model": (model.show_model, load("model-cpu-gpu")),
        "model --loader": (loader.show, with_loader()),
        "tune": (tune.show_tune, load("tune-cpu")),
        "profile": (profile.show, profiled()),
        "soak": (soak_cli.show_soak, soak()),
        "distributed": (ranks.show_distributed, distributed()),
    }[kind]


KINDS = ["run", "run -w input", "model", "model --loader", "tune", "profile", "soak", "distributed"]


def printed_by(
    show: Callable[[RunRecord], None], record: RunRecord, capsys: pytest.CaptureFixture[str]
) -> str:
    """What ``show`` prints through the CLI's console, piped (80 columns)."""
    capsys.readouterr()
    show(record)
    return capsys.readouterr().out


def stored(record: RunRecord) -> str:
    store = open_store(os.environ["TORCHMARK_DB"])  # conftest: a fresh file per test
    try:
        return store.save(record)
    finally:
        store.close()


@pytest.mark.parametrize("kind", KINDS)
def test_show_prints_what_the_measuring_command_printed(
    kind: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchmark.cli.show import printer_for

    monkeypatch.delenv("COLUMNS", raising=False)
    command_printer, record = the_printer(kind)
    chosen = printer_for(record)
    assert getattr(chosen, "func", chosen) is getattr(command_printer, "func", command_printer)
    run_id = stored(record)
    code, out, err = cli(capsys, "show", run_id)
    assert code == 0, err
    header, *rest = out.splitlines(keepends=True)
    assert header.startswith(f"Run {run_id} · {record.kind} · ")
    body = "".join(rest[1:] if record.command else rest)  # the command line, when stored
    if record.kind == "run" and record.status == "incomplete":  # then how to finish it
        body, hint = body.rstrip("\n").rsplit("\n", 1)
        body += "\n"
        assert hint.startswith(f"`torchmark run --resume {run_id}`")
    assert body == printed_by(command_printer, record, capsys)


@pytest.mark.parametrize("name", ["cpu-gpu", "model-cpu-gpu"])
def test_show_at_80_columns_matches_golden_text(
    name: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Piped, as in a CI log: rich's 80 columns."""
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, err = cli(capsys, "show", fixture(name))
    assert code == 0, err
    lines = [line.rstrip() for line in out.splitlines()]
    text = "\n".join(lines) + "\n"
    assert matches_golden(text, f"show-{name}-80.txt")
    # below the header, the measuring command's own golden text as a CI log reads it
    piped = {"cpu-gpu": "table-cpu-gpu-piped.txt", "model-cpu-gpu": "model-piped.txt"}[name]
    assert "\n".join(lines[2:]) + "\n" == (RUNS / "golden" / piped).read_text()
    assert lines[1].startswith("$ torchmark ")  # one line even when longer: a copy runs it
    assert max(len(line) for line in lines[:1] + lines[2:]) <= 80
    assert "…" not in out


def test_verbose_says_how_each_ceiling_was_measured(capsys: pytest.CaptureFixture[str]) -> None:
    run = load("cpu-gpu")
    methods = [c.method for c in run.ceilings if c.method]
    assert methods
    _, plain, _ = cli(capsys, "show", fixture("cpu-gpu"))
    code, verbose, _ = cli(capsys, "show", fixture("cpu-gpu"), "-v")
    assert code == 0
    flat = " ".join(verbose.split())
    assert all(" ".join(m.split()) in flat for m in methods)
    assert not any(" ".join(m.split()) in " ".join(plain.split()) for m in methods)
    body = "".join(verbose.splitlines(keepends=True)[2:])  # after the header, the command
    assert body == printed_by(functools.partial(printers.show_run, verbose=True), run, capsys)


def test_several_runs_each_under_its_header(capsys: pytest.CaptureFixture[str]) -> None:
    first = stored(load("cpu-gpu"))
    second = stored(load("tune-cpu"))
    code, out, _ = cli(capsys, "show", first, "latest")
    assert code == 0
    heads = [line for line in out.splitlines() if line.startswith("Run ")]
    assert [h.split()[1] for h in heads] == [first, second]


def test_an_interrupted_run_ends_with_the_command_that_finishes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rid = stored(load("cpu-only"))  # a `run` stored incomplete
    code, out, _ = cli(capsys, "show", rid)
    hint = f"`torchmark run --resume {rid}` measures the cases left in the same run"
    assert code == 0 and out.rstrip().endswith(hint)
    done = stored(load("cpu-gpu"))  # complete: nothing to finish
    code, out, _ = cli(capsys, "show", done)
    assert code == 0 and "--resume" not in out


def _model(r: RunRecord) -> None:
    r.kind, r.payload = "model", ModelPayload()


def _ranks(r: RunRecord) -> None:
    r.config["distributed"] = {"world_size": 2}


def _running(r: RunRecord) -> None:
    r.status = "running"


def _complete(r: RunRecord) -> None:
    r.status = "complete"


@pytest.mark.parametrize(
    ("change", "resumable"),
    [(None, True), (_model, False), (_ranks, False), (_running, False), (_complete, False)],
)
def test_show_hints_a_resume_exactly_where_resume_accepts_the_run(
    change: Callable[[RunRecord], None] | None, resumable: bool
) -> None:
    """One rule (``run.resume.can_resume``) for the hint and for ``--resume``'s refusal."""
    from torchmark.cli.show import resumable as hint
    from torchmark.errors import InputError
    from torchmark.run import resume

    record = load("cpu-only")  # a `run` stored incomplete
    if change is not None:
        change(record)
    try:
        resume.check_resumable(record)
        accepted = True
    except InputError:
        accepted = False
    assert accepted == resumable
    assert (hint(record, None) is not None) == resumable


def test_a_run_that_is_not_there_is_one_line_naming_the_fix(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Exit 2 for a run the store lacks (as `report`, `export`), as for a file given wrong:
    both are bad input."""
    code, out, err = cli(capsys, "show", "latest")  # an empty store
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "no runs stored in" in err and "`torchmark run`" in err
    stored(load("cpu-gpu"))
    code, out, err = cli(capsys, "show", "20991231-000000-dead")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "no run '20991231-000000-dead'" in err and "`torchmark history`" in err
    bad = tmp_path / "notes.json"
    bad.write_text('{"hello": 1}')
    code, out, err = cli(capsys, "show", str(bad))
    assert (code, out) == (2, "") and err.startswith("error:") and err.count("\n") == 1
    code, out, err = cli(capsys, "show", str(tmp_path / "missing.json"))
    assert (code, out) == (2, "") and "no such file" in err


def test_the_rungs_of_a_scaling_ladder_given_together_show_its_table(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `run --scaling 1,2` printed after its rungs: the same ladder_renderables text."""
    from test_scaling import fake_ladder
    from test_scaling import text as ladder_text

    monkeypatch.delenv("COLUMNS", raising=False)
    rungs = fake_ladder()
    ids = [stored(r) for r in rungs]
    code, out, err = cli(capsys, "show", *ids)
    assert code == 0, err
    table = ladder_text(rungs)
    assert "scaling of" in table and "DDP x2" in table
    assert out.endswith("\n" + table)
    # one rung alone, or runs that are no ladder, print no ladder
    _, one, _ = cli(capsys, "show", ids[2])
    _, two, _ = cli(capsys, "show", ids[0], ids[0])
    assert "scaling of" not in one + two


def test_history_hints_the_command_that_shows_its_newest_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    stored(load("cpu-gpu"))
    newest = stored(load("tune-cpu"))
    _, out, _ = cli(capsys, "history")
    hint = out.splitlines()[-1]
    assert hint.endswith(f"`torchmark show {newest}`")
    code, shown, _ = cli(capsys, "show", hint.split("`")[1].split()[-1])
    assert code == 0 and shown.startswith(f"Run {newest} · tune · ")


def test_verbose_profile_prints_every_rule_as_profile_v(capsys: pytest.CaptureFixture[str]) -> None:
    from torchmark.cli import profile

    record = profiled()
    run_id = stored(record)
    _, plain, _ = cli(capsys, "show", run_id)
    code, out, _ = cli(capsys, "show", run_id, "-v")
    assert code == 0 and len(out) > len(plain)
    body = "".join(out.splitlines(keepends=True)[2:])
    assert body == printed_by(functools.partial(profile.show, verbose=True), record, capsys)
