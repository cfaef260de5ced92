"""MaxText 0.2.5's own Grain mmap_npy iterator over the files the engine writes, against our
TokenBatches: are the batches ours, row for row, and how fast does MaxText's pipeline make them?"""
import sys, time, json
from pathlib import Path
import numpy as np

def main():
    workers, n_batches, out = int(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    B, S, STEPS, SEED = 32, 1024, 300, 0
    from parallax.config import RunConfig
    from parallax.data.loader import TokenBatches
    from parallax.data.prepare import PreparedData
    from parallax.engines.maxtext import data, config, launch

    prepared = PreparedData.load("/work/main/.carry/tinystories")
    run = RunConfig(framework="maxtext", model="llama-100m", batch_size=B, seq_len=S, steps=STEPS, warmup=20,
                    seed=SEED, synthetic=False, output_dir=str(out / "run"))
    where = launch.Layout(out / "run")
    keys = data.write(prepared.path("train"), where.data, run, launch.maxtext_index_hash)
    launch.verify_cache_hit(keys["grain_train_files"], STEPS * B, S, SEED)
    keys["grain_worker_count"] = workers
    sections = config.sections(run, "tuned", data=keys, output={"run_name": "g", "base_output_directory": str(out / "o")})
    yml = out / "g.yml"
    yml.write_text(config.render(sections, config.header(run, "g.yml", "tuned")))

    from absl import flags; flags.FLAGS(["check"])
    from maxtext.configs import pyconfig
    from maxtext.utils import maxtext_utils
    from maxtext.input_pipeline.input_pipeline_interface import create_data_iterator
    from jax.sharding import Mesh
    cfg = pyconfig.initialize([None, str(yml), "hardware=cpu", "skip_jax_distributed_system=true", "attention=dot_product"])
    mesh = Mesh(maxtext_utils.create_device_mesh(cfg), cfg.mesh_axes)
    it, _ = create_data_iterator(cfg, mesh)
    times, same, first = [], [], None
    with TokenBatches(prepared, batch_size=B, seq_len=S, seed=SEED, vocab_size=10_000, epochs=20.0, steps=STEPS) as ours:
        for k, batch in zip(range(n_batches), ours):
            t0 = time.perf_counter(); got = next(it); times.append(time.perf_counter() - t0)
            if first is None:
                first = {name: (np.asarray(v).shape, str(np.asarray(v).dtype)) for name, v in got.items()}
                seg = np.asarray(got["inputs_segmentation"]); pos = np.asarray(got["inputs_position"])
                print("segmentation values", np.unique(seg)[:10], "positions row0", pos[0, :5], pos[0, -3:],
                      "positions == arange", bool((pos == np.arange(S)).all()),
                      "targets_segmentation", np.unique(np.asarray(got["targets_segmentation"]))[:10])
            ours_b = np.asarray(batch)
            same.append(bool(np.array_equal(np.asarray(got["inputs"]), ours_b[:, :-1])
                             and np.array_equal(np.asarray(got["targets"]), ours_b[:, 1:])))
    print(json.dumps({"workers": workers, "fields": {k: list(map(str, v)) for k, v in first.items()},
                      "batches_equal": sum(same), "of": len(same), "first_unequal": same.index(False) if False in same else None,
                      "next_s_first": times[0], "next_s_median_after_10": float(np.median(times[10:])) if len(times) > 10 else None}))

if __name__ == "__main__":
    main()
