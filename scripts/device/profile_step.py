"""Where one recipe's training step spends its GPU time: a profile summary by kernel category.

Builds the recipe's step through its engine (``Engine.build_step``: the torch ``Trainer`` or the
JAX jitted step as ``train`` builds them, on synthetic batches), runs ``--warmup`` steps unprofiled,
times ``--steps`` steps without the profiler, then profiles ``--steps`` more and sums the GPU
kernels by category (``parallax.engines.profiling``). One (framework, recipe) per process: XLA reads
the recipe's XLA_FLAGS once, when JAX starts.

    python3 scripts/device/profile_step.py --framework torch --recipe te-fp8-delayed --out DIR
    python3 scripts/device/profile_step.py --framework jax --recipe flax-fp8-delayed --out DIR \\
        [--model llama-100m --batch 32 --seq 1024 --warmup 15 --steps 5] [--keep-trace]
    python3 scripts/device/profile_step.py --framework maxtext --recipe bf16 --out DIR
    python3 scripts/device/profile_step.py --compare DIR/profile_jax_bf16.json DIR/profile_maxtext_bf16.json --out DIR

Writes DIR/profile_<framework>_<recipe>.md (header and tables) and .json (the summary); with
--keep-trace also the trace (torch: trace_torch_<recipe>.json.gz, a Chrome trace; jax and
maxtext: trace_<framework>_<recipe>.tar.gz, the xplane folder). On the CPU (``--model tiny
--batch 2 --seq 64``) torch and jax run too: there are no GPU kernels, and the table says so.

``--framework maxtext`` runs MaxText itself (the ``maxtext`` engine's config of the recipe,
synthetic data) in a subprocess with MaxText's own profiler: ``profiler: xplane``,
``skip_first_n_steps_for_profiler`` = warmup + steps, ``profiler_steps`` = steps. MaxText calls
``jax.profiler.start_trace`` into its TensorBoard folder, so the trace is the same ``*.xplane.pb``
our JAX engine's profile is, read by the same code; XLA dumps the optimized HLO of
``jit_train_step`` beside it (``--xla_dump_to``), which describes each kernel's op as for our
JAX step. Without the profiler: the mean of MaxText's ``perf/step_time_seconds`` over the
``--steps`` steps before the profiled ones. Its files (config, log, metrics, trace) stay in
DIR/maxtext_<recipe>/. ``--compare`` puts the categories of two or more profiles' .json side by
side (DIR/profile_compare_<a>_vs_<b>.md): the gap between MaxText and our Flax engine, category
by category.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

try:
    import parallax  # noqa: F401
except ImportError:  # the source tree, when parallax is not installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from parallax.engines import profiling  # noqa: E402
from parallax.spec.config import RunConfig  # noqa: E402
from parallax.plan.resolve import resolve  # noqa: E402
from parallax.spec import registry  # noqa: E402


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=("torch", "jax", "maxtext"))
    parser.add_argument("--recipe", help="a recipe of the registry, e.g. te-fp8-delayed")
    parser.add_argument("--compare", nargs="+", type=Path, metavar="JSON",
                        help="instead of profiling: the categories of these profile_*.json side by side")
    parser.add_argument("--model", default="llama-100m")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--steps", type=int, default=5, help="steps timed, then as many profiled")
    parser.add_argument("--no-compile", action="store_true", help="torch only: eager mode")
    parser.add_argument("--cuda-graphs", choices=("auto", "on", "off"), default="auto",
                        help="torch TE recipes: replay the blocks as CUDA graphs, as the benchmark does (auto)")
    parser.add_argument("--keep-trace", action="store_true", help="also write the compressed trace")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.compare:
        if len(args.compare) < 2:
            parser.error("--compare needs two or more profile_*.json files")
    elif not (args.framework and args.recipe):
        parser.error("--framework and --recipe are required (or --compare A.json B.json)")
    return args


def run_config(args) -> RunConfig:
    recipe = registry.get(args.framework, args.recipe)
    # warmup, timed, profiled; MaxText one step more, so that its profiler stops before its last step
    total = args.warmup + 2 * args.steps + (args.framework == "maxtext")
    return RunConfig(framework=args.framework, precision=recipe.format, recipe=recipe.name, model=args.model,
                     batch_size=args.batch, seq_len=args.seq, steps=total, warmup=args.warmup,
                     compile=not args.no_compile, cuda_graphs=args.cuda_graphs)


class TorchStep:
    """The torch engine's step for ``run`` (``TorchEngine.build_step``); ``steps(n)`` runs n
    steps and waits for them."""

    def __init__(self, run: RunConfig):
        from parallax.engines.torch.engine import TorchEngine

        self.step = TorchEngine().build_step(resolve(run))
        self.device = self.step.plan.handles["device"]
        self.device_name = self.step.details["device_name"]
        self.flags = {k: self.step.details[k] for k in ("compile_mode", "attention", "torch", "cuda_graphs")}

    def steps(self, n: int) -> None:
        self.step.run(n)

    def profile(self, n: int, out: Path, name: str, keep: bool) -> list:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        with profile(activities=activities) as prof:
            self.steps(n)
        if keep:
            _gzip_chrome_trace(prof, out / f"trace_{name}.json.gz")
        return profiling.torch_kernel_events(prof)


def _gzip_chrome_trace(prof, path: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        with open(trace, "rb") as src, gzip.open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)


class JaxStep:
    """The JAX engine's jitted step for ``run``, compiled ahead of time (``JaxEngine.build_step``)."""

    def __init__(self, run: RunConfig):
        from parallax.engines.jax.engine import JaxEngine
        from parallax.engines.jax.runtime import import_jax

        self.step = JaxEngine().build_step(resolve(run))  # adds the recipe's XLA_FLAGS before JAX starts
        self.jax = import_jax()
        self.device_name = self.step.details["device_name"]
        self.flags = {k: self.step.details[k] for k in ("xla_flags", "attention", "jax")}

    def steps(self, n: int) -> None:
        self.step.run(n)

    def profile(self, n: int, out: Path, name: str, keep: bool) -> list:
        with tempfile.TemporaryDirectory() as tmp:
            trace = Path(tmp) / f"trace_{name}"
            with self.jax.profiler.trace(str(trace)):
                self.steps(n)
            events = profiling.jax_kernel_events(trace)
            if keep:
                with tarfile.open(out / f"trace_{name}.tar.gz", "w:gz") as tar:
                    tar.add(trace, arcname=trace.name)
        return profiling.describe_hlo_ops(events, self.step.fn.as_text())


