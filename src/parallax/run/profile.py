"""The driver of ``parallax profile``: one run's plan (resolved once by the command) profiled on
this machine, and its files written into the output folder: profile.md, profile.json,
profile.png, profile.html, and with ``keep_trace`` the trace.

In order: the engine's checks (a bad run ends there, nothing measured), the GEMM and HBM limits
(check-env's cached ceilings and copy bandwidth, else a short cuBLASLt measurement and a copy:
``plan.limits``), the engine's
step timed and profiled (``engines.profiler``; MaxText in its own process:
``engines/maxtext/profile.py``) and attention's backends measured at the run's shape, then the
table (``analysis/profile.py``).
"""

from __future__ import annotations

from pathlib import Path

from parallax.analysis import profile as table
from parallax.analysis.report import html
from parallax.analysis.report import profile as report
from parallax.engines import profiling
from parallax.plan import limits, machine
from parallax.plan.resolve import RunPlan
from parallax.spec import step_work
from parallax.store.results import atomic_write_json, atomic_write_text, writable_output_dir


def run_steps(framework: str, warmup: int, steps: int) -> int:
    """The run's ``steps``: warm-up, timed, profiled (MaxText one more: ``maxtext/profile.py``)."""
    return warmup + 2 * steps + (framework == "maxtext")


def stages(warmup: int, steps: int) -> list[tuple[str, int]]:
    """The run's steps in order, by stage: what the progress counts (``run.progress.ProfileProgress``)."""
    return [("warm-up", warmup), ("timed", steps), ("profiled", steps)]


NO_PROBE = "unknown: the native probe sees no GPU here (parallax check-env says why)"


def profile_run(plan: RunPlan, warmup: int, steps: int, out: Path, keep_trace: bool = False,
                say=lambda text: None, progress=None) -> dict:
    """Profile ``plan`` (``steps`` timed, then as many profiled, after ``warmup``) and write its
    files into ``out``; the record (profile.json). ``say(text)``: where its phases are told;
    ``progress`` (``engines.base.Progress``): each step, numbered over ``stages``."""
    out = writable_output_dir(out)
    run, model = plan.run, plan.run.model_config
    gpu = machine.gpu_of(run.device)
    formats = step_work.linear_formats(model, plan.recipe)
    gemm, hbm = {}, {}

    def measure_gemms():  # once the engine has accepted the run, before its steps
        say("measuring the GEMM limits")
        gemm.update(limits.gemm_limits(gpu, model, run.batch_size, run.seq_len, formats))
        if gpu is not None:
            hbm["limit"] = limits.hbm_limit(gpu)
        say(f"warming up ({warmup} steps), then {steps} timed and {steps} profiled")

    profiled = _profile(plan, warmup, steps, out, keep_trace, measure_gemms, progress)
    summary = profiling.summarize(profiled.events, steps)
    record = table.build_record(
        title=f"{run.framework} {run.recipe}", config=run.to_dict(), recipe=plan.recipe.to_dict(),
        framework={**profiled.details, "name": run.framework, "device": profiled.device},
        environment=machine.environment(), timing=_timing(profiled, warmup, steps, run.tokens_per_step),
        on_gpu=profiled.on_gpu, summary=summary,
        work=step_work.step_work(model, run.batch_size, run.seq_len, plan.recipe),
        limits=_limits(plan, profiled, gpu, gemm, hbm.get("limit"), set(formats.values())),
        notes=_notes(plan, profiled, summary))
    write(record, out)
    return record


def _limits(plan: RunPlan, profiled, gpu: dict | None, gemm: dict, hbm, formats: set[str]) -> dict:
    """The record's limits: GEMMs by format, HBM, attention; none on the CPU, unknown on a GPU
    that the native probe does not see."""
    if not profiled.on_gpu or gpu is None:
        missing = limits.Limit(None, limits.ON_THE_CPU if not profiled.on_gpu else NO_PROBE)
        gemm, hbm = {fmt: missing for fmt in formats}, missing
    elif hbm is None:
        hbm = limits.hbm_limit(gpu, measure=False)
    return {"gemm": {fmt: lim.to_dict() for fmt, lim in sorted(gemm.items())}, "hbm": hbm.to_dict(),
            "attention": _attention(plan, profiled)}


