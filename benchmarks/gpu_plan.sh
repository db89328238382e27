#!/usr/bin/env bash
# The plan for a lent GPU machine: what can only be checked there, in one device call of
# about 8 minutes (each step under its own time limit; a failing step never stops the rest).
#
#   run(command="bash benchmarks/gpu_plan.sh", carry=[".whl"], timeout_s=540)
#   GPU_PLAN_DRY=1 bash benchmarks/gpu_plan.sh       # here first: every step on this CPU,
#                                                    # at tiny sizes, into out/gpu-plan-dry
#   bash benchmarks/gpu_plan.sh standard             # the standard suite, call after call
#   bash benchmarks/gpu_plan.sh serving              # step 5 alone (a rerun)
#
# Before the call, here: scripts/gpu-wheels (the packages the image lacks -> .whl/, carried
# and installed into /tmp/site there). Results land in $OUT (default gpu-out): each step's
# output, the runs as JSON, steps.tsv (step, exit status, limit s, wall s; 124: stopped by
# its limit). Afterwards, here: `torchmark show FILE.json`, `torchmark compare A.json B.json`.
#
# Steps (limit, seconds):
#   0 machine           15   the GPU, driver, versions, cores
#   1 gpu tests         75   tests/gpu (skipped without CUDA: the dry run checks the call)
#   2 quick run         90   `run --quick -d cuda`: every workload's small sizes, ceilings
#   3 tune conv+BN      70   the fp32 baseline is never WRONG; a candidate and its gain
#   4 predict, measure 230   three models predicted from the CPU alone (hashed before
#                            anything is measured), then measured, then compared per case
#   5 serving          170   run right after the machine (the issue ranks it first):
#                            resnet50 and bert-base on the GPU, both answers (model
#                            capacity in process, as served behind torchmark's OIP server),
#                            then resnet50 on the host's CPU: the CPU-vs-GPU verdict
# `standard` (not in the 8 minutes): `run --suite standard -d cuda` for at most PART_S s a
# call (default 540), stored incomplete and resumed (`run --resume`) by the next call until
# it prints "standard suite: complete"; its database survives while the machine stays warm.
set -uo pipefail
part="${1:-plan}"
dry="${GPU_PLAN_DRY:-0}"
if [ "$dry" = 1 ]; then
    export OUT="${OUT:-out/gpu-plan-dry}"
    rm -rf "$OUT"
elif [ "${WHEELS:-1}" = 1 ] && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
out="${OUT:-gpu-out}"
mkdir -p "$out"
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 COLUMNS=160
export TORCHMARK_DB="sqlite:///$PWD/$out/plan.db"
tm=(python3 -m torchmark)
cnn=tests/fixtures/user_models/cnn.py:make_model

step() { echo; echo "=== $*"; }

# run_step NAME SECONDS CMD...: CMD under `timeout` (SIGTERM after SECONDS, SIGKILL 10 s
# later), its exit status and wall time appended to $out/steps.tsv.
run_step() {
    local name="$1" limit="$2" t0="$EPOCHREALTIME" rc=0
    shift 2
    step "$name (at most $limit s)"
    timeout -k 10 "$limit" "$@" || rc=$?
    local wall
    wall="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$limit" "$wall" >>"$out/steps.tsv"
    echo "--- $name: exit $rc in $wall s"
}

if [ "$dry" = 1 ]; then  # the CPU stands in for the GPU, every size shrunk
    dev=cpu image=16 tune_s=12 stop=test quick=(-w linear10 --stopping test --no-ceilings)
    ref=h100-quick side=cpu simple=1 sizes=1
else
    dev=cuda image=224 tune_s=40 stop=quick quick=()
    gpu="$(python3 -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null)"
    case "$gpu" in
        *H200*) ref=h200-quick ;;
        *) ref=h100-quick ;;  # the nearest committed reference run
    esac
    side=gpu simple=64 sizes=1,64
fi

