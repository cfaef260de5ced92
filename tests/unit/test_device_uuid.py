"""One form of a GPU's UUID in every record: NVML's 'GPU-<hex>' (``native.gpu.gpu_uuid``), what
torch's bare hex and a JAX device's probe entry become, and comparability treating both
spellings of one GPU as one machine."""

from __future__ import annotations

from types import SimpleNamespace

from parallax.analysis import comparability
from parallax.engines.jax import training
from parallax.native.gpu import gpu_uuid
from parallax.plan import machine

HEX = "ea8cf035-1b2c-3d4e-5f60-718293a4b5c6"


def test_every_spelling_becomes_nvml_s():
    assert gpu_uuid(HEX) == f"GPU-{HEX}"
    assert gpu_uuid(f"GPU-{HEX}") == gpu_uuid(f"gpu-{HEX.upper()}") == gpu_uuid(f" GPU-{HEX} ") == f"GPU-{HEX}"
    assert gpu_uuid(None) is None and gpu_uuid("") is None


def record(uuid: str) -> dict:
    return {"environment": {"hostname": "vm", "nvml": {"driver_version": "580.159.04"},
                            "gpus": [{"name": "NVIDIA H200", "uuid": uuid, "power_limit_w": 700.0}]},
            "framework": {"name": "torch", "device": "cuda:0"}, "config": {}}


def test_an_old_bare_record_and_a_new_one_are_one_machine():
    old, new = record(HEX), record(f"GPU-{HEX}")
    assert comparability.machine(old) == comparability.machine(new)
    assert comparability.machine(old)["gpus"][0][1] == f"GPU-{HEX}"
    assert comparability.machine_label(old) == comparability.machine_label(new) == "NVIDIA H200 ea8cf035"
    assert comparability.machine(record("GPU-0000aaaa")) != comparability.machine(new)


def test_a_jax_gpu_gets_the_uuid_of_the_probe_s_gpu_at_its_cuda_ordinal(monkeypatch):
    probed = {"devices": [{"index": 0, "uuid": "GPU-aaaa"}, {"index": 1, "uuid": f"GPU-{HEX}"}]}
    monkeypatch.setattr(machine, "_probed", probed)
    gpu1 = SimpleNamespace(platform="gpu", id=1, local_hardware_id=1)
    assert training.device_uuid(gpu1) == f"GPU-{HEX}"
    assert training.device_uuid(SimpleNamespace(platform="gpu", id=5, local_hardware_id=5)) is None
    assert training.device_uuid(SimpleNamespace(platform="cpu", id=0)) is None
