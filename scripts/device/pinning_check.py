#!/usr/bin/env python3
"""On a GPU machine: is the native loader's ring page-locked, who says so, and does it pay?

Creates a loader over a small token file before torch touches CUDA (as ``parallax train``
does), then reports, for a ring batch and for a pageable copy of it:
  - the loader's info() and the driver's word (loader.page_locked: cuPointerGetAttribute);
  - torch's is_pinned() before and after torch initialises CUDA (at::Context::isPinnedPtr
    answers False for every pointer until then);
  - cupy.cuda.runtime.pointerGetAttributes (type 1 = cudaMemoryTypeHost, 0 = unregistered);
  - whether a non_blocking copy queued behind a long kernel reads the buffer when the stream
    reaches it (DMA from the ring) or at the call (the driver staged it);
  - 32 x 1025 int32 host-to-device copies: host time per call and device GB/s, from the ring
    (non_blocking), a pageable array (non_blocking and blocking) and torch's own pinned copy.
Prints a summary last; writes $OUT/pinning_check.json when OUT is set.

Usage: python3 -m pip install -q --no-build-isolation --no-deps -e . && python3 scripts/device/pinning_check.py
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time

import numpy as np

from parallax import _native
from parallax.data.tokenfile import TokenWriter

B, S = 32, 1024
COPIES = 200
SLEEP_CYCLES = 1_000_000_000  # about 0.5 s of GPU clock: far longer than any host call here


def token_file() -> str:
    path = os.path.join(tempfile.mkdtemp(), "train.bin")
    writer = TokenWriter(path, 10_000, 0)
    writer.write(np.random.default_rng(0).integers(0, 10_000, size=1 << 20, dtype=np.uint16))
    writer.finish()
    return path


def cupy_attributes(array: np.ndarray) -> dict:
    try:
        import cupy
    except ImportError as exc:
        return {"error": f"cupy not importable: {exc}"}
    try:
        a = cupy.cuda.runtime.pointerGetAttributes(array.ctypes.data)
    except Exception as exc:  # a CUDARuntimeError names the driver's answer
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {"type": int(a.type), "device": int(a.device), "hostPointer": int(a.hostPointer),
            "devicePointer": int(a.devicePointer)}


def read_when(torch, array: np.ndarray) -> str:
    """'stream' when a non_blocking copy queued behind a long kernel lands what the array holds
    after the call returned (DMA from the array), 'call' when it lands what it held at the call
    (staged by the driver). The array is overwritten."""
    original = array.copy()
    later = -1 - np.arange(array.size, dtype=array.dtype).reshape(array.shape)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES)
        on_gpu = torch.from_numpy(array).to("cuda", non_blocking=True)
    busy_after_call = not stream.query()
    array[...] = later
    stream.synchronize()
    landed = on_gpu.cpu().numpy()
    when = "stream" if np.array_equal(landed, later) else "call" if np.array_equal(landed, original) else "mixed"
    return f"{when}{'' if busy_after_call else ' (the call waited for the stream)'}"


def time_copies(torch, tensor, non_blocking: bool) -> dict:
    """Host seconds per .to() call and device GB/s over COPIES copies of ``tensor``."""
    for _ in range(10):
        tensor.to("cuda", non_blocking=non_blocking)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = []
    start.record()
    for _ in range(COPIES):
        t0 = time.perf_counter()
        tensor.to("cuda", non_blocking=non_blocking)
        calls.append(time.perf_counter() - t0)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    return {"non_blocking": non_blocking, "call_us_median": statistics.median(calls) * 1e6,
            "gb_per_s": COPIES * tensor.numel() * tensor.element_size() / seconds / 1e9}


def main() -> dict:
    loader = _native.BatchLoader(token_file(), B, S, 0)  # before torch initialises CUDA
    batch = loader.next()
    pageable = np.array(batch)
    result = {"batch_size": B, "seq_len": S, "loader_info": loader.info(),
              "driver_page_locked": {"ring": loader.page_locked(batch), "pageable": loader.page_locked(pageable)}}

    import torch

    ring_tensor = torch.from_numpy(batch)
    result["torch"] = {"version": torch.__version__, "cuda": torch.version.cuda,
                       "initialized_before": torch.cuda.is_initialized(),
                       "is_pinned_before_init": ring_tensor.is_pinned()}
    if not torch.cuda.is_available():
        raise SystemExit("pinning_check: torch sees no CUDA GPU; run this on the GPU machine")
    torch.cuda.init()
    result["torch"].update({"device": torch.cuda.get_device_name(0),
                            "is_pinned_after_init": ring_tensor.is_pinned(),
                            "pageable_is_pinned_after_init": torch.from_numpy(pageable).is_pinned()})
    result["cupy_pointer_attributes"] = {"ring": cupy_attributes(batch), "pageable": cupy_attributes(pageable)}

    torch_pinned = torch.from_numpy(pageable).pin_memory()
    result["copies"] = {
        "ring non_blocking": time_copies(torch, ring_tensor, True),
        "pageable non_blocking": time_copies(torch, torch.from_numpy(pageable), True),
        "pageable blocking": time_copies(torch, torch.from_numpy(pageable), False),
        "torch pin_memory non_blocking": time_copies(torch, torch_pinned, True),
    }
    # Last: these overwrite the arrays.
    result["copy_reads_source_at"] = {"ring": read_when(torch, batch), "pageable": read_when(torch, pageable)}
    del batch, ring_tensor
    loader.close()
    return result


def summary(r: dict) -> str:
    info, t = r["loader_info"], r["torch"]
    lines = [
        f"\npinning check on {t['device']} (torch {t['version']}, CUDA {t['cuda']}), batch {B} x {S + 1} int32",
        f"  loader: {info['pin_status']}; slots {info['slots']}, registered {info['pinned_slots']}, "
        f"driver-verified {info['verified_slots']} -> pinned_verified={info['pinned_verified']}",
        f"  driver (cuPointerGetAttribute) page-locked: ring {r['driver_page_locked']['ring']}, "
        f"pageable {r['driver_page_locked']['pageable']}",
        f"  torch is_pinned: before torch's CUDA init {t['is_pinned_before_init']} "
        f"(initialized={t['initialized_before']}), after {t['is_pinned_after_init']}; "
        f"pageable after {t['pageable_is_pinned_after_init']}",
        f"  cupy pointerGetAttributes type: ring {r['cupy_pointer_attributes']['ring']}, "
        f"pageable {r['cupy_pointer_attributes']['pageable']}",
        f"  a non_blocking copy behind a busy stream reads its source at: ring {r['copy_reads_source_at']['ring']}, "
        f"pageable {r['copy_reads_source_at']['pageable']}",
    ]
    for name, c in r["copies"].items():
        lines.append(f"  {name:32} {c['call_us_median']:8.1f} us/call on the host  {c['gb_per_s']:6.2f} GB/s")
    return "\n".join(lines)


if __name__ == "__main__":
    result = main()
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "pinning_check.json"), "w") as f:
            json.dump(result, f, indent=2)
    print(summary(result))
