"""``parallax benchmark``: the framework × precision × GPU-count matrix, one process per cell
(an N-GPU cell's process launches its ranks)."""

from __future__ import annotations

from pathlib import Path

import click
from click.core import ParameterSource
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from parallax.cli import defaults
from parallax.cli.train import LOG_OPTION, WARMUP_HELP, default_warmup, watch
from parallax.spec.config import AUTO_MODEL, CUDA_GRAPHS, DEFAULT_MODEL, PRECISIONS, SHARDINGS, RunConfig
from parallax.spec.recipe import DEFAULT_FORMATS
from parallax.engines import DEFAULT_FRAMEWORKS, ENGINE_FRAMEWORKS
from parallax.errors import ParallaxError, fitted, say
from parallax.spec import config_schema, registry
from parallax.run import interrupt
from parallax.run.progress import TenthsGate, step_line
from parallax.run.runner import DEFAULT_MAX_LOSS_GAP, Matrix, run_matrix
from parallax.store.results import writable_output_dir

DEFAULTS = RunConfig()
DEFAULT_OUTPUT_DIR = "benchmark_results"
# What --convergence changes unless the option is given: long enough to compare validation losses
# past the early fall, an evaluation every tenth of the run, two seeds for an interval over seeds.
CONVERGENCE_DEFAULTS = {"steps": 1000, "eval_every": 100, "seeds": "0,1"}
PLAN_EPILOG = ("With --plan, the plan's keys are these options' names (batch_size for --batch-size); an option "
               "given on the command line wins over the plan. A plan of several presets runs one benchmark "
               "per preset into OUTPUT-DIR/PRESET (--model runs only that one). Plans of data = \"tokens\" "
               "need --data DIR. See docs/benchmark.md.")
# Outcomes that call for a fix (a crash, a hang) or a rerun (a cell stopped by a signal: --resume runs it
# again) make the exit status 1; oom and skipped are results.
FAILING = ("failed", "timeout", "interrupted")


def split_list(text: str, option: str) -> tuple[str, ...]:
    items = tuple(s.strip() for s in text.split(",") if s.strip())
    if not items:
        raise ParallaxError(f"{option} is empty; give a comma-separated list")
    return items


def split_seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in split_list(text, "--seeds"))
    except ValueError:
        raise ParallaxError(f"--seeds must be comma-separated integers, got '{text}'") from None


def split_gpus(text: str, device: str) -> tuple[int, ...]:
    """``--gpus 1,2,all``: each count checked against the visible GPUs (``plan.world.resolve_gpus``)."""
    from parallax.plan.world import resolve_gpus

    return tuple(resolve_gpus(item, device) for item in split_list(text, "--gpus"))


def data_choice(synthetic: bool, hf: bool, data: str | None) -> dict:
    if synthetic + hf + (data is not None) > 1:
        raise ParallaxError("choose one of --synthetic, --hf and --data PATH")
    if data is not None:
        return {"synthetic": False, "data": str(Path(data).resolve())}
    return {"synthetic": not hf, "data": None}


@click.command(epilog=PLAN_EPILOG)
@click.option("--plan", default=None, metavar="NAME|FILE",
              help="Run an experiment plan: a shipped one by name (--list-plans) or a TOML file. The plan "
                   "fills the options; an option given here replaces the plan's value.")
@click.option("--list-plans", is_flag=True, help="List the shipped plans, one line each, and exit.")
@click.option("--frameworks", default=",".join(DEFAULT_FRAMEWORKS), show_default=True,
              help=f"Comma-separated: {', '.join(ENGINE_FRAMEWORKS)}.")
@click.option("--precisions", default=",".join(DEFAULT_FORMATS), show_default=True,
              help=f"Comma-separated formats ({', '.join(PRECISIONS)}): each framework's default recipe "
                   "of each. A recipe this GPU or installation cannot run is recorded as skipped with the reason.")
@click.option("--recipes", default="", metavar="LIST",
              help="More cells: recipe names (e.g. te-fp8-current,torchao-fp8-tensorwise), 'all', or "
                   "FORMAT:all (every recipe of a format), each optionally after FRAMEWORK: (torch:te-bf16); "
                   "parallax check-env lists the recipes.")
