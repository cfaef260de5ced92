"""GitHub-flavoured Markdown report of a comparison record (``parallax.analysis.compare``)."""

from __future__ import annotations

import statistics
from datetime import datetime, timezone

from parallax import __version__
from parallax.analysis.compare import environment_summary
from parallax.spec.flops import PRIMARY_ACCOUNTING as PRIMARY
from parallax.analysis.report import format as f
from parallax.plan import capability as cap


def render(record: dict, plots: dict[str, str] | None = None) -> str:
    """The whole report; ``plots`` maps plot names to paths relative to the report."""
    parts = [
        _title(record),
        _environment(record),
        _configuration(record),
        _conclusions(record),
        _stacks(record),
        _throughput(record),
        _scaling(record),
        _speedups(record),
        _tuning(record),
        _cross_machine(record),
        _machines(record),
        _loss(record),
        _eval_deltas(record),
        _penalty_ranking(record),
        _flops(record),
        _maxtext_own(record),
        _not_ok(record),
        _baseline(record),
        _problems(record),
        _plots(record, plots),
        _method(record),
    ]
    return "\n\n".join(p for p in parts if p) + "\n"


def table(header: list[str], rows: list[list[str]]) -> str:
    def line(cells):
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header))] + [line(r) for r in rows])


def _gpus_column(record: dict, entry: dict | None = None) -> list[str]:
    """The GPUs column of a table, present only when some cell ran on several GPUs: its header
    (no ``entry``) or the entry's count."""
    if not f.several_gpus(record):
        return []
    return ["GPUs"] if entry is None else [str(entry.get("gpus") or 1)]


def _title(record: dict) -> str:
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"# Parallax benchmark report\n\nResults: `{record['results_dir']}` · "
            f"generated {now} by Parallax {__version__}")


def _environment(record: dict) -> str:
    env = environment_summary(record.get("environment") or {})
    memory = ", ".join(f"{m} GiB" for m in env["gpu_memory_gib"])
    packages = ", ".join(f"{k} {v}" for k, v in env["packages"].items()) or f.NA
    rows = [["GPU", env["gpu"] + (f" · {memory}" if memory else "")]]
    if env.get("interconnect"):
        rows.append(["Interconnect", env["interconnect"]])
    rows += [
            ["Driver", env["driver"] or f.NA], ["Python", env["python"] or f.NA],
            ["Platform", env["platform"] or f.NA], ["Parallax", env["parallax"] or f.NA],
            ["Packages", packages], ["Captured", env["captured_at"] or f.NA]]
    return "## Environment\n\n" + table(["", ""], rows)


def _configuration(record: dict) -> str:
    cfg, matrix = record.get("config") or {}, record.get("matrix") or {}
    if not cfg:
        return ""
    data = cfg.get("data") or ("synthetic batches" if cfg.get("synthetic") else "HuggingFace TinyStories")
    tokens = cfg["batch_size"] * cfg["seq_len"]
    counts = sorted({c.get("gpus") or 1 for c in record["cells"]})
    if counts != [1]:
        lines = [
            f"- Model: `{cfg['model']}`; per-GPU batch {cfg['batch_size']} × sequence {cfg['seq_len']} = "
            f"{tokens:,} tokens per GPU per step; GPUs {', '.join(map(str, counts))} (global batch = per-GPU "
            f"batch × GPUs); sharding {cfg.get('sharding', 'ddp')} on several GPUs",
        ]
    else:
        lines = [
            f"- Model: `{cfg['model']}`; batch {cfg['batch_size']} × sequence {cfg['seq_len']} = "
            f"{tokens:,} tokens per step",
        ]
    epochs = sorted({round(c["epochs"], 2) for c in record["cells"] if c.get("epochs") is not None})
    seen = (f" ({', '.join(f'{e:g}' for e in epochs)} epochs of the training tokens)" if epochs else
            " (synthetic tokens: the loss says nothing about learning)" if cfg.get("synthetic") else "")
    lines += [
        f"- Mode: {record.get('mode', 'throughput')}"
        + (" (validation on held-out tokens, losses paired by seed)" if record.get("mode") == "convergence" else
           " (speed; losses are early-training figures)"),
        f"- Steps: {cfg['steps']}, of which the first {cfg['warmup']} are warm-up and not measured{seen}",
        f"- Data: {data}; compiled: {_compiled(cfg)}; device: {cfg.get('device')}",
    ]
    if matrix:
        selectors = matrix.get("recipes") or matrix.get("precisions") or []
        lines.append(f"- Matrix: frameworks {', '.join(matrix['frameworks'])}; precisions and recipes "
                     f"{', '.join(selectors)}; seeds {', '.join(map(str, matrix['seeds']))}; "
                     f"{matrix['repeats']} repeat(s) per seed"
                     + (f"; loss guard {matrix['max_loss_gap']:g} nats against the bf16 twin"
                        if "max_loss_gap" in matrix else ""))
    return "## Configuration\n\n" + "\n".join(lines)