def _profile(plan: RunPlan, warmup: int, steps: int, out: Path, keep_trace: bool, before, progress):
    if plan.run.framework == "maxtext":
        from parallax.engines.maxtext import profile as maxtext

        return maxtext.profile(plan, warmup, steps, out, keep_trace, before, progress)
    from parallax.data.source import make_batch_source
    from parallax.engines import profiler

    return profiler.profile(plan, make_batch_source(plan.run), warmup, steps, out if keep_trace else None, before,
                            progress)


def _timing(profiled, warmup: int, steps: int, tokens: int) -> dict:
    return {"step_ms": profiled.step_ms, "tokens_per_s": tokens / profiled.step_ms * 1e3, "warmup_steps": warmup,
            "timed_steps": steps, "profiled_steps": steps, "method": profiled.timing}


def _attention(plan: RunPlan, profiled) -> dict:
    run, model = plan.run, plan.run.model_config
    if not profiled.on_gpu:
        none = {"value": None, "source": limits.ON_THE_CPU}
        return {"forward": none, "backward": none, "rates": []}
    per_layer = step_work.attention_flops(model, run.batch_size, run.seq_len)
    shape = f"B×S×H×D {run.batch_size}×{run.seq_len}×{model.n_heads}×{model.head_dim}"
    framework = "torch" if run.framework == "torch" else "jax"
    found = table.attention_limits(profiled.attention_rates, per_layer["forward"] / model.n_layers,
                                   per_layer["backward"] / model.n_layers, shape, framework)
    return {**found, "rates": profiled.attention_rates}


def _notes(plan: RunPlan, profiled, summary: dict) -> list[str]:
    notes = []
    if not profiled.on_gpu:
        notes.append("no GPU: the CPU operators of the profiled steps, torch's each charged its self time, XLA:CPU's "
                     "ops their duration")
    if summary["busy_method"] == profiling.BUSY_SUM:
        notes.append("the profiler gave no start times: busy = the summed kernel time")
    if plan.run.framework != "torch" and profiled.on_gpu:
        notes.append("this engine runs wq, wk, wv (and w_gate, w_up) as separate GEMMs; the GEMM ceiling is of the "
                     "fused shapes, a little faster than its own")
    if plan.run.framework == "maxtext" and not plan.run.synthetic:
        notes.append("MaxText was profiled on its synthetic data, not on the run's --data")
    if profiled.trace is not None:
        notes.append(f"trace: {profiled.trace.name}")
    return notes


def write(record: dict, out: Path) -> dict[str, Path]:
    """profile.json, profile.md, profile.png and profile.html (the table and the bars in one
    page) in ``out``."""
    paths = {"json": out / "profile.json", "md": out / "profile.md", "png": out / "profile.png",
             "html": out / "profile.html"}
    atomic_write_json(paths["json"], record)
    text = report.markdown(record)
    atomic_write_text(paths["md"], text)
    report.write_plot(record, paths["png"])
    html.write_markdown_page(paths["html"], f"Where the step goes: {record['title']}", text,
                             {"ms per class (black: the time at the class's limit)": paths["png"]})
    return paths


def compare(paths: list[Path], out: Path, cross_machine: bool = False) -> dict:
    """profile_compare.md/.json/.png of the profile.json files ``paths``, in ``out``."""
    import json

    from parallax.errors import ParallaxError

    records = []
    for path in paths:
        try:
            records.append(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as exc:
            raise ParallaxError(f"--compare {path}: not a readable profile.json ({exc}); pass the profile.json "
                                "that parallax profile wrote") from None
        if records[-1].get("schema") != table.SCHEMA:
            raise ParallaxError(f"--compare {path}: not a profile.json of parallax profile "
                                f"(schema {records[-1].get('schema')!r}); profile the run again")
    names = [str(p) for p in paths]
    table.check_one_machine(records, names, cross_machine)
    compared = table.comparison(records, names)
    out = writable_output_dir(out)
    atomic_write_json(out / "profile_compare.json", compared)
    text = report.compare_markdown(compared)
    atomic_write_text(out / "profile_compare.md", text)
    report.write_compare_plot(compared, out / "profile_compare.png")
    html.write_markdown_page(out / "profile_compare.html", "Where the step goes: "
                             + " vs ".join(p["title"] for p in compared["profiles"]), text,
                             {"ms per class in each profile": out / "profile_compare.png"})
    return compared
