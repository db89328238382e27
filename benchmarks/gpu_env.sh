# Sourced by the gpu_*.sh scripts THERE, on a lent GPU machine: the carried wheels go to
# /tmp/site (nothing installed system-wide), torchmark runs from src/, results land in $OUT
# (or ./gpu-out) and a throw-away gpu.db. WHEELS=0 leaves the wheels alone (a dry run here,
# whose Python has the packages and may not be the 3.12 the wheels are built for).
out="${OUT:-gpu-out}"
mkdir -p "$out"
if [ "${WHEELS:-1}" = 1 ] && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD/src:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 TORCHMARK_DB="sqlite:///$PWD/gpu.db"
export COLUMNS=160
step() { echo; echo "=== $*"; }

# run_step NAME SECONDS CMD...: CMD under `timeout` (SIGTERM after SECONDS, SIGKILL 10 s
# later), its exit status and wall time appended to $out/steps.tsv (name, exit, limit s,
# wall s); a failing step never stops the script. Exit 124: stopped by its limit.
run_step() {
    local name="$1" limit="$2" t0="$EPOCHREALTIME" rc=0
    shift 2
    step "$name (at most $limit s)"
    timeout -k 10 "$limit" "$@" || rc=$?
    local wall
    wall="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$limit" "$wall" >>"$out/steps.tsv"
    echo "--- $name: exit $rc in $wall s"
}

# stamp: each line of stdin prefixed with the Unix time it arrived and a tab (a case's
# progress line arrives as it finishes: gpu_session5_check.py times the parts from these).
stamp() {
    local line
    while IFS= read -r line; do printf '%s\t%s\n' "$EPOCHREALTIME" "$line"; done
}
