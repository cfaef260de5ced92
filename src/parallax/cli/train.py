"""``parallax train``: one training run with a live progress bar, a summary table and a result.

Options left out take RunConfig's defaults (``config.py`` is their only home). Exit codes:
0 ok, 1 the run failed, 2 bad input (nothing written), 3 out of memory.
"""

from __future__ import annotations

import click

from parallax.config import FRAMEWORKS, PRECISIONS, PRESETS, RunConfig
from parallax.errors import ParallaxError

AUTO_MODEL = "auto"
# What `--model auto` trains without a GPU: the tiny preset, small enough for a CPU.
CPU_FALLBACK = {"model": "tiny", "batch_size": 8, "seq_len": 128, "device": "cpu"}


def _data_choice(synthetic: bool, data: str | None, hf: bool) -> dict:
    """--synthetic (the default), --data PATH or --hf (streamed TinyStories): one of them."""
    if synthetic + (data is not None) + hf > 1:
        raise ParallaxError("choose one of --synthetic, --data PATH and --hf")
    if data is not None:
        return {"synthetic": False, "data": data}
    if hf:
        return {"synthetic": False, "data": None}
    return {}


def _gpu_found() -> bool:
    from parallax import envinfo

    return bool(envinfo.probe_gpus()["devices"])


def _resolve_auto_model(given: dict) -> dict:
    """``--model auto``: llama-100m where the native probe finds an NVIDIA GPU, else tiny on
    the CPU (batch 8, seq 128 unless given), saying so."""
    if given.get("model") != AUTO_MODEL:
        return given
    if _gpu_found():
        return {**given, "model": "llama-100m"}
    resolved = {**CPU_FALLBACK, **{k: v for k, v in given.items() if k != "model"}}
    click.echo(
        f"parallax: no NVIDIA GPU found; training the 'tiny' preset on the CPU "
        f"(batch {resolved['batch_size']}, seq {resolved['seq_len']}) instead of llama-100m",
        err=True,
    )
    return resolved


def load_config(path: str, options: dict) -> RunConfig:
    """The RunConfig in ``path`` (what the benchmark runner hands each cell)."""
    import json

    given = [k for k, v in options.items() if v not in (None, False)]
    if given:
        raise ParallaxError(f"--config carries the whole run; drop --{given[0].replace('_', '-')}")
    try:
        return RunConfig.from_dict(json.loads(open(path).read()))
    except OSError as exc:
        raise ParallaxError(f"--config {path}: {exc.strerror}; pass an existing file") from None
    except (ValueError, TypeError) as exc:
        raise ParallaxError(f"--config {path} is not a run configuration ({exc}); write it with RunConfig.to_dict") from None


def build_run(options: dict) -> RunConfig:
    """The RunConfig of the command line; options not given keep RunConfig's defaults."""
    data = _data_choice(options.pop("synthetic"), options.pop("data"), options.pop("hf"))
    if options.pop("no_compile"):
        options["compile"] = False
    given = {k: v for k, v in options.items() if v is not None}
    if "recipe" in given and "precision" not in given:
        given["precision"] = None  # the recipe's own format
    return RunConfig(**_resolve_auto_model(given), **data)


@click.command("train")
@click.option("--framework", metavar="NAME", help=f"Engine: {', '.join(FRAMEWORKS)}.")
@click.option("--precision", metavar="NAME",
              help=f"Number format: {', '.join(PRECISIONS)} (the framework's default recipe for it).")
@click.option("--recipe", metavar="NAME",
              help="A precision recipe by name, e.g. te-fp8-current (parallax check-env lists them).")
@click.option("--model", metavar="PRESET",
              help=f"Model preset ({', '.join(PRESETS)}) or 'auto': llama-100m on a GPU, else tiny on the CPU.")
@click.option("--batch-size", type=int, help="Sequences per step.")
@click.option("--seq-len", type=int, help="Tokens per sequence.")
@click.option("--steps", type=int, help="Optimizer steps in all, warmup included.")
@click.option("--warmup", type=int, help="First steps left out of the throughput statistics.")
@click.option("--seed", type=int, help="Seed of the initial weights and the synthetic batches.")
@click.option("--synthetic", is_flag=True, help="Synthetic batches from (seed, step) (the default).")
@click.option("--data", metavar="PATH", help="Train on a prepared token directory or a raw corpus.")
@click.option("--hf", is_flag=True, help="Stream TinyStories from the Hugging Face hub.")
@click.option("--epochs", type=float, help="Passes over the training tokens allowed (--data/--hf; default: at most one).")
@click.option("--eval-every", type=int, help="Validation loss every N steps and at the end (0: never).")
@click.option("--eval-batches", type=int, help="Fixed validation batches per evaluation.")
@click.option("--no-compile", is_flag=True, help="Run eagerly (torch): no torch.compile.")
@click.option("--device", metavar="DEVICE", help="auto, cpu, cuda or cuda:N.")
@click.option("--peak-tflops", type=float, help="Dense peak TFLOP/s of the run's precision, for MFU.")
@click.option("--output-dir", metavar="DIR", help="Where run.json and steps.jsonl go.")
@click.option("--config", "config_file", metavar="FILE",
              help="A run configuration (JSON, as run.json's 'config'); other options are not allowed with it.")
def command(config_file, **options) -> int:
    """Train the shared LLaMA once and write run.json + steps.jsonl."""
    from parallax import progress_file
    from parallax.progress import LiveProgress, print_summary
    from parallax.train import exit_code, run_training

    run = load_config(config_file, options) if config_file else build_run(options)
    with LiveProgress(run.steps, run.tokens_per_step, run.warmup) as live:
        result = run_training(run, progress_file.attach(live))
    print_summary(result, run.output_dir)
    return exit_code(result)
