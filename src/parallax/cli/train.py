"""``parallax train``: one training run with a live progress bar, a summary table and a result.

Options left out take RunConfig's defaults (``spec/config.py`` is their only home); ``--model``
defaults to ``auto`` and a preset brings its own batch size and sequence length
(``parallax.cli.defaults``). ``--help`` shows every default. Exit codes:
0 ok, 1 the run failed, 2 bad input (nothing written), 3 out of memory, 130/143 stopped by
Ctrl-C/SIGTERM (run.json of status ``interrupted`` keeps the steps done).

The output folder (``run.train.claimed``): one that holds a run is refused unless
``--overwrite``, one that holds a benchmark always; one ``train`` at a time in a folder (a lock
naming its pid); a refusal leaves no folder behind.

``--gpus N|all``: a torch run of several GPUs launches one process per GPU
(``parallax.run.distributed``); rank 0 draws the progress and prints the summary, the launcher
prints only a failure. ``--batch-size`` stays the per-GPU batch.
"""

from __future__ import annotations

import click

from parallax.cli import defaults
from parallax.spec.config import CUDA_GRAPHS, DEFAULT_MODEL, PRECISIONS, SHARDINGS, RunConfig
from parallax.engines import ENGINE_FRAMEWORKS
from parallax.errors import ParallaxError

DEFAULTS = RunConfig()


def _data_choice(synthetic: bool, data: str | None, hf: bool) -> dict:
    """--synthetic (the default), --data PATH or --hf (streamed TinyStories): one of them."""
    if synthetic + (data is not None) + hf > 1:
        raise ParallaxError("choose one of --synthetic, --data PATH and --hf")
    if data is not None:
        return {"synthetic": False, "data": data}
    if hf:
        return {"synthetic": False, "data": None}
    return {}


def load_config(path: str, options: dict) -> RunConfig:
    """The RunConfig in ``path`` (what the benchmark runner hands each cell)."""
    import json

    from parallax.spec import config_schema

    given = [k for k, v in options.items() if v not in (None, False)]
    if given:
        raise ParallaxError(f"--config carries the whole run; drop --{given[0].replace('_', '-')}")
    from parallax.store.files import read_text

    try:
        data = json.loads(read_text(path, "--config", "pass a run configuration (UTF-8 JSON)"))
    except ValueError as exc:
        raise ParallaxError(f"--config {path} is not JSON ({exc}); write it with RunConfig.to_dict") from None
    try:
        return RunConfig.from_dict(data, required=config_schema.REQUIRED)
    except ParallaxError as exc:
        raise ParallaxError(f"--config {path}: {exc}") from None


