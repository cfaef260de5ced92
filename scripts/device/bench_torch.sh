#!/usr/bin/env bash
# The torch bf16 benchmark of issue 3, for the lent GPU. Builds nothing: it runs the installed
# `parallax` (or, if that is not importable, the source tree through PYTHONPATH=src).
#
#   scripts/device/bench_torch.sh [train] [extra parallax-train options]
#       llama-100m, bf16, batch 32, seq 1024, 200 steps (20 warmup), synthetic; copies run.json
#       and steps.jsonl to $OUT and prints the figures against the issue's targets last.
#   scripts/device/bench_torch.sh profile
#       torch.profiler over 5 steps after 30 unprofiled ones: the kernel table sorted by GPU
#       time ($OUT/profile_torch.txt) and a gzipped Chrome trace ($OUT/trace_torch.json.gz).
#       ATTENTION=cudnn|flash|efficient forces a backend; COMPILE_MODE=eager profiles eager mode;
#       RECIPE=<torch recipe> profiles that recipe (default bf16), e.g. RECIPE=te-fp8-delayed.
#   scripts/device/bench_torch.sh variants
#       ms/step of the training step under several settings in one process (20 steps each
#       after 10 warmup), to choose defaults: VARIANTS="cudnn:default flash:default cudnn:eager"
#       (attention:compile-mode; modes are torch.compile's, e.g. max-autotune-no-cudagraphs).
source "$(dirname "$0")/common.sh" parallax.run.train
MODE=${1:-train}
[[ $# -gt 0 ]] && shift

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.used --format=csv || true

if [[ $MODE == profile || $MODE == variants ]]; then
    OUT="$OUT" MODE="$MODE" "$PYTHON" - <<'EOF'
import gc, gzip, json, os, shutil, time
import torch
from parallax.engines.torch.engine import TorchEngine
from parallax.plan.resolve import resolve
from parallax.spec import registry
from parallax.spec.config import RunConfig

out, mode = os.environ["OUT"], os.environ["MODE"]
recipe = registry.get("torch", os.environ.get("RECIPE", "bf16"))  # any torch recipe, e.g. RECIPE=te-fp8-delayed
run = RunConfig(model="llama-100m", batch_size=32, seq_len=1024, steps=200, warmup=20, device="cuda",
                precision=recipe.format, recipe=recipe.name, cuda_graphs="off")
plan = resolve(run)

def build(attention_name, compile_mode):
    """The engine's step (TorchEngine.build_step); attention and compile mode as the variant says
    (no attention name: the engine's probe chooses)."""
    return TorchEngine().build_step(plan, attention=attention_name or None, compile_mode=compile_mode)

def measure(step, warmup=10, n=20):
    t0 = time.perf_counter(); step.run(warmup)
    warm_s = time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        step.fn(*step.state, next(step.batches))
    end.record(); end.synchronize()
    ms = start.elapsed_time(end) / n
    return {"recipe": recipe.name, "attention": step.details["attention"],
            "compile_mode": step.details["compile_mode"],
            "warmup_s": round(warm_s, 1), "ms_per_step": round(ms, 3),
            "tokens_per_s": round(run.tokens_per_step / ms * 1e3),
            "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}

if mode == "variants":
    rows = []
    for variant in os.environ.get("VARIANTS", "cudnn:default flash:default cudnn:eager").split():
        attention_name, compile_mode = variant.split(":")
        torch.cuda.reset_peak_memory_stats()
        torch._dynamo.reset()
        step = build(attention_name, compile_mode)
        row = measure(step)
        rows.append(row); print(json.dumps(row), flush=True)
        del step; gc.collect(); torch.cuda.empty_cache()
    json.dump(rows, open(os.path.join(out, "variants_torch.json"), "w"), indent=2)
    best = max(rows, key=lambda r: r["tokens_per_s"])
    print("bench_torch variants: best", json.dumps(best))
else:
    from torch.profiler import ProfilerActivity, profile
    step = build(os.environ.get("ATTENTION", ""), os.environ.get("COMPILE_MODE", "default"))
    row = measure(step, warmup=10, n=20)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step.run(5)
    table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=50)
    with open(os.path.join(out, "profile_torch.txt"), "w") as f:
        f.write(f"{json.dumps(row)}\n5 profiled steps\n{table}\n")
    trace = os.path.join(out, "trace_torch.json")
    prof.export_chrome_trace(trace)
    with open(trace, "rb") as src, gzip.open(trace + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(trace)
    print(table)
    print("bench_torch profile:", json.dumps(row))
EOF
    exit 0
fi

RUN_DIR=${RUN_DIR:-$(mktemp -d)/torch-bf16-llama-100m}
bench_train torch "$@"
"$PYTHON" - "$OUT" "$code" <<'EOF'
import json, os, sys
out, code = sys.argv[1], int(sys.argv[2])
path = os.path.join(out, "run.json")
if not os.path.exists(path):
    print(f"bench_torch: no run.json (exit code {code})"); sys.exit(code or 1)
run = json.load(open(path))
if run["status"] != "ok":
    print(f"bench_torch: status {run['status']}: {run.get('error')}"); sys.exit(code or 1)
tps = run["throughput"]["tokens_per_s"]
peak = (run["memory"]["peak_allocated_bytes"] or float("nan")) / 2**30  # nan: not a CUDA run
spec = run["flops"]["accountings"]["spec"]
summary = {
    "tokens_per_s_median": round(tps), "target_tokens_per_s": 700_000, "tokens_ok": tps >= 700_000,
    "peak_allocated_gib": round(peak, 2), "target_gib": 14, "memory_ok": peak <= 14,
    "step_ms_median": round(run["timing"]["step_ms"]["median"], 3),
    "tflops_spec": round(spec["tflops"], 1), "mfu_spec_bf16_peak": spec["mfu_precision_peak"],
    "attention_backend": run["framework"]["attention_backend"], "compile_s": round(run["timing"]["compile_s"], 1),
    "torch": run["framework"]["version"], "device": run["framework"]["device_name"],
}
json.dump(summary, open(os.path.join(out, "bench_torch.json"), "w"), indent=2)
print("bench_torch:", json.dumps(summary))
EOF
exit $code
