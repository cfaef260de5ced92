#!/usr/bin/env bash
# The benchmark matrix of issue 6 on the lent GPU: every cell in its own process, report at the end.
# Builds nothing: it runs the installed `parallax` (or the source tree through PYTHONPATH=src).
#
#   scripts/device/bench_matrix.sh [matrix]
#       llama-100m, torch+jax × bf16,fp8,nvfp4 (what cannot run is recorded as skipped),
#       batch 32, seq 1024, STEPS=60 (20 warmup), REPEATS=2; report, plots, CSV/JSON in $OUT/bench.
#   scripts/device/bench_matrix.sh resume
#       tiny model, torch+jax bf16, 2 repeats: kills the runner with SIGKILL during the third cell,
#       checks that the cell's process died with it (its GPU memory freed), resumes, and checks
#       that only the missing cells ran and the finished run.json files are byte-identical.
# Prints a short summary last and writes $OUT/bench_matrix.json.
source "$(dirname "$0")/common.sh" parallax.run.runner
MODE=${1:-matrix}
STEPS=${STEPS:-60}
REPEATS=${REPEATS:-2}
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>/dev/null || echo "no nvidia-smi"

if [[ $MODE == matrix ]]; then
    status=0
    "$PYTHON" -m parallax benchmark --frameworks torch,jax --precisions bf16,fp8,nvfp4 \
        --model llama-100m --batch-size 32 --seq-len 1024 --steps "$STEPS" --warmup 20 \
        --repeats "$REPEATS" --timeout-per-run 600 --output-dir "$OUT/bench" --report || status=$?
    OUT="$OUT" STATUS="$status" "$PYTHON" - <<'PY'
import json, os
from pathlib import Path
out = Path(os.environ["OUT"])
record = json.loads((out / "bench" / "report.json").read_text())
index = json.loads((out / "bench" / "index.json").read_text())
cells = []
for c in record["cells"]:
    tps = c["tokens_per_s"] or {}
    spec = (c["flops"] or {}).get("spec") or {}
    cells.append({"cell": f"{c['framework']} {c['precision']}", "status": c["status"],
                  "tokens_per_s": tps.get("value"), "ci": tps.get("ci"),
                  "mfu": spec.get("mfu_precision_peak"),
                  "reserved_gib": ((c["memory"] or {}).get("peak_reserved_bytes") or 0) / 2**30,
                  "final_loss": (c["final_loss"] or {}).get("value")})
summary = {"exit_status": int(os.environ["STATUS"]), "counts": index["counts"], "cells": cells,
           "speedups": [{k: s[k] for k in ("label", "ratio", "ci")} for s in record["speedups"]],
           "problems": record["problems"]}
(out / "bench_matrix.json").write_text(json.dumps(summary, indent=2))
print(f"bench_matrix: exit {summary['exit_status']}, counts {index['counts']}")
for c in cells:
    if c["tokens_per_s"]:
        print(f"  {c['cell']:<12} {c['tokens_per_s']:>10,.0f} tok/s (CI {c['ci'][0]:,.0f}-{c['ci'][1]:,.0f})"
              f"  MFU {'n/a' if c['mfu'] is None else format(c['mfu'], '.1%')}"
              f"  reserved {c['reserved_gib']:.1f} GiB  loss {c['final_loss']}")
    else:
        print(f"  {c['cell']:<12} {c['status']}")
for s in summary["speedups"]:
    print(f"  {s['label']}: {s['ratio']:.3f}x (CI {s['ci'][0]:.3f}-{s['ci'][1]:.3f})")
PY
    exit 0
fi

if [[ $MODE == resume ]]; then
    BENCH="$OUT/resume"
    args=(benchmark --frameworks torch,jax --precisions bf16 --model tiny --batch-size 8 --seq-len 128
          --steps "${RESUME_STEPS:-400}" --warmup 10 --repeats 2 --output-dir "$BENCH")
    read -r -a extra <<<"${EXTRA_ARGS:-}"
    args+=("${extra[@]}")
    "$PYTHON" -m parallax "${args[@]}" >"$OUT/resume_first.log" 2>&1 &
    runner=$!
    # Kill once the third cell reports training steps (two cells finished, one mid-run).
    progress="$BENCH/runs/torch-bf16-seed0-rep1/progress.jsonl"
    for _ in $(seq 2400); do grep -q '"step"' "$progress" 2>/dev/null && break; sleep 0.25; done
    grep -q '"step"' "$progress" 2>/dev/null || { echo "bench_matrix resume: the third cell never started" >&2; exit 1; }
    child=$(pgrep -P "$runner" -f "parallax train" | head -n 1 || true)
    kill -9 "$runner"; wait "$runner" 2>/dev/null || true
    sleep 2
    child_alive=false
    [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null && child_alive=true
    before=$(cd "$BENCH" && sha256sum runs/*/run.json)
    "$PYTHON" -m parallax "${args[@]}" --resume >"$OUT/resume_second.log" 2>&1
    identical=false
    (cd "$BENCH" && echo "$before" | sha256sum -c --quiet) && identical=true
    counts=$("$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))['counts'])" "$BENCH/index.json")
    resumed=$(grep -o "resuming: [0-9]* of [0-9]*" "$OUT/resume_second.log" || echo "no resume line")
    printf '{"child_pid": "%s", "child_alive_after_kill": %s, "finished_identical": %s, "resumed": "%s", "counts": "%s"}\n' \
        "$child" "$child_alive" "$identical" "$resumed" "$counts" >"$OUT/bench_matrix.json"
    echo "bench_matrix resume: child ${child:-none} alive after kill: $child_alive; finished files identical: $identical; $resumed; counts $counts"
    exit 0
fi
echo "usage: $0 [matrix|resume]" >&2
exit 2
