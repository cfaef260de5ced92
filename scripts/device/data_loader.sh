#!/usr/bin/env bash
# On a GPU machine: build Parallax, run the data-loader GPU tests, then measure the native
# loader with pinned buffers: tokens/s handed to Python and host-to-device copy rates (pinned
# vs pageable ring) at llama-100m's batch 32 x seq 1024. Writes $OUT/data_loader.json when
# OUT is set; prints a summary last.
# Usage: scripts/device/data_loader.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

python3 -m pip install -q --no-build-isolation --no-deps -e . >/dev/null
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_data_loader_gpu.py

python3 - <<'PY'
import json
import os
import tempfile
import time

import numpy as np
import torch

from parallax import _native
from parallax.data.tokenfile import TokenWriter

B, S, N = 32, 1024, 400
TRAINING_TOKENS_PER_S = 700_000  # llama-100m bf16 on one H200 (the lead's measurement)

path = os.path.join(tempfile.mkdtemp(), "train.bin")
writer = TokenWriter(path, 10_000, 0)
writer.write(np.random.default_rng(0).integers(0, 10_000, size=64 << 20, dtype=np.uint16))
writer.finish()


def measure(pin: bool, copy: bool) -> dict:
    loader = _native.BatchLoader(path, B, S, 0, pin=pin)
    it = iter(loader)
    for _ in range(20):
        next(it)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(N):
        batch = next(it)
        if copy:
            torch.from_numpy(batch).to("cuda", non_blocking=True)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    info = loader.info()
    loader.close()
    return {"pin": pin, "copy": copy, "tokens_per_s": N * B * S / seconds,
            "gb_per_s": N * B * (S + 1) * 4 / seconds / 1e9, "pin_status": info["pin_status"],
            "pinned_slots": info["pinned_slots"], "pinned_verified": info["pinned_verified"], "slots": info["slots"]}


rows = [measure(True, False), measure(True, True), measure(False, True)]
result = {"batch_size": B, "seq_len": S, "batches": N, "device": torch.cuda.get_device_name(0), "runs": rows}
if os.environ.get("OUT"):
    with open(os.path.join(os.environ["OUT"], "data_loader.json"), "w") as f:
        json.dump(result, f, indent=2)
print(f"\nnative loader on {result['device']}, batch {B} x seq {S}, {N} batches")
for r in rows:
    what = ("pinned" if r["pin"] else "pageable") + (" + H2D copy" if r["copy"] else ", loader only")
    print(f"  {what:24} {r['tokens_per_s'] / 1e6:8.1f} M tok/s  {r['gb_per_s']:6.2f} GB/s  "
          f"({r['tokens_per_s'] / TRAINING_TOKENS_PER_S:,.0f}x training)  {r['pin_status']}")
PY