@click.option("--tunings", default="default", show_default=True, metavar="LIST",
              help="Knob sets, a matrix axis (docs/tuning.md): FRAMEWORK:NAME (torch:reduce-overhead, jax:lhs) or a "
                   "NAME for every framework ('tuned': each recipe's chosen one); a framework none names runs "
                   "default. Each knob set a recipe can take is a cell of its own.")
@click.option("--max-loss-gap", type=float, default=DEFAULT_MAX_LOSS_GAP, show_default=True,
              help="Numerics guard: a low-precision cell whose final loss exceeds its bf16 twin's by more "
                   "than this many nats is recorded as failed.")
@click.option("--model", default=DEFAULT_MODEL, show_default=True, help=defaults.model_help())
@click.option("--batch-size", type=int, default=None,
              help=f"Sequences per step.  [default: {defaults.sizes_help('batch_size')}]")
@click.option("--seq-len", type=int, default=None,
              help=f"Tokens per sequence.  [default: {defaults.sizes_help('seq_len')}]")
@click.option("--convergence", is_flag=True,
              help="A convergence benchmark: real tokens, held-out evaluation and seeds paired, for the loss "
                   f"penalty of each format (defaults: --steps {CONVERGENCE_DEFAULTS['steps']}, --eval-every "
                   f"{CONVERGENCE_DEFAULTS['eval_every']}, --seeds {CONVERGENCE_DEFAULTS['seeds']}). Without it "
                   "the benchmark measures speed, and its losses are early-training figures.")
@click.option("--steps", type=int, default=None,
              help=f"Training steps per run, warm-up included.  [default: {DEFAULTS.steps}; "
                   f"{CONVERGENCE_DEFAULTS['steps']} with --convergence]")
@click.option("--warmup", type=int, default=None,
              help="First steps excluded from timing." + WARMUP_HELP)
@click.option("--synthetic", is_flag=True, help="Synthetic batches (the default): pure compute.")
@click.option("--hf", is_flag=True, help="Stream TinyStories from HuggingFace.")
@click.option("--data", type=click.Path(exists=True, dir_okay=True), default=None,
              help="A prepared token directory or a raw corpus (see 'parallax data').")
@click.option("--epochs", type=float, default=None,
              help="Passes over the training tokens allowed (--data/--hf; default: at most one).")
@click.option("--gpus", "gpus", default="1", show_default=True, metavar="LIST",
              help="Comma-separated GPU counts per cell, a matrix axis (e.g. 1,2,all): the report states the "
                   "scaling of each N-GPU cell against the 1-GPU cell. --batch-size is per GPU.")
@click.option("--sharding", type=click.Choice(SHARDINGS), default=DEFAULTS.sharding, show_default=True,
              help="How the cells of several GPUs hold the weights: ddp (replicated) or fsdp (sharded).")
@click.option("--seeds", default=None, help="Comma-separated seeds; each is a run (runs of one seed share weights "
              f"and batches, so recipes pair up by seed).  [default: 0; {CONVERGENCE_DEFAULTS['seeds']} with "
              "--convergence]")
@click.option("--repeats", type=int, default=1, show_default=True,
              help="Runs per seed (timing repeats), spread over the session.")
@click.option("--eval-every", type=int, default=None,
              help=f"Steps between evaluations on the held-out split (0: never).  [default: {DEFAULTS.eval_every}; "
                   f"{CONVERGENCE_DEFAULTS['eval_every']} with --convergence]")
@click.option("--eval-batches", type=int, default=DEFAULTS.eval_batches, show_default=True)
@click.option("--no-compile", is_flag=True,
              help="Run torch eagerly (no torch.compile); JAX always compiles its step with XLA.")
@click.option("--cuda-graphs", type=click.Choice(CUDA_GRAPHS), default=DEFAULTS.cuda_graphs, show_default=True,
              help="Replay the blocks of the TransformerEngine cells as CUDA graphs: auto = on a GPU, on = "
                   "required (a TE cell that cannot is skipped), off = never. Other cells have no capture "
                   "and run without.")
@click.option("--device", default=None, help=f"auto, cpu, cuda or cuda:N.  [default: {DEFAULTS.device}; "
              f"cpu where --model {AUTO_MODEL} finds no GPU]")
@click.option("--peak-tflops", type=float, default=None, help="Peak TFLOP/s for MFU on an unknown GPU.")
@click.option("--output-dir", default=DEFAULT_OUTPUT_DIR, show_default=True, type=click.Path(file_okay=False))
@click.option("--report", is_flag=True, help="Write report.md, report.html, plots and a CSV/JSON export at the end.")
@click.option("--resume", is_flag=True, help="Run only the cells of --output-dir that have no result yet "
              "(and runs added to the same configuration: more recipes, seeds or repeats).")
