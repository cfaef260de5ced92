"""What XLA makes of the Flax fp8 recipes on this GPU: the optimized HLO of one training step.

For each recipe (and XLA_FLAGS variant, each in its own process, since XLA reads the flags once)
it compiles the engine's own step for the tiny preset (``JaxEngine.build_step``) and counts, in the optimized HLO, the fp8
types, the custom calls by target and the fusions by kind, so that "did the GEMMs run in fp8"
is answered from the compiler's output rather than assumed. Writes OUT/jax_fp8_hlo.json and
the HLO texts; prints one line per case.

    python3 scripts/device/jax_fp8_hlo.py            # every recipe, default flags and variants
"""

from __future__ import annotations

import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

CASES = [
    ("bf16", ""),
    ("flax-fp8-direct", ""),
    ("flax-fp8-delayed", ""),
    ("flax-fp8-delayed", "--xla_allow_excess_precision=false"),
    ("flax-fp8-direct", "--xla_gpu_enable_triton_gemm=false"),
]


def one(recipe: str, out: Path) -> dict:
    import jax

    from parallax.engines.jax.engine import JaxEngine
    from parallax.plan.resolve import resolve
    from parallax.spec import registry
    from parallax.spec.config import RunConfig

    flags = os.environ.get("XLA_FLAGS", "")  # the case's; the engine adds the recipe's own
    chosen = registry.get("jax", recipe)
    run = RunConfig.for_preset("tiny", framework="jax", precision=chosen.format, recipe=chosen.name, steps=20,
                               warmup=1, seed=0)
    step = JaxEngine().build_step(resolve(run))  # the GPU on the device machine (the CPU only to try this script)
    before, after = step.lowered.as_text(), step.fn.as_text()
    name = f"{recipe}{'-' + re.sub('[^a-z0-9]+', '_', flags) if flags else ''}"
    (out / f"hlo_{name}.txt").write_text(after)
    targets = collections.Counter(re.findall(r'custom_call_target="([^"]+)"', after))
    kinds = collections.Counter(re.findall(r'"kind":"([^"]+)"', after))
    return {"recipe": recipe, "xla_flags": flags, "xla_flags_run": step.details["xla_flags"], "jax": jax.__version__,
            "f8e4m3fn_before": before.count("f8E4M3FN") + before.count("f8e4m3fn"),
            "f8e4m3fn_after": after.count("f8e4m3fn"), "f8e5m2_after": after.count("f8e5m2"),
            "custom_call_targets": dict(targets), "fusion_kinds": dict(kinds),
            "dots_after": len(re.findall(r"\bdot\(", after))}


def main() -> None:
    out = Path(os.environ.get("OUT", "/tmp")) / "jax_fp8_hlo"
    out.mkdir(parents=True, exist_ok=True)
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(one(sys.argv[2], out)))
        return
    rows = []
    for recipe, flags in CASES:
        env = dict(os.environ, XLA_FLAGS=flags) if flags else dict(os.environ)
        proc = subprocess.run([sys.executable, __file__, "--one", recipe], capture_output=True, text=True,
                              env=env, timeout=300)
        if proc.returncode != 0:
            rows.append({"recipe": recipe, "xla_flags": flags, "error": proc.stderr.strip().splitlines()[-1:]})
        else:
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(f"{recipe:18} {flags or '(default flags)':40} f8 before {r.get('f8e4m3fn_before')} after "
              f"{r.get('f8e4m3fn_after')} targets {r.get('custom_call_targets')} {r.get('error') or ''}", flush=True)
    (out / "jax_fp8_hlo.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