def _compiled(cfg: dict) -> str:
    compiled = cfg.get("compiled") or {}
    return ", ".join(f"{fw} {'yes' if on else 'no'}" for fw, on in compiled.items()) or f.NA


def _run_label(record: dict, entry: dict) -> str:
    """native, emulated or cpu (``plan.capability.run_label``) of the cell a conclusion names."""
    cell = next((c for c in record["cells"] if (c["framework"], c.get("recipe"), c.get("gpus", 1)) ==
                 (entry["framework"], entry.get("recipe"), entry.get("gpus", 1))), None)
    if cell and cell.get("precision_info"):
        return cap.run_label(cell["precision_info"])
    return cap.EMULATED if entry.get("native") is False else cap.NATIVE


def _conclusions(record: dict) -> str:
    c = record["conclusions"]
    ok = any((cell.get("counts") or {}).get("ok") for cell in record["cells"])
    lines = [] if c["fastest"] else [
        "- No throughput to compare: the cells' speed was not measured (see the note below)." if ok
        else "- No cell finished with a result."]
    for e in c["fastest"]:
        word = _run_label(record, e)
        label = e["precision"] + ("" if word == cap.NATIVE else f" ({word})") + f.gpus_text(e.get("gpus"))
        stack = f"{e['framework']} {e.get('recipe', '')}".strip()
        if e["runner_up"] is None:
            lines.append(f"- **Fastest at {label}:** {stack}, {f.num(e['tokens_per_s'])} tokens/s "
                         "(the only stack with a result)")
        elif e["distinguishable"]:
            lines.append(f"- **Fastest at {label}:** {stack}, {f.num(e['tokens_per_s'])} tokens/s, "
                         f"{f.ratio(e['ratio'])} {e['runner_up']} (95% CI {f.ci(e['ci'], f.ratio)})")
        else:
            lines.append(f"- **At {label}:** {stack} and {e['runner_up']} are not distinguishable: "
                         f"{f.ratio(e['ratio'])} (95% CI {f.ci(e['ci'], f.ratio)} includes 1)")
        if e.get("cross_machine"):
            lines[-1] += f" — **cross-machine** ({' vs '.join(e['machines'])}): {e['note']}"
    for d in c["loss_cost"]:
        lines.append(f"- **Convergence penalty of {d['recipe']} ({d['framework']}{f.gpus_text(d.get('gpus'))}):** "
                     f"validation ΔLoss {f.delta(d['delta_at_best'])} vs {d['baseline']} at bf16's best step "
                     f"{f.step(d['best_step'])} ({f.penalty_interval(d, 'best')})")
    if record.get("mode") != "convergence" and any(cell.get("final_loss") for cell in record["cells"]):
        lines.append("- Loss: these are throughput runs; their loss is early training, one run per seed and "
                     "repeat, not a convergence penalty, and no conclusion is drawn from it "
                     "(`parallax benchmark --convergence` measures the penalty).")
    for e in c["emulated"]:
        lines.append(f"- {e.get('recipe', e['precision'])} on {e['framework']}{f.gpus_text(e.get('gpus'))} ran "
                     "**emulated** (not the native format): its loss shows the format's numerics, its speed is not "
                     "the format's speed")
    for e in c["not_ok"]:
        lines.append(f"- {f.stack(e)}: **{e['status']}** (see below)")
    for group in record.get("scaling") or []:
        best = max((r for r in group["rows"] if r["efficiency"]), key=lambda r: r["gpus"], default=None)
        if best is not None:
            e = best["efficiency"]
            lines.append(f"- **Scaling of {group['framework']} {group['recipe']} to {best['gpus']} GPUs:** "
                         f"{f.efficiency(e)} of ideal ({f.num(best['tokens_per_s']['value'])} tokens/s)")
        elif group["note"]:
            lines.append(f"- Scaling of {group['framework']} {group['recipe']}: {group['note']}")
    for note in sorted({n for cell in record["cells"] for n in cell.get("notes") or []}):
        lines.append(f"- Note: {note}")
    return "## Conclusions\n\n" + "\n".join(lines)


