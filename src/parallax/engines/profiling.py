"""Where a training step's GPU time goes: kernel events from either framework's profiler, put
in a few categories and summed per step.

A kernel's category comes from its name (and, for XLA, the HLO op that launched it), by the
first rule of ``RULES`` whose regex matches; ``other`` when none does. The order matters:

0. ``communication``: NCCL's collectives (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
   ``ncclKernel_...``), the time several GPUs spend exchanging gradients and weights.
1. ``memcpy``: copies and fills (torch ``Memcpy HtoD (...)``/``Memset (Device)``, XLA ``MemcpyH2D``).
2. ``attention``: flash/cuDNN/memory-efficient attention (``flash_fwd_kernel``,
   ``cudnn_generated_fort_native_sdpa_sm90_flash_fprop...``, ``fmha_cutlassF...``). Before the
   GEMMs: flash kernels are CUTLASS kernels (``cutlass::device_kernel<flash::...>``).
3. ``gemm-fp8``: a GEMM name (below) carrying an fp8 marker: ``e4m3``/``e5m2``/``fp8``/``float8``/
   ``f8e4m3fn``, ``_scaled_mm`` in an Inductor template, or cuBLAS's nvjet kernels whose type
   letters start with ``q`` (nvjet names spell A, B, compute and output types: ``q`` fp8, ``t``
   bf16, ``h`` fp16, ``s`` fp32; ``nvjet_qqtst_...`` is fp8 x fp8 -> bf16, ``nvjet_tst_...`` and
   ``nvjet_hsh_...`` are 16-bit, as profiles of ``_scaled_mm`` and of bf16 ``mm`` show).
   For XLA, ``hlo_op`` may say "f8 operands" (``describe_hlo_ops``) for a GEMM fusion whose
   name has no types.
4. ``gemm-bf16``: the other GEMMs: ``gemm`` (cuBLAS ``ampere_``/``sm90_xmma_gemm_...``, XLA
   ``triton_gemm``/``gemm_fusion``), ``xmma``, ``cutlass``, ``nvjet``, ``cublas``, ``wgmma``,
   ``matmul``, Inductor templates (``triton_tem_fused_mm``).
   Neither GEMM rule takes an Inductor pointwise/reduction kernel (``triton_poi_``/``triton_red_``/
   ``triton_per_``): ``triton_poi_fused__scaled_mm__to_copy_clamp_...`` is the cast that feeds a
   GEMM, not one.
5. ``optimizer``: ``multi_tensor_apply`` (fused AdamW, foreach norms and clipping), ``adam``, ``foreach``.
6. ``quantize``: fp8 casts and their scales: TransformerEngine's ``cast_transpose``, ``amax``,
   ``delayed_scaling``/``scale`` updates (``delayed_scaling_recipe::kernel_bulk``), ``quantize``;
   torchao's ``_to_fp8``/``to_float8``; Parallax's own NVFP4 kernels (csrc/quant: ``nvfp4_1x16_kernel``,
   ``nvfp4_16x16_kernel``, ``amax_kernel``, ``hadamard_kernel``), the emulation cost of emulated-nvfp4;
   Inductor kernels fusing ``abs``..``max`` (an amax), ``clamp`` or ``reciprocal`` (torchao's
   scaled cast: ``triton_red_fused__to_copy_abs_max_view_0``); an XLA op whose result is f8
   (``hlo_op`` from ``describe_hlo_ops`` reads "... -> f8e4m3fn[...]"). XLA's amax is a plain
   reduce fusion, named without types: it stays in ``elementwise``.
7. ``elementwise``: the other fusions and vector kernels: ``triton_poi/red/per``, XLA's
   ``loop_*``/``input_*`` fusions and ``wrapped_*`` ops, ATen's ``elementwise``/``reduce``
   kernels, norms, RoPE, softmax, SiLU, cross-entropy, copies and concatenation. XLA's
   optimizer update is fusions too: it lands here, not in ``optimizer``.
8. ``other``: anything else.

No torch, JAX, TensorBoard or xprof import at module load: the readers import their framework
when called.
"""

from __future__ import annotations

import re
from collections import defaultdict

_NOT_INDUCTOR_VECTOR = r"^(?!triton_(?:poi|red|per)_)"
_GEMM = r"gemm|xmma|cutlass|nvjet|cublas|wgmma|triton_tem_|matmul"
_FP8 = r"e4m3|e5m2|fp8|float8|f8e\dm\d|_scaled_mm|nvjet_(?:sm\d+_)?q|f8 operands"

