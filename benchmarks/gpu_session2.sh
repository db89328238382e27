#!/usr/bin/env bash
# The second device call of a GPU session (the first is gpu_session.sh; each must fit the
# device tool's 10 minutes): model targets, profile, input pipeline, DDP and break-even.
#   run(command="bash benchmarks/gpu_session2.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
{
    step "model targets (issue 3)"; timeout 200 python3 benchmarks/models_gpu.py
    step "profile: resnet50 train (expect compute-heavy) and gpt2 decode b=1 (launch-bound)"
    timeout 60 python3 -m torchmark profile -w resnet50 --scenario train --precision amp-bf16 --batch 64 \
        -d cuda --trace "$out/resnet50-train.json.gz"
    timeout 45 python3 -m torchmark profile -w gpt2 --scenario decode --batch 1 -d cuda
    step "input pipeline on the GPU (issue 13): fed vs device-resident resnet50 train"
    timeout 90 python3 -m torchmark run -w input -d cuda --json "$out/input.json"
    step "DDP x1 overhead vs no DDP (issue 12; PyTorch's own benchmark saw ~3 %)"
    timeout 45 python3 -m torchmark run -w resnet50 --scenario train --precision amp-bf16 --batch 64 -d cuda \
        --no-ceilings --json "$out/no-ddp.json"
    timeout 60 python3 -m torchmark run -w resnet50 --scenario train --precision amp-bf16 --batch 64 -d cuda \
        --no-ceilings --nproc-per-node 1 --json "$out/ddp-1.json"
    step "break-even: torchmark model, small and large"
    timeout 60 python3 -m torchmark model tests/fixtures/user_models/cnn.py:make_model --input 3x8x8 --batch 1,16,256 -d cpu -d cuda
    timeout 90 python3 -m torchmark model tests/fixtures/user_models/cnn.py:make_model --input 3x224x224 --batch 1,8,64 -d cpu -d cuda
} 2>&1 | tee "$out/session2.log"