class MaxTextRun:
    """MaxText itself on the ``maxtext`` engine's config of ``run``, profiled by MaxText."""

    HLO_MODULE = "jit_train_step"

    def __init__(self, run: RunConfig):
        from parallax.engines.maxtext.engine import MaxTextEngine

        self.run = run
        self.resolved = resolve(run)
        self.plan = MaxTextEngine().check(self.resolved)  # the engine's refusals, before MaxText starts
        device = self.plan.handles["device"]
        self.device_name = device.get("name") or "GPU"
        self.flags = {"maxtext": self.plan.handles["version"], "tuning": self.plan.details["tuning"],
                      **self.plan.details["settings"]}

    def profile_keys(self, args) -> dict:
        # No compilation cache: a step found in it is not compiled, so XLA would dump no HLO of it.
        return {"profiler": "xplane", "skip_first_n_steps_for_profiler": args.warmup + args.steps,
                "profiler_steps": args.steps, "profile_cleanly": True, "jax_cache_dir": ""}

    def measure_and_profile(self, args, out: Path, name: str) -> tuple[float, list]:
        from parallax.engines.base import NullProgress
        from parallax.engines.maxtext import config, launch, metrics

        run = self.run
        work = out / f"maxtext_{run.recipe}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        output = {"run_name": "profile", "base_output_directory": str((work / "output").resolve()),
                  "metrics_file": str((work / "metrics.jsonl").resolve())}
        tuning = self.plan.details["tuning"]
        recipe = self.resolved.recipe
        sections = config.sections(run, recipe, tuning, output=output)
        sections.append(config.Section("profiling (scripts/device/profile_step.py)", self.profile_keys(args)))
        keys = config.flat(sections)
        config.check_keys(keys, Path(self.plan.handles["base_yml"]), self.plan.handles["version"])
        yml = work / config.file_name(run, recipe)
        yml.write_text(config.render(sections, config.header(run, recipe, yml.name, tuning)))
        env = launch.child_env(int(self.plan.device.split(":")[1]))
        env.pop("JAX_COMPILATION_CACHE_DIR", None)  # JAX's own cache (jax_cache_dir above is MaxText's)
        hlo_dir = work / "hlo"
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS", ""), f"--xla_dump_to={hlo_dir}",
                                                  f"--xla_dump_hlo_module_re={self.HLO_MODULE}",
                                                  "--xla_dump_hlo_as_text"]))
        launch.stream([sys.executable, "-m", config.TRAIN_MODULE, str(yml)], env, work / "train.log",
                      NullProgress())
        steps = {s.step: s.step_s for s in metrics.read_metrics(work / "metrics.jsonl")}
        timed = [steps[k] for k in range(args.warmup, args.warmup + args.steps) if k in steps]
        if len(timed) != args.steps:
            raise SystemExit(f"profile_step: MaxText's metrics file {work / 'metrics.jsonl'} lacks steps "
                             f"{args.warmup}..{args.warmup + args.steps - 1}; see {work / 'train.log'}")
        trace = work / "output"
        events = profiling.jax_kernel_events(trace)
        hlo = profiling.find_hlo_text(hlo_dir, self.HLO_MODULE)
        if hlo is not None:
            events = profiling.describe_hlo_ops(events, hlo)
        self.flags["hlo_described"] = hlo is not None
        shutil.rmtree(hlo_dir, ignore_errors=True)  # tens of MB of text; the trace is what stays
        if args.keep_trace:
            with tarfile.open(out / f"trace_{name}.tar.gz", "w:gz") as tar:
                for path in sorted(trace.rglob("*.xplane.pb")):
                    tar.add(path, arcname=str(path.relative_to(trace)))
        return sum(timed) * 1e3 / len(timed), events