@click.option("--concurrent", type=int, default=1, show_default=True,
              help="Cells run at once on the GPU. Above 1, for loss studies only (--convergence): their "
                   "throughput is not measured (the report shows none).")
@click.option("--timeout-per-run", type=float, default=None,
              help="Seconds before a cell is stopped and recorded as timeout.")
@LOG_OPTION
@click.pass_context
def command(ctx, plan, list_plans, log, **options):
    """Run the benchmark matrix: every framework × recipe × seed × repeat in its own process."""
    from parallax import plans

    if list_plans:
        from rich.table import Table
        from rich.text import Text

        from parallax.analysis.report.terminal import console_for_output, fit

        console, table = console_for_output(), Table(box=None, show_header=False, padding=(0, 2, 0, 0))
        for name, description in plans.listing():
            table.add_row(Text(name), Text(description))
        console.print(fit(table, console))
        return 0
    watch(log)  # each cell its own TensorBoard/W&B run, named by the cell
    if plan is None:
        return benchmark(**options)
    given = {k for k in options if ctx.get_parameter_source(k) is not ParameterSource.DEFAULT}
    runs = plans.benchmark_runs(plans.load(plan), options, given)  # the plan's errors before any cell
    return max(benchmark(**run) for run in runs)


def benchmark(frameworks, precisions, recipes, tunings, max_loss_gap, model, batch_size, seq_len, convergence, steps, warmup,
            synthetic, hf, data, epochs, gpus, sharding, seeds, repeats, eval_every, eval_batches, no_compile, cuda_graphs,
            device, peak_tflops, output_dir, report, resume, concurrent, timeout_per_run):
    """One benchmark of the options as the command line gives them."""
    defaults_of_mode = CONVERGENCE_DEFAULTS if convergence else {"steps": DEFAULTS.steps, "seeds": "0",
                                                                  "eval_every": DEFAULTS.eval_every}
    steps = defaults_of_mode["steps"] if steps is None else steps
    warmup = default_warmup(steps) if warmup is None else warmup
    seeds = defaults_of_mode["seeds"] if seeds is None else seeds
    eval_every = defaults_of_mode["eval_every"] if eval_every is None else eval_every
    sizes = {k: v for k, v in (("batch_size", batch_size), ("seq_len", seq_len), ("device", device)) if v is not None}
    base, note = defaults.run_config(
        {"model": model, **sizes, "steps": steps, "warmup": warmup, "eval_every": eval_every,
         "eval_batches": eval_batches, "compile": not no_compile, "cuda_graphs": cuda_graphs, "peak_tflops": peak_tflops, "epochs": epochs,
         "sharding": sharding, **data_choice(synthetic, hf, data)}, doing="benchmarking")
    formats = tuple(registry.check_format(p) for p in split_list(precisions, "--precisions"))
    selectors = formats + (split_list(recipes, "--recipes") if recipes else ())
    matrix = Matrix(split_list(frameworks, "--frameworks"), selectors, split_seeds(seeds), repeats, base,
                    max_loss_gap, concurrent, split_gpus(gpus, device or "auto"),
                    "convergence" if convergence else "throughput", split_list(tunings, "--tunings")).validate()
    config_schema.check_option("timeout_per_run", timeout_per_run)
    writable_output_dir(output_dir)  # before any cell runs, as `train` does
    console = Console(stderr=True)
    if convergence and len(matrix.seeds) < 2:
        say("parallax: warning: one seed: the convergence penalty will have no interval (give --seeds 0,1 or more)")
    try:
        with interrupt.catching(), LiveDisplay(console, steps, note) as display:
            results = run_matrix(matrix, Path(output_dir), resume=resume, timeout_s=timeout_per_run,
                                 display=display)
    except KeyboardInterrupt as exc:  # the running cell is recorded as interrupted; --resume runs it again
        stop = interrupt.of(exc)
        error = ParallaxError(f"interrupted by {stop.name}: the cells that finished are kept in {output_dir}; "
                              "'parallax benchmark --resume' with the same options runs the rest")
        error.exit_code = stop.exit_code
        raise error from None
    summarise(Path(output_dir), report)
    if results and all(r.status == "skipped" for r in results):  # train refused every cell: so does benchmark
        reason = (results[0].error or "no reason recorded").splitlines()[0]
        raise ParallaxError(f"every cell was refused, nothing was measured; the first: {results[0].cell.label}: "
                            f"{reason}")
    failing = [r for r in results if r.status in FAILING]
    return 1 if failing else 0


