# Sourced by the scripts in scripts/device/ (not run on its own):
#
#   source "$(dirname "$0")/common.sh" parallax.run.train
#
# Moves to the repository root, sets PYTHON (default python3) and OUT (default a new temporary
# folder, created), and puts the source tree on PYTHONPATH when the named module cannot be
# imported from an installed parallax, so the scripts run with or without `pip install`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if ! "$PYTHON" -c "import $1" 2>/dev/null; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi

# bench_train FRAMEWORK [parallax train options]: the issue-3 benchmark run (llama-100m, bf16,
# batch 32 x 1024, 200 steps of which 20 warmup, synthetic, seed 0) into $RUN_DIR (a run there is replaced); later
# options override these. run.json and steps.jsonl are copied to $OUT; `code` is set to the
# exit status of `parallax train` (the caller decides what a failure means).
bench_train() {
    local framework=$1
    shift
    set +e
    PYTHONUNBUFFERED=1 "$PYTHON" -m parallax train --framework "$framework" --precision bf16 --model llama-100m \
        --batch-size 32 --seq-len 1024 --steps 200 --warmup 20 --synthetic --seed 0 --overwrite \
        --output-dir "$RUN_DIR" "$@"
    code=$?
    set -e
    [[ -f "$RUN_DIR/run.json" ]] && cp "$RUN_DIR/run.json" "$OUT/run.json"
    [[ -f "$RUN_DIR/steps.jsonl" ]] && cp "$RUN_DIR/steps.jsonl" "$OUT/steps.jsonl"
    return 0
}
