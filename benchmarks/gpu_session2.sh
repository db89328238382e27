#!/usr/bin/env bash
# The second device call of a GPU session (the first is gpu_session.sh; each must fit the
# device tool's 10 minutes): profile, input pipeline and DDP on the lent GPU.
#   run(command="bash benchmarks/gpu_session2.sh", carry=[".whl"], timeout_s=600)
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
{
    step "profile: resnet50 train (issue 14; expect compute-heavy) and gpt2 decode b=1 (launch-bound)"
    python3 -m torchmark profile -w resnet50 --scenario train --precision amp-bf16 --batch 64 \
        -d cuda --trace "$out/resnet50-train.json.gz"
    python3 -m torchmark profile -w gpt2 --scenario decode --batch 1 -d cuda
    step "input pipeline on the GPU (issue 13): fed vs device-resident resnet50 train"
    python3 -m torchmark run -w input -d cuda --json "$out/input.json"
    step "DDP x1 overhead vs no DDP (issue 12; PyTorch's own benchmark saw ~3 %)"
    python3 -m torchmark run -w resnet50 --scenario train --precision amp-bf16 --batch 64 -d cuda \
        --no-ceilings --json "$out/no-ddp.json"
    python3 -m torchmark run -w resnet50 --scenario train --precision amp-bf16 --batch 64 -d cuda \
        --nproc-per-node 1 --json "$out/ddp-1.json"
    step "collectives on one GPU (expected: skipped, needs >= 2 ranks)"
    python3 -m torchmark run -w collectives -d cuda --nproc-per-node 1
} 2>&1 | tee "$out/session2.log"
