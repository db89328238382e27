#!/usr/bin/env bash
# The input pipeline on a lent GPU: the copy paths' tests, a SIGTERM to the process group
# mid-sweep (must end "interrupted", exit 143, no traceback), then the whole sweep.
#   run(command="bash benchmarks/gpu_input.sh", carry=[".whl"], timeout_s=600)
# (SWEEP_S=300 bash ... to leave the token sweep its time)
source benchmarks/gpu_env.sh
cache=/tmp/torchmark-input
nvidia-smi -L; nproc
step "gpu tests"
python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_input_gpu.py 2>&1 | tail -8
step "SIGTERM to the process group after 45 s"
timeout 45 python3 -m torchmark run -w input -d cuda --no-ceilings --cache-dir "$cache" \
    >"$out/term.txt" 2>&1
echo "exit $?"; tail -4 "$out/term.txt"; grep -c Traceback "$out/term.txt"
step "the sweep, with ceilings"
start=$(date +%s)
timeout "${SWEEP_S:-300}" python3 -m torchmark run -w input -d cuda --cache-dir "$cache" \
    --json "$out/input.json" >"$out/sweep.txt" 2>&1
echo "exit $? after $(($(date +%s) - start)) s"; cat "$out/sweep.txt" | tail -70
step "input-tokens (the light loader), quick"
timeout 150 python3 -m torchmark run -w input-tokens -d cuda --quick --no-ceilings \
    --cache-dir "$cache" 2>&1 | tail -25