_PATTERNS = (
    ("communication", r"^nccl"),
    ("memcpy", r"^\s*(?:memcpy|memset)"),
    ("attention", r"flash|fmha|sdpa|fused_attn|attention|_attn_"),
    ("gemm-fp8", rf"{_NOT_INDUCTOR_VECTOR}(?=.*(?:{_GEMM}))(?=.*(?:{_FP8}))"),
    ("gemm-bf16", rf"{_NOT_INDUCTOR_VECTOR}.*(?:{_GEMM})"),
    ("optimizer", r"multi_tensor_apply|(?<!h)adam|foreach"),  # not h-adam-ard
    ("quantize", r"cast_transpose|amax|quantize|scale|scaling|_to_fp8|to_float8|fp8|float8|-> (?:\(.*)?f8e\dm\d"
                 r"|nvfp4_\w*kernel|hadamard_kernel"
                 r"|^triton_(?:poi|red|per)_fused\w*(?:abs_\w*max|clamp|reciprocal)"),
    ("elementwise", r"^(?!nccl)(?:triton_(?:poi|red|per)_|wrapped_|.*(?:fusion|elementwise|reduce|norm|rope"
                    r"|rotary|softmax|silu|swiglu|CatArray|index_|_copy|cross_entropy|nll_loss))"),
)
RULES: tuple[tuple[str, re.Pattern], ...] = tuple((c, re.compile(p, re.IGNORECASE)) for c, p in _PATTERNS)
CATEGORIES = tuple(category for category, _ in RULES) + ("other",)
NAME_WIDTH = 100  # characters of a kernel name kept in the summary
GPU_PLANE = re.compile(r"^/device:GPU:\d+$")


def classify(kernel_name: str, hlo_op: str | None = None) -> str:
    """The category of one GPU kernel (module docstring); ``hlo_op``: XLA's op, if known."""
    text = kernel_name if not hlo_op else f"{kernel_name} [{hlo_op}]"
    for category, pattern in RULES:
        if pattern.search(text):
            return category
    return "other"


def summarize(events, steps: int, top: int = 25) -> dict:
    """Per-category and top-``top`` kernel figures for ``events`` = (name, duration_us[, hlo_op])
    recorded over ``steps`` steps. Shares are of the summed kernel time (kernels on several
    streams may overlap, so the sum can exceed the step's wall time)."""
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    per_kernel = _per_kernel(events)
    total_us = sum(k["us"] for k in per_kernel.values())
    categories = _categories(per_kernel, total_us, steps)
    ranked = sorted(per_kernel.items(), key=lambda item: (-item[1]["us"], item[0]))
    return {
        "steps": steps,
        "events": sum(k["calls"] for k in per_kernel.values()),
        "kernel_ms_per_step": total_us / 1e3 / steps,
        "categories": categories,
        "top_kernels": [_kernel_row(name, k, total_us, steps) for name, k in ranked[:top]],
    }


def _per_kernel(events) -> dict[str, dict]:
    """name -> {us, calls, category}; one name's category is that of its first event."""
    kernels: dict[str, dict] = {}
    for event in events:
        name, duration_us = event[0], float(event[1])
        hlo_op = event[2] if len(event) > 2 else None
        if name not in kernels:
            kernels[name] = {"us": 0.0, "calls": 0, "category": classify(name, hlo_op)}
        kernels[name]["us"] += duration_us
        kernels[name]["calls"] += 1
    return kernels


def _categories(per_kernel: dict[str, dict], total_us: float, steps: int) -> dict[str, dict]:
    sums: dict[str, dict] = defaultdict(lambda: {"us": 0.0, "calls": 0, "kernels": 0})
    for k in per_kernel.values():
        row = sums[k["category"]]
        row["us"] += k["us"]
        row["calls"] += k["calls"]
        row["kernels"] += 1
    return {c: {"ms_per_step": sums[c]["us"] / 1e3 / steps,
                "share": sums[c]["us"] / total_us if total_us else 0.0,
                "calls_per_step": sums[c]["calls"] / steps,
                "kernels": sums[c]["kernels"]} for c in CATEGORIES}


def _kernel_row(name: str, k: dict, total_us: float, steps: int) -> dict:
    short = name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 3] + "..."
    return {"name": short, "category": k["category"], "ms_per_step": k["us"] / 1e3 / steps,
            "calls_per_step": k["calls"] / steps, "share": k["us"] / total_us}


