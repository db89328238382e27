#!/usr/bin/env bash
# GPT-2's vocabulary padded (gpt2-padded, 50,257 -> 50,304), in one device call:
#   run(command="bash benchmarks/gpu_session4.sh", carry=[".whl"], timeout_s=600)
# On an H100 gpt2 bf16 train b=16 reached 21.5 % MFU eager, 30.4 % compiled (target 40 %);
# its profile put the LM head's GEMMs over 50,257 on slow sm80 cutlass kernels, 35 % of the
# step. Expect: the profile's advice says "pad 50,257 to 50,304" and --check measures
# gpt2-padded on the same case (FASTER); gpt2-padded's profile gives no such advice.
# The first step also measures the ceilings (cached in gpu.db for the rest) and, with
# --check, every variant the advice names (compile among them: about a minute).
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
{
    step "profile gpt2 train b=16 amp-bf16: the padding advice, checked on gpt2-padded"
    timeout 240 python3 -m torchmark profile -w gpt2 --scenario train --precision amp-bf16 \
        --batch 16 -d cuda --stopping quick --no-memory --check --json "$out/profile-gpt2.json"
    step "profile gpt2-padded, the same case: no padding advice, the LM head off sm80 kernels"
    timeout 50 python3 -m torchmark profile -w gpt2-padded --scenario train \
        --precision amp-bf16 --batch 16 -d cuda --stopping quick --no-memory \
        --json "$out/profile-gpt2-padded.json"
    step "gpt2 vs gpt2-padded train b=16 amp-bf16, eager (MFU target 40 %)"
    timeout 80 python3 -m torchmark run -w gpt2 -w gpt2-padded --scenario train \
        --precision amp-bf16 --batch 16 -d cuda --stopping quick --json "$out/padded-eager.json"
    step "gpt2 vs gpt2-padded train b=16 amp-bf16+compile"
    timeout 180 python3 -m torchmark run -w gpt2 -w gpt2-padded --scenario train \
        --precision amp-bf16+compile --batch 16 -d cuda --stopping quick \
        --json "$out/padded-compiled.json"
} 2>&1 | tee "$out/session4.log"
