# The pipeline's plumbing (sourced by scripts/device/session.sh): its settings, the deadline, parts bounded by
# both, the waits of `start` and `wait`, and the report each call prints before it packs.

settings() {  # settings BUDGET_S: the pipeline's knobs, from the environment
    BUDGET=${1:-1440}
    START=$SECONDS
    DRY=${DRY_RUN:-0}
    PARTS=" ${PARTS:-capture matrix curves profile} "
    GPU_BY=${GPU_BY_S:-480}
    TE_WAIT=${TE_WAIT_S:-600}
    RESERVE=${RESERVE_S:-200}
    DATA=$E/carry/tinystories
    export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
    export JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    DONE_PARTS=" "
    LIVE=$PWD
    NO_TE_PARTS="convbase quantbench ncu curves profile"  # what may run while TE builds, else after the matrix
}

left() {  # seconds to the deadline; a dry run spends none (its limits are the budget's arithmetic)
    if ((DRY)); then echo "$BUDGET"; else echo $((BUDGET - (SECONDS - START))); fi
}
log() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - START))s] $*"; }
want() { [[ $PARTS == *" $1 "* ]]; }
run() { "run_$1"; DONE_PARTS+="$1 "; }

part() {  # part NAME LIMIT_S COMMAND...: bounded by LIMIT_S and the deadline; output to $LOG or logs/NAME.txt
    local name=$1 limit=$2; shift 2
    local out=${LOG:-$E/logs/$name.txt} room; room=$(left)
    if ((DRY)); then printf 'DRY part %s %s' "$name" "$limit"; printf ' %q' "$@"; printf '\n'; return 0; fi
    poll_live
    maybe_start_te
    ((room < limit)) && limit=$room
    if ((limit < 20)); then log "$name: skipped, ${room}s left"; return 1; fi
    mkdir -p "$(dirname "$out")"
    local t0=$SECONDS building=""
    [[ $(te_state) == building ]] && building=" [TE building meanwhile]"
    timeout "$limit" "$@" >>"$out" 2>&1
    local rc=$?
    log "$name: rc=$rc in $((SECONDS - t0))s (limit ${limit}s)$building; $(tail -n 1 "$out" | cut -c1-200)"
    return $rc
}

alive() { [[ -f $E/pipeline.pid ]] && kill -0 "$(cat "$E/pipeline.pid")" 2>/dev/null; }

wait_for() {  # wait_for FILE LIMIT_S: until FILE exists, the pipeline is gone, or LIMIT_S passed
    local t0=$SECONDS
    while [[ ! -f $1 ]] && alive && ((SECONDS - t0 < $2)); do sleep "${POLL_S:-5}"; done
}

report() {
    tail -n 40 "$E/pipeline.log" 2>/dev/null
    if [[ -f $E/DONE ]]; then echo "[session] pipeline done"
    elif alive; then echo "[session] pipeline still running"
    else echo "[session] no pipeline running here (never started on this machine, or it died: see pipeline.log)"; fi
    pack
}