def format_table(summary: dict) -> str:
    """Markdown: the category table, then the top kernels; one line when there were no GPU kernels."""
    steps = summary["steps"]
    if not summary["events"]:
        return f"No GPU kernel events in the {steps} profiled step(s) (a CPU run?): nothing to attribute.\n"
    lines = [f"GPU kernel time: {summary['kernel_ms_per_step']:.3f} ms/step summed over "
             f"{summary['events']} kernels in {steps} profiled step(s).", "",
             "| category | ms/step | share | calls/step | kernels |", "|---|---:|---:|---:|---:|"]
    for category, row in summary["categories"].items():
        lines.append(f"| {category} | {row['ms_per_step']:.3f} | {row['share']:.1%} | "
                     f"{row['calls_per_step']:g} | {row['kernels']} |")
    lines += ["", f"Top {len(summary['top_kernels'])} kernels by time:", "",
              "| # | kernel | category | ms/step | share | calls/step |", "|---:|---|---|---:|---:|---:|"]
    for i, row in enumerate(summary["top_kernels"], 1):
        name = row["name"].replace("|", "\\|")
        lines.append(f"| {i} | `{name}` | {row['category']} | {row['ms_per_step']:.3f} | "
                     f"{row['share']:.1%} | {row['calls_per_step']:g} |")
    return "\n".join(lines) + "\n"


# torch.profiler: kineto's activity types of work on the GPU itself.
TORCH_DEVICE_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")


def torch_kernel_events(prof) -> list[tuple[str, float]]:
    """(name, duration_us) of every GPU kernel, copy and fill in a finished
    ``torch.profiler.profile``; [] for a CPU-only profile."""
    from torch.autograd import DeviceType

    return [(e.name, e.time_range.elapsed_us()) for e in prof.events() if is_torch_device_work(e, DeviceType)]


def is_torch_device_work(event, device_type_enum) -> bool:
    """A CUDA-device event that is work (kernel, memcpy, memset), not a GPU-side user
    annotation (``ProfilerStep#N`` mirrored on the GPU). torch builds that record no
    ``activity_type`` are judged by device and annotation flag alone."""
    if event.device_type != device_type_enum.CUDA or getattr(event, "is_user_annotation", False):
        return False
    activity = getattr(event, "activity_type", None)
    return activity is None or activity in TORCH_DEVICE_ACTIVITIES


def jax_kernel_events(trace_dir) -> list[tuple[str, float, str | None]]:
    """(name, duration_us, hlo_op) of every GPU kernel, copy and fill in the ``*.xplane.pb``
    files that ``jax.profiler.trace(trace_dir)`` wrote, read with ``jax.profiler.ProfileData``
    (jaxlib's own XSpace reader, public in jax 0.10.2 and 0.11: ``from_file``,
    ``from_serialized_xspace``, ``from_text_proto``); [] when no GPU plane was recorded (a CPU run)."""
    from pathlib import Path

    from jax.profiler import ProfileData

    paths = sorted(Path(trace_dir).rglob("*.xplane.pb"))
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb under {trace_dir}; was jax.profiler.trace given this folder?")
    events = []
    for path in paths:
        events += xspace_kernel_events(ProfileData.from_file(str(path)))
    return events


def xspace_kernel_events(profile) -> list[tuple[str, float, str | None]]:
    """The GPU events of one ProfileData (or anything with its planes/lines/events shape):
    events on the ``Stream #N...`` lines of ``/device:GPU:N`` planes. Other lines of a GPU
    plane (CUPTI overhead, graph metadata, lines a viewer derives) are not kernels."""
    events = []
    for plane in profile.planes:
        if not GPU_PLANE.match(plane.name):
            continue
        for line in plane.lines:
            if line.name.startswith("Stream #"):
                events += [(e.name, e.duration_ns / 1e3, _stat(e, "hlo_op")) for e in line.events]
    return events


def _stat(event, key: str) -> str | None:
    for name, value in event.stats:
        if name == key:
            return str(value)
    return None


