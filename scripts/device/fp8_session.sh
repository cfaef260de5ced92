#!/usr/bin/env bash
# The whole fp8 evidence of issue 10 as one pipeline on one warm H200, under one deadline, so that
# a device session's 30 minutes go to measurement rather than to restarts between calls.
#
#   scripts/device/fp8_session.sh start [BUDGET_S]   # first call: start the pipeline detached, then wait
#   scripts/device/fp8_session.sh wait               # later calls: wait for it (at most WAIT_S)
#
# The pipeline runs detached (setsid), so it outlives one 10-minute call as long as the machine
# stays warm; every call packs what exists so far into $OUT/fp8_session.tar.gz, so a machine lost
# between calls loses only what had not come back yet. Order (times on the H200, 2026-12-01 plan):
#
#   1. TransformerEngine's torch extension builds in the background (.carry/gpu, ~2 min) while
#      `pip install -e .` runs;
#   2. the JAX fp8 GPU tests during the build; then convergence (CONV_STEPS, default 1000 steps,
#      eval every 100) of every fp8 recipe and bf16, 4 cells at once on the GPU (benchmark
#      --concurrent 4: loss only, no throughput), beside the torch fp8 GPU tests and check-env;
#   3. the throughput matrix, alone on the GPU: every recipe, REPEATS (3) repeats, 60 steps;
#   4. profiles of one step of the recipes that miss their targets (scripts/device/profile_step.py),
#      and TE eager against TE with its blocks in CUDA graphs, the engine's --cuda-graphs
#      (scripts/device/te_graphs.py);
#   5. the crossover presets (llama-330m, then llama-860m) with what time is left.
#
# Each part is bounded by the time left to the deadline (BUDGET_S from the start, default 1560 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
E=/tmp/fp8
OUT=${OUT:-$E/out}
mkdir -p "$E" "$OUT"

pack() {
    find "$E" -name 'trace_*' -size +12M -delete 2>/dev/null
    tar -czf "$OUT/fp8_session.tar.gz" -C /tmp --exclude=fp8/out fp8 2>/dev/null
    ls -la "$OUT"
}

wait_done() {  # wait_done LIMIT_S: until the pipeline wrote DONE or LIMIT_S passed
    local t0=$SECONDS
    while [[ ! -f $E/DONE ]] && ((SECONDS - t0 < $1)); do sleep 5; done
    tail -n 40 "$E/pipeline.log"
    [[ -f $E/DONE ]] && echo "[session] pipeline done" || echo "[session] pipeline still running"
    pack
}

case ${1:-} in
    start)
        rm -f "$E/DONE"
        setsid nohup bash "$0" pipeline "${2:-1560}" >"$E/pipeline.log" 2>&1 < /dev/null &
        wait_done "${WAIT_S:-560}"; exit 0 ;;
    wait)
        wait_done "${WAIT_S:-560}"; exit 0 ;;
    pipeline) ;;
    *) echo "usage: $0 start [BUDGET_S] | wait"; exit 2 ;;
esac

# ------------------------------------------------------------------------------ the pipeline
BUDGET=${2:-1560}
START=$SECONDS
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
DATA=$PWD/.carry/tinystories
# --precisions bf16,fp8 gives each framework's defaults (torch: bf16, te-fp8-delayed; jax: bf16,
# flax-fp8-delayed); --recipes adds the others. Every implemented recipe of both engines:
ALL=te-bf16,te-fp8-current,torchao-fp8-tensorwise,torchao-fp8-rowwise,flax-fp8-direct
CONV=te-fp8-current,torchao-fp8-tensorwise,torchao-fp8-rowwise,flax-fp8-direct  # te-bf16: a speed baseline only
BENCH=(python3 -m parallax benchmark --precisions bf16,fp8 --seeds 0 --batch-size 32 --seq-len 1024)

left() { echo $((BUDGET - (SECONDS - START))); }
log() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - START))s] $*"; }
part() {  # part NAME LIMIT_S COMMAND...: bounded by LIMIT_S and by the deadline
    local name=$1 limit=$2; shift 2
    local room; room=$(left)
    ((room < limit)) && limit=$room
    if ((limit < 20)); then log "$name: skipped, ${room}s left"; return 1; fi
    mkdir -p "$E/$name"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$E/$name/log.txt" 2>&1
    local rc=$?
    log "$name: rc=$rc in $((SECONDS - t0))s (limit ${limit}s); $(tail -n 1 "$E/$name/log.txt" | cut -c1-200)"
}

log "start, budget ${BUDGET}s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.used --format=csv > "$E/nvidia-smi.txt" 2>&1
( bash -c 'source .carry/gpu/install.sh' > "$E/carry.log" 2>&1; touch "$E/te.ready"; ) &
part install 240 python3 -m pip install -q --no-build-isolation --no-deps -e .
export PYTHONPATH=/tmp/carry-site${PYTHONPATH:+:$PYTHONPATH}

# 2. the JAX fp8 GPU tests while TE builds; then convergence (loss only) beside the torch GPU tests.
# The convergence waits for TE: a TE cell started before the build ends fails (seen 2026-12-01).
part gputests-jax 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_jax_fp8_gpu.py
while [[ ! -f $E/te.ready ]] && (($(left) > 60)); do sleep 2; done
log "TE ready: $(tail -n 1 "$E/carry.log")"
# 5 evaluation batches of 32: the sample's validation split holds 187 sequences of 1,025 tokens.
part convergence 600 "${BENCH[@]}" --frameworks jax,torch --recipes "$CONV" --steps "${CONV_STEPS:-1000}" \
    --warmup 20 --eval-every 100 --eval-batches 5 --data "$DATA" --epochs 40 --concurrent 4 \
    --timeout-per-run 560 --output-dir "$E/convergence/bench" --resume --report &
CONV_PID=$!
part checkenv 120 bash -c "python3 -m parallax check-env && python3 -m parallax check-env --json > $E/checkenv/check_env.json"
part gputests-torch 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_torch_fp8_gpu.py
wait $CONV_PID

# 3. the throughput matrix, alone on the GPU
part matrix 720 "${BENCH[@]}" --frameworks torch,jax --recipes "$ALL" --steps 60 --warmup 20 \
    --repeats "${REPEATS:-3}" --data "$DATA" --epochs 20 --timeout-per-run 200 \
    --output-dir "$E/matrix/bench" --resume --report

# 4. profiles of single steps
for fr in ${PROFILES:-torch:te-fp8-delayed torch:te-bf16 jax:flax-fp8-direct}; do
    part profiles 90 python3 scripts/device/profile_step.py --framework "${fr%%:*}" --recipe "${fr#*:}" \
        --out "$E/profiles"
done

# 4b. TE eager against the engine's --cuda-graphs on, through its own Trainer (scripts/device/te_graphs.py)
part tegraphs 150 env OUT="$E/tegraphs" python3 scripts/device/te_graphs.py

# 5. the crossover, with what is left
for model in llama-330m llama-860m; do
    part "crossover-$model" 400 "${BENCH[@]}" --frameworks torch,jax --model "$model" \
        --recipes torchao-fp8-tensorwise,flax-fp8-direct --steps 30 --warmup 10 \
        --synthetic --timeout-per-run 150 --output-dir "$E/crossover/$model" --resume --report
done
part crossover-report 60 python3 -m parallax crossover "$E/matrix/bench" "$E/crossover/llama-330m" \
    "$E/crossover/llama-860m" --output-dir "$E/crossover/report"
log "done"
touch "$E/DONE"
