"""MaxText's exact parameter count of a config, run in MaxText's environment (Python 3.12+):

    python -m parallax.engines.maxtext.count_params CONFIG.yml [key=value ...]

MaxText 0.2.5 logs its count only as ``number parameters: 0.100 billion``; the exact number goes to
TensorBoard, which ``DECOUPLE_GCLOUD=TRUE`` turns off (no tensorboardX). This builds MaxText's
model abstractly, as its ``setup_train_loop`` does (``create_nnx_abstract_model``: ``nnx.eval_shape``,
no weights allocated, no step compiled), keeps the ``nnx.Param`` variables as its
``write_setup_info_to_tensorboard`` does, and counts them with its own
``max_utils.calculate_num_params_from_pytree``. The engine runs it on the CPU
(``JAX_PLATFORMS=cpu``), so it never touches the GPU. Prints one line: ``PREFIX <count>``.
"""

from __future__ import annotations

import sys

PREFIX = "parallax-maxtext-parameters:"
# Added after the config: no jax.distributed start-up for a count (the run itself did its own), and
# the XLA attention kernel, which owns no parameters, since cuDNN's (cudnn_flash_jax) needs a GPU
# where Qwix's fp8_gpu traces the model ("cuDNN is not detected" on the CPU).
OVERRIDES = ("skip_jax_distributed_system=true", "attention=dot_product")


def count(argv: list[str]) -> int:
    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils

    config = pyconfig.initialize([sys.argv[0], *argv, *OVERRIDES])
    _, abstract = model_creation_utils.create_nnx_abstract_model(config)
    return count_of(abstract)


def count_of(abstract) -> int:
    """The parameters of MaxText's abstract model, counted as MaxText counts them (also called by
    ``initial_weights.py``, which builds the same model, so that a run need not build it again)."""
    from flax import nnx
    from maxtext.utils import max_utils

    _, params, _ = nnx.split(abstract, nnx.Param, ...)
    return int(max_utils.calculate_num_params_from_pytree(params))


def main(argv: list[str]) -> int:
    if not argv or not argv[0].endswith(".yml"):
        print("usage: python -m parallax.engines.maxtext.count_params CONFIG.yml [key=value ...]", file=sys.stderr)
        return 2
    print(f"{PREFIX} {count(argv)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