def _stacks(record: dict) -> str:
    """What each cell ran: versions, device, attention, compilation (and CUDA graphs of the blocks,
    ``framework.cuda_graphs``), recipe, timing method."""
    rows = []
    for c in record["cells"]:
        fw, p = c.get("framework_info"), c.get("precision_info")
        if not fw:
            continue
        attention = (fw.get("attention_backend") or f.NA) + (" (fell back)" if c.get("attention_fallback") else "")
        rows.append([c["framework"], f.precision_label(c), *_gpus_column(record, c), fw.get("version") or f.NA,
                     c.get("machine") or fw.get("device_name") or fw.get("device") or f.NA, attention,
                     ("yes" if fw.get("compiled") else "no") + (" + CUDA graphs" if fw.get("cuda_graphs") else ""),
                     f"{p.get('recipe')} ({p.get('backend')}, {cap.run_label(p)})", c.get("timing_method") or f.NA])
    if not rows:
        return ""
    return "## Stacks\n\n" + table(["Framework", "Precision", *_gpus_column(record), "Version", "Machine",
                                     "Attention", "Compiled", "Recipe", "Step timing"], rows)


def _throughput(record: dict) -> str:
    rows = []
    for c in record["cells"]:
        fl = (c["flops"] or {}).get(PRIMARY, {})
        mem = c["memory"] or {}
        step = c["step_ms"]
        rows.append([
            c["framework"], f.precision_label(c), *_gpus_column(record, c), c["status"],
            f"{f.num(step['median'])} ({f.num(step['p10'])}–{f.num(step['p90'])})" if step else f.NA,
            f.value_ci((c["tokens_per_s"] or {}).get("value"), (c["tokens_per_s"] or {}).get("ci"))
            + (" (input-bound)" if c.get("input_bound") else ""),
            f.num(fl.get("tflops")), f.pct(fl.get("mfu_precision_peak")),
            f"{f.gib(mem.get('peak_allocated_bytes'))} / {f.gib(mem.get('peak_reserved_bytes'))}" if mem else f.NA,
            f.seconds(c["compile_s"]),
        ])
    header = ["Framework", "Precision", *_gpus_column(record), "Runs", "Step ms median (p10–p90)",
              "Tokens/s (95% CI)", "TFLOP/s", "MFU", "Peak memory allocated / reserved", "Compile"]
    note = (f"TFLOP/s and MFU use the `{PRIMARY}` FLOPs accounting (6·P + 12·L·S·d); MFU is against "
            "the dense peak of the cell's precision on this GPU (n/a where no honest peak is known). "
            "Other accountings and denominators are in the FLOPs table.")
    if f.several_gpus(record):
        note += (" On several GPUs tokens/s is the whole cell's (global batch), TFLOP/s and MFU are per GPU, "
                 "peak memory is the largest GPU's, and each step's time is the slowest rank's.")
    return "## Throughput\n\n" + table(header, rows) + "\n\n" + note


