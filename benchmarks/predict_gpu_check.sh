#!/usr/bin/env bash
# Issue 31's GPU check: predict three models for this GPU from a CPU-only profile and the
# committed reference run of the same GPU model, keep the predictions (and their sha256)
# BEFORE anything is measured on the GPU, then measure the same cases there and print
# predicted vs measured per case (`torchmark compare`: inside / outside each interval).
#   simplenet infer b=64, resnet50 infer b=1   (built-ins: their reference cases; dry: b=1)
#   tests/fixtures/user_models/cnn.py b=1, 64  (your model: device-only and end-to-end)
# On the lent GPU (one call, ~1.5 min of command; each step under `timeout`):
#   run(command="bash benchmarks/predict_gpu_check.sh", carry=[".whl"], timeout_s=240)
# Here first, on this CPU (PREDICT_DRY=1): the same steps, predicting the reference's host
# CPU and measuring this CPU at the same small sizes (the figures then compare two different
# CPUs: the run checks the steps, not the predictor):
#   PREDICT_DRY=1 bash benchmarks/predict_gpu_check.sh
# Results in $OUT (default gpu-out/predict, dry: out/predict-dry): pred-*.json (the
# predictions), predictions.sha256 (with the UTC time, written before measuring), measured
# runs meas-*.json, steps.tsv (each step's exit status and wall time).
set -uo pipefail
dry="${PREDICT_DRY:-0}"
if [ "$dry" = 1 ]; then
    export WHEELS=0 OUT="${OUT:-out/predict-dry}"
    rm -rf "$OUT"
else
    export OUT="${OUT:-gpu-out/predict}"
fi
here="$(dirname "$0")"
. "$here/gpu_env.sh"
export TORCHMARK_DB="sqlite:///$PWD/$out/predict.db"
tm=(python3 -m torchmark)
cnn=tests/fixtures/user_models/cnn.py:make_model

if [ "$dry" = 1 ]; then  # tiny: resnet50 b=64 takes seconds a call on 2 loaded cores
    ref=h100-quick side=cpu dev=cpu stop=test simple=1 sizes=1
else
    gpu="$(python3 -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")')"
    case "$gpu" in
        *H200*) ref=h200-quick ;;
        *H100*) ref=h100-quick ;;
        *) echo "no committed reference run of a '${gpu:-GPU}': nothing to predict it from"; exit 2 ;;
    esac
    side=gpu dev=cuda stop=quick simple=64 sizes=1,64
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
fi
echo "predicting for $ref ($side) from a CPU-only profile; measuring on $dev"

# 1. Predictions, from the CPU alone: no GPU is visible to these steps.
run_step "1a predict simplenet on $ref" 150 env CUDA_VISIBLE_DEVICES= "${tm[@]}" predict \
    simplenet --on "$ref" -d "$side" --batch "$simple" --json "$out/pred-simplenet.json"
run_step "1b predict resnet50 on $ref" 120 env CUDA_VISIBLE_DEVICES= "${tm[@]}" predict \
    resnet50 --on "$ref" -d "$side" --batch 1 --json "$out/pred-resnet50.json"
run_step "1c predict cnn.py on $ref" 90 env CUDA_VISIBLE_DEVICES= "${tm[@]}" predict \
    "$cnn" --input 3x32x32 --on "$ref" -d "$side" --batch 1,64 --json "$out/pred-cnn.json"
{ date -u +%Y-%m-%dT%H:%M:%SZ; sha256sum "$out"/pred-*.json; } | tee "$out/predictions.sha256"

# 2. The same cases measured (the predictions are kept above, hashed, before this starts).
run_step "2a run simplenet b=$simple, resnet50 b=1 on $dev" 120 "${tm[@]}" run -w simplenet \
    -w resnet50 --scenario infer --precision fp32 --batch "$sizes" -d "$dev" --stopping "$stop" \
    --no-ceilings --json "$out/meas-run.json"
run_step "2b model cnn.py b=1,64 on $dev" 90 "${tm[@]}" model "$cnn" --input 3x32x32 \
    --batch 1,64 -d "$dev" --stopping "$stop" --no-ceilings --no-energy \
    --json "$out/meas-cnn.json"

# 3. Predicted vs measured, per case (the predictions read back from their files).
step "3 predicted vs measured"
"${tm[@]}" compare "$out"/pred-simplenet.json "$out"/pred-resnet50.json \
    "$out"/pred-cnn.json "$out"/meas-run.json "$out"/meas-cnn.json
sha256sum -c "$out/predictions.sha256" 2>/dev/null | sed 's/^/unchanged since predicted: /'
cat "$out/steps.tsv"
