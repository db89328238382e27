"""The leaderboard's work catalogue (web/catalogue.py, torch-free) says what each built-in
workload declares: the micro formulas against ``prepare`` at small sizes on this CPU, the
model table against each model's own FLOP count, and every case the suites plan here is in
it (else a submitted run of it would not be checked)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from torchmark.devices import resolve
from torchmark.store.exchange import import_run
from torchmark.web import catalogue
from torchmark.workloads import WORKLOADS, Case, PlanOptions, load_builtins

RUNS = Path(__file__).parents[1] / "fixtures" / "runs"
# Planned on a CPU only to say why they cannot run there: never a measured result.
ALWAYS_SKIPPED_ON_CPU = {("transfer", "h2d/d2h"), ("collectives", "all")}


@pytest.mark.parametrize(
    ("workload", "variant", "params"),
    [
        ("add", "float32", {"n": 1024}),
        ("triad", "float32", {"n": 1024}),
        ("matmul", "float32", {"n": 64}),
        ("matmul", "bfloat16", {"n": 64}),
        ("seed-add", "as-published", {"size": 64}),
        ("seed-add", "intended", {"size": 64}),
        ("simplenet", "infer", {"scenario": "infer", "precision": "fp32", "batch": 4}),
        ("linear10", "train", {"scenario": "train", "precision": "fp32", "batch": 8}),
    ],
)
def test_the_catalogue_says_what_prepare_declares(
    workload: str, variant: str, params: dict[str, int]
) -> None:
    load_builtins()
    device = resolve("cpu")[0]
    w = WORKLOADS.get(workload)()
    prepared = w.prepare(Case(workload, variant, device, tuple(params.items()), rule="test"))
    try:
        derived = catalogue.work(workload, variant, params, accelerator=False)
        assert derived is not None
        assert any(catalogue.matches(prepared.work.model_dump(), d) for d in derived), (
            prepared.work,
            derived,
        )
    finally:
        if prepared.teardown is not None:
            prepared.teardown()


@pytest.mark.slow
def test_the_model_table_is_each_models_own_count() -> None:
    """`python scripts/make-work-catalogue` writes it; a model workload that changes fails
    here until it is run again."""
    from torchmark.workloads.models.table import model_work

    committed = json.loads((Path(catalogue.__file__).parent / "model_work.json").read_text())
    assert committed == json.loads(json.dumps(model_work()))


@pytest.mark.parametrize("suite", ["quick", "standard", "full"])
def test_every_case_planned_here_is_in_the_catalogue(suite: str) -> None:
    load_builtins()
    device = resolve("cpu")[0]
    missing = []
    for name in WORKLOADS.names():
        w = WORKLOADS.get(name)()
        if w.group == "user":
            continue
        for case in w.cases(device, PlanOptions(suite=suite)):  # type: ignore[arg-type]
            if (case.workload, case.variant) in ALWAYS_SKIPPED_ON_CPU:
                continue
            if catalogue.work(case.workload, case.variant, case.param_dict, False) is None:
                missing.append(case.label)
    assert missing == []


def test_a_gpu_input_run_matches_the_catalogue() -> None:
    """The input pipelines on an H100 (the fixture measured there): GPU shapes."""
    run = import_run(RUNS / "input-h100.json")
    for r in run.results:
        if r.ok:
            derived = catalogue.work(r.workload, r.variant, r.params, accelerator=True)
            assert derived and any(catalogue.matches(r.work.model_dump(), d) for d in derived)
