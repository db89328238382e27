#!/usr/bin/env bash
# Run THERE, on a lent GPU machine, from the repository root, in one device call:
#   run(command="bash benchmarks/gpu_session.sh", carry=[".whl"], timeout_s=600)
# after `scripts/gpu-wheels` here. Everything it measures lands in $OUT (or ./gpu-out).
# It installs nothing system-wide: the carried wheels go to /tmp/site, torchmark runs from src/.
set -uo pipefail
. "$(dirname "$0")/gpu_env.sh"
{
    step "machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
    python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))"
    step "doctor"; python3 -m torchmark doctor
    step "GPU tests"; python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider
    step "quick suite (METHOD.md predicts seed-add as-published ~2,500 it/s on an H100, ~3,500 on an H200)"
    python3 -m torchmark run --quick --json "$out/quick.json"
    step "seed-add and transfer"
    python3 -m torchmark run --device cuda --workload seed-add --workload transfer \
        --json "$out/seed-transfer.json"
    step "model targets (issue 3)"; python3 benchmarks/models_gpu.py
} 2>&1 | tee "$out/session.log"
