"""The JAX engine's TransformerEngine recipes on a real GPU with TE's JAX extension (fp8: compute
capability 8.9+; run on the device, skipped elsewhere and where ``transformer_engine_jax`` is not
installed: ``../shared/tools/gpu-carry`` bundle ``te-jax``, ~190 s to build on a fresh machine).
Installed means what the recipe registry reads, the distribution's metadata: the extension module
itself is not importable by name (TE loads it from inside its package), and a ``find_spec`` test
skipped these on the H200 on 2026-12-01 with the extension built.

- te-bf16 (TE modules, no fp8) against our Flax bf16 model from the same weights: logits, loss
  and gradients (converted back to canonical names) agree to bf16 rounding;
- te-fp8-delayed trains tiny through the engine on real tokens within the loss band of JAX bf16
  (tests/fixtures/loss_band.py): native, no numerics-guard problem (finite, nonzero gradients
  of every TE kernel); its layers against the formats' bounds: test_layer_error_bounds_gpu.py;
- the step replaces the fp8_metas collection (amax histories, scales) by its 'gradient': it
  changes from step to step as delayed scaling says; the compiled step has E4M3 and E5M2
  tensors; the params after a step export to the canonical layout.
Each case runs in a fresh interpreter: TE must load pip's cuDNN before JAX starts (the
engine's ``hooks.prepare``), and TE's autocast is process-global state.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.test_jax_fp8_gpu import BATCH, TINY, in_fresh_process  # noqa: F401  (BATCH, TINY: used by the children)
from parallax.spec.config import OptimConfig, RunConfig
from parallax.plan.envinfo import package_version

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(package_version("transformer_engine_jax") is None,
                                 reason="TransformerEngine's JAX extension is not installed (gpu-carry bundle te-jax)")]


def gpu_run(recipe: str, steps: int = 20) -> RunConfig:
    return RunConfig(framework="jax", recipe=recipe, precision=None, model="tiny", batch_size=4, seq_len=128,
                     steps=steps, warmup=2, device="gpu", optim=OptimConfig(lr=3e-3, lr_warmup_steps=0))


def test_te_bf16_matches_our_flax_bf16_from_the_same_weights():
    result = in_fresh_process("""
        import jax, jax.numpy as jnp, numpy as np
        from gpu.test_jax_fp8_gpu import BATCH, TINY
        from gpu.test_jax_te_gpu import gpu_run
        from parallax.engines import get_engine
        from parallax.plan.resolve import planned
        from parallax.engines.jax import convert, runtime
        from parallax.engines.jax.model import loss_fn
        from parallax.engines.weights import init_weights
        plan = get_engine("jax").check(planned(gpu_run("te-bf16")))
        hooks, device = plan.handles["precision"].hooks, plan.handles["device"]
        weights = init_weights(TINY, 0)
        batch = jax.device_put(jnp.asarray(BATCH), device)
        out = {}
        with hooks.context():
            for kind, build, to_params, export in (
                    ("flax", None, convert.to_flax, lambda g: convert.from_flax(g)),
                    ("te", hooks.model, hooks.to_params, lambda g: hooks.from_params(g, TINY))):
                model, attention, _ = runtime.build_model(TINY, "bfloat16", device, 4, 128, module=build)
                params = jax.device_put(to_params(weights, TINY), device)
                logits = jax.jit(lambda p, t: model.apply({"params": p}, t))(params, batch[:, :-1])
                loss, grads = jax.jit(jax.value_and_grad(lambda p, b: loss_fn(model, p, b)))(params, batch)
                out[kind] = (np.asarray(logits), float(loss), export(grads), attention)
        (lf, loss_f, gf, att_f), (lt, loss_t, gt, att_t) = out["flax"], out["te"]
        rel = lambda a, b: float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
        result = dict(logits_rel=rel(lt, lf), loss_flax=loss_f, loss_te=loss_t, attention=[att_f, att_t],
                      grad_rel={k: rel(gt[k], gf[k]) for k in gf}, grad_names=sorted(gt) == sorted(gf))
    """)
    print(result)
    assert result["attention"][0] == result["attention"][1] == "cudnn"
    assert result["grad_names"]
    assert result["logits_rel"] < 0.03, result["logits_rel"]
    assert abs(result["loss_te"] - result["loss_flax"]) < 0.01, (result["loss_te"], result["loss_flax"])
    worst = max(result["grad_rel"].items(), key=lambda kv: kv[1])
    assert worst[1] < 0.1, worst  # a swapped gate/up or q/k/v block gives errors of order 1


def test_te_fp8_delayed_trains_natively_within_the_band_of_bf16():
    """tiny from the same weights on the same 30 distinct real-token batches as JAX bf16
    (tests/fixtures/gpu_trajectories.py): the loss within loss_band.LOSS_BAND of bf16's at every
    step, falling by FALL; native, no numerics-guard problem after the first step (TE's first
    step quantizes with scale 1), TE's recipe as recorded."""
    from fixtures import loss_band
    from fixtures.gpu_trajectories import FALL, jax_trajectory

    result, bf16 = jax_trajectory("te-fp8-delayed"), jax_trajectory(None)
    losses = result["losses"]
    print("te-fp8-delayed largest |loss - bf16| %.4f at step %d" % loss_band.largest_gap(losses, bf16["losses"]))
    assert result["native"] is True and result["recipe"] == "te-fp8-delayed"
    assert loss_band.band_problems(losses, bf16["losses"], FALL) == []
    assert result["problem"] is None and all(not b for b in result["bad"][1:]), result["bad"]
    assert len(result["quantized"]) == 4 * TINY.n_layers and result["collections"] == ["fp8_metas"]
    d = result["details"]
    assert (d["te_recipe"], d["fp8_format"], d["amax_history_len"], d["amax_compute_algo"]) == \
        ("DelayedScaling", "HYBRID", 1024, "max")
    assert d["te_version"] and result["attention"] == bf16["attention"]