def _scaling(record: dict) -> str:
    """Per framework × recipe that ran on several GPU counts: each count's throughput, per-GPU
    figures and scaling efficiency against the 1-GPU cell (``compare.scaling``)."""
    groups = record.get("scaling") or []
    if not groups:
        return ""
    header = ["GPUs", "Global batch", "Tokens/s (95% CI)", "Tokens/s per GPU", "MFU per GPU",
              "Peak memory per GPU allocated / reserved", "Step ms, slowest rank (median)",
              "Scaling efficiency (95% CI)"]
    parts = ["## Scaling"]
    for g in groups:
        rows = []
        for r in g["rows"]:
            tps, per_gpu = r["tokens_per_s"] or {}, r["tokens_per_s_per_gpu"] or {}
            rows.append([str(r["gpus"]), f.NA if r["global_batch"] is None else str(r["global_batch"]),
                         f.value_ci(tps.get("value"), tps.get("ci")) if tps else r["status"],
                         f.num(per_gpu.get("value")), f.pct(r["mfu_per_gpu"]),
                         f"{f.gib(r['peak_allocated_bytes_per_gpu'])} / {f.gib(r['peak_reserved_bytes_per_gpu'])}",
                         f.num(r["step_ms_median"]),
                         "100% (baseline)" if r["gpus"] == g["baseline_gpus"] and r["efficiency"] else
                         f.efficiency(r["efficiency"])])
        text = f"### {g['framework']} {g['recipe']} ({g['precision']})\n\n" + table(header, rows)
        if g["note"]:
            text += f"\n\nNote: {g['note']}."
        parts.append(text)
    parts.append("Scaling efficiency = tokens/s on N GPUs ÷ (N × tokens/s on 1 GPU), against the 1-GPU cell of "
                 "this matrix; 100% is linear scaling. The per-GPU batch is fixed, so N GPUs train on N times the "
                 "global batch (weak scaling). Its 95% interval is the ratio of the two cells' bootstrap replicates "
                 "(independent runs) ÷ N. Each step's time is the slowest rank's: the step ends when every rank "
                 "has finished it. MFU is per GPU, against one GPU's dense peak.")
    return "\n\n".join(parts)


def _speedups(record: dict) -> str:
    if not record["speedups"]:
        return ""
    rows = [[s["label"], f.value_ci(s["ratio"], s["ci"], f.ratio), f.verdict(s)] for s in record["speedups"]]
    return ("## Speedups\n\nTokens/s of the first stack divided by tokens/s of the second.\n\n"
            + table(["Comparison", "Speedup (95% CI)", "Reading"], rows))


def _tuning(record: dict) -> str:
    """Each knob set against its recipe's default cell, the winners and the TUNED table."""
    section = record.get("tuning")
    if not section:
        return ""
    rows = [[r["framework"] + f.gpus_text(r.get("gpus")), r["recipe"], r["knob_set"],
             f.value_ci(r["tokens_per_s"]["value"], r["tokens_per_s"]["ci"]),
             "1 (the default)" if r["knob_set"] == "default" else
             (f.value_ci(r["ratio"], r["ci"], f.ratio) + f" {f.verdict(r)}" if r["ratio"] else f.NA),
             f.seconds(r["compile_s"]), _loss_agreement(r, section["loss_band"])] for r in section["rows"]]
    won = [[w["framework"] + f.gpus_text(w.get("gpus")), w["recipe"], w["knob_set"],
            f.value_ci(w["ratio"], w["ci"], f.ratio), "yes" if w["beats_default"] else "no",
            ", ".join(w["moved_loss"]) or "none"] for w in section["winners"]]
    return ("## Tuning\n\nEach knob set (`--tuning`, docs/tuning.md) against its recipe's default cell: tokens/s, "
            "its ratio over the default, the compile time it costs, and the largest |loss difference| at any step "
            f"against the default cell's run of the same seed; above {section['loss_band']:g} nats (bf16's "
            "run-to-run band) the knob set moves the loss and is never chosen.\n\n"
            + table(["Framework", "Recipe", "Knob set", "Tokens/s (95% CI)", "Over default (95% CI)", "Compile",
                     "Loss vs default"], rows)
            + "\n\nThe winner of each recipe: the fastest median among the default and the knob sets within the "
              "band; 'beats default' when its ratio's interval lies above 1.\n\n"
            + table(["Framework", "Recipe", "Winner", "Over default (95% CI)", "Beats default", "Moved the loss"], won)
            + "\n\nThe winners that beat their default, as `spec/tuning.py`'s `TUNED` (what `--tuning tuned` runs):"
              "\n\n```python\n" + section["tuned_table"] + "\n```")


