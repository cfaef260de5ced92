#!/usr/bin/env bash
# Collects the committed H200 evidence in as few device calls as possible. Each PART runs under
# its own time limit, so one that hangs cannot cost the others; every output goes under
# $OUT/evidence/<part>/ and is packed at the end into $OUT/evidence.tar.gz (the device tool
# returns at most 8 files). Usage: scripts/device/evidence.sh PART [PART ...]
# Parts: build gputests measure crosscheck pinning parity jax torch data-torch data-jax profile
#        matrix train-for-overhead
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
OUT=${OUT:-$(mktemp -d)}
E=/tmp/evidence
mkdir -p "$E"
DATA=${DATA:-.carry/tinystories}
TRAIN=(python3 -m parallax train --model llama-100m --precision bf16 --batch-size 32 --seq-len 1024 --seed 0 --overwrite)  # scratch folders: a rerun replaces

part() {  # part NAME LIMIT_S COMMAND...
    local name=$1 limit=$2; shift 2
    mkdir -p "$E/$name"
    local t0=$SECONDS
    OUT="$E/$name" timeout "$limit" "$@" >"$E/$name/log.txt" 2>&1
    local rc=$?
    echo "[$name] rc=$rc ${SECONDS}s-${t0}s=$((SECONDS - t0))s; $(tail -n 1 "$E/$name/log.txt" | cut -c1-300)"
}

keep_run() {  # copy a run dir's result files into the part's folder
    cp "$1"/run.json "$1"/steps.jsonl "$2"/ 2>/dev/null || true
}

for p in "$@"; do
    case $p in
        build) part build 120 python3 -m pip install --no-build-isolation --no-deps -e . ;;
        gputests) part gputests 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests ;;
        measure) part measure 150 bash -c 'python3 -m parallax check-env --measure --json > "$OUT/check_env_measure.json"' ;;
        crosscheck) part crosscheck 120 python3 scripts/device/ceiling_crosscheck.py ;;
        pinning) part pinning 60 python3 scripts/device/pinning_check.py ;;
        parity) part parity 200 bash scripts/device/parity_gpu.sh ;;
        torch) part torch 150 "${TRAIN[@]}" --framework torch --steps 200 --warmup 20 --synthetic --output-dir /tmp/ev/torch
               keep_run /tmp/ev/torch "$E/torch" ;;
        jax) part jax 200 "${TRAIN[@]}" --framework jax --steps 200 --warmup 20 --synthetic --output-dir /tmp/ev/jax
             keep_run /tmp/ev/jax "$E/jax" ;;
        data-torch) part data-torch 150 "${TRAIN[@]}" --framework torch --steps 200 --warmup 20 --data "$DATA" --epochs 4 \
                        --eval-every 100 --output-dir /tmp/ev/data-torch
                    keep_run /tmp/ev/data-torch "$E/data-torch" ;;
        data-jax) part data-jax 200 "${TRAIN[@]}" --framework jax --steps 200 --warmup 20 --data "$DATA" --epochs 4 \
                      --eval-every 100 --output-dir /tmp/ev/data-jax
                  keep_run /tmp/ev/data-jax "$E/data-jax" ;;
        profile) part profile 150 bash scripts/device/bench_torch.sh profile ;;
        matrix) part matrix 420 python3 -m parallax benchmark --frameworks torch,jax --precisions bf16 --model llama-100m \
                    --batch-size 32 --seq-len 1024 --steps "${MATRIX_STEPS:-120}" --warmup 20 --repeats 3 --synthetic \
                    --timeout-per-run 200 --output-dir "$E/matrix/bench" --report ;;
        *) echo "unknown part $p"; exit 2 ;;
    esac
done
find "$E" -name 'trace_*' -size +12M -delete
tar -czf "$OUT/evidence.tar.gz" -C /tmp evidence
ls -la "$OUT/evidence.tar.gz"
