"""CPU smoke-test shim (NOT part of Parallax): lifts the maxtext engine's GPU-only checks and writes
CPU keys into its MaxText config, then runs the real `parallax` CLI (current module layout)."""
import sys

from parallax.plan import envinfo
from parallax.engines.maxtext import config

envinfo.probe_gpus = lambda: {"driver": {"available": True, "error": None}, "nvml": {"available": True, "error": None},
                              "devices": [{"index": 0, "name": "CPU (shim)", "compute_capability": "9.0",
                                           "uuid": "GPU-cpushim"}]}
_versions = envinfo.package_versions
envinfo.package_versions = lambda names=envinfo.PACKAGES: {**_versions(names), "jax_cuda13_plugin": "0.11.2",
                                                           "jax_cuda12_plugin": "0.11.2"}
_run_keys = config.run_keys
config.run_keys = lambda run: {**_run_keys(run), "hardware": "cpu", "skip_jax_distributed_system": True}
for t in config.TUNINGS.values():
    t["attention"] = "dot_product"
from parallax.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
