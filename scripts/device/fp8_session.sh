#!/usr/bin/env bash
# The fp8/nvfp4 evidence of issues 10 and 11 as one pipeline on one warm H200, under one deadline,
# so that a device session's 30 minutes go to measurement rather than to restarts between calls.
#
#   scripts/device/fp8_session.sh start [BUDGET_S]   # first call: start the pipeline detached, then wait
#   scripts/device/fp8_session.sh wait               # later calls: wait for it (at most WAIT_S)
#
# The pipeline runs detached (setsid), so it outlives one 10-minute call as long as the machine
# stays warm; every call packs what exists so far into $OUT/fp8_session.tar.gz, so a machine lost
# between calls loses only what had not come back yet. PARTS (default "tests matrix crossover")
# picks what runs, in this order:
#
#   tests      TE's torch extension builds in the background (.carry/gpu, ~2 min) after `pip install
#              -e .`; meanwhile the JAX fp8, CUDA quantization and emulated-NVFP4 GPU tests and the
#              NVFP4 kernel benchmark (scripts/device/quant_bench.py); then check-env, the torch
#              fp8 GPU tests (CUDA graphs included) and the TE-JAX tests once TE is there.
#   matrix     the throughput matrix alone on the GPU: every bf16/fp8/emulated-NVFP4 recipe of both
#              engines (TE with --cuda-graphs auto: its blocks in CUDA graphs), REPEATS (3) repeats.
#   crossover  the larger presets (llama-330m, then llama-860m), one repeat, bf16 and every fp8
#              recipe (TE-JAX aside), then `parallax crossover` (XO_RECIPES, XO_MODELS,
#              XO_RESUME, XO_TIMEOUT, XO_PART_S: see the part).
#   convergence  CONV_STEPS (1000) steps of every fp8 and emulated-NVFP4 recipe and bf16, eval every
#              100 steps, 5 cells at once on the GPU (loss only: --concurrent stamps them).
#   nvfp4conv  the same for bf16 and emulated NVFP4 alone (both engines, 4 cells at once), started in
#              the background right after the CUDA quantization tests passed, so that it runs while
#              the other correctness tests and TE's build do; nothing timed (the kernel benchmark,
#              the matrix) starts before it is done.
#
# Each part is bounded by the time left to the deadline (BUDGET_S from the start, default 1560 s).
#
# The pipeline runs from its own copy of the checkout and of the prepared tokens under /tmp/fp8:
# every device call re-syncs the working tree and drops what that call does not carry (on
# 2026-12-01 the second call removed .carry/tinystories mid-matrix, and every later cell was
# skipped). Carry the same paths in every call anyway.
set -uo pipefail
cd "$(dirname "$0")/../.."
E=/tmp/fp8
OUT=${OUT:-$E/out}
mkdir -p "$E" "$OUT"
pack() {
    find "$E" -name 'trace_*' -size +12M -delete 2>/dev/null
    tar -czf "$OUT/fp8_session.tar.gz" -C /tmp --exclude=fp8/out --exclude=fp8/src --exclude=fp8/carry-gpu fp8 2>/dev/null
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
rm -rf "$E/src" && mkdir -p "$E/src" && tar -cf - --exclude=./.carry/gpu --exclude=./.git . | tar -xf - -C "$E/src"
cp -a .carry/gpu "$E/carry-gpu" 2>/dev/null
cd "$E/src"
PARTS=" ${PARTS:-tests matrix crossover} "
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export JAX_COMPILATION_CACHE_DIR=/tmp/jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
DATA=$PWD/.carry/tinystories
# --precisions bf16 gives each framework's bf16; --recipes names the others (torch: scoped, since
# JAX has TE recipes too and its TE extension is not built in this pipeline).
FP8=torch:te-bf16,torch:te-fp8-delayed,torch:te-fp8-current,torchao-fp8-tensorwise,torchao-fp8-rowwise
FP8=$FP8,flax-fp8-delayed,flax-fp8-direct
BENCH=(python3 -m parallax benchmark --precisions bf16 --seeds 0 --batch-size 32 --seq-len 1024)

left() { echo $((BUDGET - (SECONDS - START))); }
log() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - START))s] $*"; }
want() { [[ $PARTS == *" $1 "* ]]; }
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
wait_te() {
    while [[ ! -f $E/te.ready ]] && (($(left) > 60)); do sleep 2; done
    log "TE ready: $(tail -n 1 "$E/carry.log")"
}