def default_warmup(steps: int) -> int:
    """The warm-up when --warmup is not given: RunConfig's default, but at most half of --steps so
    that a short run (--steps 10) keeps as many timed steps as warm-up ones."""
    return min(DEFAULTS.warmup, max(1, steps // 2))


WARMUP_HELP = f"  [default: {DEFAULTS.warmup}, at most half the steps]"


def warmup_origin(options: dict, run: RunConfig) -> str | None:
    """Where the run's warm-up came from, for its summary: the default (``default_warmup``) when
    --warmup was not given, None when it was."""
    if options.get("warmup") is not None:
        return None
    return f"the default for --steps {run.steps}: half the steps, at most {DEFAULTS.warmup}"


def build_run(options: dict) -> tuple[RunConfig, str | None]:
    """The RunConfig of the command line: ``--model auto`` (the default) resolved, the preset's
    batch size and sequence length unless given, RunConfig's defaults for the rest; and the
    line that says what ``auto`` chose. ``--gpus`` stays as given: ``plan.resolve`` counts it."""
    data = _data_choice(options.pop("synthetic"), options.pop("data"), options.pop("hf"))
    if options.pop("no_compile"):
        options["compile"] = False
    gpus = options.pop("gpus", None)
    given = {k: v for k, v in options.items() if v is not None}
    if "warmup" not in given and "steps" in given:
        given["warmup"] = default_warmup(given["steps"])
    if "recipe" in given and "precision" not in given:
        given["precision"] = None  # the recipe's own format
    run, note = defaults.run_config({**given, **data})
    if gpus is not None:
        run = run.replace(gpus=gpus)
    return run, note


def _shown(text) -> str:
    """The help text's '[default: ...]' of an option left None (so that build_run sees only what
    the user gave)."""
    return f"  [default: {text}]"


def _default(field: str) -> str:
    """'[default: ...]' with RunConfig's value of ``field``."""
    return _shown(getattr(DEFAULTS, field))


def options(*decorators):
    """One decorator applying ``decorators`` in the order given (the first is the first in --help)."""
    def apply(command):
        for decorator in reversed(decorators):
            command = decorator(command)
        return command
    return apply


# What a run is, shared with `parallax profile` (cli/profile.py): its shape, its data, where it runs.
SHAPE_OPTIONS = options(
    click.option("--framework", metavar="NAME", help=f"Engine: {', '.join(ENGINE_FRAMEWORKS)}." + _default("framework")),
    click.option("--precision", metavar="NAME",
                 help=f"Number format: {', '.join(PRECISIONS)}, run by the framework's default recipe for it."
                      + _default("precision")),
    click.option("--recipe", metavar="NAME",
                 help="A precision recipe by name, e.g. te-fp8-current (parallax check-env lists them)."
                      + _shown("the default recipe of --precision")),
    click.option("--model", metavar="PRESET", help=defaults.model_help() + _shown(DEFAULT_MODEL)),
    click.option("--batch-size", type=int, help="Sequences per step." + _shown(defaults.sizes_help("batch_size"))),
    click.option("--seq-len", type=int, help="Tokens per sequence." + _shown(defaults.sizes_help("seq_len"))),
)
DATA_OPTIONS = options(
    click.option("--seed", type=int, help="Seed of the initial weights and the synthetic batches." + _default("seed")),
    click.option("--synthetic", is_flag=True, help="Synthetic batches from (seed, step) (the default)."),
    click.option("--data", metavar="PATH",
                 help="Train on a prepared token directory, or on raw text (.txt, .jsonl, .parquet or a directory "
                      "of them) prepared once into the cache, validation held out of it when evaluation is asked for."),
    click.option("--hf", is_flag=True, help="Stream TinyStories from the Hugging Face hub."),
)
DEVICE_OPTIONS = options(
    click.option("--no-compile", is_flag=True, help="Run eagerly (torch): no torch.compile."),
    click.option("--cuda-graphs", type=click.Choice(CUDA_GRAPHS),
                 help="Replay the model's blocks as CUDA graphs (torch, TransformerEngine recipes): auto = on for "
                      "them on a GPU, on = that or an error, off = never." + _default("cuda_graphs")),
    click.option("--device", metavar="DEVICE", help="auto, cpu, cuda or cuda:N." + _default("device")),
)


LOG_OPTION = click.option(
    "--log", metavar="SINKS",
    help="Watch it while it trains: tensorboard, wandb or tensorboard,wandb. Each run (a benchmark: each cell) "
         "writes TensorBoard event files into its folder's tensorboard/ and an offline W&B run (unless WANDB_MODE "
         "says otherwise) into its wandb/; docs/watching.md.")


def watch(log: str | None) -> None:
    """``--log``: its libraries checked now (one line naming the extra), then handed to the driver
    and every process it starts (a benchmark's cells, a run's ranks) as ``PARALLAX_LOG``."""
    import os

    from parallax.run import live_log

    sinks = live_log.parse(log) if log is not None else live_log.from_env()
    live_log.check(sinks)
    if log is not None:
        os.environ[live_log.ENV_VAR] = ",".join(sinks)


@click.command("train")
@SHAPE_OPTIONS
@click.option("--steps", type=int, help="Optimizer steps in all, warmup included." + _default("steps"))
@click.option("--warmup", type=int, help="First steps left out of the throughput statistics." + WARMUP_HELP)
@DATA_OPTIONS
@click.option("--epochs", type=float,
              help="Passes over the training tokens allowed (--data/--hf)." + _shown("at most one"))
@click.option("--eval-every", type=int,
              help="Validation loss every N steps and at the end (0: never)." + _default("eval_every"))
@click.option("--eval-batches", type=int, help="Fixed validation batches per evaluation." + _default("eval_batches"))
@DEVICE_OPTIONS
@click.option("--tuning", metavar="NAME",
              help="A knob set of the framework's own tuning knobs (XLA flags, torch.compile mode, MaxText keys; "
                   "docs/tuning.md), or 'tuned': the one the tuning sweep chose for the recipe." + _default("tuning"))
@click.option("--gpus", metavar="N|all",
              help="GPUs of this host: one process per GPU (torch), one mesh over the devices (JAX); "
                   "--batch-size is per GPU. With --device cpu, N CPU ranks (the test lab)." + _default("gpus"))
@click.option("--sharding", type=click.Choice(SHARDINGS),
              help="With several GPUs: ddp = replicated weights, gradients all-reduced; fsdp = weights, "
                   "gradients and optimizer state sharded (torch FSDP2)." + _default("sharding"))
@click.option("--dist-timeout", "dist_timeout_s", type=float, metavar="SECONDS",
              help="With several GPUs: how long a collective waits for a rank that does not come (a hung "
                   "rank then fails the run)." + _default("dist_timeout_s"))
@click.option("--peak-tflops", type=float,
              help="Dense peak TFLOP/s of the run's precision, for MFU." + _shown("the GPU's datasheet peak"))
@click.option("--output-dir", metavar="DIR", help="Where run.json and steps.jsonl go." + _default("output_dir"))
@click.option("--overwrite", is_flag=True,
              help="Replace the run that --output-dir holds (refused without it), from the new run's first step.")
@click.option("--config", "config_file", metavar="FILE",
              help="A whole run configuration (JSON, as run.json's 'config'; what benchmark hands each cell); "
                   "no other option goes with it but --overwrite and --log.")
@LOG_OPTION
def command(config_file, overwrite, log, **options) -> int:
    """Train the shared LLaMA once and write run.json + steps.jsonl."""
    from parallax.plan import world
    from parallax.plan.resolve import resolve
    from parallax.run import distributed, interrupt, progress_file
    from parallax.run.progress import LiveProgress, print_summary
    from parallax.run.train import check_free, claimed, exit_code, run_training

    watch(log)
    asked = options.get("device") or "auto"  # what --gpus counts against (build_run may pick the CPU)
    if config_file:
        run, note = load_config(config_file, options), None
        asked, origin = run.device, "from --config"
    else:
        run, note = build_run(options)
        origin = warmup_origin(options, run)
    plan = resolve(run, asked_device=asked)  # once: --gpus, every field, the recipe; bad input is one line
    run = plan.run
    rank = world.rank_info() if run.gpus > 1 else None
    if rank is not None or world.process_count_from_env() > 1:
        defaults.say(note)  # one process of several: the folder is its launcher's, or its hosts' to share
        if rank is None:  # a host of several, started as the user asked: their folder, held to --overwrite
            from parallax.store.results import writable_output_dir

            check_free(writable_output_dir(run.output_dir), overwrite)
        return _one_of_several(plan, rank)
    with claimed(run.output_dir, overwrite):
        defaults.say(note)
        if distributed.needs_launch(run):  # the ranks draw the progress; say only how it ended
            result = run_training(plan)
            if result["status"] != "ok":
                print_summary(result, run.output_dir)
            return exit_code(result)
        with interrupt.catching(), LiveProgress(run.steps, run.tokens_per_step, run.warmup) as live:
            result = run_training(plan, progress_file.attach(live))
    print_summary(result, run.output_dir, warmup_origin=origin)
    return exit_code(result)


def _one_of_several(plan, rank) -> int:
    """One process's part of a run of several (a torch rank, a JAX host): the output folder is
    not claimed (it is the launcher's, or the hosts share it) and no signal is caught. Torch's
    rank 0 (every JAX host) draws the progress and prints the summary."""
    from parallax.run import progress_file
    from parallax.run.progress import LiveProgress, print_summary
    from parallax.run.train import exit_code, run_training

    run = plan.run
    if rank is not None and rank.rank != 0:
        return exit_code(run_training(plan))
    with LiveProgress(run.steps, run.tokens_per_step, run.warmup) as live:
        result = run_training(plan, progress_file.attach(live))
    print_summary(result, run.output_dir)
    return exit_code(result)
