"""What this machine is, probed once per process: the native GPU probe (``envinfo.probe_gpus``),
asked the first time anything needs it and remembered after. Every reader of the GPUs (``--model
auto``, ``--gpus all``, a recipe's default on this GPU, the run's environment record, the
launcher's precheck) reads ``probe()``; nothing else calls the native probe."""

from __future__ import annotations

from parallax.plan import envinfo

_probed: dict | None = None


def probe() -> dict:
    """The GPU probe of this process (``gpu.probe()``'s dict: driver, NVML, devices, topology)."""
    global _probed
    if _probed is None:
        _probed = envinfo.probe_gpus()
    return _probed


def forget() -> None:
    """Probe again on the next ``probe()`` (tests that fake the GPUs of a machine)."""
    global _probed
    _probed = None


def devices() -> list[dict]:
    return probe().get("devices") or []


def gpu_of(device: str) -> dict | None:
    """The probe entry of the GPU that ``device`` names (``cuda:N`` its index N; ``cuda`` and
    ``auto`` the first); None for ``cpu`` or where no such GPU is visible."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return None
    position = int(index) if index.isdigit() else 0
    return next((d for d in devices() if d.get("index") == position), None)


def compute_capability(device: str) -> str | None:
    """The compute capability of the GPU ``device`` names; None for the CPU or no GPU."""
    found = gpu_of(device)
    return found.get("compute_capability") if found else None


def environment() -> dict:
    """The run's environment record (``envinfo.environment``) over this process's one probe."""
    return envinfo.environment(probe())