def summarise(output_dir: Path, report: bool) -> None:
    """The terminal table, and with --report the Markdown report, plots and exports."""
    from parallax.analysis.compare import build_comparison
    from parallax.analysis.report import terminal, write_report

    from parallax.cli.compare import warn_problems

    record = build_comparison(output_dir)
    terminal.render(record)
    warn_problems(record)
    if report:
        written = write_report(record, output_dir / "report.md")
        Console(stderr=True).print(f"report: {written['report']} (in a browser: {written['html']})", highlight=False)


class LiveDisplay:
    """The matrix's live progress: one bar over all cells with an ETA, one for the cell that runs."""

    def __init__(self, console: Console, steps: int, note: str | None = None):
        self.console, self.steps = console, steps
        self.note = note  # what --model auto chose: said once the matrix is known to be good
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                 console=console, transient=True)
        self.matrix_task = None
        self.cell_tasks: dict[str, int] = {}  # cell id -> its bar (several with --concurrent)
        self.cell_steps: dict[str, int] = {}
        self.done_steps = 0
        # no terminal (a log file, CI): the bars draw nothing until the end; print step k/N lines
        self.plain = not console.is_terminal
        self.gate = TenthsGate(steps)

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def matrix_started(self, matrix, results):
        if self.note:
            self.say(f"parallax: {self.note}")
        todo = [r for r in results if r.status == "pending"]
        reused = len(results) - len(todo)
        if reused:
            self.console.print(f"resuming: {reused} of {len(results)} cells already have a result", highlight=False)
        self.matrix_task = self.progress.add_task(f"matrix ({len(todo)} cells to run)",
                                                  total=max(1, len(todo) * self.steps))

    def cell_started(self, cell):
        self.cell_tasks[cell.id] = self.progress.add_task(cell.label, total=self.steps)
        self.cell_steps[cell.id] = 0

    def cell_progress(self, cell, record):
        task = self.cell_tasks[cell.id]
        if "phase" in record:
            self.progress.update(task, description=f"{cell.label} · {record['phase']}")
            if self.plain:
                self.console.print(f"  {cell.label}: {record['phase']}", highlight=False, markup=False)
            return
        step = min(int(record.get("step", 0)) + 1, self.steps)  # "step" is the 0-based index
        self.cell_steps[cell.id] = step
        loss, ms = record.get("loss"), record.get("step_ms")
        if self.plain and self.gate(cell.id, step):
            self.console.print("  " + step_line(cell.label, step, self.steps, loss, ms), highlight=False, markup=False)
        text = cell.label + (f" · loss {loss:.3f}" if loss is not None else "") + (f" · {ms:.1f} ms" if ms else "")
        self.progress.update(task, completed=step, description=text)
        self.progress.update(self.matrix_task, completed=self.done_steps + sum(self.cell_steps.values()))

    def cell_finished(self, result):
        self.done_steps += self.steps
        self.cell_steps.pop(result.cell.id, None)
        self.progress.update(self.matrix_task, completed=self.done_steps + sum(self.cell_steps.values()))
        self.progress.remove_task(self.cell_tasks.pop(result.cell.id))
        colour = {"ok": "green", "skipped": "yellow"}.get(result.status, "red")
        reason = f": {result.error.splitlines()[0]}" if result.error else ""
        self.console.print(f"[{colour}]{result.status:>7}[/] {escape(result.cell.label)} "
                           f"({result.elapsed_s:.1f} s){escape(reason)}", highlight=False)

    def warning(self, text):
        self.say(f"parallax: warning: {text}")

    def say(self, line: str) -> None:
        """``line`` as ``errors.say`` shows it (wrapped on a terminal, one line in a log), above the bars."""
        width = self.console.width if self.console.is_terminal else None
        self.console.print(fitted(line, width), highlight=False, markup=False, soft_wrap=True)

    def matrix_finished(self, results):
        counts = {}
        for r in results:
            counts[r.status] = counts.get(r.status, 0) + 1
        self.console.print("cells: " + ", ".join(f"{n} {s}" for s, n in counts.items()), highlight=False)
