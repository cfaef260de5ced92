#!/usr/bin/env bash
# The torch bf16 benchmark of issue 3, for the lent GPU. Builds nothing: it runs the installed
# `parallax` (or, if that is not importable, the source tree through PYTHONPATH=src).
#
#   scripts/device/bench_torch.sh [train] [extra parallax-train options]
#       llama-100m, bf16, batch 32, seq 1024, 200 steps (20 warmup), synthetic; copies run.json
#       and steps.jsonl to $OUT and prints the figures against the issue's targets last.
#   scripts/device/bench_torch.sh profile
#       torch.profiler over 5 compiled steps after 10 warmup steps: the kernel table sorted by
#       GPU time ($OUT/profile_torch.txt) and a gzipped Chrome trace ($OUT/trace_torch.json.gz).
#       ATTENTION=flash|efficient|cudnn forces a backend; COMPILE=0 profiles eager mode.
set -euo pipefail
cd "$(dirname "$0")/../.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if ! "$PYTHON" -c "import parallax.train" 2>/dev/null; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
MODE=${1:-train}
[[ $# -gt 0 ]] && shift

nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit,memory.used --format=csv || true

if [[ $MODE == profile ]]; then
    OUT="$OUT" "$PYTHON" - <<'EOF'
import gzip, os, shutil, time
import torch
from torch.profiler import ProfilerActivity, profile
from parallax.config import RunConfig
from parallax.data.synthetic import SyntheticBatches
from parallax.engines.torch.engine import ATTENTION_NAMES, Trainer, probe_attention, resolve_device
from parallax.precision import torch as torch_precision
from parallax.weights import init_weights

out = os.environ["OUT"]
run = RunConfig(model="llama-100m", batch_size=32, seq_len=1024, steps=200, warmup=20)
device = resolve_device(torch, "cuda")
precision = torch_precision.for_run("bf16", device)
by_name = {v: k for k, v in ATTENTION_NAMES.items()}
attention = by_name.get(os.environ.get("ATTENTION", ""), None) or probe_attention(
    torch, device, precision.compute_dtype, run.model_config, run.seq_len)
trainer = Trainer(run, init_weights(run.model_config, 0), precision, device, attention,
                  compile=os.environ.get("COMPILE", "1") != "0")
batches = iter(SyntheticBatches(0, run.batch_size, run.seq_len, run.model_config.vocab_size))

def steps(first, n):
    for k in range(first, first + n):
        trainer.train_step(trainer.upload(next(batches)), trainer.lr(k))

t0 = time.perf_counter(); steps(0, 10); torch.cuda.synchronize()
print(f"attention {ATTENTION_NAMES[attention]}; 10 warmup steps (compile included) {time.perf_counter() - t0:.1f} s")
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record(); steps(10, 20); end.record(); end.synchronize()
ms = start.elapsed_time(end) / 20
print(f"unprofiled: {ms:.2f} ms/step = {run.tokens_per_step / ms * 1e3:,.0f} tokens/s")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    steps(30, 5)
    torch.cuda.synchronize()
table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=50)
with open(os.path.join(out, "profile_torch.txt"), "w") as f:
    f.write(f"attention {ATTENTION_NAMES[attention]}; {ms:.2f} ms/step unprofiled; 5 profiled steps\n{table}\n")
trace = os.path.join(out, "trace_torch.json")
prof.export_chrome_trace(trace)
with open(trace, "rb") as src, gzip.open(trace + ".gz", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.remove(trace)
print(table)
print(f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB; "
      f"attention {ATTENTION_NAMES[attention]}; {ms:.2f} ms/step; {run.tokens_per_step / ms * 1e3:,.0f} tokens/s")
EOF
    exit 0
fi

RUN_DIR=${RUN_DIR:-$(mktemp -d)/torch-bf16-llama-100m}
set +e
"$PYTHON" -m parallax train --framework torch --precision bf16 --model llama-100m \
    --batch-size 32 --seq-len 1024 --steps 200 --warmup 20 --synthetic --seed 0 \
    --output-dir "$RUN_DIR" "$@"
code=$?
set -e
[[ -f "$RUN_DIR/run.json" ]] && cp "$RUN_DIR/run.json" "$OUT/run.json"
[[ -f "$RUN_DIR/steps.jsonl" ]] && cp "$RUN_DIR/steps.jsonl" "$OUT/steps.jsonl"
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
