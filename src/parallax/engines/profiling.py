"""Where a training step's time goes: kernel events from either framework's profiler, each put
in one class and summed per step, with the time the step kept the device busy.

A kernel's class comes from its name and its context (for XLA, the HLO op that launched it as
``describe_hlo_ops`` describes it; for a torch CPU operator, the scope it ran in), by the first
rule of ``RULES`` whose regex matches; ``other`` when none does. The order matters:

0. ``communication``: NCCL's collectives (``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
   ``ncclKernel_...``), the time several GPUs spend exchanging gradients and weights.
1. ``memcpy``: copies and fills (torch ``Memcpy HtoD (...)``/``Memset (Device)``, XLA ``MemcpyH2D``).
2. ``attention-bwd``: an attention kernel (rule 3's names) of the backward pass, named so by
   ``bprop``/``bwd``/``backward``/``dgrad`` (cuDNN ``..._sdpa_sm90_flash_bprop_...``, flash
   ``flash_bwd_dq_dk_dv_...`` and its ``flash_bwd_dot_do_o``/``flash_bwd_convert_dq`` helpers,
   torch's CPU ``aten::_scaled_dot_product_flash_attention_for_cpu_backward``), the
   memory-efficient backward ``fmha_cutlassB``, and cuDNN's own helpers of its backward
   (``cudnn::fusion::compute_dot_do_o_specialized``, ``cudnn::fusion::convert_dq_to_16bits``:
   the dot(dO, O) before it and the dQ conversion after it). XLA: an op of the JAX model's
   attention scope (``ATTENTION_SCOPE``) under ``transpose(...)``, tagged ``{attention backward}``.
3. ``attention-fwd``: the other attention kernels: flash/cuDNN/memory-efficient/TE fused attention
   (``flash_fwd_kernel``, ``cudnn_generated_fort_native_sdpa_sm90_flash_fprop...``,
   ``fmha_cutlassF...``); XLA ops of the attention scope, tagged ``{attention forward}``
   (with ``implementation='xla'`` and on the CPU, attention is plain dots and fusions: the
   scope is what tells them from the GEMMs). Before the GEMMs: flash kernels are CUTLASS kernels
   (``cutlass::device_kernel<flash::...>``).
4. ``gemm-fp4``: a GEMM name (rule 6) with an fp4 marker: ``e2m1``/``fp4``/``nvf4``/``mxf4``/
   ``float4``, or for XLA ``(f4 operands)``. No profile of an fp4 GEMM has been read yet
   (Blackwell): the markers are CUTLASS's and cuBLASLt's type names, not observed kernels.
5. ``gemm-fp8``: a GEMM name carrying an fp8 marker: ``e4m3``/``e5m2``/``fp8``/``float8``/
   ``f8e4m3fn``, ``_scaled_mm`` in an Inductor template, or cuBLAS's nvjet kernels whose type
   letters start with ``q`` or ``r`` (nvjet names spell A, B, compute and output types: ``q``
   E4M3, ``r`` E5M2, ``t`` bf16, ``h`` fp16, ``s`` fp32; ``nvjet_qqtst_...`` is fp8 x fp8 ->
   bf16, ``nvjet_sm90_rqsss_...`` the E5M2-gradient x E4M3 GEMM of a backward pass,
   ``nvjet_tst_...`` and ``nvjet_hsh_...`` are 16-bit, as H200 profiles of TE and Flax fp8
   show: docs/results/2026-12-01-h200-b/profiles/). For XLA, the context may say "(f8
   operands)" (``describe_hlo_ops``) for a GEMM fusion whose name has no types.
6. ``gemm-bf16``: the other GEMMs: ``gemm`` (cuBLAS ``ampere_``/``sm90_xmma_gemm_...``, XLA
   ``triton_gemm``/``gemm_fusion``), ``xmma``, ``cutlass``, ``nvjet``, ``cublas``, ``wgmma``,
   ``matmul``, Inductor templates (``triton_tem_fused_mm``), torch's CPU ``aten::mm``/``addmm``/
   ``bmm``, an XLA dot (tagged ``(dot)``). Neither GEMM rule takes an Inductor pointwise/reduction
   kernel (``triton_poi_``/``triton_red_``/``triton_per_``): ``triton_poi_fused__scaled_mm__to_copy_clamp_...``
   is the cast that feeds a GEMM, not one. (On the CPU a "bf16" GEMM is whatever dtype the CPU
   step runs in.)
7. ``optimizer``: ``multi_tensor_apply`` (fused AdamW, foreach norms and clipping), ``adam``,
   ``foreach``; torch CPU operators inside ``Optimizer.step`` and XLA ops of the JAX step's
   optimizer scope (``OPTIMIZER_SCOPE``: clipping, AdamW, the update), tagged ``{optimizer}``.
8. ``quantize``: casts to low precision and their scales: TransformerEngine's ``cast_transpose``,
   ``amax``, ``delayed_scaling``/``scale`` updates (``delayed_scaling_recipe::kernel_bulk``),
   ``quantize``; torchao's ``_to_fp8``/``to_float8``; Parallax's own NVFP4 kernels (csrc/quant:
   ``nvfp4_1x16_kernel``, ``nvfp4_16x16_kernel``, ``amax_kernel``, ``hadamard_kernel``), the
   emulation cost of emulated-nvfp4; Inductor kernels fusing ``abs``..``max`` (an amax),
   ``clamp`` or ``reciprocal`` (torchao's scaled cast: ``triton_red_fused__to_copy_abs_max_view_0``);
   an XLA op whose result is f8 ("... -> f8e4m3fn[...]"). XLA's amax is a plain reduce fusion,
   named without types: it stays in ``elementwise``. TE kernels that fuse an activation or a
   norm with the cast to fp8 (``gated_act_kernel``/``rmsnorm_fwd_tuned_kernel`` writing
   ``__nv_fp8_e4m3``) land here too: the name says fp8.
9. ``elementwise``: norms and the other fusions and vector kernels: ``triton_poi/red/per``, XLA's
   ``loop_*``/``input_*`` fusions and ``wrapped_*`` ops, ATen's ``elementwise``/``reduce``
   kernels, norms, RoPE, softmax, SiLU (TE's ``gated_act``/``dgated_act``), cross-entropy,
   copies and concatenation, and every other torch CPU operator (``aten::...``).
10. ``other``: anything else.

No torch, JAX, TensorBoard or xprof import at module load: the readers import their framework
when called.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import NamedTuple

# Name scopes of the JAX engine's step (engines/jax/model.py, engines/jax/runtime.py): XLA writes
# them into each op's metadata (op_name), and describe_hlo_ops turns them into tags.
ATTENTION_SCOPE = "sdpa"
OPTIMIZER_SCOPE = "optimizer"

_NOT_INDUCTOR_VECTOR = r"^(?!triton_(?:poi|red|per)_)"
_GEMM = r"gemm|xmma|cutlass|nvjet|cublas|wgmma|triton_tem_|matmul|^aten::(?:mm|addmm|bmm|baddbmm)$|\(dot\)"
_FP4 = r"e2m1|fp4|nvf4|mxf4|float4|f4 operands"
_FP8 = r"e4m3|e5m2|fp8|float8|f8e\dm\d|_scaled_mm|nvjet_(?:sm\d+_)?[qr]|f8 operands"
_ATTENTION = r"flash|fmha|sdpa|fused_attn|attention|_attn_"
_BACKWARD = r"bprop|bwd|backward|dgrad|fmha_cutlassB"


def _gemm_with(marker: str) -> str:
    return rf"{_NOT_INDUCTOR_VECTOR}(?=.*(?:{_GEMM}))(?=.*(?:{marker}))"


_PATTERNS = (
    ("communication", r"^nccl"),
    ("memcpy", r"^\s*(?:memcpy|memset)"),
    ("attention-bwd", rf"(?=.*(?:{_ATTENTION}))(?=.*(?:{_BACKWARD}))|cudnn::fusion::(?:compute_dot_do_o|convert_dq)"),
    ("attention-fwd", _ATTENTION),
    ("gemm-fp4", _gemm_with(_FP4)),
    ("gemm-fp8", _gemm_with(_FP8)),
    ("gemm-bf16", rf"{_NOT_INDUCTOR_VECTOR}.*(?:{_GEMM})"),
    ("optimizer", rf"multi_tensor_apply|(?<!h)adam|foreach|\{{{OPTIMIZER_SCOPE}\}}"),  # not h-adam-ard
    ("quantize", r"cast_transpose|amax|quantize|scale|scaling|_to_fp8|to_float8|fp8|float8|-> (?:\(.*)?f8e\dm\d"
                 r"|nvfp4_\w*kernel|hadamard_kernel"
                 r"|^triton_(?:poi|red|per)_fused\w*(?:abs_\w*max|clamp|reciprocal)"),
    ("elementwise", r"^(?!nccl)(?:triton_(?:poi|red|per)_|wrapped_|aten::|.*(?:fusion|elementwise|reduce|norm|rope"
                    r"|rotary|softmax|silu|swiglu|gated_act|CatArray|index_|_copy|cross_entropy|nll_loss))"),
)
RULES: tuple[tuple[str, re.Pattern], ...] = tuple((c, re.compile(p, re.IGNORECASE)) for c, p in _PATTERNS)
CLASSES = tuple(name for name, _ in RULES) + ("other",)
NAME_WIDTH = 100  # characters of a kernel name kept in the summary
GPU_PLANE = re.compile(r"^/device:GPU:\d+$")
HOST_PLANE = "/host:CPU"


class Kernel(NamedTuple):
    """One kernel (or CPU operator) the profiler saw."""

    name: str
    us: float  # the time it is charged: a GPU kernel's duration, a CPU operator's self time
    context: str | None = None  # XLA's op as describe_hlo_ops gives it, or a CPU operator's scope tag
    start_us: float | None = None  # the interval it kept the device busy, when the profiler says
    end_us: float | None = None


def classify(kernel_name: str, context: str | None = None) -> str:
    """The class of one kernel (module docstring); ``context``: XLA's op or a scope tag, if known."""
    text = kernel_name if not context else f"{kernel_name} [{context}]"
    for name, pattern in RULES:
        if pattern.search(text):
            return name
    return "other"


