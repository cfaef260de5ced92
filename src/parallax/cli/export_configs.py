"""``parallax export-configs``: one MaxText YAML per ``maxtext`` recipe, ready for MaxText itself.

Each file inherits MaxText's ``base.yml`` and sets our model, batch, sequence, steps, schedule,
optimizer, clipping and weight decay (``engines/maxtext/config.py``), with a header saying what
it needs and how to run it. Where MaxText is installed (or ``--base-yml`` names a file), every
key is checked against its ``base.yml`` first: a key it lacks is a one-line error, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import click

from parallax.spec.config import GPU_MODEL, PRESET_SIZES, PRESETS, RunConfig, get_preset
from parallax.errors import ParallaxError
from parallax.plan.resolve import RunPlan, resolve

DEFAULTS = RunConfig()


def build_plans(model: str, recipes: str, batch_size, seq_len, steps, seed) -> list[RunPlan]:
    """The plan (``plan.resolve``) of one run per maxtext recipe that ``recipes`` selects: what
    ``export`` writes reads the recipe from it."""
    from parallax.spec import registry

    get_preset(model)
    selectors = tuple(s.strip() for s in recipes.split(",") if s.strip()) or ("all",)
    chosen = registry.select(("maxtext",), selectors)
    sizes = {"batch_size": batch_size, "seq_len": seq_len}
    given = {k: v for k, v in {**sizes, "steps": steps, "seed": seed}.items() if v is not None}
    plans = []
    for recipe in chosen:
        base = RunConfig.for_preset(model, **given) if model in PRESET_SIZES else RunConfig(model=model, **given)
        # No measurement warm-up: it is Parallax's statistics, not a MaxText key, so no file
        # could say it; any --steps >= 1 is a run MaxText can do.
        run = base.replace(framework="maxtext", precision=recipe.format, recipe=recipe.name, warmup=0)
        plans.append(resolve(run, timed=False))
    return plans


def export(plans: list[RunPlan], output_dir: Path, tuning: str | None, base_yml: Path | None) -> list[Path]:
    """Write one file per run; every key checked against ``base_yml`` first (when given).
    ``tuning`` None: each recipe's own (``bf16-defaults``: defaults, the others: tuned)."""
    from parallax.engines.maxtext import config as mt
    from parallax.store.files import folder_for_writing, write_text
    from parallax.store.results import writable_output_dir

    rendered = []
    for plan in plans:
        run, recipe = plan.run, plan.recipe
        chosen = tuning or mt.recipe_tuning(recipe)
        sections = mt.sections(run, recipe, chosen)
        if base_yml is not None:
            mt.check_keys(mt.flat(sections), base_yml, mt.installed_version())
        name = mt.file_name(run, recipe)
        rendered.append((name, mt.render(sections, mt.header(run, recipe, name, chosen))))
    out = writable_output_dir(output_dir)
    written = []
    with folder_for_writing(out, "--output-dir"):
        try:
            for name, text in rendered:
                written.append(write_text(out / name, text, "--output-dir"))
        except ParallaxError:  # a disk that fills half way: all the files or none
            for path in written:
                path.unlink(missing_ok=True)
            raise
    return written


@click.command("export-configs")
@click.option("--output-dir", required=True, metavar="DIR", help="Where the .yml files go.")
@click.option("--model", default=GPU_MODEL, show_default=True, metavar="PRESET",
              help=f"Model preset: {', '.join(PRESETS)}.")
@click.option("--recipes", default="all", show_default=True, metavar="LIST",
              help="maxtext recipes: names (bf16, fp8, fp8_gpu, te_fp8_delayedscaling, ...), formats, or 'all'.")
@click.option("--batch-size", type=int, help="Sequences per step.  [default: the preset's]")
@click.option("--seq-len", type=int, help="Tokens per sequence.  [default: the preset's]")
@click.option("--steps", type=int, help=f"Optimizer steps.  [default: {DEFAULTS.steps}]")
@click.option("--seed", type=int, help=f"init_weights_seed and data_shuffle_seed.  [default: {DEFAULTS.seed}]")
@click.option("--tuning", type=click.Choice(["tuned", "defaults"]), default=None,
              help="The performance settings of every file: tuned (scan_layers false, remat_policy minimal, "
                   "attention cudnn_flash_jax) or defaults (MaxText's base.yml values).  [default: each "
                   "recipe's own: bf16-defaults defaults, every other recipe tuned]")
@click.option("--base-yml", metavar="FILE",
              help="Check the keys against this base.yml.  [default: the installed MaxText's, if any]")
def command(output_dir, model, recipes, batch_size, seq_len, steps, seed, tuning, base_yml) -> int:
    """Write MaxText YAML configs of our model, one per maxtext recipe."""
    from parallax.engines.maxtext import config as mt

    plans = build_plans(model, recipes, batch_size, seq_len, steps, seed)
    if base_yml is not None and not Path(base_yml).is_file():
        raise ParallaxError(f"--base-yml {base_yml}: no such file")
    check = Path(base_yml) if base_yml else mt.installed_base_yml()
    paths = export(plans, Path(output_dir), tuning, check)
    for path in paths:
        click.echo(str(path))
    checked = f"keys checked against {check}" if check else "keys not checked: MaxText is not installed here"
    from parallax.analysis.report.terminal import console_for_output, paragraph

    paragraph(console_for_output(stderr=True), f"parallax: wrote {len(paths)} MaxText config(s) for {model}; {checked}")
    return 0
