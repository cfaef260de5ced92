"""FLOPs per token under three labelled accountings, and MFU against three denominators.

- ``spec``:         6·P + 12·L·S·d, the product spec's formula. It counts the input-embedding
                    lookup as matmul work, which it is not (about 7% too high for llama-100m).
- ``conventional``: 6·(P − V·d) + 12·L·S·d: the same without the input embedding (PaLM-style).
- ``maxtext``:      MaxText's ``calculate_tflops_training_per_device``: 3 × (forward matmul
                    FLOPs of the MLP, QKV, output projection and lm_head) plus 3 × causal
                    attention (S²-term halved for the causal mask).

MFU is reported against the precision's dense datasheet peak, the bf16 dense peak and the
measured cuBLASLt ceiling; a denominator that is unknown gives None, never a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

from parallax.spec.config import ModelConfig

ACCOUNTINGS = ("spec", "conventional", "maxtext")
PRIMARY_ACCOUNTING = "spec"


def flops_per_token_spec(model: ModelConfig, seq_len: int) -> int:
    return 6 * model.param_count() + 12 * model.n_layers * seq_len * model.d_model


def flops_per_token_conventional(model: ModelConfig, seq_len: int) -> int:
    non_input_embedding = model.param_count() - model.vocab_size * model.d_model
    return 6 * non_input_embedding + 12 * model.n_layers * seq_len * model.d_model


def flops_per_token_maxtext(model: ModelConfig, seq_len: int) -> int:
    d, f, hd = model.d_model, model.d_ff, model.head_dim
    heads = model.n_heads
    mlp = 2 * f * d * 2 + 2 * f * d  # gate and up (two activations), then down
    qkv = 2 * d * (heads + 2 * heads) * hd
    proj = 2 * d * heads * hd
    embedding = 2 * d * model.vocab_size  # the lm_head matmul
    learnable = 3 * ((mlp + qkv + proj) * model.n_layers + embedding)
    causal_attention = 4 * seq_len * heads * hd // 2
    return learnable + 3 * causal_attention * model.n_layers


def flops_per_token(model: ModelConfig, seq_len: int) -> dict[str, int]:
    """Every accounting, labelled."""
    return {
        "spec": flops_per_token_spec(model, seq_len),
        "conventional": flops_per_token_conventional(model, seq_len),
        "maxtext": flops_per_token_maxtext(model, seq_len),
    }


@dataclass(frozen=True)
class Denominators:
    """Peak rates in TFLOP/s; None where unknown."""

    precision_peak: float | None
    bf16_peak: float | None
    measured_ceiling: float | None


def achieved_tflops(tokens_per_s: float, flops_token: int) -> float:
    return tokens_per_s * flops_token / 1e12


def mfu(tflops: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation as a fraction (0..1), or None without an honest peak."""
    if peak is None or peak <= 0:
        return None
    return tflops / peak


def mfu_table(tokens_per_s: float, model: ModelConfig, seq_len: int, den: Denominators) -> dict:
    """TFLOP/s and MFU for every accounting against every denominator."""
    table = {}
    for name, per_token in flops_per_token(model, seq_len).items():
        tflops = achieved_tflops(tokens_per_s, per_token)
        table[name] = {
            "flops_per_token": per_token,
            "tflops": tflops,
            "mfu_precision_peak": mfu(tflops, den.precision_peak),
            "mfu_bf16_peak": mfu(tflops, den.bf16_peak),
            "mfu_measured_ceiling": mfu(tflops, den.measured_ceiling),
        }
    return table
