"""``parallax check-env``: what GPUs these are, how they are joined, what is installed, and what
Parallax can run here.

Fast by design (no torch/JAX import): the GPU facts come from the native probe, versions from
package metadata. ``--measure`` adds the achieved GEMM ceilings, which takes a minute.
"""

from __future__ import annotations

import json

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from parallax import __version__
from parallax.analysis.report.terminal import fit
from parallax.plan import envinfo, hardware, machine
from parallax.native import topology
from parallax.spec.config import PRECISIONS, RunConfig
from parallax.errors import ParallaxError
from parallax.plan import capability as cap
from parallax.spec import registry

_DEFAULTS = RunConfig()


@click.command("check-env")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document to stdout.")
@click.option("--verbose", "-v", is_flag=True,
              help="Every column and every package (wide tables); the default fits 80 columns.")
@click.option("--measure", is_flag=True, help="Also measure achieved GEMM TFLOP/s per precision (slow).")
@click.option("--device", default=0, show_default=True, help="GPU index to check and measure.")
@click.option("--model", default=_DEFAULTS.model, show_default=True,
              help="Model preset whose GEMM shapes --measure times.")
@click.option("--batch-size", default=_DEFAULTS.batch_size, show_default=True, help="Batch size for --measure shapes.")
@click.option("--seq-len", default=_DEFAULTS.seq_len, show_default=True, help="Sequence length for --measure shapes.")
def command(as_json, verbose, measure, device, model, batch_size, seq_len):
    """Show the GPUs and their interconnect, driver, package versions and the framework × precision
    capability matrix."""
    run = RunConfig(model=model, batch_size=batch_size, seq_len=seq_len).validate()
    probe = machine.probe()
    _check_device(probe, device, measure)
    report = build_report(probe, device)
    if measure:
        report["ceilings"] = measure_ceilings(probe, device, run)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        console = Console(soft_wrap=False)
        if verbose:
            render(report, console)
        else:
            render_compact(report, console)
    return 0


def _check_device(probe: dict, device: int, measure: bool) -> None:
    """Every bad request fails here, before any output or GPU work."""
    indices = [d["index"] for d in probe["devices"]]
    if measure and not indices:
        raise ParallaxError(
            f"--measure needs an NVIDIA GPU: {cap.no_gpu_reason(probe)}; run check-env without --measure"
        )
    if indices and device not in indices:
        raise ParallaxError(
            f"--device {device} does not exist; this machine has GPU index {', '.join(map(str, indices))}"
        )


def build_report(probe: dict, device: int) -> dict:
    """The one record that both the JSON and the tables are made from."""
    env = envinfo.environment(probe)
    found = bool(probe["devices"])
    return {
        "parallax": __version__,
        "gpu_found": found,
        "no_gpu_reason": None if found else cap.no_gpu_reason(probe),
        "selected_device": device if found else None,
        "environment": env,  # includes the probe: cuda_driver, nvml, gpus, gpu_topology
        "hardware": [dict(index=d["index"], **hardware.resolve_device(d).to_dict()) for d in probe["devices"]],
        "interconnect": topology.interconnect(probe),
        "capability": [c.to_dict() for c in cap.capability_matrix(probe, env["packages"], device)],
        "recipes": [r.to_dict() for r in registry.recipes()],
        "ceilings": None,
    }


def measure_ceilings(probe: dict, device: int, run: RunConfig) -> dict:
    """gpu.measure_ceilings with a progress bar on stderr, plus % of the dense datasheet peak."""
    from parallax.native import gpu

    result = gpu.measure_ceilings(device, run.model_config, run.batch_size, run.seq_len, progress=_progress())
    spec = hardware.resolve_device(_device(probe, device)).spec

    def peak(prec):
        return spec.peak(prec) if spec and prec in PRECISIONS else None

    result["percent_of_dense_peak"] = {
        prec: {
            "square": _percent(summary.get("square_tflops"), peak(prec)),
            "model_shapes": _percent(summary.get("model_shapes_tflops"), peak(prec)),
        }
        for prec, summary in result.get("summary", {}).items()
    }
    for row in result.get("model_shapes", []):
        row["percent_of_dense_peak"] = _percent(row.get("tflops"), peak(row.get("precision")))
    result["hbm"] = gpu.measure_bandwidth(_device(probe, device))  # profile's memory-bound limit
    result["hbm"]["datasheet"] = spec.bandwidth if spec else None
    return result