def _loss_agreement(row: dict, band: float) -> str:
    if row["knob_set"] == "default":
        return "—"
    if row["loss_gap"] is None:
        return f.NA
    return f"{row['loss_gap']:.3f}" + (" **moves the loss**" if row["moves_loss"] else " (within the band)")


def _cross_machine(record: dict) -> str:
    """Ratios between cells of different machines (``--cross-machine``), apart from the others."""
    section = record.get("cross_machine")
    if not section or not section["speedups"]:
        return ""
    rows = [[s["label"], " / ".join(s["machines"]), f.value_ci(s["ratio"], s["ci"], f.ratio),
             f.ci(s["raw_ci"], f.ratio), f.verdict(s) if s["ci"] else s["note"]] for s in section["speedups"]]
    twins = [f"- {t['cell']}: {f.num(t['tokens_per_s'][0])} on {t['machines'][0]}, {f.num(t['tokens_per_s'][1])} on "
             f"{t['machines'][1]} ({t['tokens_per_s'][1] / t['tokens_per_s'][0] - 1:+.2%})" for t in section["twins"]]
    return ("## Cross-machine speedups (--cross-machine)\n\n**Not like-for-like:** the two cells ran on different "
            "machines. " + section["note"] + "\n\n"
            + table(["Comparison", "Machines", "Speedup (95% CI incl. machine spread)", "Interval over steps and runs",
                     "Reading"], rows)
            + "\n\nTwins (one cell measured on two machines):\n\n" + ("\n".join(twins) or "- none"))


def _machines(record: dict) -> str:
    """Every machine the cells ran on, and which cells."""
    machines = record.get("machines") or []
    rows = [[m["machine"], ", ".join(_gpu_text(g) for g in m["gpus"]), m["host"] or f.NA, m["driver"] or f.NA,
             ", ".join(m["cells"])] for m in machines]
    text = "## Machines\n\n" + table(["Machine", "GPUs (UUID, power limit, max SM/memory MHz)", "Host", "Driver",
                                         "Cells"], rows) if rows else ""
    return text


def _gpu_text(gpu: list) -> str:
    name, uuid, *rest = list(gpu) + [None] * (5 - len(gpu))
    if name == "cpu":
        return f"CPU ({uuid})"
    power, sm, mem = rest[:3]
    extra = ", ".join(x for x in (f"{power:g} W" if power else None, f"{sm}/{mem} MHz" if sm else None) if x)
    return f"{name} {uuid}" + (f" ({extra})" if extra else "")


def _loss(record: dict) -> str:
    deltas = {f.cell_id(d): d for d in record["loss_deltas"]}
    rows = []
    for c in record["cells"]:
        final = c["final_loss"] or {}
        d = deltas.get(f.cell_id(c))
        final_text = ("diverged (NaN)" if final.get("diverged")
                      else f.value_ci(final.get("value"), final.get("ci"), f.loss))
        rows.append([c["framework"], f.precision_label(c), *_gpus_column(record, c), final_text,
                     f"{f.value_ci(d['delta'], d['ci'], f.delta)}{' (includes 0)' if d['includes_zero'] else ''}"
                     if d else "–",
                     f.loss(c["eval_loss"]), f.num(c["perplexity"])])
    header = ["Framework", "Precision", *_gpus_column(record), "Final loss, mean of last steps (95% CI)",
              "ΔLoss vs bf16, this run's end (95% CI)", "Validation loss", "Perplexity"]
    text = "## Loss\n\n" + _loss_reading(record) + "\n\n" + table(header, rows)
    if f.several_gpus(record):
        text += ("\n\nΔLoss compares cells of one GPU count: a cell on N GPUs trains on N times the "
                 "per-GPU batch, so its loss is not comparable with a 1-GPU cell's.")
    return text


