"""Write ``parallax.engines.weights.init_weights(MODEL, SEED)`` as the checkpoint MaxText loads with
``load_parameters_path``; run in MaxText's environment (Python 3.12+), on the CPU (the te_* modes
on the GPU: ``launch.weights_env``):

    python -m parallax.engines.maxtext.initial_weights CONFIG.yml OUT_DIR MODEL SEED
    python -m parallax.engines.maxtext.initial_weights --tree CONFIG.yml    # MaxText's Param tree

The tree MaxText expects is read from MaxText itself: its model built abstractly from the config
(``create_nnx_abstract_model``, nothing allocated), the variables a params-only restore wants
(``checkpointing._abstract_params`` keeps all but rng, cache, intermediate and batch-stat ones).
Its ``nnx.Param`` leaves come from our weights (``weights.to_maxtext``, checked path by path and
shape by shape against MaxText's); any other such variable (the fp8 recipes' scales and amax
histories) keeps MaxText's own initial value, from a concrete init of the model (Params are
not trained state of ours to replace). MaxText's own ``checkpointing.save_params_to_path`` writes
the checkpoint, so its layout is the one ``load_params_from_path`` reads: ``OUT_DIR/items``
holding ``params/<collection>/<tree>``. Prints ``PREFIX OUT_DIR``, then MaxText's exact
parameter count of the same abstract model as ``count_params.py`` prints it (``count_params.PREFIX N``;
no such line if counting failed: the checkpoint does not depend on it).
"""

from __future__ import annotations

import sys

from parallax.engines.maxtext import count_params  # constants and functions only: no MaxText import

PREFIX = "parallax-maxtext-weights:"
SKIPPED = ("RngState", "Cache", "Intermediate", "BatchStat")


def wanted(abstract) -> tuple[dict, dict]:
    """({path: shape} of the model's Params, {collection: {path: variable}} of its other
    restored variables), from MaxText's abstract model."""
    from flax import nnx
    from flax.nnx import variablelib

    skipped = tuple(getattr(nnx, name) for name in SKIPPED)
    params, others = {}, {}
    for path, var in nnx.to_flat_state(nnx.state(abstract)):
        if isinstance(var, skipped):
            continue
        name = "/".join(map(str, path))
        if isinstance(var, nnx.Param):
            params[name] = tuple(var.get_value().shape)
        else:
            others.setdefault(variablelib.variable_name_from_type(type(var), allow_register=True), {})[name] = var
    return params, others


def initial_values(build, others: dict) -> dict:
    """{collection: {path: array}}: MaxText's own initial values of the non-Param variables."""
    import numpy as np
    from flax import nnx

    if not others:
        return {}
    state = dict((("/".join(map(str, p))), v) for p, v in nnx.to_flat_state(nnx.state(build())))
    return {col: {path: np.asarray(state[path].get_value()) for path in paths} for col, paths in others.items()}


def abstract_model(yml: str):
    """(MaxText's config, its model's constructor, the abstract model) of ``yml``."""
    from maxtext.configs import pyconfig
    from maxtext.utils import model_creation_utils

    # the config may already name the checkpoint being written: MaxText would read its metadata
    config = pyconfig.initialize([sys.argv[0], yml, *count_params.OVERRIDES, "load_parameters_path=''"])
    build, abstract = model_creation_utils.create_nnx_abstract_model(config)
    return config, build, abstract


def tree_lines(yml: str) -> str:
    """MaxText's Param tree of ``yml`` as ``path<TAB>shape`` lines (the fixtures' format)."""
    expected, _ = wanted(abstract_model(yml)[2])
    return "".join(f"{path}\t{','.join(map(str, shape))}\n" for path, shape in sorted(expected.items()))


def write(argv: list[str]) -> tuple[str, int | None]:
    """Write the checkpoint; return (its folder, MaxText's parameter count of the model, None if
    counting failed)."""
    from maxtext.common import checkpointing

    from parallax.spec.config import get_preset
    from parallax.engines.maxtext import weights
    from parallax.engines.weights import init_weights

    yml, out_dir, model_name, seed = argv
    config, build, abstract = abstract_model(yml)
    expected, others = wanted(abstract)
    model = get_preset(model_name)
    scan_axis = config.param_scan_axis if config.scan_layers else None
    tree = weights.to_maxtext(init_weights(model, int(seed)), model, scan_axis)
    weights.check_tree(tree, expected)
    collections = {"params": weights.nested(tree)}
    for col, values in initial_values(build, others).items():
        collections[col] = weights.nested(values)
    checkpointing.save_params_to_path(out_dir, collections)
    try:
        return out_dir, count_params.count_of(abstract)
    except Exception as exc:  # the checkpoint stands; the engine runs count_params.py after training
        print(f"no parameter count: {type(exc).__name__}: {exc}", file=sys.stderr)
        return out_dir, None


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--tree":
        print(tree_lines(argv[1]), end="", flush=True)
        return 0
    if len(argv) != 4 or not argv[0].endswith(".yml") or not argv[3].isdigit():
        print("usage: python -m parallax.engines.maxtext.initial_weights CONFIG.yml OUT_DIR MODEL SEED",
              file=sys.stderr)
        return 2
    out_dir, parameters = write(argv)
    print(f"{PREFIX} {out_dir}", flush=True)
    if parameters is not None:
        print(f"{count_params.PREFIX} {parameters}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