def measure(step, args) -> float:
    """ms/step of ``args.steps`` steps without the profiler, after ``args.warmup`` steps."""
    step.steps(args.warmup)
    t0 = time.perf_counter()
    step.steps(args.steps)
    return (time.perf_counter() - t0) * 1e3 / args.steps


def report(args, run: RunConfig, step, ms: float, summary: dict) -> dict:
    return {"framework": args.framework, "recipe": run.recipe, "format": run.precision, "model": run.model,
            "batch_size": run.batch_size, "seq_len": run.seq_len, "device": step.device_name,
            "flags": step.flags, "warmup_steps": args.warmup, "timed_steps": args.steps,
            "ms_per_step": ms, "tokens_per_s": run.tokens_per_step / ms * 1e3, "summary": summary}


def markdown(record: dict) -> str:
    flags = ", ".join(f"{k}={v!r}" for k, v in record["flags"].items())
    return "\n".join([
        f"# Where the step goes: {record['framework']} {record['recipe']}", "",
        f"- recipe: {record['recipe']} ({record['format']}), {record['model']}, "
        f"batch {record['batch_size']} x seq {record['seq_len']}, on {record['device']}",
        f"- flags: {flags}",
        f"- without the profiler: {record['ms_per_step']:.3f} ms/step, {record['tokens_per_s']:,.0f} tokens/s "
        f"({record['timed_steps']} steps after {record['warmup_steps']} warmup, host clock, synchronised)",
        f"- profiled: the next {record['summary']['steps']} steps", "",
        profiling.format_table(record["summary"]),
    ])


def one_line(record: dict, md_path: Path) -> str:
    summary = record["summary"]
    total = summary["kernel_ms_per_step"] or 1.0
    shares = {c: row["ms_per_step"] / total for c, row in summary["classes"].items()}
    parts = [f"{c} {share:.0%}" for c, share in shares.items() if share >= 0.005]
    return (f"profile_step {record['framework']} {record['recipe']}: {record['ms_per_step']:.2f} ms/step, "
            f"{record['tokens_per_s']:,.0f} tokens/s; {', '.join(parts) or 'no GPU kernels'} -> {md_path}")


def compare(args) -> None:
    records = [json.loads(Path(p).read_text()) for p in args.compare]
    args.out.mkdir(parents=True, exist_ok=True)
    names = "_vs_".join(f"{r['framework']}_{r['recipe']}" for r in records)
    path = args.out / f"profile_compare_{names}.md"
    path.write_text(profiling.format_comparison(records))
    labels = [f"{r['framework']} {r['recipe']}" for r in records]
    print(f"profile_step compare: {' vs '.join(labels)} -> {path}", flush=True)


def main(argv=None) -> None:
    args = parse(argv)
    if args.compare:
        return compare(args)
    run = run_config(args)
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"{args.framework}_{run.recipe}"
    if args.framework == "maxtext":
        step = MaxTextRun(run)
        ms, events = step.measure_and_profile(args, args.out, name)
    else:
        step = TorchStep(run) if args.framework == "torch" else JaxStep(run)
        ms = measure(step, args)
        events = step.profile(args.steps, args.out, name, args.keep_trace)
    record = report(args, run, step, ms, profiling.summarize(events, args.steps))
    md_path = args.out / f"profile_{name}.md"
    md_path.write_text(markdown(record))
    (args.out / f"profile_{name}.json").write_text(json.dumps(record, indent=2) + "\n")
    print(one_line(record, md_path), flush=True)


if __name__ == "__main__":
    main()