@pytest.mark.parametrize("recipe", ["te-fp8-delayed", "te-bf16"])
def test_fp8_metas_update_each_step_and_export_is_canonical(recipe):
    result = in_fresh_process(f"""
        import jax, jax.numpy as jnp, numpy as np
        from flax.traverse_util import flatten_dict
        from gpu.test_jax_fp8_gpu import BATCH, TINY
        from gpu.test_jax_te_gpu import gpu_run
        from parallax.spec.config import OptimConfig
        from parallax.engines import get_engine
        from parallax.plan.resolve import planned
        from parallax.engines.jax import runtime
        from parallax.engines.weights import check_canonical, init_weights
        plan = get_engine("jax").check(planned(gpu_run({recipe!r})))
        hooks, device = plan.handles["precision"].hooks, plan.handles["device"]
        weights = init_weights(TINY, 0)
        with hooks.context():
            model, _, _ = runtime.build_model(TINY, "bfloat16", device, 4, 128, module=hooks.model)
            declared = sorted(jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((4, 128), jnp.int32)))
            params = jax.device_put(hooks.to_params(weights, TINY), device)
            extra = runtime.init_extra(model, hooks.extra_collections(), (4, 128), device)
            tx = runtime.make_optimizer(OptimConfig(lr=3e-3, lr_warmup_steps=0), 20)
            watched = [path for path, _ in hooks.quantized_kernels(TINY)]
            step = runtime.jit_train_step(model, tx, watched)
            batch = jax.device_put(jnp.asarray(BATCH), device)
            opt = jax.device_put(tx.init(params), device)
            hlo = step.lower(params, extra, opt, batch).compile().as_text()
            metas = [{{"/".join(k): np.asarray(v) for k, v in flatten_dict(extra).items()}}]
            norms = []
            for _ in range(2):
                params, extra, opt, metrics = step(params, extra, opt, batch)
                metas.append({{"/".join(k): np.asarray(v) for k, v in flatten_dict(extra).items()}})
                norms.append([float(m) for m in np.asarray(metrics)[2:]])
        exported = hooks.from_params(params, TINY)
        check_canonical(TINY, exported)
        hist = lambda m: {{k: int(np.count_nonzero(v)) for k, v in m.items() if k.endswith("amax_history")}}
        scales = lambda m: {{k: float(v[0]) for k, v in m.items() if k.endswith("_scale")}}
        result = dict(declared=declared, keys=sorted(metas[0]), hist=[hist(m) for m in metas],
                      scales=[scales(m) for m in metas], norms=norms,
                      e4m3=hlo.count("f8e4m3fn"), e5m2=hlo.count("f8e5m2"),
                      exported=sorted(exported) == sorted(weights),
                      changed=[k for k in weights if not np.array_equal(exported[k], weights[k])])
    """)
    print({k: v for k, v in result.items() if k not in ("scales", "hist", "keys")})
    assert result["exported"] and sorted(result["changed"]) == sorted(TINY.param_shapes())  # every weight moved
    if recipe == "te-bf16":
        assert result["declared"] == ["params"] and result["keys"] == [] and result["norms"] == [[], []]
        assert result["e4m3"] == 0 and result["e5m2"] == 0
        return
    assert result["declared"] == ["fp8_metas", "params"]
    assert result["e4m3"] > 0 and result["e5m2"] > 0, result  # fp8 survived compilation
    assert all(np.isfinite(n) and n > 0 for step in result["norms"] for n in step), result["norms"]
    assert len(result["norms"][0]) == 4 * TINY.n_layers
    init, after1, after2 = result["hist"]
    assert set(init.values()) == {0} and len(init) == 3 * 4 * TINY.n_layers  # x, kernel, grad of 4 GEMMs a layer
    assert set(after1.values()) == {1}, after1  # one amax recorded per step, not summed
    assert set(after2.values()) == {2}, after2
    s0, s1, s2 = result["scales"]
    assert set(s0.values()) == {1.0}
    assert all(np.isfinite(v) and v > 0 for v in list(s1.values()) + list(s2.values()))
    assert any(v != 1.0 for v in s2.values()) and s2 != s0
    # the names TE 2.20 gives them: {x,kernel,grad}{postfix}_{scale,amax_history}; LayerNormMLP's
    # two GEMMs are postfix _0 and _1. The flattened keys start with the collection
    # (fp8_metas/layers_0/qkv/...: seen on the H200, 2026-12-01), so layer 0's are named here by
    # their module under the block and their leaf, whatever TE nests between the two
    layer0 = {path.split("/")[0] + "/" + path.split("/")[-1]
              for k in result["keys"] for path in [("/" + k).partition("/layers_0/")[2]] if path}
    expected = {f"{m}/{q}{p}_{leaf}" for m, ps in (("qkv", [""]), ("wo", [""]), ("mlp", ["_0", "_1"]))
                for p in ps for q in ("x", "kernel", "grad") for leaf in ("scale", "amax_history")}
    assert layer0 == expected, (sorted(layer0 ^ expected), [k for k in result["keys"] if "layers_0/" in k])