def find_hlo_text(dump_dir, module: str = "jit_train_step") -> str | None:
    """The optimized HLO of ``module`` from an XLA dump (``--xla_dump_to=DIR
    --xla_dump_hlo_as_text``: ``module_NNNN.<module>.<...>after_optimizations.txt``), the largest
    such file where XLA wrote several (the train step, not a small helper of the same name);
    None when there is none. This is how a MaxText subprocess's step is described: its
    ``compiled.as_text()`` is out of reach."""
    from pathlib import Path

    found = [p for p in Path(dump_dir).rglob("*after_optimizations.txt")
             if f".{module}." in p.name] if Path(dump_dir).is_dir() else []
    if not found:
        return None
    return max(found, key=lambda p: (p.stat().st_size, p.name)).read_text(errors="replace")


def format_comparison(records: list[dict]) -> str:
    """Markdown: the categories of several profiles side by side (ms/step and share of each,
    then each one's difference from the first), with each one's step time without the
    profiler, its summed kernel time and the difference of the two (time no kernel covers:
    launch gaps, host work; kernels on several streams overlap, so it can be negative)."""
    if len(records) < 2:
        raise ValueError("a comparison needs two or more profiles")
    names = [f"{r['framework']} {r['recipe']}" for r in records]
    first = records[0]["summary"]
    head = "| | " + " | ".join(names) + " | " + " | ".join(f"{n} − {names[0]}" for n in names[1:]) + " |"
    rule = "|---|" + "---:|" * (2 * len(records) - 1)

    def row(label: str, values: list[float], digits: int = 3, shares: list[float] | None = None) -> str:
        cells = [f"{v:.{digits}f}" + (f" ({s:.1%})" if shares else "") for v, s in zip(values, shares or values)]
        deltas = [f"{v - values[0]:+.{digits}f}" for v in values[1:]]
        return f"| {label} | " + " | ".join(cells + deltas) + " |"

    step = [r["ms_per_step"] for r in records]
    kernels = [r["summary"]["kernel_ms_per_step"] for r in records]
    lines = [f"# Where the step goes: {' vs '.join(names)}", "",
             "ms per step (share of the summed kernel time); each profile's own shape and device:", ""]
    lines += [f"- {n}: {r['model']}, batch {r['batch_size']} x seq {r['seq_len']}, on {r['device']}, "
              f"{r['summary']['steps']} profiled step(s), {r['tokens_per_s']:,.0f} tokens/s without the profiler"
              for n, r in zip(names, records)]
    lines += ["", head, rule,
              row("step, without the profiler", step),
              row("GPU kernels, summed", kernels),
              row("not covered by kernels (step − kernels)", [a - b for a, b in zip(step, kernels)])]
    for category in first["categories"]:
        rows = [r["summary"]["categories"].get(category, {"ms_per_step": 0.0, "share": 0.0}) for r in records]
        lines.append(row(category, [c["ms_per_step"] for c in rows], shares=[c["share"] for c in rows]))
    calls = [r["summary"]["events"] / r["summary"]["steps"] for r in records]
    lines.append(row("kernel launches per step", calls, digits=0))
    return "\n".join(lines) + "\n"


_HLO_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+) = (?P<type>.+?) (?P<opcode>[a-z][\w\-]*)\((?P<operands>.*)$")


def describe_hlo_ops(events, hlo_text: str) -> list[tuple[str, float, str | None]]:
    """``events`` with each known hlo_op replaced by "op -> result type", plus " (f8 operands)"
    for a GEMM (dot, custom call or GEMM fusion) that reads f8, read from the optimized HLO
    text of the step (``compiled.as_text()``); ops not in the text keep their name."""
    described = _hlo_descriptions(hlo_text)
    return [(name, us, described.get(op, op) if op else op) for name, us, op in events]


def _hlo_descriptions(hlo_text: str) -> dict[str, str]:
    instructions = {m["name"]: m for m in map(_HLO_INSTRUCTION.match, hlo_text.splitlines()) if m}
    types = {name: m["type"] for name, m in instructions.items()}
    return {name: _describe(m, types) for name, m in instructions.items()}


def _describe(m: re.Match, types: dict[str, str]) -> str:
    """The op as "name -> result type", with " (f8 operands)" for a GEMM reading f8. XLA prints
    operands by name (jax 0.10) or with their types: both are read."""
    text = f"{m['name']} -> {m['type']}"
    gemm = m["opcode"] in ("dot", "custom-call") or re.search(r"gemm|dot", m["name"])
    operand_types = [types.get(o, "") for o in re.findall(r"%?([\w.\-]+)", m["operands"])]
    if gemm and re.search(r"f8e\dm\d", " ".join([m["operands"], *operand_types])):
        text += " (f8 operands)"
    return text