log "start, budget ${BUDGET}s, parts:$PARTS"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.used --format=csv > "$E/nvidia-smi.txt" 2>&1
( bash -c "source $E/carry-gpu/install.sh" > "$E/carry.log" 2>&1; touch "$E/te.ready"; ) &
part install 300 python3 -m pip install -q --no-build-isolation --no-deps \
    --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -e .
export PYTHONPATH=/tmp/carry-site${PYTHONPATH:+:$PYTHONPATH}
python3 -c "import parallax.quant as q; print(q.available_bindings())" > "$E/bindings.txt" 2>&1

if want tests; then
    part gputests-quant 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_quant_cuda_gpu.py
fi
CONV_PID=""
if want nvfp4conv; then  # losses only: sharing the GPU with the tests below changes no number it reports
    part nvfp4conv 900 "${BENCH[@]}" --frameworks torch,jax --recipes emulated-nvfp4 \
        --steps "${CONV_STEPS:-1000}" --warmup 20 --eval-every 100 --eval-batches 5 --data "$DATA" \
        --epochs 40 --concurrent 4 --timeout-per-run 800 --output-dir "$E/nvfp4conv/bench" --resume --report &
    CONV_PID=$!
fi
if want tests; then
    part gputests-nvfp4 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_nvfp4_emulated_gpu.py
    part gputests-jax 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_jax_fp8_gpu.py
    wait_te
    part checkenv 120 bash -c "python3 -m parallax check-env && python3 -m parallax check-env --json > $E/checkenv/check_env.json"
    part gputests-torch 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_torch_fp8_gpu.py
    # TE's JAX extension builds with the torch one when .carry/gpu holds it (fetch.sh ... te-jax)
    part gputests-tejax 240 python3 -m pytest -q -p no:cacheprovider -m gpu -rs tests/gpu/test_jax_te_gpu.py
fi
if [[ -n $CONV_PID ]]; then
    log "waiting for nvfp4conv before anything timed"
    wait "$CONV_PID"
fi
want tests && part quantbench 120 env OUT="$E/quantbench" python3 scripts/device/quant_bench.py
wait_te

if want matrix; then
    part matrix "${MATRIX_S:-1000}" "${BENCH[@]}" --frameworks torch,jax --recipes "$FP8,emulated-nvfp4" \
        --steps 60 --warmup 20 --repeats "${REPEATS:-3}" --data "$DATA" --epochs 20 --timeout-per-run 200 \
        --output-dir "$E/matrix/bench" --resume --report
fi

if want crossover; then
    # The default is every fp8 recipe of both engines but TE-JAX (its extension is not built here);
    # a session of 2026-12-01 left torchao rowwise out to fit both sizes in (XO_RECIPES sets the
    # list). XO_RESUME: a folder of earlier crossover benchmarks (one per preset, e.g.
    # docs/results/2026-12-01-h200-c/crossover) copied in first, so that --resume runs only the
    # cells they lack; XO_TIMEOUT: the per-cell limit (torchao compiles ~150 s at llama-330m).
    XO=${XO_RECIPES:-torch:te-bf16,torch:te-fp8-delayed,torch:te-fp8-current,torchao-fp8-tensorwise,torchao-fp8-rowwise,flax-fp8-delayed,flax-fp8-direct}
    for model in ${XO_MODELS:-llama-330m llama-860m}; do
        if [[ -n ${XO_RESUME:-} && -d $XO_RESUME/$model && ! -d $E/crossover/$model ]]; then
            mkdir -p "$E/crossover" && cp -r "$XO_RESUME/$model" "$E/crossover/$model"
            log "crossover-$model: resuming the runs of $XO_RESUME/$model"
        fi
        part "crossover-$model" "${XO_PART_S:-400}" "${BENCH[@]}" --frameworks torch,jax --model "$model" \
            --recipes "$XO" --steps 30 --warmup 10 --synthetic --timeout-per-run "${XO_TIMEOUT:-150}" \
            --output-dir "$E/crossover/$model" --resume --report
    done
    # XO_BASE: the llama-100m benchmark to line up with (this pipeline's matrix by default)
    part crossover-report 60 python3 -m parallax crossover "${XO_BASE:-$E/matrix/bench}" "$E/crossover/llama-330m" \
        "$E/crossover/llama-860m" --output-dir "$E/crossover/report"
fi

if want convergence; then
    part convergence 900 "${BENCH[@]}" --frameworks torch,jax --recipes "$FP8,emulated-nvfp4" \
        --steps "${CONV_STEPS:-1000}" --warmup 20 --eval-every 100 --eval-batches 5 --data "$DATA" \
        --epochs 40 --concurrent 5 --timeout-per-run 800 --output-dir "$E/convergence/bench" --resume --report
fi
log "done"
touch "$E/DONE"
