#!/usr/bin/env bash
# Run the whole Parallax benchmark matrix and write its report.
#
#   bash scripts/run_benchmarks.sh [OUTPUT_DIR] [BATCH_SIZE] [STEPS] [WARMUP]
#   bash scripts/run_benchmarks.sh benchmark_results 32 200 20
#
# Environment (all optional):
#   FRAMEWORKS=torch,jax  PRECISIONS=bf16,fp8,nvfp4  SEEDS=0  REPEATS=3  SEQ_LEN=1024
#   MODEL=llama-100m  TIMEOUT=1800 (seconds per cell)  DATA=--synthetic|--hf
#   DATA_PATH=/path/to/tokens (a prepared token directory; replaces DATA)
#   EXTRA_ARGS="..." (passed to parallax benchmark as they are)
#   MEASURE=1 (default) runs `check-env --measure` first: GEMM ceilings for MFU; 0 skips it
#   PARALLAX=parallax (the command; defaults to `parallax`, else `python3 -m parallax`)
#   DRY_RUN=1 prints the commands instead of running them.
#
# Running it again on the same OUTPUT_DIR resumes: only cells without a result run. The
# environment is recorded first (check-env), the report is written last.
set -euo pipefail

OUTPUT_DIR="${1:-benchmark_results}"
BATCH_SIZE="${2:-32}"
STEPS="${3:-200}"
WARMUP="${4:-20}"
FRAMEWORKS="${FRAMEWORKS:-torch,jax}"
PRECISIONS="${PRECISIONS:-bf16,fp8,nvfp4}"
SEEDS="${SEEDS:-0}"
REPEATS="${REPEATS:-3}"
SEQ_LEN="${SEQ_LEN:-1024}"
MODEL="${MODEL:-llama-100m}"
TIMEOUT="${TIMEOUT:-1800}"
DATA="${DATA:---synthetic}"
EXTRA_ARGS="${EXTRA_ARGS:-}"
MEASURE="${MEASURE:-1}"

if [[ -n "${PARALLAX:-}" ]]; then
    read -r -a parallax <<<"$PARALLAX"
elif command -v parallax >/dev/null 2>&1; then
    parallax=(parallax)
else
    parallax=(python3 -m parallax)
fi

source "$(dirname "${BASH_SOURCE[0]}")/dry_run.sh"  # show, run (DRY_RUN=1 prints)

read -r -a data_args <<<"$DATA"
[[ -n "${DATA_PATH:-}" ]] && data_args=(--data "$DATA_PATH")
read -r -a extra_args <<<"$EXTRA_ARGS"
resume=()
if [[ -f "$OUTPUT_DIR/matrix.json" ]]; then
    resume=(--resume)
    echo "run_benchmarks: $OUTPUT_DIR holds a matrix already; resuming it" >&2
fi

run mkdir -p "$OUTPUT_DIR"
# The environment as check-env sees it, next to the results (the benchmark records its own too).
# --measure also stores this GPU's measured GEMM ceilings, the third MFU denominator.
check_env=("${parallax[@]}" check-env --json)
[[ "$MEASURE" == 1 ]] && check_env+=(--measure)
if [[ "${DRY_RUN:-0}" == 1 ]]; then
    show "${check_env[@]}"
else
    "${check_env[@]}" >"$OUTPUT_DIR/check-env.json" || echo "run_benchmarks: check-env failed; continuing" >&2
fi

status=0
run "${parallax[@]}" benchmark \
    --frameworks "$FRAMEWORKS" --precisions "$PRECISIONS" --model "$MODEL" \
    --batch-size "$BATCH_SIZE" --seq-len "$SEQ_LEN" --steps "$STEPS" --warmup "$WARMUP" \
    --seeds "$SEEDS" --repeats "$REPEATS" --timeout-per-run "$TIMEOUT" \
    "${data_args[@]}" --output-dir "$OUTPUT_DIR" --report "${resume[@]}" "${extra_args[@]}" || status=$?

# Exit status 1 means a cell failed or timed out (recorded, the matrix went on); 2 is bad input.
if [[ "$status" -ge 2 ]]; then
    echo "run_benchmarks: parallax benchmark refused to start (exit $status)" >&2
    exit "$status"
fi
echo "run_benchmarks: report $OUTPUT_DIR/report.md (exit $status)"
exit "$status"
