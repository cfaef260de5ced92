"""Whether two cells may be compared: the facts of a run that move its speed, and the rule that
a ratio is computed only between cells that agree on every fact but the one under comparison.

Every fact is read from what ``run.json`` already records (``environment``, ``framework``,
``data``, ``recipe``), so runs written before this module are judged as well. A fact has a
scope, which says in which comparisons it may differ:

  machine    the GPUs by UUID and name, the host, the driver, each GPU's power limit and
             maximum clocks (a CPU run: the host and platform). Never, except in the
             separate cross-machine section that ``--cross-machine`` asks for.
  software   Python, Parallax, every library version that both runs recorded (a library one
             run lacks is one it did not need), torch's CUDA runtime. Never.
  data       the token source: synthetic, or which training tokens and tokenizer. Never.
  framework  what a framework's engine chose for every recipe: the attention backend, compiled
             or eager, JAX's allocator and the XLA flags that no recipe asked for. Only between
             frameworks (``jax bf16`` over ``torch bf16``), where they belong to what is compared.
  recipe     what a recipe brings with it: CUDA graphs and their scope, the compile scope, the
             XLA flags the recipe asks for, MaxText's settings, the cuDNN its libraries loaded,
             the attention a torch recipe runs itself (TE's DotProductAttention).
             Between recipes, as part of what is compared.
  tuning     the knob set a run ran (``--tuning``, spec/tuning.py: its XLA flags, torch.compile
             mode and inductor options, MaxText keys); runs written before it read as "default".
             Only in a tuning comparison (a knob set over its recipe's default): a ratio between
             recipes or frameworks uses cells of one knob set.

A cell whose attention fell back (the engine's first choice refused at this shape, e.g. cuDNN
→ flash) is marked; its speed is kept out of every ratio, since it measures the fallback. So is
an input-bound cell: one whose steps waited for their batches more than INPUT_BOUND_FRACTION of
their step time (``timing.data_wait``, docs/timing.md): its speed measures the data feeding, not
the stack. A run recorded before the data wait was (no ``timing.data_wait``) is not marked:
unknown, not input-bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from parallax.errors import ParallaxError
from parallax.native.gpu import gpu_uuid
from parallax.spec import tuning

MACHINE, SOFTWARE, DATA, FRAMEWORK, RECIPE, TUNING = "machine", "software", "data", "framework", "recipe", "tuning"
# The scopes a comparison of each kind may differ in (besides the cells' names).
MAY_DIFFER = {"repeat": (), "recipe": (RECIPE,), "framework": (FRAMEWORK, RECIPE), "tuning": (TUNING,),
              # the fastest stacks of a format, each with its knob set (the report's conclusions)
              "recipe+tuning": (RECIPE, TUNING), "framework+tuning": (FRAMEWORK, RECIPE, TUNING)}
# Each engine's attention on a GPU when nothing refuses (torch probes cuDNN first, JAX asks for
# cuDNN's fused attention); MaxText's is its config key, set by the recipe, so never a fallback.
FIRST_CHOICE_ATTENTION = {"torch": "cudnn", "jax": "cudnn"}
# Rule: a run whose timed steps waited for their batches more than this fraction of their step
# time (total wait / total step time) is input-bound; exactly this fraction is not.
INPUT_BOUND_FRACTION = 0.02
# How to feed a run faster, for the input-bound reason: by how it was fed.
FEED_FASTER_GRAIN = ("Parallax's loader instead of Grain (the maxtext engine's default, without a grain "
                     "--tuning), or more Grain workers (grain_worker_count: engines/maxtext/config.py)")
FEED_FASTER_DEFAULT = ("prepared tokens (parallax data prepare) through the native loader, on a host with "
                       "CPU cores to spare")


@dataclass(frozen=True)
class Difference:
    fact: str
    scope: str
    a: object
    b: object

    def text(self) -> str:
        show = _gpus_text if self.fact == "machine.gpus" else _short
        return f"{self.fact} ({show(self.a)} vs {show(self.b)})"


def _gpus_text(gpus) -> str:
    """The GPUs of a machine fact as 'NVIDIA H200 GPU-ca94b9f0-e600-... 700 W'."""
    return ", ".join(" ".join(str(x) for x in g[:2]) + (f" {g[2]:g} W" if len(g) > 2 and g[2] else "")
                     for g in gpus or ())


def _short(value) -> str:
    text = "none" if value in (None, "", ()) else " ".join(str(value).split())
    return text if len(text) <= 90 else text[:87] + "..."


# ----------------------------------------------------------------------------- facts

def facts(run: dict) -> dict[str, tuple[str, object]]:
    """{fact name: (scope, value)} of a run.json."""
    env = run.get("environment") if isinstance(run.get("environment"), dict) else {}
    fw = run.get("framework") if isinstance(run.get("framework"), dict) else {}
    out = {f"machine.{k}": (MACHINE, v) for k, v in machine(run).items()}
    out.update({f"software.{k}": (SOFTWARE, v) for k, v in _software(env, fw).items()})
    # The cuDNN that torch finds loaded at the end of a run: a recipe's library may load its own
    # first (TransformerEngine loads the system's), so it belongs to the recipe.
    out["cudnn_loaded"] = (RECIPE, fw.get("cudnn"))
    out["data"] = (DATA, data_source(run))
    # MaxText's attention is its config key, which a recipe's settings choose (bf16-defaults)
    out["attention"] = (RECIPE if fw.get("name") == "maxtext" else FRAMEWORK, fw.get("attention_backend"))
    # ... and a torch recipe that runs attention itself (TE's DotProductAttention) brings it along
    out["recipe_attention"] = (RECIPE, fw.get("recipe_attention"))
    out["compiled"] = (FRAMEWORK, fw.get("compiled"))
    out["jax_allocator"] = (FRAMEWORK, (fw.get("allocator"), fw.get("preallocate")) if "allocator" in fw else None)
    own_flags = set(_recipe_params(run).get("xla_flags") or ())
    knobs = (run.get("tuning") or {}).get("knobs") or {} if isinstance(run.get("tuning"), dict) else {}
    knob_flags = set(knobs.get("xla_flags") or ())
    flags = [f for f in (fw.get("xla_flags") or "").split() if f not in knob_flags]
    out["tuning"] = (TUNING, tuning.of_run(run))
    out["xla_flags"] = (FRAMEWORK, " ".join(sorted(f for f in flags if f not in own_flags)))
    out["recipe_xla_flags"] = (RECIPE, " ".join(sorted(f for f in flags if f in own_flags)))
    out["cuda_graphs"] = (RECIPE, (bool(fw.get("cuda_graphs")), fw.get("graph_scope")))
    out["compile_scope"] = (RECIPE, fw.get("compile_scope"))
    out["maxtext_settings"] = (RECIPE, _stable(fw.get("settings")))
    return out


def machine(run: dict) -> dict:
    """The machine facts of a run: its host and driver, and each GPU it ran on (name, UUID,
    power limit, maximum SM and memory clocks); the platform where there is no GPU."""
    env = run.get("environment") if isinstance(run.get("environment"), dict) else {}
    nvml = env.get("nvml") or {}
    driver = env.get("cuda_driver") or {}
    gpus = tuple((g.get("name"), gpu_uuid(g.get("uuid")), g.get("power_limit_w"), g.get("clock_sm_max_mhz"),
                  g.get("clock_mem_max_mhz")) for g in used_gpus(run))
    return {"host": env.get("hostname"), "driver": nvml.get("driver_version") or driver.get("version_str"),
            "gpus": gpus or (("cpu", env.get("platform")),)}


def used_gpus(run: dict) -> list[dict]:
    """The GPUs of ``environment.gpus`` (those the run could see, in CUDA's order) that it ran
    on: from its device's index (``cuda:1``, ``gpu:0``; 0 for ``auto``), as many as it had GPUs."""
    env = run.get("environment") if isinstance(run.get("environment"), dict) else {}
    gpus = env.get("gpus") or []
    fw = run.get("framework") if isinstance(run.get("framework"), dict) else {}
    config = run.get("config") or {}
    device = str(fw.get("device") or "")
    start = int(device.rsplit(":", 1)[1]) if ":" in device and device.rsplit(":", 1)[1].isdigit() else 0
    count = int((run.get("parallel") or {}).get("gpus") or config.get("gpus") or 1)
    return gpus[start:start + count]


def machine_label(run: dict) -> str:
    """A short name of a run's machine: 'NVIDIA H200 ca94b9f0' (the GPU's name and the start of
    its UUID), '2× NVIDIA H200 ca94b9f0+1b2c3d4e', or 'cpu <host>'."""
    env = run.get("environment") if isinstance(run.get("environment"), dict) else {}
    gpus = used_gpus(run)
    if not gpus:
        return f"cpu {env.get('hostname') or '?'}" if env else "unknown"
    names = sorted({str(g.get("name")) for g in gpus})
    ids = "+".join((gpu_uuid(g.get("uuid")) or "GPU-?")[4:12] for g in gpus)
    count = f"{len(gpus)}× " if len(gpus) > 1 else ""
    return f"{count}{'/'.join(names)} {ids}"


def host_label(env: dict) -> str:
    """The host and every GPU it shows (name and UUID) of an environment record: which machine a
    benchmark folder was started on (environment.json), where a run's own GPUs are unknown."""
    gpus = ", ".join(f"{g.get('name')} {g.get('uuid')}" for g in env.get("gpus") or []) or "no GPU"
    return f"{env.get('hostname') or 'an unnamed host'} ({gpus})"


def _software(env: dict, fw: dict) -> dict:
    packages = {k: v for k, v in (env.get("packages") or {}).items() if v}
    return {"python": env.get("python"), "parallax": env.get("parallax"),
            "cuda_runtime": fw.get("cuda_runtime"), "packages": packages}


def data_source(run: dict) -> str:
    """'synthetic', or the training tokens by their hash and the tokenizer's (the source text
    where a run recorded no hash)."""
    data = run.get("data") if isinstance(run.get("data"), dict) else {}
    config = run.get("config") or {}
    if data.get("synthetic", config.get("synthetic")):
        return "synthetic"
    if data.get("train_sha256"):
        return f"tokens {data['train_sha256'][:12]}, tokenizer {str(data.get('tokenizer_sha256'))[:12]}"
    return str(data.get("source") or config.get("data") or "unknown")


def _recipe_params(run: dict) -> dict:
    recipe = run.get("recipe") if isinstance(run.get("recipe"), dict) else {}
    return recipe.get("params") or {}


def _stable(value):
    """A dict as a sorted tuple of items, so that two equal settings compare equal."""
    return tuple(sorted((k, str(v)) for k, v in value.items())) if isinstance(value, dict) else value


# ----------------------------------------------------------------------------- comparing

def differences(a: dict, b: dict, kind: str = "repeat") -> list[Difference]:
    """The facts of ``a`` and ``b`` (``facts()``) that differ in a scope the comparison ``kind``
    (``MAY_DIFFER``'s keys, or "scaling": one cell on more GPUs of the same machine) does not
    allow. Library versions count only where both runs recorded one."""
    allowed = MAY_DIFFER["repeat" if kind == "scaling" else kind]
    out = []
    for name in sorted(set(a) | set(b)):
        scope, va = a.get(name, (None, None))
        scope_b, vb = b.get(name, (None, None))
        scope = scope or scope_b
        if scope in allowed:
            continue
        if name == "software.packages":
            out += _package_differences(va or {}, vb or {})
        elif scope == SOFTWARE and (va is None or vb is None):
            continue  # recorded by one engine only (torch's CUDA runtime)
        elif name == "machine.gpus" and kind == "scaling":
            if not (set(va or ()) <= set(vb or ()) or set(vb or ()) <= set(va or ())):
                out.append(Difference(name, scope, va, vb))
        elif va != vb:
            out.append(Difference(name, scope, va, vb))
    return out


def _package_differences(a: dict, b: dict) -> list[Difference]:
    return [Difference(f"software.{name}", SOFTWARE, a[name], b[name])
            for name in sorted(set(a) & set(b)) if a[name] != b[name]]


def attention_fallback(run: dict) -> str | None:
    """Why a run's attention is not its engine's first choice on a GPU ('cudnn refused: ... →
    flash'), or None (the first choice ran, a CPU run, or an engine without a fallback)."""
    fw = run.get("framework") if isinstance(run.get("framework"), dict) else {}
    first = FIRST_CHOICE_ATTENTION.get(fw.get("name"))
    backend = fw.get("attention_backend")
    on_gpu = fw.get("platform") == "gpu" or str(fw.get("device", "")).startswith("cuda")
    if first is None or not on_gpu or backend in (None, first):
        return None
    reason = (fw.get("attention_refused") or {}).get(first) or fw.get("attention_reason") or "reason not recorded"
    return f"{first} refused ({_short(reason)}) → {backend}"


def input_bound(run: dict) -> str | None:
    """Why a run's speed measures its data feeding ('input-bound: waited 3.1 ms of 52.0 ms a step
    for its batch (6.0%); feed it faster: ...'), or None: its wait is at most INPUT_BOUND_FRACTION
    of its step time, or it recorded no wait (a run.json from before ``timing.data_wait``)."""
    timing = run.get("timing") if isinstance(run.get("timing"), dict) else {}
    wait = timing.get("data_wait") if isinstance(timing.get("data_wait"), dict) else None
    if wait is None or wait.get("fraction") is None or wait["fraction"] <= INPUT_BOUND_FRACTION:
        return None
    step = (timing.get("step_ms") or {}).get("mean")
    of_step = f" of {step:.1f} ms" if step is not None else ""
    return (f"input-bound: waited {wait['mean_ms']:.1f} ms{of_step} a step for its batch "
            f"({wait['fraction']:.1%}); feed it faster: {feed_faster(run)}")


def feed_faster(run: dict) -> str:
    """The advice for an input-bound run: a MaxText run fed through Grain (its record's
    ``data.maxtext_input``) can take Parallax's loader; any other, the native loader's host."""
    data = run.get("data") if isinstance(run.get("data"), dict) else {}
    fed = data.get("maxtext_input")
    return FEED_FASTER_GRAIN if isinstance(fed, str) and fed.startswith("grain") else FEED_FASTER_DEFAULT


def kept_out(run: dict) -> str | None:
    """Why a run's speed is kept out of every ratio (its attention fell back, or it is
    input-bound), as one line; None where it may be compared."""
    fallback = attention_fallback(run)
    return f"attention fell back ({fallback})" if fallback else input_bound(run)


def refusal(subject: str, found: list[Difference], cross_machine: bool = False) -> ParallaxError:
    """The one-line error for ``subject`` ('torch te-fp8-delayed over torch bf16 (runs/..., runs/...)')
    whose two sides differ in ``found``."""
    hint = ("compare cells of one machine, or pass 'parallax compare --cross-machine' for a separate, labelled "
            "section"
            if all(d.scope == MACHINE for d in found) and not cross_machine
            else "re-run one side so that only the compared thing differs")
    listed = "; ".join(d.text() for d in found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
    return ParallaxError(f"refusing {subject}: they differ in {listed}; {hint}")
