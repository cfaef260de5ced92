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
import os
import runpy
import sys

TRAIN_MODULE = "maxtext.trainers.pre_train.train"  # also config.TRAIN_MODULE; this module imports nothing of ours
MEMORY_TAG = "[parallax] device memory after training: "
STATS = ("peak_bytes_in_use", "peak_pool_bytes", "bytes_limit")
# The folder of MaxText's own TensorBoard events (``--log tensorboard``), set by the engine.
TENSORBOARD_ENV = "PARALLAX_MAXTEXT_TENSORBOARD"


def peak_memory() -> dict:
    """The first local device's allocator stats (None each where the backend keeps none, the CPU,
    or where the trainer never imported JAX: no device was used, and none is started here)."""
    if "jax" not in sys.modules:
        return dict.fromkeys(STATS)
    import jax

    stats = jax.local_devices()[0].memory_stats() or {}
    return {key: stats.get(key) for key in STATS}


def point_tensorboard(folder: str) -> None:
    """MaxText's summary writer into ``folder``. MaxText 0.2.5 under ``DECOUPLE_GCLOUD=TRUE``
    (which the engine sets: no Google Cloud packages) ignores its ``tensorboard_dir`` and writes
    into ``local_tensorboard/`` of its own installation (``max_utils.initialize_summary_writer``);
    its metric logger calls that function through the module, so replacing it there points
    MaxText's scalars at the run's folder. Process 0 writes, as in MaxText."""
    from maxtext.utils import max_utils

    own = max_utils.initialize_summary_writer

    def into_the_run(tensorboard_dir, run_name, enable_tensorboard=True):
        import jax
        from tensorboardX import SummaryWriter

        if not enable_tensorboard or jax.process_index() != 0:
            return own(tensorboard_dir, run_name, enable_tensorboard)
        return SummaryWriter(folder)

    max_utils.initialize_summary_writer = into_the_run


def main(argv: list[str]) -> None:
    if os.environ.get(TENSORBOARD_ENV):
        point_tensorboard(os.environ[TENSORBOARD_ENV])
    sys.argv = [TRAIN_MODULE, *argv]  # argv[0] becomes the module's file, as with python -m
    try:
        runpy.run_module(TRAIN_MODULE, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code not in (None, 0):
            raise
    print(MEMORY_TAG + json.dumps(peak_memory()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