def _loss_reading(record: dict) -> str:
    epochs = sorted({round(c["epochs"], 2) for c in record["cells"] if c.get("epochs") is not None})
    seen = f", {', '.join(f'{e:g}' for e in epochs)} epochs of the training tokens" if epochs else ""
    if record.get("mode") == "convergence":
        return (f"Training loss at the end of the runs{seen}. What a format costs is the validation ΔLoss "
                "below, paired by seed.")
    return (f"**Early training, not a convergence penalty:** the training loss at the end of throughput runs "
            f"({(record.get('config') or {}).get('steps')} steps{seen}), one run per seed and repeat. Its "
            "interval covers these runs only, not what the format costs once trained; no conclusion is drawn "
            "from it.")


def _penalty_ranking(record: dict) -> str:
    """The formats of a convergence benchmark ranked by their penalty (``compare.penalty_ranking``)."""
    rows = record.get("penalty_ranking") or []
    if not rows:
        return ""
    body = [[str(r["rank"]), r["precision"] + ("" if r["label"] in (None, cap.NATIVE) else f" ({r['label']})"),
             r["framework"] + f.gpus_text(r.get("gpus")), r["recipe"], str(r["seeds"]),
             f.delta(r["delta"]), f.penalty_interval({"ci_at_best": r["ci"], "seeds": r["seeds"],
                                                      "delta_at_best": r["delta"]}, "best"),
             "–" if r["overlaps_next"] is None else ("yes: not ordered" if r["overlaps_next"] else "no")]
            for r in rows]
    note = ("Ranked by the validation ΔLoss vs the framework's bf16 at bf16's best step (each seed paired with bf16's "
            "run of that seed, averaged over seeds; Student's t interval over seeds). Two recipes whose intervals "
            "overlap are not ordered by this benchmark. A format marked emulated ran as quantize-dequantize with "
            "bf16 GEMMs: its loss is the format's numerics; its step time is the emulation's cost, not the format's "
            "speed.")
    return ("## Formats ranked by convergence penalty\n\n"
            + table(["Rank", "Format", "Framework", "Recipe", "Seeds", "ΔLoss vs bf16", "95% CI over seeds",
                     "Overlaps the next"], body)
            + "\n\n" + note)


def _eval_deltas(record: dict) -> str:
    """Validation ΔLoss against bf16, paired by seed (``compare.eval_deltas``): the convergence
    penalty in a convergence benchmark, an early-training difference otherwise."""
    rows = record.get("eval_deltas") or []
    if not rows:
        return ""
    steps = sorted({k for r in rows for k in r["steps"]})
    body = [[r["framework"] + f.gpus_text(r.get("gpus")), r["recipe"], r["baseline"], str(r["seeds"]),
             f"{f.delta(r['delta_at_best'])} at step {f.step(r['best_step'])} ({f.penalty_interval(r, 'best')})",
             f"{f.delta(r['delta_at_final'])} at step {f.step(r['final_step'])} ({f.penalty_interval(r, 'final')})",
             _by_seed(r)]
            + [f.delta(dict(zip(r["steps"], r["delta"])).get(k)) if k in r["steps"] else "–" for k in steps]
            for r in rows]
    convergence = record.get("mode") == "convergence"
    title = "Convergence penalty: validation ΔLoss vs bf16" if convergence else \
        "Validation ΔLoss vs bf16 (early training, not a convergence penalty)"
    note = ("Validation loss of the recipe minus its framework's bf16, taken per seed (the same initial weights, "
            "training batches and held-out batches) and averaged over seeds; the interval is Student's t over "
            "seeds, the unit that varies between trainings, and one seed has none. Shown at the step where "
            "bf16's validation loss is lowest and at the last evaluation.")
    return (f"## {title}\n\n"
            + table(["Framework", "Recipe", "Baseline", "Seeds", "At bf16's best step (95% CI over seeds)",
                     "At the last evaluation", "Each seed at the best step"] + [f"step {f.step(k)}" for k in steps], body)
            + "\n\n" + note)


