#!/usr/bin/env bash
# The check after fixes, in one device call: every GPU test, the quick suite kept as the
# reference run (src/torchmark/reference/), the timer check, GPT-2's MFU explained
# (compiled, and profiled eager), and the profile and input workloads on the GPU.
#   run(command="bash benchmarks/gpu_session3.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
{
    step "GPU tests"; timeout 120 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider --timeout 60
    step "quick suite: the reference run"
    timeout 150 python3 -m torchmark run --quick --json "$out/quick.json"
    step "measure vs CUDA events and do_bench (target: within 3 %)"
    timeout 60 python3 benchmarks/measure_vs_cuda.py --rounds 3
    step "GPT-2 small train b=16: compiled (MFU target 40 %) and the eager profile"
    timeout 110 python3 -m torchmark run -w gpt2 --scenario train --precision amp-bf16+compile \
        --batch 16 -d cuda --stopping quick
    timeout 50 python3 -m torchmark profile -w gpt2 --scenario train --precision amp-bf16 \
        --batch 16 -d cuda --stopping quick
    step "profile resnet50 train: kernel names"
    timeout 40 python3 -m torchmark profile -w resnet50 --scenario train --precision amp-bf16 \
        --batch 64 -d cuda --stopping quick
    step "input pipeline on the GPU"
    timeout 60 python3 -m torchmark run -w input -d cuda --stopping quick --json "$out/input.json"
} 2>&1 | tee "$out/session3.log"
