"""The emulated NVFP4 recipes on a GPU (run on the device; skipped elsewhere): the counter
quantizer (the kernel reading the step from device memory) bit-identical to the CPU in torch and
in JAX, llama-100m-shaped block linears with finite, nonzero gradients, tiny training on real
tokens within the loss band of bf16 (tests/fixtures/loss_band.py) and llama-100m running in both
engines. Their layers against the formats' bounds: test_layer_error_bounds_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
jnp = jax.numpy

from parallax import quant  # noqa: E402
from parallax.spec.config import get_preset  # noqa: E402
from parallax.spec import nvfp4_scheme as scheme  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def cuda_kernels():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device")
    if not (quant.available_bindings()["cuda"] and quant.available_bindings()["jax_ffi"]):
        pytest.fail("parallax._native lacks the CUDA kernels or the JAX FFI handlers on a GPU machine", pytrace=False)


def bits(t):
    return t.contiguous().view(torch.int16).cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t).view(np.int16)


@pytest.mark.parametrize("rht", [False, True])
def test_counter_qdq_is_bit_identical_on_gpu_cpu_torch_and_jax(rht):
    from parallax.quant import jax_ffi, torch_ops  # noqa: F401

    x = torch.randn(4096, 768, dtype=torch.bfloat16)
    seed, counter = scheme.operand_seed(0, 3, "wo", scheme.WGRAD_DY), 17
    c_cpu, c_gpu = torch.tensor([counter], dtype=torch.int32), torch.tensor([counter], dtype=torch.int32, device="cuda")
    cpu = torch.ops.parallax.nvfp4_qdq_counter(x, c_cpu, "1x16", True, seed, rht, 5)
    gpu = torch.ops.parallax.nvfp4_qdq_counter(x.cuda(), c_gpu, "1x16", True, seed, rht, 5)
    gpu_dev = jax.devices("gpu")[0]
    xj = jax.device_put(jnp.asarray(x.view(torch.int16).numpy().view(jnp.bfloat16)), gpu_dev)
    jx = jax.jit(lambda a, c: jax_ffi.nvfp4_qdq_counter(a, c, "1x16", True, seed, rht, 5))(xj, jnp.float32(counter))
    np.testing.assert_array_equal(bits(cpu), bits(gpu))
    np.testing.assert_array_equal(bits(cpu), bits(jx))
    other = torch.ops.parallax.nvfp4_qdq_counter(x.cuda(), c_gpu + 1, "1x16", True, seed, rht, 5)
    assert (bits(other) != bits(gpu)).mean() > 0.05  # the kernel read the counter


def shapes():
    c = get_preset("llama-100m")
    width = c.n_heads * c.head_dim
    return c, {"wqkv": (3 * width, c.d_model, ("wq", "wk", "wv")), "wo": (c.d_model, width, ("wo",)),
               "w_gate_up": (2 * c.d_ff, c.d_model, ("w_gate", "w_up")), "w_down": (c.d_model, c.d_ff, ("w_down",))}


def test_torch_llama_100m_linears_have_finite_nonzero_grads_on_cuda():
    from parallax.quant.torch_nvfp4_linear import EmulatedNvfp4Linear

    _, linears = shapes()
    for out_f, in_f, parts in linears.values():
        lin = torch.nn.Linear(in_f, out_f, bias=False, device="cuda")
        m = EmulatedNvfp4Linear(lin, 0, parts, 0)
        x = torch.randn(4, 1024, in_f, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            m(x).float().square().mean().backward()
        for g in (x.grad, lin.weight.grad):
            assert torch.isfinite(g).all() and g.abs().sum() > 0


def test_jax_llama_100m_linears_have_finite_nonzero_grads_on_gpu():
    from parallax.quant.jax_nvfp4_linear import nvfp4_linear

    _, linears = shapes()
    key = jax.random.key(0)
    for out_f, in_f, _ in linears.values():
        x = jax.random.normal(key, (4, 1024, in_f), jnp.bfloat16)
        k = (jax.random.normal(key, (in_f, out_f), jnp.float32) * 0.02).astype(jnp.bfloat16)
        seeds = (1, 2, scheme.rht_seed(0))
        dx, dk = jax.jit(jax.grad(lambda a, b: nvfp4_linear(a, b, jnp.float32(0), seeds).astype(jnp.float32)
                                  .__pow__(2).mean(), argnums=(0, 1)))(x, k)
        for g in (dx, dk):
            g = np.asarray(g.astype(jnp.float32))
            assert np.isfinite(g).all() and np.abs(g).sum() > 0


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_emulated_nvfp4_trains_within_the_band_of_bf16_on_the_gpu(framework):
    """tiny from the same weights on the same 30 distinct real-token batches as the framework's
    bf16 (tests/fixtures/gpu_trajectories.py): the loss within loss_band.LOSS_BAND of bf16's at
    every step, falling by FALL, labelled emulated; no numerics-guard problem."""
    from fixtures import loss_band
    from fixtures.gpu_trajectories import FALL, cached_torch_trajectory, jax_trajectory

    if framework == "torch":
        (plan, out), (_, bf16) = cached_torch_trajectory("emulated-nvfp4"), cached_torch_trajectory(None)
        losses, ref = [s.loss for s in out.steps], [s.loss for s in bf16.steps]
        assert (out.precision.recipe, out.precision.native) == ("emulated-nvfp4", False)
        assert all(np.isfinite(s.grad_norm) and s.grad_norm > 0 and s.bad_layers is None for s in out.steps)
        assert len(out.extra["quantized_parameters"]) == 4 * get_preset("tiny").n_layers
    else:
        result, bf16 = jax_trajectory("emulated-nvfp4"), jax_trajectory(None)
        losses, ref = result["losses"], bf16["losses"]
        assert (result["recipe"], result["native"], result["problem"]) == ("emulated-nvfp4", False, None)
        assert len(result["quantized"]) == 7 * get_preset("tiny").n_layers
    print(framework, "largest |loss - bf16| %.4f at step %d" % loss_band.largest_gap(losses, ref))
    assert loss_band.band_problems(losses, ref, FALL) == []


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_emulated_nvfp4_runs_llama_100m_on_the_gpu(framework, tmp_path):
    """The llama-100m shapes (its last two blocks bf16) through run_training: every step recorded,
    the loss at ln(vocab) on synthetic tokens (uniform: nothing better exists) and finite, nonzero
    gradient norms."""
    import json
    import math

    from parallax.spec.config import RunConfig
    from parallax.store.results import load_steps
    from parallax.run.train import run_training

    run = RunConfig.for_preset("llama-100m", framework=framework, precision="nvfp4", recipe="emulated-nvfp4",
                               batch_size=4, seq_len=256, steps=4, warmup=1, output_dir=str(tmp_path))
    run_training(run)
    data = json.loads((tmp_path / "run.json").read_text())
    assert data["status"] == "ok", data.get("error")
    assert data["precision"]["recipe"] == "emulated-nvfp4" and data["precision"]["native"] is False
    rows = load_steps(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(abs(r["loss"] - math.log(run.model_config.vocab_size)) < 0.1 for r in rows), rows
    assert all(math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in rows)