def summarize(events, steps: int, top: int = 25) -> dict:
    """Per-class and top-``top`` kernel figures for ``events`` (``Kernel``s, or tuples of its
    leading fields) recorded over ``steps`` steps, and the time the device was busy: the union of
    the kernels' intervals where every event has one (kernels on several streams, or CPU operators
    nested in one another, are counted once), else their summed time (``busy_method`` says which)."""
    if steps <= 0:
        raise ValueError(f"steps must be positive, got {steps}")
    kernels = [Kernel(*event) for event in events]
    per_kernel = _per_kernel(kernels)
    total_us = sum(k["us"] for k in per_kernel.values())
    busy_us, method = busy_time(kernels)
    ranked = sorted(per_kernel.items(), key=lambda item: (-item[1]["us"], item[0]))
    return {
        "steps": steps,
        "events": len(kernels),
        "kernel_ms_per_step": total_us / 1e3 / steps,
        "busy_ms_per_step": busy_us / 1e3 / steps,
        "busy_method": method,
        "classes": _classes(per_kernel, steps),
        "best_ms_per_step": best_class_time(kernels, steps),
        "top_kernels": [_kernel_row(name, k, steps) for name, k in ranked[:top]],
    }


def best_class_time(kernels: list[Kernel], steps: int) -> dict[str, float]:
    """{class: ms a step if each of its ops ran every step at its fastest profiled call}: a kernel
    (name and context) called n times a step, in order, is n ops, the i-th call of each step the
    same op (the same shapes); each op's fastest of the ``steps`` calls, summed. A kernel whose
    calls do not split evenly into the steps counts its mean time a step. The step's own best:
    ``analysis/profile.py`` makes it a floor of each class's limit."""
    calls: dict[tuple, list[Kernel]] = defaultdict(list)
    kind: dict[str, str] = {}  # a name's class is that of its first event, as in the per-class sums
    for k in kernels:
        calls[(k.name, k.context)].append(k)
        kind.setdefault(k.name, classify(k.name, k.context))
    best: dict[str, float] = defaultdict(float)
    for (name, context), found in calls.items():
        durations = [float(k.us) for k in sorted(found, key=lambda k: k.start_us or 0.0)]
        per_step = len(durations) // steps
        if per_step * steps != len(durations):
            fastest = sum(durations) / steps
        else:
            fastest = sum(min(durations[s * per_step + i] for s in range(steps)) for i in range(per_step))
        best[kind[name]] += fastest / 1e3
    return {c: best.get(c, 0.0) for c in CLASSES}


