#!/usr/bin/env bash
# Run THERE, on a lent GPU machine, from the repository root, in one device call:
#   run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=600)
# after `scripts/gpu-wheels` here. Everything it measures lands in $OUT (or ./gpu-out).
# It installs nothing system-wide: the carried wheels go to /tmp/site, torchmark runs from src/.
# Each step has its own time bound so one hang cannot eat the device call.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
{
    step "machine"; nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv || true
    python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
    step "doctor"; timeout 60 python3 -m torchmark doctor
    step "GPU tests"; timeout 150 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider -x --timeout 60
    step "quick suite (METHOD.md predicts seed-add as-published ~2,500 it/s on an H100, ~3,500 on an H200)"
    timeout 200 python3 -m torchmark run --quick --json "$out/quick.json"
    step "measure vs CUDA events and do_bench (target: within 3 %)"
    timeout 120 python3 benchmarks/measure_vs_cuda.py --rounds 3
} 2>&1 | tee "$out/session.log"
