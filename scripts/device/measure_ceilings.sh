#!/usr/bin/env bash
# On a GPU machine: build Parallax, run the native GPU tests, then measure GPU 0's GEMM ceilings
# for llama-100m at batch 32 x seq 1024 (bf16, fp8, nvfp4; square 8192). Writes the full record
# to $OUT/ceilings.json when OUT is set (and to the per-GPU cache); prints a summary last.
# Usage: scripts/device/measure_ceilings.sh [device_index]
set -euo pipefail
cd "$(dirname "$0")/../.."
DEVICE="${1:-0}"

python3 -m pip install -q --no-build-isolation --no-deps -e . >/dev/null
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_gpu_native.py

DEVICE="$DEVICE" python3 - <<'PY'
import json
import os

from parallax.native import gpu
from parallax.spec.config import get_preset

device = int(os.environ["DEVICE"])
result = gpu.measure_ceilings(device, get_preset("llama-100m"), 32, 1024)
if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "ceilings.json"), "w") as f:
        json.dump(result, f, indent=2)

def fmt(x):
    return f"{'-':>8}" if x is None else f"{x:8.1f}"

print(f"\n{'shape':18} {'m':>6} {'n':>6} {'k':>6} " + " ".join(f"{p:>8}" for p in result["summary"]))
by_key = {(r["precision"], r["name"]): r for r in result["model_shapes"]}
for row in (r for r in result["model_shapes"] if r["precision"] == next(iter(result["summary"]))):
    cells = " ".join(fmt(by_key[(p, row["name"])]["tflops"]) for p in result["summary"])
    print(f"{row['name']:18} {row['m']:6} {row['n']:6} {row['k']:6} {cells}")
dev = result["device"]
print(f"\n{dev['name']} (cc {dev['compute_capability']}, {dev['sm_count']} SMs, "
      f"SM clock {dev['clock_sm_mhz']}/{dev['clock_sm_max_mhz']} MHz, {dev['power_limit_w']} W), "
      f"{result['measured_at']}")
for prec, s in result["summary"].items():
    sq = result["square"][prec]
    error = sq["error"]
    best = fmt(s["square_tflops_best"]).strip()
    chosen = "" if error else f" (best call {best}; algo {sq['algo_index']} of {sq['algo_count']})"
    print(f"{prec:6} square 8192^3: {fmt(s['square_tflops'])} TFLOP/s median{chosen}   model shapes: "
          f"{fmt(s['model_shapes_tflops'])} TFLOP/s" + (f"   ({error})" if error else ""))
PY
