"""``python -m parallax.engines.maxtext.child CONFIG.yml [key=value ...]``: MaxText's trainer as
``python -m maxtext.trainers.pre_train.train`` runs it, then one line with the GPU's peak memory.

MaxText 0.2.5 logs memory only before training (``Memstats: After params initialized``) and as
XLA's compile-time estimate; our engines report the allocator's peak over the run
(``memory_stats()["peak_bytes_in_use"]``, ``["peak_pool_bytes"]``). So the engine runs MaxText's
module through this one: the same module, the same arguments, in the same process
(``runpy.run_module(..., run_name="__main__")``, with ``sys.argv`` as MaxText's own command
line would set it), and once it has exited with status 0 (absl's ``app.run`` ends in
``sys.exit``), the device's stats are read while JAX is still up and printed as ``MEMORY_TAG``
+ JSON, which ``metrics.LogFacts`` reads. A run that fails prints nothing more.
"""

from __future__ import annotations

import json
import runpy
import sys

TRAIN_MODULE = "maxtext.trainers.pre_train.train"  # also config.TRAIN_MODULE; this module imports nothing of ours
MEMORY_TAG = "[parallax] device memory after training: "
STATS = ("peak_bytes_in_use", "peak_pool_bytes", "bytes_limit")


def peak_memory() -> dict:
    """The first local device's allocator stats (None each where the backend keeps none, the CPU,
    or where the trainer never imported JAX: no device was used, and none is started here)."""
    if "jax" not in sys.modules:
        return dict.fromkeys(STATS)
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    return {key: stats.get(key) for key in STATS}


def main(argv: list[str]) -> None:
    sys.argv = [TRAIN_MODULE, *argv]  # argv[0] becomes the module's file, as with python -m
    try:
        runpy.run_module(TRAIN_MODULE, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code not in (None, 0):
            raise
    print(MEMORY_TAG + json.dumps(peak_memory()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
