"""MLPerf LoadGen's own early-stopping counts beside torchmark's port of its rule.

    python benchmarks/loadgen_early_stopping.py [--over 0,1,2,3,10]

For each t, LoadGen (``mlcommons-loadgen``, Server scenario, PerformanceOnly) drives a SUT
that answers at once except its first t queries, answered 200 ms late against a 50 ms
bound, for exactly N queries (N below what early stopping asks). LoadGen's summary then
says how many more queries it would need: N + that = h(t) + t, LoadGen's minimum. The
script prints LoadGen's count beside ``torchmark.stats.early_stopping.min_queries(t)``
and exits 1 if any differ. LoadGen runs in real time (~1 s a count).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
from pathlib import Path

from torchmark.stats import early_stopping

BOUND_NS = 50_000_000
LATE_S = 0.200
QPS = 2_000


def loadgen_min_queries(over: int, issued: int) -> int | None:
    """h(t) + t as LoadGen says it for ``issued`` queries with ``over`` of them late."""
    import mlperf_loadgen as lg

    seen = [0]
    lock = threading.Lock()

    def issue(samples: list) -> None:  # type: ignore[type-arg]
        for s in samples:
            with lock:
                k = seen[0]
                seen[0] += 1
            reply = [lg.QuerySampleResponse(s.id, 0, 0)]
            if k < over:
                threading.Timer(LATE_S, lg.QuerySamplesComplete, (reply,)).start()
            else:
                lg.QuerySamplesComplete(reply)

    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = QPS
    settings.server_target_latency_ns = BOUND_NS
    settings.min_duration_ms = 0
    settings.min_query_count = issued
    settings.max_query_count = issued
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(1024, 1024, lambda s: None, lambda s: None)
    with tempfile.TemporaryDirectory() as out:
        log = lg.LogOutputSettings()
        log.outdir = out
        log.copy_summary_to_stdout = False
        log_settings = lg.LogSettings()
        log_settings.log_output = log
        lg.StartTestWithLogSettings(sut, qsl, settings, log_settings)
        text = (Path(out) / "mlperf_log_summary.txt").read_text()
    lg.DestroyQSL(qsl)
    lg.DestroySUT(sut)
    if "-v" in sys.argv:
        print(text)
    more = re.search(r"Would need to run at least (\d+) more queries", text)
    return issued + int(more.group(1)) if more else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--over", default="0,1,2,3,10")
    ap.add_argument("-v", action="store_true", help="print LoadGen's summaries")
    args = ap.parse_args()
    bad = 0
    print(f"{'over':>5} {'LoadGen':>8} {'torchmark':>10}")
    for t in (int(x) for x in args.over.split(",")):
        ours = early_stopping.min_queries(t)
        theirs = loadgen_min_queries(t, max(t + 1, ours // 2))
        ok = theirs == ours
        bad += not ok
        print(
            f"{t:>5} {theirs if theirs is not None else '-':>8} {ours:>10}"
            + ("" if ok else "  DIFFER")
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
