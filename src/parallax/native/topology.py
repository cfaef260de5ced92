"""How a machine's GPUs are joined, in plain words: the probe's topology as a matrix.

``gpu.probe()`` reads, through NVML, each GPU's NVLinks and, for every pair, the closest thing
their PCIe paths share (``nvmlDeviceGetTopologyCommonAncestor``) and how many NVLinks join them
(directly, or through NVSwitch). ``interconnect(probe)`` turns that into the matrix
``nvidia-smi topo -m`` prints, with the same codes, and says what each code means. It needs
neither torch nor JAX, so ``check-env`` shows it before any framework is imported.

Codes: ``NV<n>`` n NVLinks; ``BOARD`` the same board (a dual-GPU card; nvidia-smi has no code);
``PIX`` one PCIe switch; ``PXB`` several PCIe switches; ``PHB`` the CPU's PCIe host bridge;
``NODE`` host bridges of one NUMA node; ``SYS`` across NUMA nodes (the CPUs' interconnect);
``?`` NVML could not tell.
"""

from __future__ import annotations

PCIE_WORDS = {
    "BOARD": "the same board (a dual-GPU card)",
    "PIX": "PCIe through one PCIe switch",
    "PXB": "PCIe through several PCIe switches (not the CPU)",
    "PHB": "PCIe through a CPU's PCIe host bridge",
    "NODE": "PCIe across the host bridges of one NUMA node",
    "SYS": "PCIe and the link between CPU sockets (UPI, xGMI...)",
    "?": "unknown (NVML could not tell)",
}


def connection_words(pair: dict) -> str:
    """One pair's link in words: 'NVLink ×18 through NVSwitch', 'PCIe through one PCIe switch'."""
    n = pair.get("nvlinks") or 0
    if n:
        how = "through NVSwitch" if pair.get("via_nvswitch") else "direct (bridge or board)"
        return f"NVLink ×{n} {how}"
    return PCIE_WORDS.get(pair.get("pcie_path") or "?", PCIE_WORDS["?"])


def nvlink_words(device: dict) -> str:
    """A GPU's NVLinks: '18/18 up, 18 to NVSwitch', 'none', or why NVML could not say."""
    info = device.get("nvlink")
    if not info:
        return "unknown"
    if not info.get("links"):
        error = info.get("error") or ""
        if not error or error.endswith("Not Supported"):  # what a GPU without NVLink answers
            return "none"
        return f"unknown ({error})"
    text = f"{info['active']}/{info['links']} up"
    if info.get("to_nvswitch"):
        text += f", {info['to_nvswitch']} to NVSwitch"
    return text


def interconnect(probe: dict) -> dict:
    """The GPUs' interconnect from a probe dict (``gpu.probe()`` or environment.json's pieces).

    Returns {"available", "error", "gpus": [index...], "matrix": [[code, ...], ...] ("X" on the
    diagonal), "pairs": [{a, b, connection, words, nvlinks, via_nvswitch, pcie_path, p2p_nvlink}],
    "legend": {code: words} for the codes present, "summary": one sentence}. A probe from before
    the topology was read (no ``topology`` key) reads as unavailable, with that reason.
    """
    devices = probe.get("devices") or []
    indices = [d["index"] for d in devices]
    topology = probe.get("topology")
    if topology is None:
        topology = {"available": False, "error": "this probe did not read the topology", "pairs": []}
    pairs = {(p["a"], p["b"]): p for p in topology.get("pairs") or []}
    out = {"available": bool(topology.get("available")), "error": topology.get("error"), "gpus": indices,
           "matrix": [], "pairs": [], "legend": {}, "summary": ""}
    for a in indices:
        row = []
        for b in indices:
            pair = pairs.get((min(a, b), max(a, b)))
            row.append("X" if a == b else (pair or {}).get("connection") or "?")
        out["matrix"].append(row)
    for (a, b), p in sorted(pairs.items()):
        if a not in indices or b not in indices:
            continue
        words = connection_words(p)
        out["pairs"].append({"a": a, "b": b, "connection": p.get("connection") or "?", "words": words,
                             "nvlinks": p.get("nvlinks") or 0, "via_nvswitch": bool(p.get("via_nvswitch")),
                             "pcie_path": p.get("pcie_path"), "p2p_nvlink": p.get("p2p_nvlink")})
        code = p.get("connection") or "?"
        out["legend"].setdefault(code, words if code.startswith("NV") else PCIE_WORDS.get(code, PCIE_WORDS["?"]))
    out["summary"] = _summary(out, len(indices))
    return out


def _summary(record: dict, n: int) -> str:
    if n == 0:
        return "no GPU"
    if n == 1:
        return "one GPU: nothing to connect"
    if not record["available"]:
        return f"{n} GPUs; their interconnect is unknown ({record['error']})"
    links = [p for p in record["pairs"] if p["nvlinks"]]
    if len(links) == len(record["pairs"]):
        fewest = min(p["nvlinks"] for p in links)
        switch = all(p["via_nvswitch"] for p in links)
        return (f"all {n} GPUs are joined by NVLink (at least {fewest} links per pair"
                + (", through NVSwitch)" if switch else ")"))
    if links:
        return (f"{len(links)} of {len(record['pairs'])} GPU pairs are joined by NVLink; "
                "the others talk over PCIe")
    return f"{n} GPUs with no NVLink between them: every pair talks over PCIe"