def _flops(record: dict) -> str:
    rows = []
    for c in record["cells"]:
        for name, e in (c["flops"] or {}).items():
            rows.append([c["framework"], f.precision_label(c), *_gpus_column(record, c), name,
                         f"{e['flops_per_token']:,}",
                         f.num(e["tflops"]), f.pct(e["mfu_precision_peak"]), f.pct(e["mfu_bf16_peak"]),
                         f.pct(e["mfu_measured_ceiling"])])
    if not rows:
        return ""
    header = ["Framework", "Precision", *_gpus_column(record), "Accounting", "FLOPs/token",
              "TFLOP/s" + (" per GPU" if f.several_gpus(record) else ""), "MFU vs precision peak",
              "MFU vs bf16 peak", "MFU vs measured ceiling"]
    note = ("`spec`: 6·P + 12·L·S·d (counts the input-embedding lookup as matmul work, ~7% high); "
            "`conventional`: the same without the input embedding; `maxtext`: MaxText's own accounting.")
    return "## FLOPs accountings\n\n" + table(header, rows) + "\n\n" + note


def _by_seed(row: dict) -> str:
    """'seed 0 -0.0251, seed 1 +0.0007': each seed's ΔLoss at bf16's best step."""
    return ", ".join(f"seed {k} {f.delta(v)}" for k, v in (row.get("by_seed_at_best") or {}).items())


def _maxtext_own(record: dict) -> str:
    """MaxText's own logged figures beside ours, for every maxtext cell that has them."""
    rows = []
    for c in record["cells"]:
        own, ours = c.get("maxtext_own"), (c.get("tokens_per_s") or {}).get("value")
        if not own or not ours:
            continue
        logged, clock = own["tokens_per_s_median"], own["wallclock_tokens_per_s_median"]
        rows.append([f.precision_label(c), f"{ours:,.0f}", _per_run(logged, own.get("logged_vs_ours"), ours),
                     _per_run(clock, own.get("clock_vs_ours"), ours),
                     _beside(own["tflops_per_step"], own["parallax_maxtext_accounting_tflops_per_step"], ",.3f"),
                     f.num(own["tflops_per_s_median"]),
                     f"{own['parameters']:,.0f}" if own["parameters"] is not None else f.NA])
    if not rows:
        return ""
    header = ["Recipe", "Tokens/s (ours)", "MaxText's tokens/s/device (vs ours)", "Our clock (vs ours)",
              "MaxText's TFLOPs a step (vs our `maxtext` accounting)", "MaxText's TFLOP/s/device", "MaxText's parameters"]
    note = ("Medians over each cell's ok runs. Ours: the cell's tokens/s, from MaxText's `perf/step_time_seconds` "
            "(median step). MaxText's: the median of its logged `perf/per_device_tokens_per_sec` and "
            "`perf/per_device_tflops_per_sec` over the measured steps, and its `perf/per_device_tflops`. Our clock: "
            "the median interval between MaxText's `completed step` lines reaching us, independent of its timer. "
            "The percentages compare each run with its own tokens/s (median over the runs, and their range where "
            "they differ), not with the cell's pooled figure. "
            "Parameters: MaxText's own count of its model (`count_params.py`).")
    return "## MaxText's own figures\n\n" + table(header, rows) + "\n\n" + note + "\n\n" + MAXTEXT_DIFFERENCES


MAXTEXT_DIFFERENCES = (
    "MaxText trains the same function from the same weights on the same batches, but not the same optimisation: "
    "its warm-up starts at lr 0, one step behind ours, and its llama2 holds the query kernel as wq/√head_dim, so "
    "AdamW moves its query projection √head_dim times as far a step (8× for head_dim 64) and its gradient norm "
    "counts the query's gradient that many times. Its losses match ours closely; its gradient norms do not "
    "(docs/maxtext.md).")


