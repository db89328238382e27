#!/usr/bin/env bash
# The check after fixes, in one device call: the quick suite kept as the reference run
# (src/torchmark/reference/), every GPU test, the timer check, GPT-2's MFU explained (the
# eager profile, then compiled), the profile, DDP ladder and input workloads on the GPU.
#   run(command="bash benchmarks/gpu_session3.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
{
    step "quick suite: the reference run"
    timeout 150 python3 -m torchmark run --quick --json "$out/quick.json"
    step "GPU tests"; timeout 100 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider --timeout 50
    step "measure vs CUDA events and do_bench (target: within 3 %)"
    timeout 50 python3 benchmarks/measure_vs_cuda.py --rounds 3
    step "GPT-2 small train b=16 amp-bf16: why 22 % MFU (eager profile)"
    timeout 45 python3 -m torchmark profile -w gpt2 --scenario train --precision amp-bf16 \
        --batch 16 -d cuda --stopping quick --no-memory
    step "profile resnet50 train b=64: short kernel names, memory by category, what to check"
    timeout 40 python3 -m torchmark profile -w resnet50 --scenario train --precision amp-bf16 \
        --batch 64 -d cuda --stopping quick
    step "DDP ladder on one GPU: no DDP vs DDP x1"
    timeout 60 python3 -m torchmark run -w resnet50 --scenario train --precision amp-bf16 \
        --batch 64 -d cuda --stopping quick --scaling 1
    step "input pipeline on the GPU"
    timeout 60 python3 -m torchmark run -w input -d cuda --json "$out/input.json"
    echo "exit $? (143: stopped by the time bound, must end without a traceback)"
    step "GPT-2 small train b=16 compiled (MFU target 40 %)"
    timeout 90 python3 -m torchmark run -w gpt2 --scenario train --precision amp-bf16+compile \
        --batch 16 -d cuda --stopping quick
} 2>&1 | tee "$out/session3.log"
