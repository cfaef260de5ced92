"""``parallax profile``: where a run's training step goes, class by class, and how far each class
is from its limit on this GPU (``parallax.analysis.profile``), as profile.md (one table),
profile.png, profile.html (both in one page) and profile.json in ``--output-dir``; ``--compare
A.json B.json ...`` puts finished profiles side by side (profile_compare.md/.json/.png/.html).

The run is given as to ``parallax train`` (the same options, or ``--config FILE``), or as a
finished run's folder (``--from-run DIR``: its run.json's configuration). ``--warmup`` steps run
first, then ``--steps`` are timed without the profiler, then as many profiled, each stage's steps
counted on stderr (``run.progress.ProfileProgress``). One GPU: a
finished run of several GPUs is refused (its per-GPU step is the same options without --gpus).
Exit codes: 0 ok, 2 bad input (nothing measured).
"""

from __future__ import annotations

import click

from parallax.cli import defaults
from parallax.cli.train import DATA_OPTIONS, DEVICE_OPTIONS, SHAPE_OPTIONS, build_run, load_config
from parallax.errors import ParallaxError, say
from parallax.spec import config_schema

DEFAULT_OUTPUT = "runs/profile"
DEFAULT_WARMUP, DEFAULT_STEPS = 15, 5
EPILOG = ("MaxText (--framework maxtext) runs in its own process with its own profiler (profiler: xplane), on "
          "its synthetic data; its step time is the mean of its perf/step_time_seconds.")


@click.command("profile", epilog=EPILOG)
@SHAPE_OPTIONS
@DATA_OPTIONS
@DEVICE_OPTIONS
@click.option("--config", "config_file", metavar="FILE",
              help="A whole run configuration (JSON, as run.json's 'config'); no other run option goes with it.")
@click.option("--from-run", "from_run", metavar="DIR",
              help="Profile the configuration of a finished run (DIR/run.json); no other run option goes with it.")
@click.option("--warmup", type=int, default=DEFAULT_WARMUP, show_default=True,
              help="Steps run first, neither timed nor profiled (compilation, autotuning).")
@click.option("--steps", type=int, default=DEFAULT_STEPS, show_default=True,
              help="Steps timed without the profiler, then as many profiled.")
@click.option("--output-dir", metavar="DIR", default=DEFAULT_OUTPUT, show_default=True,
              help="Where profile.md, profile.json, profile.png and profile.html (or profile_compare.*) go.")
@click.option("--overwrite", is_flag=True, help="Replace the profile that --output-dir holds (refused without it).")
@click.option("--keep-trace", is_flag=True,
              help="Keep the profiler's trace too (torch: trace.json.gz; JAX, MaxText: trace.xplane.tar.gz).")
@click.option("--compare", is_flag=True,
              help="Put the profile.json files given as arguments side by side instead of profiling.")
@click.option("--cross-machine", is_flag=True, help="With --compare: allow profiles of different machines.")
@click.argument("profiles", nargs=-1, metavar="[PROFILE.json ...]")
def command(config_file, from_run, warmup, steps, output_dir, overwrite, keep_trace, compare, cross_machine, profiles,
            **options) -> int:
    """Profile a few training steps: time, share and distance to this GPU's limit of each class of work."""
    from pathlib import Path

    from parallax.run import profile as driver
    from parallax.plan import machine
    from parallax.run import profile_child
    from parallax.run.progress import ProfileProgress

    _check_free(Path(output_dir), "profile_compare.json" if compare or profiles else "profile.json", overwrite)
    if compare or profiles:
        return _compare(compare, profiles, cross_machine, output_dir, options, config_file, from_run)
    if cross_machine:
        raise ParallaxError("--cross-machine goes with --compare; drop it")
    if warmup < 1 or steps < 1:
        raise ParallaxError(f"--warmup and --steps must be at least 1, got {warmup} and {steps}")
    config_schema.check_option("profile_warmup", warmup)
    config_schema.check_option("profile_steps", steps)
    from parallax.run import interrupt

    plan, note = _plan(options, config_file, from_run, warmup, steps)
    defaults.say(note)
    with interrupt.catching():  # Ctrl-C, SIGTERM: one line, exit 130/143, no profile.* written
        if profile_child.wanted(plan.run.framework, machine.gpu_of(plan.run.device) is not None):
            code, record = profile_child.profile(plan.run.to_dict(), warmup, steps, Path(output_dir), keep_trace,
                                                 say=say)
            return code  # the child printed its summary line, or its error
        with ProfileProgress(driver.stages(warmup, steps)) as progress:
            record = driver.profile_run(plan, warmup, steps, Path(output_dir), keep_trace,
                                        lambda text: say(f"parallax: {text}"), progress)
    from parallax.analysis.report.terminal import console_for_output, paragraph

    paragraph(console_for_output(), summary_line(record, Path(output_dir)))
    return 0


