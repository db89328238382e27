"""`torchmark predict` end to end on this CPU: a built-in and a user model predicted on a
committed reference machine (its run from a file), stored as a prediction that holds no
result; what it refuses; predicted vs measured; `show`, `compare`, `report` and `submit`
of a prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clitest import cli
from torchmark import reference
from torchmark.results import RunRecord

FIX = Path(__file__).parents[1] / "fixtures" / "user_models"
CNN = f"{FIX}/cnn.py:make_model"


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """h100-quick's run as a file, under another id."""
    run = reference.load("h100-quick").run
    assert run is not None
    path = tmp_path_factory.mktemp("target") / "h100-small.json"
    path.write_text(run.model_copy(update={"run_id": "h100-small"}).model_dump_json())
    return path


def _stored(path: Path) -> RunRecord:
    return RunRecord.model_validate_json(path.read_text())


def test_a_builtin_is_predicted_with_an_interval_and_held_against_its_measurement(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pred.json"
    code, text, err = cli(capsys, "predict", "linear10", "--on", str(target), "--json", str(out))
    assert code == 0, err
    said = " ".join(text.split())
    assert "Predicted, not measured: linear10 on NVIDIA H100 80GB HBM3" in said
    assert "launch/host" in said and "interval:" in said and "basis:" in said
    rec = _stored(out)
    assert rec.kind == "predict" and rec.results == []  # a prediction is no measurement
    (case,) = rec.payload.cases  # the batch the target measured it at
    assert case.params["batch"] == 1000 and case.predicted
    assert case.low <= case.seconds <= case.high and case.dominant == "launch"
    # linear10 itself is left out of what the target teaches: its host time per launch
    # comes from simplenet's cases only
    assert all("linear10" not in c for c in rec.payload.target.calibration["h_cases"])
    (m,) = rec.payload.measured  # the target's run measured it: predicted vs measured
    assert m.source == "the target's run" and m.inside == (case.low <= m.measured_s <= case.high)
    assert "measured there: " in said


def test_your_model_gets_both_views_on_a_gpu_and_one_on_its_host(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pred.json"
    args = ["predict", CNN, "--input", "3x16x16", "--on", str(target), "--batch", "1,64"]
    code, _, err = cli(capsys, *args, "--json", str(out))
    assert code == 0, err
    cases = _stored(out).payload.cases
    assert [(c.params["batch"], c.variant) for c in cases] == [
        (1, "device"), (1, "e2e"), (64, "device"), (64, "e2e")
    ]  # fmt: skip
    assert all(c.predicted and c.dominant and c.low <= c.seconds <= c.high for c in cases)
    e2e = cases[3]
    assert e2e.terms["transfer"] > 0 and cases[2].terms["transfer"] == 0  # inputs copied in
    assert e2e.profile["families"]["conv"] == 3
    code, _, err = cli(capsys, *args, "-d", "cpu", "--json", str(out))
    assert code == 0, err
    assert {c.variant for c in _stored(out).payload.cases} == {"e2e"}


def test_what_no_reference_covers_is_refused_plainly(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    attn = tmp_path / "attn.py"
    attn.write_text(
        "import torch\n"
        "class A(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        return torch.nn.functional.scaled_dot_product_attention(x, x, x)\n"
        "def make_model():\n    return A()\n"
    )
    half = tmp_path / "half.py"
    half.write_text(
        "import torch\n"
        "class H(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.w = torch.nn.Parameter(torch.randn(16, 16, dtype=torch.bfloat16))\n"
        "    def forward(self, x):\n        return x.to(torch.bfloat16) @ self.w\n"
        "def make_model():\n    return H()\n"
    )
    code, text, err = cli(capsys, "predict", f"{attn}:make_model", "--input", "4x8",
                          "--on", str(target), "--batch", "2")  # fmt: skip
    assert code == 0, err
    assert "not predicted: op family attention" in " ".join(text.split())
    # the host CPU of the H100 run measured a bf16 peak: predicted; no fp16 peak there
    code, text, err = cli(capsys, "predict", f"{half}:make_model", "--input", "16",
                          "--on", str(target), "-d", "cpu", "--batch", "2")  # fmt: skip
    assert code == 0, err
    assert "not predicted" not in text
    fp16 = tmp_path / "fp16.py"
    fp16.write_text(half.read_text().replace("bfloat16", "float16"))
    code, text, err = cli(capsys, "predict", f"{fp16}:make_model", "--input", "16",
                          "--on", str(target), "-d", "cpu", "--batch", "2")  # fmt: skip
    assert code == 0, err
    assert "no matmul:float16 ceiling on h100-small.json's cpu" in " ".join(text.split())
    code, text, err = cli(capsys, "predict", "linear10", "--on", str(target), "-d", "cpu",
                          "--threads", "2")  # fmt: skip
    assert code == 0, err
    assert "a CPU at 2 threads: h100-small.json's host was measured at 16" in " ".join(text.split())
    code, _, err = cli(capsys, "predict", "no_such_model", "--on", str(target))
    assert code == 2 and "simplenet" in err  # the valid names
    code, _, err = cli(capsys, "predict", "linear10", "--on", "seed-2023")
    assert code == 2 and "a published table, not a run" in err


def test_a_prediction_is_shown_compared_and_reported_as_predicted_and_never_submitted(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pred.json"
    code, printed, err = cli(capsys, "predict", "simplenet", "--on", str(target),
                             "--json", str(out))  # fmt: skip
    assert code == 0, err
    code, shown, _ = cli(capsys, "show", str(out))
    assert code == 0 and "Per call on the target (predicted)" in shown
    assert printed.split("Prediction ")[0].strip().endswith(shown.strip().split("\n")[-1])
    code, text, _ = cli(capsys, "compare", str(out), str(target))
    said = " ".join(text.split())
    assert code == 0 and "(predicted)" in said and "the interval" in said
    table = said.split("A predicted column is never")[0]  # the rule under it names them
    assert "FASTER" not in table and "SLOWER" not in table and " SAME" not in table
    code, _, err = cli(capsys, "compare", str(out), str(target), "--fail-on-regression", "5")
    assert code == 2 and "is a prediction of" in err and "never compared" in err
    code, md, _ = cli(capsys, "report", "--markdown", "-", str(out))
    assert code == 0 and "| Case (predicted) |" in md and "simplenet/infer fp32 b=64" in md
    html = tmp_path / "r.html"
    code, _, _ = cli(capsys, "report", "--html", str(html), str(out))
    assert code == 0 and "Per call" not in html.read_text()  # the HTML's own table
    assert "case (predicted)" in html.read_text()
    code, sent, err = cli(capsys, "submit", "--dry-run", str(out))
    assert code == 2 and sent == ""  # nothing printed as if it were to be sent
    assert err.count("\n") == 1 and "is a prediction of" in err and "never submitted" in err


def test_here_measures_this_cpu_and_says_the_break_even(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "pred.json"
    db = f"sqlite:///{tmp_path / 'r.db'}"
    code, text, err = cli(
        capsys, "predict", CNN, "--input", "3x8x8", "--on", str(target), "--batch", "1,4",
        "--here", "--stopping", "test", "--no-ceilings", "--db", db, "--json", str(out),
    )  # fmt: skip
    assert code == 0, err
    said = " ".join(text.split())
    assert "Batch sweep: median time per call on cpu" in said  # this CPU, as `model` shows it
    assert "this CPU (measured) vs NVIDIA H100 80GB HBM3 (predicted)" in said
    assert "break-even:" in said
    p = _stored(out).payload
    assert p.here_run is not None and [r.batch for r in p.here] == [1, 4]
    assert p.break_even is not None and p.break_even.startswith("break-even:")
    code, hist, _ = cli(capsys, "history", "--db", db)
    assert "predict" in hist and "model" in hist


def test_a_run_of_the_same_gpu_on_another_machine_closes_the_loop(
    target: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # another machine with the same GPU measured simplenet at batch 8, which the target's
    # run never did (made from the target's own b=64 result, relabelled: a test fixture)
    run = _stored(target)
    [b64] = [r for r in run.results if r.workload == "simplenet" and r.variant == "infer"
             and r.device == "cuda:0"]  # fmt: skip
    b8 = b64.model_copy(update={"params": {**b64.params, "batch": 8}})
    other = run.model_copy(update={"run_id": "other-h100", "fingerprint": "another",
                                   "results": [b8]})  # fmt: skip
    path = tmp_path / "other-h100.json"
    path.write_text(other.model_dump_json())
    out = tmp_path / "pred.json"
    code, text, err = cli(capsys, "predict", "simplenet", "--on", str(target), "--batch", "8",
                          "--measured", str(path), "--json", str(out))  # fmt: skip
    assert code == 0, err
    (m,) = _stored(out).payload.measured
    assert m.run_id == "other-h100" and m.measured_s == b8.median_s
    assert "another machine with a NVIDIA H100 80GB HBM3" in m.source
    assert "measured there: " in " ".join(text.split())
    code, hist, _ = cli(capsys, "history")
    assert "predicted" in hist and "0/0" not in hist  # never "0 ok"


def test_a_boards_run_is_a_target(
    target: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from torchmark.cli import submit

    asked: list[str] = []

    def get(server: str, token: str | None, path: str) -> dict:
        asked.append(server + path)
        return json.loads(target.read_text()) if path.endswith("/r1") else {}

    monkeypatch.setattr(submit, "get", get)
    code, text, err = cli(capsys, "predict", "linear10", "--on", "r1", "--server", "http://b")
    assert code == 0, err
    assert asked == ["http://b/api/v1/runs/r1"]
    assert "a run on http://b" in " ".join(text.split())
    code, _, err = cli(capsys, "predict", "linear10", "--on", "nope", "--server", "http://b")
    assert code == 2 and "no run 'nope' could be read there" in err