BUSY_UNION = "union of the kernel intervals"
BUSY_SUM = "sum of the kernel times (the profiler gave no start times; overlapping kernels count twice)"


def busy_time(kernels: list[Kernel]) -> tuple[float, str]:
    """(µs the device was busy, how it was counted): the union of the intervals, else the sum."""
    if any(k.start_us is None or k.end_us is None for k in kernels):
        return sum(k.us for k in kernels), BUSY_SUM
    busy, end = 0.0, None
    for start, stop in sorted((k.start_us, k.end_us) for k in kernels):
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return busy, BUSY_UNION


def _per_kernel(kernels: list[Kernel]) -> dict[str, dict]:
    """name -> {us, calls, class}; one name's class is that of its first event."""
    found: dict[str, dict] = {}
    for k in kernels:
        if k.name not in found:
            found[k.name] = {"us": 0.0, "calls": 0, "class": classify(k.name, k.context)}
        found[k.name]["us"] += float(k.us)
        found[k.name]["calls"] += 1
    return found


def _classes(per_kernel: dict[str, dict], steps: int) -> dict[str, dict]:
    sums: dict[str, dict] = defaultdict(lambda: {"us": 0.0, "calls": 0, "kernels": 0})
    for k in per_kernel.values():
        row = sums[k["class"]]
        row["us"] += k["us"]
        row["calls"] += k["calls"]
        row["kernels"] += 1
    return {c: {"ms_per_step": sums[c]["us"] / 1e3 / steps, "calls_per_step": sums[c]["calls"] / steps,
                "kernels": sums[c]["kernels"]} for c in CLASSES}


