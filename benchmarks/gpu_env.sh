# Sourced by gpu_session.sh and gpu_session2.sh THERE, on a lent GPU machine: the carried
# wheels go to /tmp/site (nothing installed system-wide), torchmark runs from src/, results
# land in $OUT (or ./gpu-out) and a throw-away gpu.db.
out="${OUT:-gpu-out}"
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 TORCHMARK_DB="sqlite:///$PWD/gpu.db"
export COLUMNS=160
step() { echo; echo "=== $*"; }
