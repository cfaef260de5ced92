"""CPU smoke-test shim (NOT part of Parallax): lifts the maxtext engine's GPU-only checks and writes
CPU keys into its MaxText config, then runs the real `parallax` CLI."""
import sys
from parallax import envinfo
from parallax.engines.maxtext import engine, config
from parallax.precision import capability as cap_mod

engine.gpu_index = lambda spec: 0                      # --device cpu -> "GPU 0"
envinfo.probe_gpus = lambda: {"devices": [{"index": 0, "name": "CPU (shim)", "compute_capability": "9.0", "uuid": None}]}
_orig_cap = cap_mod.capability
def _cap(recipe, probe, packages, index=0):
    c = _orig_cap(recipe, probe, packages, index)
    return cap_mod.Capability(c.framework, c.recipe, c.precision, cap_mod.NATIVE, "CPU shim", recipe.summary, c.default) \
        if c.status != cap_mod.NATIVE and "CUDA plugin" in (c.reason or "") else c
cap_mod.capability = _cap
_orig_run_keys = config.run_keys
config.run_keys = lambda run: {**_orig_run_keys(run), "hardware": "cpu", "skip_jax_distributed_system": True}
for t in config.TUNINGS.values():
    t["attention"] = "dot_product"
from parallax.cli import main
sys.exit(main(sys.argv[1:]))