def _kernel_row(name: str, k: dict, steps: int) -> dict:
    short = name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 3] + "..."
    return {"name": short, "class": k["class"], "ms_per_step": k["us"] / 1e3 / steps,
            "calls_per_step": k["calls"] / steps}


# torch.profiler: kineto's activity types of work on the GPU itself.
TORCH_DEVICE_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")
TORCH_OPTIMIZER_STEP = "Optimizer.step#"  # the annotation torch's optimizers record around step()


def torch_kernel_events(prof) -> list[Kernel]:
    """Every GPU kernel, copy and fill in a finished ``torch.profiler.profile``, with its
    interval; [] for a CPU-only profile."""
    from torch.autograd import DeviceType

    return [Kernel(e.name, e.time_range.elapsed_us(), None, e.time_range.start, e.time_range.end)
            for e in prof.events() if is_torch_device_work(e, DeviceType)]


def is_torch_device_work(event, device_type_enum) -> bool:
    """A CUDA-device event that is work (kernel, memcpy, memset), not a GPU-side user
    annotation (``ProfilerStep#N`` mirrored on the GPU). torch builds that record no
    ``activity_type`` are judged by device and annotation flag alone."""
    if event.device_type != device_type_enum.CUDA or getattr(event, "is_user_annotation", False):
        return False
    activity = getattr(event, "activity_type", None)
    return activity is None or activity in TORCH_DEVICE_ACTIVITIES


def torch_cpu_events(prof) -> list[Kernel]:
    """The CPU operators of a profile without a GPU, each charged its self time (nested
    operators then add up to their parents' time once), with its interval; those that ran
    inside an optimizer's ``step()`` are tagged ``{optimizer}``."""
    from torch.autograd import DeviceType

    events = [e for e in prof.events() if e.device_type == DeviceType.CPU]
    steps = [(e.time_range.start, e.time_range.end) for e in events
             if getattr(e, "is_user_annotation", False) and e.name.startswith(TORCH_OPTIMIZER_STEP)]
    return [Kernel(e.name, e.self_cpu_time_total, _scope(e.time_range.start, steps), e.time_range.start,
                   e.time_range.end)
            for e in events if not getattr(e, "is_user_annotation", False)]


def _scope(start: float, optimizer_steps: list[tuple[float, float]]) -> str | None:
    return f"{{{OPTIMIZER_SCOPE}}}" if any(a <= start < b for a, b in optimizer_steps) else None


def jax_kernel_events(trace_dir) -> list[Kernel]:
    """Every GPU kernel, copy and fill in the ``*.xplane.pb`` files that
    ``jax.profiler.trace(trace_dir)`` wrote, read with ``jax.profiler.ProfileData`` (jaxlib's own
    XSpace reader, public in jax 0.10.2 and 0.11: ``from_file``, ``from_serialized_xspace``,
    ``from_text_proto``); [] when no GPU plane was recorded (a CPU run)."""
    return [k for data in _xspaces(trace_dir) for k in xspace_kernel_events(data)]


def jax_host_events(trace_dir) -> list[Kernel]:
    """The XLA:CPU ops in the same files (a run without a GPU): ``host_op_events``."""
    return [k for data in _xspaces(trace_dir) for k in host_op_events(data)]


