"""The emulated MX linear in JAX (MXFP8, MXFP4): a ``jax.custom_vjp`` over the XLA FFI
quantize-dequantize calls, and the Flax ``dot_general`` module of the block linears' Dense
layers. The equations: ``parallax/spec/mx_scheme.py``; the seeds and the step counter (a float32
variable of the collection ``mx_counter`` whose 'gradient' is its next value) are the emulated
NVFP4 linear's (``jax_nvfp4_linear.py``); the torch twin is ``torch_mx_linear.py``.

Flax's Dense hands the op x [..., K] and its kernel [K, N] (= Wᵀ of torch's layout), both bf16:
Q(W along K) is the kernel quantized along its first dimension (the transpose's rows), Q(W
along N) the kernel quantized along its rows.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from parallax.quant import jax_ffi
from parallax.quant.jax_nvfp4_linear import EmulatedNvfp4DotGeneral
from parallax.spec import mx_scheme

COLLECTION = "mx_counter"


def _q(t, s: mx_scheme.MxScheme, counter=None, stochastic=False, seed=0):
    return jax_ffi.mx_qdq(t, s.elem, s.rule, stochastic, seed, counter)


def _columns(t, s: mx_scheme.MxScheme, rht_seed: int):
    """tᵀ, after the RHT along its rows (the tokens) when the scheme has it."""
    return jax_ffi.hadamard16(t.T, rht_seed) if s.wgrad_rht else t.T


def forward_operands(x2, kernel, s: mx_scheme.MxScheme) -> dict:
    """As torch_mx_linear.forward_operands, bf16: 'xq' [M, K], 'wq' = Q(W along K) [N, K], 'wt' =
    Q(W along N)ᵀ [N, K], from the Flax kernel [K, N]."""
    k = kernel.astype(jnp.bfloat16)
    return {"xq": _q(x2.astype(jnp.bfloat16), s), "wq": _q(k.T, s), "wt": _q(k, s).T}


def backward_operands(x2, dy2, counter, seeds, s: mx_scheme.MxScheme) -> dict:
    """As torch_mx_linear.backward_operands for one canonical part: 'dy' [M, N], 'xw' [K, M],
    'dyw' [N, M]; seeds = (dgrad seed, wgrad seed, RHT seed)."""
    dgrad_seed, wgrad_seed, rht_seed = seeds
    dy = dy2.astype(jnp.bfloat16)
    sr = s.grad_sr
    return {"dy": _q(dy, s, counter if sr else None, sr, dgrad_seed if sr else 0),
            "xw": _q(_columns(x2.astype(jnp.bfloat16), s, rht_seed), s),
            "dyw": _q(_columns(dy, s, rht_seed), s, counter if sr else None, sr, wgrad_seed if sr else 0)}


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def mx_linear(x, kernel, counter, seeds, scheme):
    """x [..., K] · kernel [K, N] on MX-quantized operands; the counter's cotangent is counter + 1."""
    return _forward(x, kernel, counter, seeds, scheme)[0]


def _forward(x, kernel, counter, seeds, scheme):
    x2 = x.reshape(-1, x.shape[-1])
    q = forward_operands(x2, kernel, scheme)
    y = jnp.dot(q["xq"], q["wq"].T)
    dtypes = (jnp.zeros((0,), x.dtype), jnp.zeros((0,), kernel.dtype))
    return y.reshape(*x.shape[:-1], kernel.shape[1]), (x2, q["wt"], counter, dtypes)


def _backward(seeds, scheme, res, dy):
    x2, wt, counter, (x_dtype, k_dtype) = res
    q = backward_operands(x2, dy.reshape(-1, wt.shape[0]), counter, seeds, scheme)
    dx = jnp.dot(q["dy"], wt)
    dk = jnp.dot(q["xw"], q["dyw"].T)  # xw·dywᵀ [K, N] = dWᵀ
    return dx.reshape(*dy.shape[:-1], wt.shape[1]).astype(x_dtype.dtype), dk.astype(k_dtype.dtype), counter + 1


mx_linear.defvjp(lambda x, kernel, counter, seeds, scheme: _forward(x, kernel, counter, seeds, scheme), _backward)


class EmulatedMxDotGeneral(EmulatedNvfp4DotGeneral):
    """A Flax dot_general for ``nn.Dense(dot_general_cls=...)``, as EmulatedNvfp4DotGeneral (its
    site lookup, its bf16 blocks) with the MX linear; ``scheme`` is set by ``dot_general_class``."""

    scheme = mx_scheme.MXFP8
    collection = COLLECTION

    def quantized(self, lhs, rhs, counter, seeds):
        return mx_linear(lhs, rhs, counter, seeds, self.scheme)


def dot_general_class(run_seed: int, quantized_layers: tuple[int, ...], scheme: mx_scheme.MxScheme):
    """The op class for one run (Flax's Dense instantiates ``dot_general_cls()`` without arguments)."""
    return type("EmulatedMxDotGeneral", (EmulatedMxDotGeneral,),
                {"run_seed": int(run_seed), "quantized_layers": tuple(quantized_layers), "scheme": scheme,
                 "__module__": __name__})
