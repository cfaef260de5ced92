"""The shapes TransformerEngine's low-precision GEMMs take, for its recipes in both frameworks
(``engines/torch/recipes/te.py``, ``engines/jax/recipes/te.py``), and the head sizes its FP8
attention takes on each GPU generation (torch only): checked before any GPU work."""

from __future__ import annotations

from parallax.errors import ParallaxError

FP8_TOKENS_MULTIPLE = 8  # TE fp8 GEMMs: the product of the leading dims (batch·seq) ...
FP8_DIM_MULTIPLE = 16  # ... and the last dim of every GEMM operand


def check_shapes(recipe: str, run, tokens_multiple: int = FP8_TOKENS_MULTIPLE, tokens_label: str = "TE fp8") -> None:
    """A one-line ParallaxError when ``run``'s batch·seq is not a multiple of ``tokens_multiple``
    or the model's d_model/d_ff not of FP8_DIM_MULTIPLE."""
    model, tokens = run.model_config, run.batch_size * run.seq_len
    if tokens % tokens_multiple:
        raise ParallaxError(f"recipe '{recipe}': {tokens_label} needs batch·seq divisible by "
                            f"{tokens_multiple}; {run.batch_size}·{run.seq_len} = {tokens} is not")
    for name in ("d_model", "d_ff"):
        size = getattr(model, name)
        if size % FP8_DIM_MULTIPLE:
            raise ParallaxError(f"recipe '{recipe}': TE fp8 needs {name} divisible by "
                                f"{FP8_DIM_MULTIPLE}; model '{model.name}' has {name} {size}")


# TransformerEngine's FP8 attention (DelayedScaling(fp8_dpa=True)) runs only in its cuDNN fused
# backend, sub-backend FP8. Which shapes TE 2.20 sends there for training (causal, BSHD, no bias,
# no dropout), by compute capability, from nvte_get_fused_attn_backend
# (transformer_engine/common/fused_attn/fused_attn.cpp) and get_attention_backend (pytorch/attention/
# dot_product_attention/utils.py); cuDNN itself refuses the FP8 backward on Hopper at any other
# head_dim (cudnn-frontend include/cudnn_frontend/node/sdpa_fp8_bwd.h). docs/fp8-attention.md has
# the lines and what the H200 said.
FP8_ATTENTION_HOPPER_HEAD_DIM = 128  # 9.x: head_dim_qk == head_dim_v == 128, training
FP8_ATTENTION_MAX_HEAD_DIM = 128  # 10.x, 11.x: head_dim <= 128 and a multiple of 16


def fp8_attention_refusal(head_dim: int, compute_capability) -> str | None:
    """Why TE's FP8 attention cannot train causal attention with heads of ``head_dim`` on a GPU
    of ``compute_capability``, in a phrase that names the way out; None where TE's rule lets it
    (TE may still refuse for a reason of its own, e.g. the cuDNN it loads; it then says so)."""
    from parallax.plan.hardware import cc_string, cc_tuple, family

    cc = cc_tuple(compute_capability)
    if cc is None:
        return None
    where = f"{family(cc)} ({cc_string(cc)})"
    if cc < (9, 0):
        return f"TE's FP8 attention needs compute capability 9.0+ (Hopper); this GPU is {where}"
    if cc[0] == 12:
        return f"TE 2.20 has no FP8 attention on {where} (get_attention_backend turns it off there)"
    if cc[0] == 9 and head_dim != FP8_ATTENTION_HOPPER_HEAD_DIM:
        return (f"TE's FP8 attention trains only at head_dim {FP8_ATTENTION_HOPPER_HEAD_DIM} on {where} (cuDNN has no "
                f"FP8 attention backward at other sizes there); this model's heads are {head_dim} wide: use "
                "--model llama-100m-hd128 (6 heads of 128), or --recipe te-fp8-delayed for bf16 attention")
    if cc[0] in (10, 11) and (head_dim > FP8_ATTENTION_MAX_HEAD_DIM or head_dim % 16):
        return (f"TE's FP8 attention on {where} needs head_dim <= {FP8_ATTENTION_MAX_HEAD_DIM} and a multiple of "
                f"16; this model's heads are {head_dim} wide: use --recipe te-fp8-delayed for bf16 attention")
    return None


def check_fp8_attention(recipe: str, run, compute_capability) -> None:
    """A one-line ParallaxError when TE's FP8 attention cannot train ``run``'s model here."""
    why = fp8_attention_refusal(run.model_config.head_dim, compute_capability)
    if why is not None:
        raise ParallaxError(f"recipe '{recipe}': {why}")
