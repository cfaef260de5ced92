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

Each step's data wait: MaxText's train loop takes every step's batch from
``DataLoader.load_next_batch`` (``maxtext.common.data_loader``: ``next()`` on its Grain or
synthetic iterator, then ``jax.device_put``), and neither its metrics file nor its log says
how long that took. When MaxText imports that module, this one wraps the method (an import
hook: nothing is imported early) so that every call prints ``DATA_WAIT_TAG`` + the call's host
milliseconds, one line per training step in step order, which ``metrics.LogFacts`` reads.

Real tokens (feed.py): where the engine sets ``feed.FEED_ENV``, the same hook makes the
DataLoader take Parallax's batches (the loader opened before MaxText starts), and after training
one line (``feed.FEED_TAG``) counts them.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import runpy
import sys
import time

TRAIN_MODULE = "maxtext.trainers.pre_train.train"  # also config.TRAIN_MODULE; this module imports nothing of ours
MEMORY_TAG = "[parallax] device memory after training: "
DATA_WAIT_TAG = "[parallax] data wait ms: "
LOADER_MODULE = "maxtext.common.data_loader"  # MaxText 0.2.5's DataLoader.load_next_batch
STATS = ("peak_bytes_in_use", "peak_pool_bytes", "bytes_limit")
# The folder of MaxText's own TensorBoard events (``--log tensorboard``), set by the engine.
TENSORBOARD_ENV = "PARALLAX_MAXTEXT_TENSORBOARD"


def timed_loader(loader_class) -> None:
    """Wrap ``loader_class.load_next_batch`` to print each call's host milliseconds."""
    inner = loader_class.load_next_batch

    def load_next_batch(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return inner(self, *args, **kwargs)
        finally:
            print(f"{DATA_WAIT_TAG}{(time.perf_counter() - started) * 1e3:.4f}", flush=True)

    loader_class.load_next_batch = load_next_batch


class LoaderTimer(importlib.abc.MetaPathFinder):
    """Finds ``LOADER_MODULE`` as the other finders would and wraps its ``DataLoader`` once the
    module has run; a MaxText without that class is left as it is (no data wait recorded). With
    a ``feed`` (feed.py), the DataLoader takes its batches from it."""

    def __init__(self, feed=None):
        self.feed = feed

    def find_spec(self, fullname, path, target=None):
        if fullname != LOADER_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            if self.feed is not None and hasattr(module, "DataLoader"):
                from parallax.engines.maxtext import feed

                feed.install(module.DataLoader, self.feed)
            if hasattr(getattr(module, "DataLoader", None), "load_next_batch"):
                timed_loader(module.DataLoader)

        spec.loader.exec_module = exec_module
        return spec


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
    timer = LoaderTimer(our_feed())
    sys.meta_path.insert(0, timer)
    try:
        runpy.run_module(TRAIN_MODULE, run_name="__main__", alter_sys=True)
    except SystemExit as done:
        if done.code not in (None, 0):
            raise
    finally:
        sys.meta_path.remove(timer)
    if timer.feed is not None:
        from parallax.engines.maxtext.feed import FEED_TAG

        print(FEED_TAG + json.dumps(timer.feed.record()), flush=True)
    print(MEMORY_TAG + json.dumps(peak_memory()), flush=True)


def our_feed():
    """Parallax's batches for MaxText (feed.py) when the engine asked for them, else None."""
    from parallax.engines.maxtext.feed import from_environment

    return from_environment()


if __name__ == "__main__":
    main(sys.argv[1:])
