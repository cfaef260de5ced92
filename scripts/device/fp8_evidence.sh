#!/usr/bin/env bash
# The fp8 evidence (issue 10) on the lent H200, in parts, each under its own time limit so one that
# hangs cannot cost the others. Everything lands in /tmp/fp8/<part>/ and is packed into
# $OUT/fp8_<parts>.tar.gz (the device tool returns at most 8 files). A warm machine keeps /tmp, so
# consecutive calls may run different parts (benchmarks resume into the same folders).
#
#   scripts/device/fp8_evidence.sh PART [PART ...]
#
# Parts:
#   setup        `pip install -e .` and check-env (the carried TE + torchao of .carry/gpu, see
#                ../shared/tools/gpu-carry, are installed first by every call, once per warm machine)
#   gputests     every test marked gpu (the fp8 recipes of both engines among them)
#   fp8tests     only the GPU tests of the fp8 recipes (tests/gpu/test_{torch,jax}_fp8_gpu.py)
#   jaxhlo       scripts/device/jax_fp8_hlo.py: what XLA compiles the Flax fp8 recipes to
#   matrix       llama-100m, batch 32 x 1024, real TinyStories tokens (.carry/tinystories), every fp8
#                recipe next to bf16, 3 repeats, STEPS (default 100, 20 warmup); MATRIX_LIMIT seconds
#                (default 560), resumed by the next call; TORCH_FP8, JAX_FP8 and REPEATS override the cells
#   convergence  1,000 steps (several epochs of the sample), eval every 100, the default bf16/fp8
#                recipes of both engines and the other fp8 recipe of each, one seed
#   crossover    llama-330m and llama-860m, synthetic, bf16 and every fp8 recipe, 40 steps (10 warmup);
#                then `parallax crossover` over them and the matrix (llama-100m): speedup against size
#
# Compile caches (Inductor's default and JAX's persistent cache) make later cells of a recipe
# compile faster; compile time is reported apart from step time either way.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax-cache}
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
OUT=${OUT:-$(mktemp -d)}
E=/tmp/fp8
DATA=${DATA:-$PWD/.carry/tinystories}
STEPS=${STEPS:-100}
mkdir -p "$E"
# Installs once per warm machine (the torch extension of TE builds in ~95 s), then only sets PYTHONPATH.
t0=$SECONDS; source .carry/gpu/install.sh >>"$E/carry.log" 2>&1; echo "[carry] $((SECONDS - t0))s"
TORCH_FP8=${TORCH_FP8:-te-bf16,te-fp8-current,torchao-fp8-tensorwise,torchao-fp8-rowwise}
JAX_FP8=${JAX_FP8:-flax-fp8-direct}
REPEATS=${REPEATS:-3}
BENCH=(python3 -m parallax benchmark --frameworks torch,jax --batch-size 32 --seq-len 1024 --seeds 0)

part() {  # part NAME LIMIT_S COMMAND...
    local name=$1 limit=$2; shift 2
    mkdir -p "$E/$name"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$E/$name/log.txt" 2>&1
    local rc=$?
    echo "[$name] rc=$rc $((SECONDS - t0))s; $(tail -n 1 "$E/$name/log.txt" | cut -c1-240)"
}

for p in "$@"; do
    case $p in
        setup)
            part setup 180 bash -c 'python3 -m pip install -q --no-build-isolation --no-deps -e . \
                && python3 -m parallax check-env && python3 -m parallax check-env --json > /tmp/fp8/setup/check_env.json' ;;
        gputests)
            part gputests 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests ;;
        fp8tests)
            part fp8tests 240 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_torch_fp8_gpu.py \
                tests/gpu/test_jax_fp8_gpu.py ;;
        jaxhlo)
            part jaxhlo 240 env OUT="$E/jaxhlo" python3 scripts/device/jax_fp8_hlo.py ;;
        matrix)
            part matrix "${MATRIX_LIMIT:-560}" "${BENCH[@]}" --model llama-100m --precisions bf16,fp8 --recipes "$TORCH_FP8,$JAX_FP8" \
                --steps "$STEPS" --warmup 20 --repeats "$REPEATS" --data "$DATA" --epochs 20 --timeout-per-run 240 \
                --output-dir "$E/matrix/bench" --resume --report ;;
        convergence)
            part convergence 560 "${BENCH[@]}" --model llama-100m --precisions bf16,fp8 \
                --recipes torchao-fp8-tensorwise,flax-fp8-direct --steps 1000 --warmup 20 --eval-every 100 \
                --data "$DATA" --epochs 40 --timeout-per-run 240 --output-dir "$E/convergence/bench" --resume --report ;;
        crossover)
            for model in llama-330m llama-860m; do
                part crossover 280 "${BENCH[@]}" --model "$model" --precisions bf16,fp8 --recipes "$TORCH_FP8,$JAX_FP8" \
                    --steps 40 --warmup 10 --synthetic --timeout-per-run 150 --output-dir "$E/crossover/$model" \
                    --resume --report
            done
            part crossover 120 python3 -m parallax crossover "$E/matrix/bench" "$E/crossover/llama-330m" \
                "$E/crossover/llama-860m" --output-dir "$E/crossover/report" ;;
        *) echo "unknown part $p"; exit 2 ;;
    esac
done
find "$E" -name 'trace_*' -size +12M -delete
tar -czf "$OUT/fp8_$(IFS=_; echo "$*").tar.gz" -C /tmp fp8
ls -la "$OUT"