plan() {
    step "0 machine"
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv \
        2>/dev/null || echo "no nvidia-smi"
    python3 -c 'import os, torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "cores", os.cpu_count())'

    serving

    run_step "1 gpu tests" 75 python3 -m pytest -q -p no:cacheprovider tests/gpu

    run_step "2 quick run on $dev" 90 "${tm[@]}" run --quick -d "$dev" "${quick[@]}" \
        --json "$out/quick.json"

    # cuDNN's TF32 default once made tune's own fp32 reference disagree with its baseline
    local tune_env=()
    [ "$dry" = 1 ] && tune_env=(env OMP_NUM_THREADS=1)
    run_step "3 tune conv+BN b=1 on $dev" $((tune_s + 30)) "${tune_env[@]}" "${tm[@]}" tune \
        benchmarks/convbn_model.py:make_model --input "3x${image}x${image}" -d "$dev" \
        --no-compile --budget "${tune_s}s" --per-candidate 2s --json "$out/tune.json"

    # Predictions from the CPU alone (no GPU visible), kept and hashed before measuring.
    run_step "4a predict simplenet on $ref" 50 env CUDA_VISIBLE_DEVICES= "${tm[@]}" predict \
        simplenet --on "$ref" -d "$side" --batch "$simple" --json "$out/pred-simplenet.json"
    run_step "4b predict resnet50 on $ref" 50 env CUDA_VISIBLE_DEVICES= "${tm[@]}" predict \
        resnet50 --on "$ref" -d "$side" --batch 1 --json "$out/pred-resnet50.json"
    run_step "4c predict cnn.py on $ref" 40 env CUDA_VISIBLE_DEVICES= "${tm[@]}" predict \
        "$cnn" --input 3x32x32 --on "$ref" -d "$side" --batch 1,64 --json "$out/pred-cnn.json"
    { date -u +%Y-%m-%dT%H:%M:%SZ; sha256sum "$out"/pred-*.json; } >"$out/predictions.sha256"
    run_step "4d run simplenet b=$simple, resnet50 b=1 on $dev" 50 "${tm[@]}" run \
        -w simplenet -w resnet50 --scenario infer --precision fp32 --batch "$sizes" -d "$dev" \
        --stopping "$stop" --no-ceilings --json "$out/meas-run.json"
    run_step "4e model cnn.py b=1,64 on $dev" 30 "${tm[@]}" model "$cnn" --input 3x32x32 \
        --batch 1,64 -d "$dev" --stopping "$stop" --no-ceilings --no-energy \
        --json "$out/meas-cnn.json"
    run_step "4f predicted vs measured" 10 "${tm[@]}" compare "$out"/pred-simplenet.json \
        "$out"/pred-resnet50.json "$out"/pred-cnn.json "$out"/meas-run.json \
        "$out"/meas-cnn.json
    sha256sum -c "$out/predictions.sha256" 2>/dev/null | sed 's/^/unchanged since predicted: /'

}

serving() {  # both answers per device; its p99 bound is a typical online one for each model
    local budget=45s point=10s min=5s small=()
    [ "$dry" = 1 ] && budget=8s point=2s min=0.5s small=(--min-requests 500)
    run_step "5a serving resnet50 on $dev" 60 "${tm[@]}" serving resnet50 --p99-ms 100 \
        -d "$dev" --budget "$budget" --point "$point" --min-duration "$min" "${small[@]}" \
        --json "$out/serving-resnet50-$dev.json"
    run_step "5b serving bert-base on $dev" 60 "${tm[@]}" serving bert-base --p99-ms 100 \
        -d "$dev" --budget "$budget" --point "$point" --min-duration "$min" "${small[@]}" \
        --json "$out/serving-bert-$dev.json"
    [ "$dry" = 1 ] && return  # the dry run's device is the CPU already
    run_step "5c serving resnet50 on the host cpu" 50 "${tm[@]}" serving resnet50 \
        --p99-ms 100 -d cpu --budget 40s --point "$point" --min-duration "$min" \
        --json "$out/serving-resnet50-cpu.json"
}

standard() {
    local db="sqlite:///$PWD/gpu-standard.db" part_s="${PART_S:-540}" new=(--suite standard)
    [ "$dry" = 1 ] && new+=(-w linear10 -d cpu) && part_s="${PART_S:-30}"
    [ "$dry" = 1 ] || new+=(-d cuda)
    local id state
    read -r id state <<<"$("${tm[@]}" history --json --db "$db" 2>/dev/null | python3 -c '
import json, sys
runs = [r for r in json.load(sys.stdin) if r["kind"] == "run"]
print(runs[0]["id"] + " " + runs[0]["status"] if runs else "")')"
    if [ "${state:-}" = "complete" ]; then
        step "standard suite: complete already (run $id)"
        return
    elif [ "${state:-}" = "incomplete" ]; then
        run_step "standard suite: resuming $id" "$part_s" "${tm[@]}" run --resume "$id" \
            --db "$db" --json "$out/standard.json"
    else
        run_step "standard suite: starting" "$part_s" "${tm[@]}" run "${new[@]}" --db "$db" \
            --json "$out/standard.json"
    fi
    echo "(124: stopped by its time bound; the run is stored incomplete: call again)"
}

case "$part" in
    plan) plan 2>&1 | tee "$out/plan.log" ;;
    standard) standard 2>&1 | tee -a "$out/standard.log" ;;
    serving) serving 2>&1 | tee "$out/serving.log" ;;  # step 5 alone (a rerun)
    *) echo "usage: bash benchmarks/gpu_plan.sh [plan|standard|serving]" >&2; exit 2 ;;
esac
cat "$out/steps.tsv"
