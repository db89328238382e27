"""The suite: each script asks one question about torchmark itself and says its goal.

``python -m benchmarks NAME|all [--quick]`` runs them (``benchmarks/__main__.py``); this
module is the one list of them. ``quick``: the arguments that answer the question at a
small size on this CPU in under a minute or so (None: the script is too long or needs a
server or a GPU to say anything at a small size, and runs only without --quick).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bench:
    name: str
    question: str
    goal: str  # "" where the figures are for comparing runs, with no target
    args: tuple[str, ...] = ()
    quick: tuple[str, ...] | None = ()

    @property
    def script(self) -> str:
        return f"benchmarks/{self.name}.py"


SUITE: tuple[Bench, ...] = (
    Bench(
        "startup",
        "How long does each command take to start (fresh processes)?",
        "every read-only command (--help, --version, history, export, compare, report "
        "--markdown, show latest, list, env, doctor's first line) <= 0.4 s wall",
        quick=("--runs", "7"),  # the fewest whose median has a 95 % interval
    ),
    Bench(
        "overhead",
        "What does torchmark cost per sample, inside and outside the timed region?",
        "inside < 10 us; outside median < 100 us; decide() < 10 us a sample",
        quick=("--samples", "100"),
    ),
    Bench(
        "stopping_bias",
        "Is adaptive stopping biased toward quiet, fast stretches? (fake clock)",
        "",
        quick=("--reps", "60", "--rule", "quick"),
    ),
    Bench(
        "measure_vs_timer",
        "Does torchmark.measure agree with torch.utils.benchmark's Timer?",
        "medians within 3 %",
        quick=("--rounds", "7", "--only", "matmul", "--clock", "cpu"),
    ),
    Bench(
        "telemetry_overhead",
        "What does the telemetry sampler cost the measurement it watches?",
        "under 1 %",
        quick=("--rounds", "3", "--size", "128", "--device", "cpu"),
    ),
    Bench(
        "serving_generator",
        "How many arrivals a second does the serving load generator issue on time?",
        ">= 10,000 arrivals/s, median lateness < 50 us",
        quick=("--seconds", "0.3", "--rates", "1000,10000"),
    ),
    Bench(
        "loadgen_early_stopping",
        "Does torchmark's port of LoadGen's early stopping ask for LoadGen's query counts?",
        "every count equal",
        quick=("--over", "0,1"),
    ),
    Bench(
        "serving_loadgen",
        "Does MLPerf LoadGen's Server scenario agree with serving's as-served answer?",
        "LoadGen VALID at the answer, INVALID at the bracket's top in every round, within 10 %",
        quick=None,  # a serving search, then LoadGen and its client in turn at two rates: minutes
    ),
    Bench(
        "predict_loo",
        "How close does `torchmark predict` come on the committed reference runs?",
        "every model case within 15 %, the median within 5 %, no micro case worse than naive",
    ),
    Bench(
        "gpu_standard_estimate",
        "How long does the standard suite take on an H100 (estimated without one)?",
        "",
        quick=None,  # nothing is timed, but it plans and counts 251 cases: ~2 min
    ),
    Bench(
        "stopping_vs_timer",
        "Time to a result: torchmark's stopping rules against blocked_autorange",
        "",
        quick=None,
    ),
    Bench(
        "input_workers",
        "Do DataLoader workers help a decode-heavy pipeline here?",
        "best worker count >= 1.2x workers=0",
        quick=None,
    ),
    Bench(
        "profile_capture",
        "How long does `torchmark profile`'s capture take on a step of many tiny ops?",
        "",
        quick=("1000", "2"),
    ),
    Bench(
        "run_quick",
        "How long does `torchmark run --quick` take on a fresh store?",
        "<= 45 s wall on a quiet 2-core machine",
        quick=None,
    ),
    Bench(
        "quick_memory",
        "Peak memory of `run --quick`, alone and four at once",
        "<= 2 GB peak RSS; four concurrent runs complete",
        quick=None,
    ),
    Bench(
        "user_model",
        "How long do `torchmark model` and `tune` take on a small CNN?",
        "model <= 60 s, tune <= 3 min",
        quick=None,
    ),
    Bench(
        "models_gpu",
        "Do the standard models reach their GPU targets?",
        "ResNet-50 bf16 train >= 2,500 img/s; GPT-2 MFU >= 40 %; BERT b256 >= 5,000 seq/s",
    ),
    Bench(
        "measure_vs_cuda",
        "Does torchmark.measure agree with a CUDA-event loop and triton's do_bench?",
        "medians within 3 %",
        quick=("--rounds", "1"),
    ),
    Bench(
        "leaderboard_load",
        "How many submissions a second does the leaderboard take, and its page latency?",
        "p95 < 200 ms at 100,000 results",
        quick=None,
    ),
    Bench(
        "board_reports",
        "Does drawing report pages starve the rest of the leaderboard?",
        "",
        quick=None,
    ),
)
BY_NAME = {b.name: b for b in SUITE}
