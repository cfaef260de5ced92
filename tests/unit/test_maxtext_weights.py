"""parallax.engines.weights -> MaxText's parameter tree (engines/maxtext/weights.py), NumPy only.

The trees MaxText 0.2.5 builds for our configs were read from the real MaxText (its abstract
model, ``python -m parallax.engines.maxtext.initial_weights --tree CONFIG.yml``) into
``tests/fixtures/maxtext_0_2_5_param_tree_<model>_<scan|unscanned>.txt``. The function test runs
our model and MaxText's llama2 block in NumPy, each written from its own definition: ours from
REFERENCE.md §5 (attention scaled by 1/sqrt(head_dim), ``parallax.engines.rope`` tables); MaxText's from
its 0.2.5 code (DenseGeneral contractions over [emb, heads, head_dim] kernels, no attention scale,
``RotaryEmbedding``: timescale = θ^(2i/head_dim), rotate_half, both halves), on MaxText's tree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from parallax.spec.config import PRESETS
from parallax.engines.maxtext import weights as mw
from parallax.errors import ParallaxError
from parallax.engines.rope import rope_tables
from parallax.engines.weights import init_weights

FIXTURES = Path(__file__).parent.parent / "fixtures"
SCAN_AXIS = 1  # MaxText 0.2.5 base.yml: param_scan_axis


def fixture(model: str, scanned: bool) -> dict[str, tuple[int, ...]]:
    name = f"maxtext_0_2_5_param_tree_{model}_{'scan' if scanned else 'unscanned'}.txt"
    return mw.read_tree_fixture((FIXTURES / name).read_text())


def zeros(model) -> dict[str, np.ndarray]:
    """Canonical weights of the right shapes, without drawing 100M numbers."""
    return {name: np.zeros(shape, np.float32) for name, shape in model.param_shapes().items()}


@pytest.mark.parametrize("scanned", [False, True])
@pytest.mark.parametrize("model", ["tiny", "llama-100m"])
def test_the_converted_tree_has_exactly_maxtexts_paths_and_shapes(model, scanned):
    expected = fixture(model, scanned)
    tree = mw.to_maxtext(zeros(PRESETS[model]), PRESETS[model], SCAN_AXIS if scanned else None)
    assert {p: tuple(v.shape) for p, v in tree.items()} == expected
    mw.check_tree(tree, expected)
    assert sum(int(np.prod(s)) for s in expected.values()) == PRESETS[model].param_count()


def test_a_tree_that_differs_names_the_first_path():
    model = PRESETS["tiny"]
    expected = fixture("tiny", False)
    tree = mw.to_maxtext(zeros(model), model)
    lacking = dict(tree)
    del lacking["decoder/layers_1/mlp/wi_1/kernel"]
    with pytest.raises(ParallaxError, match="lack MaxText's parameter 'decoder/layers_1/mlp/wi_1/kernel'"):
        mw.check_tree(lacking, expected)
    transposed = dict(tree, **{"decoder/logits_dense/kernel": tree["decoder/logits_dense/kernel"].T})
    with pytest.raises(ParallaxError, match=r"'decoder/logits_dense/kernel' has shape \(64, 10000\); the "
                                            r"converted weights give \(10000, 64\)"):
        mw.check_tree(transposed, expected)
    with pytest.raises(ParallaxError, match="tree has no 'decoder/layers_9/mlp/wo/kernel'"):
        mw.check_tree(dict(tree, **{"decoder/layers_9/mlp/wo/kernel": np.zeros((128, 64))}), expected)


def test_values_are_copied_and_stacked_on_the_scan_axis():
    model = PRESETS["tiny"]
    canonical = init_weights(model, 3)
    flat = mw.to_maxtext(canonical, model)
    stacked = mw.to_maxtext(canonical, model, SCAN_AXIS)
    np.testing.assert_array_equal(flat["decoder/layers_1/mlp/wi_0/kernel"], canonical["layers.1.w_gate"])
    np.testing.assert_array_equal(flat["decoder/layers_0/self_attention/out/kernel"][2, 5],
                                  canonical["layers.0.wo"][2 * model.head_dim + 5])
    for path in [p for p in flat if p.startswith("decoder/layers_1/")]:
        leaf = path[len("decoder/layers_1/"):]
        np.testing.assert_array_equal(np.take(stacked[f"decoder/layers/{leaf}"], 1, axis=SCAN_AXIS), flat[path])
    np.testing.assert_array_equal(flat["token_embedder/embedding"], canonical["tok_embeddings"])


def test_the_query_kernel_carries_the_attention_scale():
    """MaxText has no 1/sqrt(head_dim) in its attention: it lives in the query kernel."""
    model = PRESETS["tiny"]
    canonical = init_weights(model, 0)
    query = mw.to_maxtext(canonical, model)["decoder/layers_0/self_attention/query/kernel"]
    x = np.random.default_rng(1).standard_normal((3, model.d_model)).astype(np.float32)
    ours = (x @ canonical["layers.0.wq"]).reshape(3, model.n_heads, model.head_dim) / np.sqrt(model.head_dim)
    np.testing.assert_allclose(np.einsum("sd,dhk->shk", x, query), ours, rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------------------- the function


def rms(x, gain, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain


def softmax(a):
    a = a - a.max(axis=-1, keepdims=True)
    e = np.exp(a)
    return e / e.sum(axis=-1, keepdims=True)


def silu(x):
    return x / (1.0 + np.exp(-x))


def causal(logits):
    t = logits.shape[-1]
    return np.where(np.tril(np.ones((t, t), bool)), logits, -1e30)


def our_logits(w, model, tokens):
    """Our model (REFERENCE.md §5), canonical weights, float64."""
    heads, hd, eps = model.n_heads, model.head_dim, model.norm_eps
    cos, sin = (t.astype(np.float64) for t in rope_tables(len(tokens), hd, model.rope_theta))

    def rope(x):  # [s, h, hd], half-split
        rotated = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], axis=-1)
        return x * cos[:, None] + rotated * sin[:, None]

    x = w["tok_embeddings"][tokens].astype(np.float64)
    for i in range(model.n_layers):
        p = lambda n: w[f"layers.{i}.{n}"].astype(np.float64)
        h = rms(x, p("attention_norm"), eps)
        q, k, v = (rope((h @ p(n)).reshape(-1, heads, hd)) if n != "wv" else (h @ p(n)).reshape(-1, heads, hd)
                   for n in ("wq", "wk", "wv"))
        a = softmax(causal(np.einsum("shk,thk->hst", q, k) / np.sqrt(hd)))
        x = x + np.einsum("hst,thk->shk", a, v).reshape(len(tokens), -1) @ p("wo")
        h = rms(x, p("ffn_norm"), eps)
        x = x + (silu(h @ p("w_gate")) * (h @ p("w_up"))) @ p("w_down")
    return rms(x, w["norm"].astype(np.float64), eps) @ w["lm_head"].astype(np.float64)


def maxtext_logits(tree, model, tokens, scan_axis):
    """MaxText 0.2.5's llama2 decoder on its own tree (read from its code), float64."""
    hd, eps, theta = model.head_dim, model.norm_eps, model.rope_theta
    timescale = theta ** (2 * np.arange(hd // 2) / hd)  # min_timescale 1
    angle = np.arange(len(tokens))[:, None, None] / timescale
    sin, cos = np.concatenate([np.sin(angle)] * 2, -1), np.concatenate([np.cos(angle)] * 2, -1)

    def rotary(x):  # RotaryEmbedding: x*cos + rotate_half(x)*sin
        x1, x2 = np.split(x, 2, axis=-1)
        return x * cos + np.concatenate([-x2, x1], axis=-1) * sin

    def leaf(i, path):
        if scan_axis is None:
            return tree[f"decoder/layers_{i}/{path}"].astype(np.float64)
        return np.take(tree[f"decoder/layers/{path}"], i, axis=scan_axis).astype(np.float64)

    x = tree["token_embedder/embedding"][tokens].astype(np.float64)
    for i in range(model.n_layers):
        att = lambda n: leaf(i, f"self_attention/{n}/kernel")
        h = rms(x, leaf(i, "pre_self_attention_layer_norm/scale"), eps)
        q, k, v = (np.einsum("sd,dhk->shk", h, att(n)) for n in ("query", "key", "value"))
        a = softmax(causal(np.einsum("shk,thk->hst", rotary(q), rotary(k))))  # no 1/sqrt(head_dim)
        x = x + np.einsum("shk,hkd->sd", np.einsum("hst,thk->shk", a, v), att("out"))
        h = rms(x, leaf(i, "post_self_attention_layer_norm/scale"), eps)
        mlp = lambda n: leaf(i, f"mlp/{n}/kernel")
        x = x + (silu(h @ mlp("wi_0")) * (h @ mlp("wi_1"))) @ mlp("wo")  # mlp_activations [silu, linear]
    h = rms(x, tree["decoder/decoder_norm/scale"].astype(np.float64), eps)
    return h @ tree["decoder/logits_dense/kernel"].astype(np.float64)


@pytest.mark.parametrize("scan_axis", [None, SCAN_AXIS])
def test_maxtexts_model_on_the_converted_tree_computes_our_logits(scan_axis):
    model = PRESETS["tiny"]
    canonical = init_weights(model, 7)
    # larger weights than the init's 0.02, so that attention is far from uniform and RoPE matters
    canonical = {n: (v * 10 if v.ndim == 2 else v + 0.1 * np.arange(v.size)) for n, v in canonical.items()}
    tokens = np.random.default_rng(0).integers(0, model.vocab_size, 24)
    ours = our_logits(canonical, model, tokens)
    theirs = maxtext_logits(mw.to_maxtext(canonical, model, scan_axis), model, tokens, scan_axis)
    np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5 * np.abs(ours).max())


def test_the_function_test_sees_a_wrong_layout():
    """The same check fails without the query scale, or with RoPE's dimensions interleaved."""
    model = PRESETS["tiny"]
    canonical = {n: (v * 10 if v.ndim == 2 else v) for n, v in init_weights(model, 7).items()}
    tokens = np.random.default_rng(0).integers(0, model.vocab_size, 24)
    ours = our_logits(canonical, model, tokens)
    tree = mw.to_maxtext(canonical, model)
    unscaled = dict(tree)
    for i in range(model.n_layers):
        unscaled[f"decoder/layers_{i}/self_attention/query/kernel"] = tree[
            f"decoder/layers_{i}/self_attention/query/kernel"] * np.sqrt(model.head_dim)
    interleaved = dict(tree)
    order = np.concatenate([np.arange(0, model.head_dim, 2), np.arange(1, model.head_dim, 2)])
    for i in range(model.n_layers):
        for n in ("query", "key"):
            path = f"decoder/layers_{i}/self_attention/{n}/kernel"
            interleaved[path] = tree[path][..., order]
    for wrong in (unscaled, interleaved):
        assert not np.allclose(maxtext_logits(wrong, model, tokens, None), ours, rtol=1e-3, atol=1e-3)