def _xspaces(trace_dir) -> list:
    from pathlib import Path

    from jax.profiler import ProfileData

    paths = sorted(Path(trace_dir).rglob("*.xplane.pb"))
    if not paths:
        raise FileNotFoundError(f"no *.xplane.pb under {trace_dir}; was jax.profiler.trace given this folder?")
    return [ProfileData.from_file(str(path)) for path in paths]


def xspace_kernel_events(profile) -> list[Kernel]:
    """The GPU events of one ProfileData (or anything with its planes/lines/events shape):
    events on the ``Stream #N...`` lines of ``/device:GPU:N`` planes, context their ``hlo_op``.
    Other lines of a GPU plane (CUPTI overhead, graph metadata, lines a viewer derives) are not
    kernels."""
    events = []
    for plane in profile.planes:
        if not GPU_PLANE.match(plane.name):
            continue
        for line in plane.lines:
            if line.name.startswith("Stream #"):
                events += [_xevent(e, _stat(e, "hlo_op")) for e in line.events]
    return events


def host_op_events(profile) -> list[Kernel]:
    """The XLA:CPU ops of one ProfileData: events of the ``/host:CPU`` plane that carry an
    ``hlo_op`` (XLA's thunks, one per op; the executor's own events carry none)."""
    events = []
    for plane in profile.planes:
        if plane.name != HOST_PLANE:
            continue
        for line in plane.lines:
            events += [_xevent(e, op) for e in line.events if (op := _stat(e, "hlo_op")) is not None]
    return events


def _xevent(event, op: str | None) -> Kernel:
    start = event.start_ns / 1e3
    return Kernel(event.name, event.duration_ns / 1e3, op, start, start + event.duration_ns / 1e3)


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


_HLO_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+) = (?P<type>.+?) (?P<opcode>[a-z][\w\-]*)\((?P<operands>.*)$")
_OP_NAME = re.compile(r'op_name="([^"]*)"')


def describe_hlo_ops(events, hlo_text: str) -> list[Kernel]:
    """``events`` with each known context (an hlo_op name) replaced by its description from the
    optimized HLO text of the step (``compiled.as_text()``): "op -> result type", then " (f8
    operands)"/" (f4 operands)" for a GEMM (dot, custom call or GEMM fusion) that reads f8/f4,
    " (dot)" for a dot (or a custom fusion of one, as XLA:CPU makes them), and the JAX step's
    scopes from the op's metadata: " {attention forward}", " {attention backward}" (under
    ``transpose(...)``), " {optimizer}". Ops not in the text keep their name."""
    described = _hlo_descriptions(hlo_text)
    return [k._replace(context=described.get(k.context, k.context)) if k.context else k
            for k in map(lambda e: Kernel(*e), events)]


def _hlo_descriptions(hlo_text: str) -> dict[str, str]:
    instructions = {m["name"]: m for m in map(_HLO_INSTRUCTION.match, hlo_text.splitlines()) if m}
    types = {name: m["type"] for name, m in instructions.items()}
    return {name: _describe(m, types) for name, m in instructions.items()}


def _describe(m: re.Match, types: dict[str, str]) -> str:
    """The op as "name -> result type" and its tags (``describe_hlo_ops``). XLA prints operands
    by name (jax 0.10) or with their types: both are read."""
    text = f"{m['name']} -> {m['type']}"
    found = _OP_NAME.search(m["operands"])
    op_name = found.group(1) if found else ""
    gemm = m["opcode"] in ("dot", "custom-call") or re.search(r"gemm|dot", m["name"])
    operand_types = " ".join([m["operands"], *(types.get(o, "") for o in re.findall(r"%?([\w.\-]+)", m["operands"]))])
    if gemm and re.search(r"f8e\dm\d", operand_types):
        text += " (f8 operands)"
    if gemm and re.search(r"f4e2m1", operand_types):
        text += " (f4 operands)"
    if m["opcode"] == "dot" or ("kind=kCustom" in m["operands"] and op_name.endswith("dot_general")):
        text += " (dot)"
    return text + _scope_tags(op_name)


def _scope_tags(op_name: str) -> str:
    parts = op_name.split("/")
    if ATTENTION_SCOPE in parts:
        return " {attention backward}" if "transpose(" in op_name else " {attention forward}"
    if OPTIMIZER_SCOPE in parts:
        return f" {{{OPTIMIZER_SCOPE}}}"
    return ""

