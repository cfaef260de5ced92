"""TransformerEngine eager against TE with its blocks in CUDA graphs, as the benchmark runs them.

TE's modules run eagerly: every step launches each block's kernels from Python, and
DelayedScaling adds its amax/scale bookkeeping on the host. Where the host is slower than the
GPU, the step waits on launches. ``--cuda-graphs`` (on by default for the TE recipes on a GPU)
has the engine capture each block's forward and backward once with ``te.make_graphed_callables``
(``TransformerEngineHooks.graph``), so a step replays 12 graphs plus the embedding, head and
optimizer. For te-bf16, te-fp8-delayed and te-fp8-current this script builds the engine's own
step through ``TorchEngine.build_step`` with ``cuda_graphs`` off and on (llama-100m, batch
32 x 1024, synthetic batches), measures ms/step in one process, and writes one JSON line per
case to OUT/te_graphs.jsonl. A case that fails records its error and the next one runs.

    python3 scripts/device/te_graphs.py            # on the H200, TE carried (.carry/gpu)
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback


def build(recipe_name: str, graphs: bool):
    """The step that ``parallax train --recipe NAME --cuda-graphs on|off`` runs
    (``TorchEngine.build_step``: the engine's check decides device, recipe, attention and the
    graphs; the Trainer captures them)."""
    from parallax.engines.torch.engine import TorchEngine
    from parallax.plan.resolve import resolve
    from parallax.spec import registry
    from parallax.spec.config import RunConfig

    recipe = registry.get("torch", recipe_name)
    run = RunConfig(model="llama-100m", batch_size=32, seq_len=1024, steps=200, warmup=20,
                    precision=recipe.format, recipe=recipe.name, device="cuda",
                    cuda_graphs="on" if graphs else "off")
    return TorchEngine().build_step(resolve(run)), run


def measure(step, run, warmup: int = 10, steps: int = 30) -> dict:
    import torch

    t0 = time.perf_counter()
    step.run(warmup)
    warm_s = time.perf_counter() - t0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        _, metrics = step.fn(*step.state, next(step.batches))
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end) / steps
    values = metrics.tolist()
    return {"ms_per_step": round(ms, 3), "tokens_per_s": round(run.tokens_per_step / ms * 1e3),
            "warmup_s": round(warm_s, 1), "last_loss": round(values[0], 4),
            "quantized_grad_norms_finite_nonzero": all(v == v and v != 0 for v in values[2:]),
            "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}


def case(recipe_name: str, graphed: bool) -> dict:
    import torch

    row = {"recipe": recipe_name, "blocks": "cuda-graphs (te.make_graphed_callables)" if graphed else "eager"}
    try:
        torch.cuda.reset_peak_memory_stats()
        step, run = build(recipe_name, graphed)
        captured = step.state[0].graph_capture_s
        row["graph_capture_s"] = None if captured is None else round(captured, 1)
        row.update(measure(step, run))
    except Exception as exc:  # one case's failure is a result; the next case runs
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        row["traceback"] = traceback.format_exc().splitlines()[-8:]
    finally:
        step = None
        gc.collect()
        torch.cuda.empty_cache()
    return row


def main() -> int:
    out = os.environ.get("OUT", ".")
    cases = [(r, g) for r in os.environ.get("RECIPES", "te-bf16,te-fp8-delayed,te-fp8-current").split(",")
             for g in (False, True)]
    with open(os.path.join(out, "te_graphs.jsonl"), "w") as f:
        for recipe_name, graphed in cases:
            row = case(recipe_name, graphed)
            f.write(json.dumps(row) + "\n")
            f.flush()
            print(json.dumps({k: v for k, v in row.items() if k != "traceback"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
