"""Schema-1 documents: real runs of every kind, exported by torchmark before typed payloads
(main at dac9388), still load, show, report and compare as that torchmark printed them.

The runs (tests/fixtures/runs/v1-*.json) were measured on this project's 2-core CPU VM at
tiny sizes and exported with ``torchmark export``::

    torchmark run --quick -w linear10 -d cpu --no-ceilings --stopping test          # run
    torchmark model tests/fixtures/user_models/cnn.py:make_model --input 3x16x16 \\
        --batch 1,2 --stopping test --price cpu=0.1 -d cpu                          # model
    torchmark tune tests/fixtures/user_models/cnn.py:make_model --input 3x8x8 -d cpu \\
        --no-compile --budget-s 20 --per-candidate-s 0.1                            # tune
    torchmark soak --duration 3s -w linear10 -d cpu                                 # soak
    torchmark profile -w linear10 -d cpu --scenario infer --steps 3 --stopping test \\
        --no-ceilings                                                               # profile
    torchmark model tiny_loader.py:make_model --loader tiny_loader.py:make_loader \\
        -d cpu --stopping test                                                      # loader
    torchmark run -w simplenet --scenario train --precision fp32 --batch 8 --threads 1 \\
        --stopping test --no-telemetry --no-ceilings --nproc-per-node 2             # ranks
    torchmark run -w collectives --stopping test --no-telemetry --no-ceilings \\
        --size 1024 --nproc-per-node 2                                              # collectives
    torchmark run -d cpu -w add --size 1048576,...,16777216 --stopping quick \\
        --no-ceilings --no-telemetry; SIGTERM after 1 case; run --resume latest     # resumed

(``tiny_loader.py`` is tests/fixtures/user_models/tiny_loader.py.) The golden text in
tests/fixtures/runs/golden/v1/ is what that torchmark printed for ``show FILE``,
``report --markdown - FILE`` and ``compare FILE FILE``, piped (80 columns): it is never
regenerated, because it is the old behaviour these documents must keep.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clitest import cli

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
GOLDEN = RUNS / "golden" / "v1"
KINDS = ["run", "model", "tune", "soak", "profile", "loader", "ranks", "collectives", "resumed"]


def v1(kind: str) -> str:
    return str(RUNS / f"v1-{kind}.json")


@pytest.fixture(autouse=True)
def _piped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)  # rich's 80 columns, as the golden text


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "what, args",
    [("show", ("show", "{f}")), ("md", ("report", "--markdown", "-", "{f}")),
     ("cmp", ("compare", "{f}", "{f}"))],
)  # fmt: skip
def test_a_schema_1_run_prints_as_the_torchmark_that_wrote_it(
    kind: str, what: str, args: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, *(a.format(f=v1(kind)) for a in args))
    assert code == 0, err
    assert out == (GOLDEN / f"{what}-{kind}.txt").read_text()
