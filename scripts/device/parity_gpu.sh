#!/usr/bin/env bash
# Cross-framework parity on the lent GPU (issue 4): `parallax parity --device gpu` for
#   tiny        float32  B2 S32   3 steps  (gated: the CPU thresholds must hold on the GPU too)
#   tiny        bfloat16 B2 S32   3 steps  (report-only)
#   llama-100m  bfloat16 B4 S1024 3 steps  (report-only: the benchmark's model and precision)
#   llama-100m  float32  B2 S256  3 steps  (gated)
# Writes $OUT/parity_<model>_<dtype>.json for each, $OUT/parity_gpu.json (all of them) and
# $OUT/parity_gpu.md (the tables for docs/results/), and prints a summary last. Exit code 1
# when a gated case fails or a case cannot run.
# Builds nothing: it runs the installed `parallax` (or the source tree through PYTHONPATH=src).
# Usage: scripts/device/parity_gpu.sh
source "$(dirname "$0")/common.sh" parallax.analysis.parity
export XLA_PYTHON_CLIENT_PREALLOCATE=false  # torch and JAX share the GPU in one process
DEVICE=${DEVICE:-gpu}

nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv || true

OUT="$OUT" DEVICE="$DEVICE" PYTHONUNBUFFERED=1 "$PYTHON" - <<'EOF'
import json, os, time
from parallax.cli.parity import print_report
from parallax.analysis.parity import run_parity

out, device = os.environ["OUT"], os.environ["DEVICE"]
cases = [("tiny", "float32", 2, 32), ("tiny", "bfloat16", 2, 32),
         ("llama-100m", "bfloat16", 4, 1024), ("llama-100m", "float32", 2, 256)]
results = []
for model, dtype, batch, seq in cases:
    t0 = time.perf_counter()
    try:
        report = run_parity(model=model, batch_size=batch, seq_len=seq, steps=3, seed=0, dtype=dtype, device=device)
    except Exception as exc:  # record and go on: one failing case must not hide the others
        results.append({"settings": {"model": model, "dtype": dtype, "batch_size": batch, "seq_len": seq},
                        "error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"})
        print("parity failed to run:", results[-1]["error"])
        continue
    print_report(report)
    record = {**report.to_dict(), "seconds": round(time.perf_counter() - t0, 1)}
    results.append(record)
    with open(os.path.join(out, f"parity_{model}_{dtype}.json"), "w") as f:
        json.dump(record, f, indent=2)

with open(os.path.join(out, "parity_gpu.json"), "w") as f:
    json.dump(results, f, indent=2)

lines = []
for r in results:
    s = r["settings"]
    head = f"### {s['model']}, {s['dtype']}, B{s['batch_size']} S{s['seq_len']}, {s.get('steps', 3)} steps, {device}"
    if "error" in r:
        lines += [head, "", f"did not run: {r['error']}", ""]
        continue
    mode = "gated" if r["gate"] else "report-only"
    lines += [head, "", f"attention: jax {r['backends']['jax']}, torch {r['backends']['torch']}; {mode}; "
              f"{'PASS' if r['passed'] else 'FAIL'}", "",
              "| quantity | max abs err | max rel err | tolerance | within | worst tensor |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {x['quantity']} | {x['max_abs']:.2e} | {x['max_rel']:.2e} | {x['tolerance']:.2g} | "
              f"{'yes' if x['within'] else 'no'} | {x['worst']} |" for x in r["rows"]]
    lines.append("")
with open(os.path.join(out, "parity_gpu.md"), "w") as f:
    f.write("\n".join(lines))

print("\nparity_gpu summary (max rel err per quantity; * = over tolerance)")
for r in results:
    s = r["settings"]
    name = f"{s['model']} {s['dtype']} B{s['batch_size']} S{s['seq_len']}"
    if "error" in r:
        print(f"  {name:32} ERROR {r['error']}")
        continue
    cells = " ".join(f"{x['quantity'].split(',')[0]}={x['max_rel']:.1e}{'' if x['within'] else '*'}" for x in r["rows"])
    verdict = ("PASS" if r["passed"] else "FAIL") if r["gate"] else "report"
    print(f"  {name:32} {verdict:6} {cells}")
raise SystemExit(1 if any("error" in r or not r["passed"] for r in results) else 0)
EOF
