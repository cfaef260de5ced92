#!/usr/bin/env bash
# The JAX bf16 benchmark of issue 4, for the lent GPU. Builds nothing: it runs the installed
# `parallax` (or, if that is not importable, the source tree through PYTHONPATH=src).
#
#   scripts/device/bench_jax.sh [train] [extra parallax-train options]
#       The JAX gpu tests, then llama-100m, bf16, batch 32, seq 1024, 200 steps (20 warmup),
#       synthetic; copies run.json and steps.jsonl to $OUT and prints the figures against the
#       issue's target (650,000 tokens/s median) last, with the timing method's measured
#       overhead (per-step method vs one block at the end, engine_extra.timing_overhead).
#   scripts/device/bench_jax.sh variants
#       ms/step of the training step under several settings, each in its own process (XLA_FLAGS
#       are read once per process): VARIANTS="cudnn|;xla|;cudnn|--xla_gpu_enable_triton_gemm=false"
#       (';'-separated attention|XLA_FLAGS), 30 steps after 10 warmup, one block at the end.
#       BENCH_MODEL, BENCH_BATCH, BENCH_SEQ change the shape (default llama-100m, 32, 1024).
#   scripts/device/bench_jax.sh profile
#       jax.profiler trace of 5 steps after 15 unprofiled ones, packed as $OUT/trace_jax.tar.gz
#       (open the xplane.pb inside with TensorBoard's profile plugin or xprof).
source "$(dirname "$0")/common.sh" parallax.run.train
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # as the engine sets it: peak memory is measurable
MODE=${1:-train}
[[ $# -gt 0 ]] && shift

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.used --format=csv || true

# One measurement of the bare training step in this process: prints one JSON line.
STEP_PY='
import json, os, sys, time
from parallax.engines.jax.engine import JaxEngine
from parallax.plan.resolve import resolve
from parallax.spec.config import RunConfig

attention, mode, out = sys.argv[1], sys.argv[2], os.environ["OUT"]
run = RunConfig(framework="jax", model=os.environ.get("BENCH_MODEL", "llama-100m"),
                batch_size=int(os.environ.get("BENCH_BATCH", 32)), seq_len=int(os.environ.get("BENCH_SEQ", 1024)),
                steps=200, warmup=20)
t0 = time.perf_counter()
step = JaxEngine().build_step(resolve(run), attention=attention)  # the bf16 step of the engine, compiled
step.run(10)
warm_s = time.perf_counter() - t0

def timed(n):
    start = time.perf_counter()
    step.run(n)
    return time.perf_counter() - start

if mode == "profile":
    import jax
    step.run(5)
    trace = os.path.join(out, "trace_jax")
    with jax.profiler.trace(trace):
        total = timed(5)
    n = 5
else:
    n = 30
    total = timed(n)
ms = total * 1e3 / n
stats = step.plan.handles["device"].memory_stats() or {}
print(json.dumps({"attention": step.details["attention"], "xla_flags": os.environ.get("XLA_FLAGS", ""),
                  "compile_and_warmup_s": round(warm_s, 1), "ms_per_step": round(ms, 3),
                  "tokens_per_s": round(run.tokens_per_step / ms * 1e3),
                  "peak_gib": round(stats.get("peak_bytes_in_use", 0) / 2**30, 2)}), flush=True)
'

if [[ $MODE == variants ]]; then
    IFS=';' read -r -a variants <<< "${VARIANTS:-cudnn|;xla|;cudnn|--xla_gpu_enable_triton_gemm=false}"
    : > "$OUT/variants_jax.jsonl"
    for variant in "${variants[@]}"; do
        attention=${variant%%|*}
        flags=${variant#*|}
        if ! XLA_FLAGS="$flags" OUT="$OUT" "$PYTHON" -c "$STEP_PY" "$attention" variants > "$OUT/variant.log" 2>&1; then
            tail -n 5 "$OUT/variant.log"
            echo "{\"attention\": \"$attention\", \"xla_flags\": \"$flags\", \"failed\": true}" >> "$OUT/variants_jax.jsonl"
        else
            tail -n 1 "$OUT/variant.log" | tee -a "$OUT/variants_jax.jsonl"
        fi
    done
    rm -f "$OUT/variant.log"
    "$PYTHON" - "$OUT/variants_jax.jsonl" <<'EOF'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
ok = [r for r in rows if "tokens_per_s" in r]
best = max(ok, key=lambda r: r["tokens_per_s"]) if ok else None
print("bench_jax variants:", len(ok), "of", len(rows), "ran; best", json.dumps(best))
EOF
    exit 0
fi

if [[ $MODE == profile ]]; then
    OUT="$OUT" "$PYTHON" -c "$STEP_PY" cudnn profile | tee "$OUT/profile_jax.json"
    tar -C "$OUT" -czf "$OUT/trace_jax.tar.gz" trace_jax && rm -rf "$OUT/trace_jax"
    echo "bench_jax profile: $(cat "$OUT/profile_jax.json"); trace in trace_jax.tar.gz"
    exit 0
fi

"$PYTHON" -m pytest -q -p no:cacheprovider -m gpu tests/unit/test_jax_model.py tests/parity/test_parity.py \
    || echo "bench_jax: gpu tests failed (see above)"

RUN_DIR=${RUN_DIR:-$(mktemp -d)/jax-bf16-llama-100m}
bench_train jax "$@"
"$PYTHON" - "$OUT" "$code" <<'EOF'
import json, os, sys
out, code = sys.argv[1], int(sys.argv[2])
path = os.path.join(out, "run.json")
if not os.path.exists(path):
    print(f"bench_jax: no run.json (exit code {code})"); sys.exit(code or 1)
run = json.load(open(path))
if run["status"] != "ok":
    print(f"bench_jax: status {run['status']}: {run.get('error')}"); sys.exit(code or 1)
tps = run["throughput"]["tokens_per_s"]
peak = run["memory"]["peak_allocated_bytes"]
spec = run["flops"]["accountings"]["spec"]
extra = run["engine_extra"]
overhead = extra["timing_overhead"]
summary = {
    "tokens_per_s_median": round(tps), "target_tokens_per_s": 650_000, "tokens_ok": tps >= 650_000,
    "step_ms_median": round(run["timing"]["step_ms"]["median"], 3),
    "step_ms_p10_p90": [round(run["timing"]["step_ms"]["p10"], 3), round(run["timing"]["step_ms"]["p90"], 3)],
    "peak_bytes_in_use_gib": None if peak is None else round(peak / 2**30, 2),
    "peak_reserved_gib": None if run["memory"]["peak_reserved_bytes"] is None
    else round(run["memory"]["peak_reserved_bytes"] / 2**30, 2),
    "tflops_spec": round(spec["tflops"], 1), "mfu_spec_bf16_peak": spec["mfu_precision_peak"],
    "attention_backend": run["framework"]["attention_backend"],
    "compile_s": round(run["timing"]["compile_s"], 1), "aot_compile_s": round(extra["aot_compile_s"], 1),
    "timing_overhead_ms": round(overhead["overhead_ms"], 3), "timing_overhead_pct": round(overhead["overhead_pct"], 2),
    "per_step_method_ms": round(overhead["per_step_method_mean_ms"], 3),
    "single_block_ms": round(overhead["single_block_mean_ms"], 3),
    "loss_first_final": [round(run["loss"]["first"], 4), round(run["loss"]["final_smoothed"], 4)],
    "jax": run["framework"]["version"], "device": run["framework"]["device_name"],
}
json.dump(summary, open(os.path.join(out, "bench_jax.json"), "w"), indent=2)
print("bench_jax:", json.dumps(summary))
EOF
exit $code