def _progress():
    """A rich progress bar on stderr, given to gpu.measure_ceilings."""
    from rich.progress import Progress

    return Progress(console=Console(stderr=True), transient=True)


def _device(probe: dict, index: int) -> dict | None:
    return next((d for d in probe["devices"] if d["index"] == index), None)


def _percent(value: float | None, peak: float | None) -> float | None:
    if value is None or not peak:
        return None
    return 100.0 * value / peak


# ---- rendering ---------------------------------------------------------------------------------

def _fmt(value, unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        value = f"{value:g}"
    return f"{value}{unit}"


def _gib(n: int | None) -> str:
    return "–" if n is None else f"{n / 2**30:.1f} GiB"


def render(report: dict, console: Console) -> None:
    console.print(f"[bold]Parallax {report['parallax']}[/] environment check, {report['environment']['captured_at']}")
    _render_driver(report, console)
    if report["gpu_found"]:
        _render_gpus(report, console)
        _render_interconnect(report, console)
    _render_versions(report["environment"], console)
    _render_capability(report, console)
    if report["ceilings"] is not None:
        _render_ceilings(report, console)


def render_compact(report: dict, console: Console) -> None:
    """What a user needs first, in 80 columns: the GPUs in one short table, the packages in two
    lines, the recipe table with each distinct reason written once, as a footnote."""
    console.print(f"[bold]Parallax {report['parallax']}[/] environment check, {report['environment']['captured_at']}")
    _render_driver(report, console)
    if report["gpu_found"]:
        _render_gpus_compact(report, console)
        link = report["interconnect"]
        if len(link["gpus"]) >= 2:
            console.print(escape(f"Interconnect: {link['summary']}"), highlight=False)
    env = report["environment"]
    console.print(escape(f"Python {env['python']} on {env['platform']} ({env['hostname']})"), highlight=False)
    have = [f"{name} {version}" for name, version in env["packages"].items() if version]
    lack = [name for name, version in env["packages"].items() if not version]
    console.print(escape("installed: " + (", ".join(have) or "none")), highlight=False)
    if lack:
        console.print(escape("not installed: " + ", ".join(lack)), highlight=False)
    _render_capability_compact(report, console)
    if report["ceilings"] is not None:
        _render_ceilings(report, console)
    console.print("[dim]--verbose: every column (what runs, clocks, power), --json: the whole record[/]")


def _render_gpus_compact(report: dict, console: Console) -> None:
    table = Table(title="GPUs", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col in ("#", "name", "hardware key", "memory", "peak TFLOP/s bf16/fp8/fp4"):
        table.add_column(col, overflow="fold")
    notes = []
    for dev, hw in zip(report["environment"]["gpus"], report["hardware"]):
        spec = hw["spec"]
        peaks = "–" if spec is None else "/".join(
            _fmt(v) + ("~" if col in spec["uncertain"] else "") for col, v in spec["dense_peak_tflops"].items()
        )
        table.add_row(str(dev["index"]), escape(dev["name"]), hw["key"] or "[red]unknown[/]",
                      _gib(dev.get("memory_total_bytes")), peaks)
        notes += [escape(f"GPU {dev['index']}: {w}") for w in hw["warnings"] + hw["notes"]]
    console.print(fit(table, console))
    for note in notes:
        console.print(f"[yellow]note:[/] {note}")


def _render_capability_compact(report: dict, console: Console) -> None:
    """One row per recipe; its reason is cut into clauses, each distinct clause printed once below
    the table and named by number in the row (without a GPU, 'no NVIDIA GPU found', said above,
    is left out)."""
    where = f"GPU {report['selected_device']}" if report["gpu_found"] else "no GPU"
    table = Table(title=f"Precision recipes ({where}); * = default for --precision", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for col in ("framework", "format", "recipe", "status", "why (notes below)"):
        table.add_column(col, overflow="fold")
    colour = {cap.NATIVE: "green", cap.EMULATED: "yellow", cap.CPU: "cyan", cap.UNAVAILABLE: "red"}
    notes: dict[str, int] = {}
    for c in report["capability"]:
        marks = [notes.setdefault(clause, len(notes) + 1) for clause in _clauses(c["reason"])
                 if report["gpu_found"] or clause != cap.NO_GPU]
        recipe = c["recipe"] + (" *" if c.get("default") else "")
        table.add_row(c["framework"], c["precision"], escape(recipe),
                      f"[{colour[c['status']]}]{c['status']}[/]", ",".join(map(str, marks)))
    console.print(fit(table, console))
    for clause, mark in notes.items():
        console.print(escape(f"{mark}: {clause}"), highlight=False)


def _clauses(reason: str) -> list[str]:
    """A capability reason cut at '; ' outside parentheses; a fix ('pip install ...', 'install ...')
    or a 'GPU ... lacks it' stays with the clause before it."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(reason):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and reason.startswith("; ", i):
            parts.append(reason[start:i])
            start = i + 2
    parts.append(reason[start:])
    clauses: list[str] = []
    for part in filter(None, parts):
        follows = part.startswith(("pip install", "install ", "but ")) or part.endswith("lacks it")
        if clauses and follows and clauses[-1] != cap.NO_GPU:
            clauses[-1] += "; " + part
        else:
            clauses.append(part)
    return clauses


def _render_driver(report: dict, console: Console) -> None:
    env = report["environment"]
    if not report["gpu_found"]:
        console.print(f"[yellow]{escape(report['no_gpu_reason'])}[/]")
        return
    driver, nvml = env["cuda_driver"] or {}, env["nvml"] or {}
    console.print(escape(
        f"CUDA driver API {_fmt(driver.get('version_str'))} ({_fmt(driver.get('library'))}); "
        f"NVML driver {_fmt(nvml.get('driver_version'))}"
    ))


def _render_gpus(report: dict, console: Console) -> None:
    table = Table(title="GPUs", title_justify="left")
    for col in ("#", "name", "cc", "family", "hardware key", "memory total / free",
                "SM clock (max)", "power limit", "dense peak bf16 / fp8 / fp4 TFLOP/s", "native", "NVLink"):
        table.add_column(col)
    warnings, uncertain = [], False
    for dev, hw in zip(report["environment"]["gpus"], report["hardware"]):
        spec = hw["spec"]
        peaks = "–" if spec is None else " / ".join(
            _fmt(v) + ("~" if col in spec["uncertain"] else "") for col, v in spec["dense_peak_tflops"].items()
        )
        table.add_row(
            str(dev["index"]), escape(dev["name"]), _fmt(dev.get("compute_capability")), hw["family"],
            hw["key"] or "[red]unknown[/]",
            f"{_gib(dev.get('memory_total_bytes'))} / {_gib(dev.get('memory_free_bytes'))}",
            f"{_fmt(dev.get('clock_sm_mhz'))} ({_fmt(dev.get('clock_sm_max_mhz'))}) MHz",
            _fmt(dev.get("power_limit_w"), " W"), peaks, ", ".join(hw["native_precisions"]) or "none",
            escape(topology.nvlink_words(dev)),
        )
        warnings += [escape(f"GPU {dev['index']}: {w}") for w in hw["warnings"] + hw["notes"]]
        uncertain = uncertain or bool(spec and spec["uncertain"])
    console.print(fit(table, console))
    if uncertain:
        console.print("~ uncertain figure: shown, never used for MFU (use --peak-tflops)")
    for w in warnings:
        console.print(f"[yellow]note:[/] {w}")


def _render_interconnect(report: dict, console: Console) -> None:
    """The pairs' links as ``nvidia-smi topo -m`` shows them, with what each code means."""
    link = report["interconnect"]
    if len(link["gpus"]) < 2 or not link["available"]:
        if len(link["gpus"]) >= 2:
            console.print(f"[yellow]interconnect:[/] {escape(link['summary'])}")
        return
    console.print(escape(f"Interconnect: {link['summary']}"), highlight=False, soft_wrap=True)
    table = Table(title="GPU pairs (nvidia-smi topo -m codes)", title_justify="left")
    table.add_column("")
    for index in link["gpus"]:
        table.add_column(f"GPU {index}", justify="center")
    for index, row in zip(link["gpus"], link["matrix"]):
        table.add_row(f"GPU {index}", *row)
    console.print(fit(table, console))
    for code, words in link["legend"].items():
        console.print(escape(f"  {code}: {words}"), highlight=False)


def _render_versions(env: dict, console: Console) -> None:
    console.print(escape(f"Python {env['python']} on {env['platform']} ({env['hostname']})"))
    table = Table(title="Packages", title_justify="left")
    table.add_column("package")
    table.add_column("version")
    for name, version in env["packages"].items():
        table.add_row(name, escape(version) if version else "[dim]not installed[/]")
    console.print(fit(table, console))


def _render_capability(report: dict, console: Console) -> None:
    where = f"GPU {report['selected_device']}" if report["gpu_found"] else "no GPU"
    table = Table(title=f"Precision recipes ({where}); * = the framework's default for --precision",
                  title_justify="left")
    for col in ("framework", "precision", "recipe", "status", "what runs", "reason"):
        table.add_column(col, overflow="fold")
    colour = {cap.NATIVE: "green", cap.EMULATED: "yellow", cap.CPU: "cyan", cap.UNAVAILABLE: "red"}
    for c in report["capability"]:
        status = f"[{colour[c['status']]}]{c['status']}[/]"
        recipe = c["recipe"] + (" *" if c.get("default") else "")
        table.add_row(c["framework"], c["precision"], escape(recipe), status, escape(c["backend"] or "–"),
                      escape(c["reason"]))
    console.print(fit(table, console))


def _render_ceilings(report: dict, console: Console) -> None:
    ceilings = report["ceilings"]
    table = Table(title=f"Measured GEMM ceilings (GPU {report['selected_device']})", title_justify="left")
    for col in ("precision", "shape", "median ms", "TFLOP/s", "% of dense peak", "error"):
        table.add_column(col)
    percent = ceilings.get("percent_of_dense_peak", {})
    for prec, row in ceilings.get("square", {}).items():
        table.add_row(prec, _shape(row), *_timings(row), _num(percent.get(prec, {}).get("square"), "{:.1f} %"),
                      escape(row.get("error") or ""))
    for row in ceilings.get("model_shapes", []):
        table.add_row(row.get("precision", "?"), _shape(row), *_timings(row),
                      _num(row.get("percent_of_dense_peak"), "{:.1f} %"), escape(row.get("error") or ""))
    for prec, summary in ceilings.get("summary", {}).items():
        table.add_row(prec, "all model GEMMs (count-weighted)", "", _num(summary.get("model_shapes_tflops"), "{:.1f}"),
                      _num(percent.get(prec, {}).get("model_shapes"), "{:.1f} %"), "")
    console.print(fit(table, console))
    if ceilings.get("hbm"):
        console.print(escape(hbm_line(ceilings["hbm"])))


def hbm_line(hbm: dict) -> str:
    """The measured copy bandwidth in one line (``gpu.measure_bandwidth``'s record)."""
    copy = hbm["copy"]
    if copy.get("error"):
        return f"HBM bandwidth: not measured ({copy['error']})"
    return (f"HBM bandwidth (a device-to-device copy of {copy['bytes'] / 2**30:.1f} GiB, read + written, median of "
            f"{copy['iters']}): {copy['bytes_per_s'] / 1e12:.3f} TB/s (datasheet: {hbm.get('datasheet') or '–'})")


def _timings(row: dict) -> tuple[str, str]:
    return _num(row.get("median_ms"), "{:.3f}"), _num(row.get("tflops"), "{:.1f}")


def _num(value, fmt: str) -> str:
    return "–" if value is None else fmt.format(value)


def _shape(row: dict) -> str:
    dims = [row.get(k) for k in ("m", "n", "k")]
    name = row.get("name") or ""
    shape = "×".join(map(str, dims)) if all(dims) else ""
    return f"{name} {shape}".strip() or "?"
