"""The emulated NVFP4 linear in JAX: a ``jax.custom_vjp`` over the XLA FFI quantize-dequantize
calls, and the Flax ``dot_general`` module the block linears' Dense layers use (as Flax's fp8
ops are used). The equations and the seed scheme: ``parallax/spec/nvfp4_scheme.py``; the
torch twin is ``torch_nvfp4_linear.py``.

Flax's Dense hands the op x [..., K] and its kernel [K, N] (= Wᵀ of torch's layout), both in
bf16. The 16×16 weight blocks of the kernel are the transposes of W's, so they quantize to the
same values; the step counter is a float32 variable of the collection ``nvfp4_counter`` whose
'gradient' is its next value (the training step replaces extra collections by their gradient).
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from parallax.spec import nvfp4_scheme as scheme
from parallax.quant import jax_ffi

COLLECTION = "nvfp4_counter"


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def nvfp4_linear(x, kernel, counter, seeds):
    """x [..., K] · kernel [K, N] on NVFP4-quantized operands; ``seeds`` = (dgrad seed, wgrad
    seed, RHT seed). The counter's cotangent is counter + 1."""
    return _forward(x, kernel, counter, seeds)[0]


def forward_operands(x2, kernel):
    """(Q(X, 1x16), Q(kernel, 16x16)) in bf16 for X [M, K] and the Flax kernel [K, N]."""
    return jax_ffi.nvfp4_qdq(x2.astype(jnp.bfloat16), "1x16"), jax_ffi.nvfp4_qdq(kernel.astype(jnp.bfloat16), "16x16")


def backward_operands(x2, dy2, counter, seeds):
    """The backward GEMMs' operands, bf16, as torch_nvfp4_linear.backward_operands: 'dy' =
    Q(dY, 1x16, SR) [M, N]; for wgrad 'xw' = Q(H(Xᵀ), 1x16)ᵀ [M, K] and 'dyw' = Q(H(dYᵀ), 1x16,
    SR)ᵀ [M, N], quantized in 16x1 blocks in their own layout (no transposes for XLA to copy)."""
    dgrad_seed, wgrad_seed, rht_seed = seeds
    dy2 = dy2.astype(jnp.bfloat16)
    return {"dy": jax_ffi.nvfp4_qdq_counter(dy2, counter, "1x16", True, dgrad_seed),
            "xw": jax_ffi.nvfp4_qdq(x2.astype(jnp.bfloat16), "16x1", False, 0, True, rht_seed),
            "dyw": jax_ffi.nvfp4_qdq_counter(dy2, counter, "16x1", True, wgrad_seed, True, rht_seed)}


def _forward(x, kernel, counter, seeds):
    x2 = x.reshape(-1, x.shape[-1])
    xq, wq = forward_operands(x2, kernel)
    y = jnp.dot(xq, wq)
    # Residuals are arrays only: the operands' dtypes travel as empty arrays of those dtypes.
    dtypes = (jnp.zeros((0,), x.dtype), jnp.zeros((0,), kernel.dtype))
    return y.reshape(*x.shape[:-1], kernel.shape[1]), (x2, wq, counter, dtypes)


def _backward(seeds, res, dy):
    x2, wq, counter, (x_dtype, k_dtype) = res
    q = backward_operands(x2, dy.reshape(-1, wq.shape[1]), counter, seeds)
    dx = jnp.dot(q["dy"], wq.T)
    dk = jax.lax.dot_general(q["xw"], q["dyw"], (((0,), (0,)), ((), ())))  # xwᵀ·dyw [K, N]
    return dx.reshape(*dy.shape[:-1], wq.shape[0]).astype(x_dtype.dtype), dk.astype(k_dtype.dtype), counter + 1


nvfp4_linear.defvjp(lambda x, kernel, counter, seeds: _forward(x, kernel, counter, seeds), _backward)


class EmulatedNvfp4DotGeneral(nn.Module):
    """A Flax dot_general for ``nn.Dense(dot_general_cls=...)``. It finds its block and linear
    from its scope path (``layers_{i}/<linear>/<this>``); blocks outside ``quantized_layers``
    (the last ones, kept bf16) use XLA's own dot. ``run_seed`` and ``quantized_layers`` are set
    by ``dot_general_class``."""

    run_seed = 0
    quantized_layers = ()  # class attributes, not fields: Dense constructs the op with no arguments
    collection = COLLECTION  # where the step counters live (the MX op keeps its own)

    @nn.compact
    def __call__(self, lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
        layer, linear = self.site()
        if layer not in self.quantized_layers:
            return jax.lax.dot_general(lhs, rhs, dimension_numbers, precision=precision,
                                       preferred_element_type=preferred_element_type)
        if dimension_numbers != (((lhs.ndim - 1,), (0,)), ((), ())) or rhs.ndim != 2:
            raise ValueError(f"{type(self).__name__}: only Dense's x[..., K] · kernel[K, N], got {dimension_numbers}")
        counter = self.variable(self.collection, "counter", jnp.zeros, (), jnp.float32)
        seeds = (scheme.operand_seed(self.run_seed, layer, linear, scheme.DGRAD_DY),
                 scheme.operand_seed(self.run_seed, layer, linear, scheme.WGRAD_DY),
                 scheme.rht_seed(self.run_seed))
        return self.quantized(lhs, rhs, counter.value, seeds)

    def quantized(self, lhs, rhs, counter, seeds):
        """The emulated GEMM of a quantized layer (the MX op overrides it)."""
        return nvfp4_linear(lhs, rhs, counter, seeds)

    def site(self) -> tuple[int, str]:
        path = self.scope.path
        if len(path) < 3 or not path[-3].startswith("layers_") or path[-2] not in scheme.LINEARS:
            raise ValueError(f"EmulatedNvfp4DotGeneral belongs in a block linear (layers_<i>/<linear>), not {path}")
        return int(path[-3].removeprefix("layers_")), path[-2]


def dot_general_class(run_seed: int, quantized_layers: tuple[int, ...]):
    """The op class for one run: its seed and the blocks it quantizes as class attributes (Flax's
    Dense instantiates ``dot_general_cls()`` without arguments)."""
    return type("EmulatedNvfp4DotGeneral", (EmulatedNvfp4DotGeneral,),
                {"run_seed": int(run_seed), "quantized_layers": tuple(quantized_layers),
                 "__module__": __name__})
