#!/usr/bin/env bash
# The standard suite on a lent GPU, over as many device calls as it needs. Call it again and
# again until it prints "standard suite: complete"; each call measures for at most PART_S
# seconds (default 540), then the run is stored incomplete and the next call resumes it
# (`torchmark run --resume`), in the same run:
#   run(command="bash benchmarks/gpu_standard.sh", carry=[".whl"], timeout_s=600)
# DEVICE=cuda measures that device alone (default: every device, the CPU too);
# STANDARD_ARGS adds options to a new run (GPU5_DRY tries it on a CPU: "-w linear10").
# gpu_session5.sh runs it with DEVICE=cuda as its second call.
# Its database, gpu-standard.db, is ignored by git, so a warm machine keeps it between calls;
# on a fresh machine (the warm one went back) --resume refuses the other host and the suite
# starts over. Each line of its log (standard.log) starts with the Unix time it came, so the
# time per part can be read from it (gpu_session5_check.py). The run's JSON is in $OUT after
# every call, complete or not; once complete, its HTML report too. Commit it as a reference
# run here:
#   scripts/make-reference <files_at>/standard.json h100-standard --title "..." --where "..."
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
db="sqlite:///$PWD/gpu-standard.db"
part_s="${PART_S:-540}"  # seconds of measuring a call (PART_S=30 to try it on a CPU)
new=(--suite standard)
[ -n "${DEVICE:-}" ] && new+=(-d "$DEVICE")
# shellcheck disable=SC2206  # STANDARD_ARGS is a list of words on purpose
[ -n "${STANDARD_ARGS:-}" ] && new+=(${STANDARD_ARGS})
status() {  # the newest `run` in the suite's database: "ID STATUS", or nothing
    python3 -m torchmark history --json --db "$db" 2>/dev/null | python3 -c '
import json, sys
runs = [r for r in json.load(sys.stdin) if r["kind"] == "run"]
print(runs[0]["id"] + " " + runs[0]["status"] if runs else "")'
}
{
    read -r id state <<<"$(status)"
    if [ "${state:-}" = "complete" ]; then
        step "standard suite: complete already (run $id)"
    elif [ "${state:-}" = "incomplete" ]; then
        step "standard suite: resuming run $id for at most $part_s s"
        timeout -k 15 "$part_s" python3 -m torchmark run --resume "$id" --db "$db" \
            --json "$out/standard.json"
    else
        step "standard suite: starting (${new[*]}), for at most $part_s s"
        timeout -k 15 "$part_s" python3 -m torchmark run "${new[@]}" --db "$db" \
            --json "$out/standard.json"
    fi
    echo "exit $? (124: stopped by the time bound; the run is stored incomplete)"
    read -r id state <<<"$(status)"
    if [ -n "${id:-}" ]; then
        python3 -m torchmark export "$id" --db "$db" -o "$out/standard.json"
    fi
    if [ "${state:-}" = "complete" ]; then
        python3 -m torchmark report "$id" --db "$db" --html "$out/standard.html"
        step "standard suite: complete (run $id)"
    else
        step "standard suite: ${state:-not started} (run ${id:-none}); call again to go on"
    fi
} 2>&1 | stamp | tee -a "$out/standard.log"