def _check_free(out, name: str, overwrite: bool) -> None:
    """One line, before any work, when ``out`` holds a profile (``name``) and --overwrite is not given."""
    if (out / name).exists() and not overwrite:
        raise ParallaxError(f"{out} already holds a profile ({name}); pass --overwrite to replace it, or pick a "
                            "fresh --output-dir")


def _compare(compare: bool, profiles: tuple, cross_machine: bool, output_dir: str, options: dict,
             config_file, from_run) -> int:
    from pathlib import Path

    from parallax.run import profile as driver

    if not compare:
        raise ParallaxError(f"'{profiles[0]}': files are read with --compare only; pass --compare A.json B.json")
    given = [k for k, v in {**options, "config": config_file, "from_run": from_run}.items() if v not in (None, False)]
    if given:
        raise ParallaxError(f"--compare reads finished profiles; drop --{given[0].replace('_', '-')}")
    if len(profiles) < 2:
        raise ParallaxError("--compare needs two or more profile.json files")
    compared = driver.compare([Path(p) for p in profiles], Path(output_dir), cross_machine)
    titles = " vs ".join(p["title"] for p in compared["profiles"])
    click.echo(f"parallax profile: {titles} -> {Path(output_dir) / 'profile_compare.md'}")
    return 0


def _plan(options: dict, config_file, from_run, warmup: int, steps: int):
    """The RunPlan to profile (resolved once) and the line saying what --model auto chose."""
    from parallax.plan.resolve import resolve
    from parallax.run.profile import run_steps

    asked = options.get("device") or "auto"
    if config_file and from_run:
        raise ParallaxError("--config and --from-run both give the whole run; pass one of them")
    if config_file or from_run:
        run = load_config(config_file, options) if config_file else load_run(from_run, options)
        note, asked = None, run.device
        if run.gpus > 1:
            raise ParallaxError(f"parallax profile measures one GPU; this run used --gpus {run.gpus} (profile its "
                                "per-GPU step with the same options and no --gpus)")
        total = run_steps(run.framework, warmup, steps)
        run = run.replace(steps=total, warmup=warmup, eval_every=0)
    else:
        framework = options.get("framework") or "torch"
        run, note = build_run({**options, "steps": run_steps(framework, warmup, steps), "warmup": warmup})
    return resolve(run, asked_device=asked), note


def load_run(folder: str, options: dict):
    """The RunConfig of a finished run's ``folder/run.json`` (its 'config')."""
    import json
    from pathlib import Path

    from parallax.spec import config_schema
    from parallax.spec.config import RunConfig
    from parallax.store.files import read_text

    given = [k for k, v in options.items() if v not in (None, False)]
    if given:
        raise ParallaxError(f"--from-run carries the whole run; drop --{given[0].replace('_', '-')}")
    path = Path(folder) / "run.json"
    text = read_text(path, f"--from-run {folder}:", "pass a run's output folder")
    try:
        config = json.loads(text)["config"]
    except (ValueError, KeyError, TypeError):
        raise ParallaxError(f"--from-run {folder}: {path} has no run configuration; pass a folder parallax train "
                            "wrote") from None
    try:
        return RunConfig.from_dict(config, required=config_schema.REQUIRED)  # never a default model silently
    except ParallaxError as exc:
        raise ParallaxError(f"--from-run {folder}: {exc}") from None


def summary_line(record: dict, out) -> str:
    shares = [f"{row['class']} {row['share']:.0%}" for row in record["classes"] if row["share"] >= 0.005]
    return (f"parallax profile: {record['title']}: {record['timing']['step_ms']:.2f} ms/step, "
            f"{record['timing']['tokens_per_s']:,.0f} tokens/s; {', '.join(shares)} -> {out / 'profile.md'}")