def _per_run(theirs, diffs, ours) -> str:
    """MaxText's median figure with each run's difference from its own tokens/s (median, range)."""
    if theirs is None or not diffs:
        return _beside(theirs, ours)
    mid = statistics.median(diffs)
    spread = "" if max(diffs) - min(diffs) < 5e-5 else f"; runs {min(diffs):+.2%} to {max(diffs):+.2%}"
    return f"{theirs:,.0f} ({mid:+.2%}{spread})"


def _beside(theirs, ours, spec: str = ",.0f") -> str:
    if theirs is None:
        return f.NA
    return f"{theirs:{spec}} ({theirs / ours - 1:+.2%})" if ours else f"{theirs:{spec}}"


def _not_ok(record: dict) -> str:
    rows = [[run["dir"], c["framework"], f.precision_label(c), *_gpus_column(record, c), run["seed"],
             run["status"], run["error"] or ""]
            for c in record["cells"] for run in c["runs"] if run["status"] != "ok"]
    pending = [c for c in record["cells"] if c["counts"].get("pending")]
    rows += [["–", c["framework"], f.precision_label(c), *_gpus_column(record, c), "–", "pending",
              f"{c['counts']['pending']} run(s) not run yet (resume the benchmark)"] for c in pending]
    if not rows:
        return ""
    return ("## Runs without a result\n\n"
            + table(["Run", "Framework", "Precision", *_gpus_column(record), "Seed", "Status", "Reason"], rows))


def _baseline(record: dict) -> str:
    base = record.get("baseline")
    if not base:
        return ""
    rows = []
    for r in base["rows"]:
        loss = r["loss_difference"]
        rows.append([r["framework"] + f.gpus_text(r.get("gpus")), f"{r['precision']} {r.get('recipe', '')}".strip(),
                     f.value_ci(r["tokens_per_s"]["ratio"], r["tokens_per_s"]["ci"], f.ratio),
                     f.ratio(r["step_ms_ratio"]), f.ratio(r["memory_ratio"]),
                     f.value_ci(loss["delta"], loss["ci"], f.delta) if loss else f.NA])
    where = ("**cross-machine**: " + " ÷ ".join(", ".join(base["machines"][k]) or "?" for k in ("this", "baseline"))
             + ". " if base.get("cross_machine") else "same machine. ")
    text = (f"## Against the baseline\n\nBaseline: `{base['results_dir']}`, {where}Ratios are this run ÷ "
            "baseline.\n\n"
            + table(["Framework", "Precision", "Tokens/s ratio (95% CI)", "Step time ratio",
                     "Reserved memory ratio", "Final loss − baseline (95% CI)"], rows))
    for title, items in (("Configuration differences", base["config_differences"]),
                         ("Environment differences", base["environment_differences"])):
        if items:
            text += f"\n\n{title} (baseline → this run):\n\n" + "\n".join(f"- {i}" for i in items)
    for note in base.get("notes") or []:
        text += f"\n\nNote: {note}."
    return text


def _problems(record: dict) -> str:
    if not record["problems"]:
        return ""
    return ("## Problems\n\nA file named here could not be read and is not part of any number above.\n\n"
            + "\n".join(f"- `{p}`" for p in record["problems"]))


PLOT_TITLES = {"loss": "Loss curves", "throughput": "Throughput (95% CI)", "memory": "Peak memory", "mfu": "MFU",
               "scaling": "Scaling with GPUs (95% CI)"}


def _plots(record: dict, plots: dict[str, str] | None) -> str:
    """The plots written, then one line for each left out because it would be an empty frame;
    nothing where no plots were made (``plots`` None)."""
    if plots is None:
        return ""
    from parallax.analysis.report.plots import skipped

    shown = [f"![{PLOT_TITLES.get(k, k)}]({v})" for k, v in plots.items()]
    left_out = [f"- {PLOT_TITLES.get(k, k)}: not plotted, {why}." for k, why in skipped(record).items()]
    return "## Plots\n\n" + "\n\n".join(shown + (["\n".join(left_out)] if left_out else []))


def _method(record: dict) -> str:
    return "## Method\n\n" + record["statistics"]["method"]
