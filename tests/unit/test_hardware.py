"""The GPU table: lookups by name and capability, families, and the MFU denominators."""

from __future__ import annotations

import re

import pytest

from parallax.plan import hardware
from parallax.spec.flops import Denominators


def dev(name, cc, index=0):
    return {"index": index, "name": name, "compute_capability": cc}


# Names as nvidia-smi / NVML print them.
@pytest.mark.parametrize(
    "name, cc, key",
    [
        ("NVIDIA H200", "9.0", "h200-sxm"),
        ("NVIDIA H100 80GB HBM3", "9.0", "h100-sxm"),
        ("NVIDIA H100 PCIe", "9.0", "h100-pcie"),
        ("NVIDIA B200", "10.0", "b200"),
        ("NVIDIA GB200", "10.0", "gb200"),
        ("NVIDIA GB300", "10.3", "gb300"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", "rtx-pro-6000-blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "12.0", "rtx-pro-6000-blackwell-max-q"),
        ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "rtx-pro-6000-blackwell-server"),
        ("NVIDIA GeForce RTX 5090", "12.0", "rtx-5090"),
        ("NVIDIA L40S", "8.9", "l40s"),
        ("NVIDIA GeForce RTX 4090", "8.9", "rtx-4090"),
        ("NVIDIA A100-SXM4-80GB", "8.0", "a100"),
        ("NVIDIA A100-PCIE-40GB", "8.0", "a100"),
        ("NVIDIA A100 80GB PCIe", "8.0", "a100"),
        ("nvidia  h200", "9.0", "h200-sxm"),  # case and spacing do not matter
    ],
)
def test_lookup_by_name_and_capability(name, cc, key):
    res = hardware.lookup(name, cc)
    assert res.key == key
    assert res.spec.compute_capability == cc
    assert res.warnings == ()


def test_h200_resolves_to_its_own_key_not_h100():
    spec = hardware.lookup("NVIDIA H200", "9.0").spec
    assert spec.key == "h200-sxm"
    assert spec.memory == "141 GB HBM3e"
    assert spec.peak("bf16") == 989.0
    assert spec.peak("fp8") == 1979.0


def test_rtx_pro_6000_blackwell_is_12_0_with_its_peaks():
    spec = hardware.lookup("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0").spec
    assert spec.compute_capability == "12.0"
    assert hardware.family(spec.compute_capability) == "Blackwell RTX"
    assert spec.peak("bf16") == 503.8
    assert spec.peak("fp8") == 1007.6
    assert spec.peaks["fp4"] == 2015.0
    assert spec.peak("nvfp4") is None  # "~2015" is uncertain: shown, never used


def test_rtx_pro_6000_with_a_datacenter_capability_does_not_resolve():
    res = hardware.lookup("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "10.0")
    assert res.spec is None
    assert "rtx-pro-6000-blackwell (12.0)" in res.warnings[0]
    assert "--peak-tflops" in res.warnings[0]


@pytest.mark.parametrize("name", ["NVIDIA H200 NVL", "NVIDIA H100 NVL", "NVIDIA Quadro RTX 8000", "Some GPU"])
def test_unknown_names_resolve_to_none_with_the_fix(name):
    res = hardware.lookup(name, "9.0")
    assert res.spec is None and res.key is None
    assert f"'{name}'" in res.warnings[0]
    assert "resolved key: none" in res.warnings[0]
    assert "--peak-tflops" in res.warnings[0]


def test_lookup_without_a_name():
    res = hardware.lookup(None, "9.0")
    assert res.spec is None
    assert "--peak-tflops" in res.warnings[0]


def test_every_row_is_sourced_and_consistent():
    keys = [g.key for g in hardware.GPUS]
    assert len(keys) == len(set(keys))
    for gpu in hardware.GPUS:
        assert gpu.source.strip()
        assert hardware.family(gpu.compute_capability) != "unknown"
        assert set(gpu.peaks) == {"bf16", "fp8", "fp4"}
        assert gpu.uncertain <= set(gpu.peaks)
        # A part without native fp8/fp4 tensor cores carries no such peak.
        native = hardware.native_precisions(gpu.compute_capability)
        native_columns = {hardware.PEAK_COLUMN[p] for p in native}  # mxfp8 shares fp8's column
        for column in set(hardware.PEAK_COLUMN.values()) - native_columns:
            assert gpu.peaks[column] is None, (gpu.key, column)


def test_no_name_matches_two_rows():
    names = [
        "NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA B200", "NVIDIA GB200",
        "NVIDIA B300 SXM6 AC", "NVIDIA GB300", "NVIDIA GeForce RTX 5090", "NVIDIA L40S",
        "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "NVIDIA RTX PRO 6000 Blackwell Server Edition", "NVIDIA A100-SXM4-40GB",
    ]
    for name in names:
        assert len(hardware._matches(name)) == 1, name


def test_uncertain_rows():
    b300 = hardware.lookup("NVIDIA B300 SXM6 AC", "10.3").spec
    assert b300.key == "b300"
    assert b300.peaks["bf16"] == 2250.0
    assert [b300.peak(p) for p in ("bf16", "fp8", "nvfp4")] == [None, None, None]
    max_q = hardware.BY_KEY["rtx-pro-6000-blackwell-max-q"]
    assert (max_q.peak("bf16"), max_q.peak("fp8")) == (438.9, None)
    assert hardware.BY_KEY["rtx-5090"].peak("bf16") == 209.5
    assert hardware.BY_KEY["b200"].peak("nvfp4") == 9000.0


@pytest.mark.parametrize(
    "cc, family",
    [
        ("8.0", "Ampere"), ("8.6", "Ampere"), ("8.7", "Ampere"), ("8.9", "Ada"), ("9.0", "Hopper"),
        ("10.0", "Blackwell datacenter"), ("10.3", "Blackwell datacenter"), ("11.0", "Blackwell datacenter"),
        ("12.0", "Blackwell RTX"), ("12.1", "Blackwell RTX"), ((9, 0), "Hopper"), ("7.5", "Turing"),
        (None, "unknown"), ("abc", "unknown"), ("13.0", "unknown"),
    ],
)
def test_family(cc, family):
    assert hardware.family(cc) == family


@pytest.mark.parametrize(
    "cc, native",
    [
        ("7.5", ()), ("8.0", ("bf16",)), ("8.6", ("bf16",)), ("8.9", ("bf16", "fp8")), ("9.0", ("bf16", "fp8")),
        ("10.0", ("bf16", "fp8", "mxfp8", "nvfp4", "mxfp4")), ("12.0", ("bf16", "fp8", "mxfp8", "nvfp4", "mxfp4")),
        (None, ()),
    ],
)
def test_native_precisions(cc, native):
    assert hardware.native_precisions(cc) == native


def test_precision_notes_only_on_12_x():
    notes = hardware.precision_notes("12.0")
    assert any("PR #3195" in n for n in notes)
    assert any("all-zero gradients" in n for n in notes)
    assert hardware.precision_notes("10.0") == []
    assert hardware.precision_notes("9.0") == []


H200 = dev("NVIDIA H200", "9.0")


def test_denominators_known_gpu():
    assert hardware.denominators(H200, "bf16") == (Denominators(989.0, 989.0, None), [])
    assert hardware.denominators(H200, "fp8", measured_ceiling=700.5) == (Denominators(1979.0, 989.0, 700.5), [])


def test_denominators_precision_without_tensor_cores():
    den, warnings = hardware.denominators(H200, "nvfp4")
    assert den == Denominators(None, 989.0, None)
    assert warnings == [
        "h200-sxm: compute capability 9.0 has no nvfp4 tensor cores, so MFU against the nvfp4 peak is n/a; "
        "pass --peak-tflops to set a figure you trust"
    ]


def test_denominators_override():
    assert hardware.denominators(H200, "fp8", peak_override=1500.0) == (Denominators(1500.0, 989.0, None), [])
    # For a bf16 run the precision peak is the bf16 peak.
    assert hardware.denominators(H200, "bf16", peak_override=800.0) == (Denominators(800.0, 800.0, None), [])
    unknown = dev("NVIDIA Imaginary GPU", "9.0")
    assert hardware.denominators(unknown, "bf16", 700.0, 650.0) == (Denominators(700.0, 700.0, 650.0), [])


def test_denominators_unknown_gpu_gives_none_and_names_the_fix():
    den, warnings = hardware.denominators(dev("NVIDIA Imaginary GPU", "9.0"), "bf16", measured_ceiling=600.0)
    assert den == Denominators(None, None, 600.0)
    assert len(warnings) == 1
    assert "'NVIDIA Imaginary GPU'" in warnings[0] and "--peak-tflops" in warnings[0]


def test_denominators_uncertain_figures_are_not_used():
    den, warnings = hardware.denominators(dev("NVIDIA B300 SXM6 AC", "10.3"), "fp8")
    assert den == Denominators(None, None, None)
    assert len(warnings) == 2
    assert re.search(r"b300: its fp8 figure \(4500 TFLOP/s, .*\) is uncertain", warnings[0])
    assert "--peak-tflops" in warnings[0]
    assert warnings[1].startswith("b300: its bf16 figure (2250 TFLOP/s")


def test_denominators_without_gpu():
    den, warnings = hardware.denominators(None, "bf16")
    assert den == Denominators(None, None, None)
    assert warnings == ["no NVIDIA GPU found, so MFU is n/a"]


def test_denominators_ignore_a_non_positive_ceiling():
    assert hardware.denominators(H200, "bf16", measured_ceiling=0.0)[0].measured_ceiling is None


def test_denominators_reject_unknown_precision():
    with pytest.raises(ValueError):
        hardware.denominators(H200, "fp16")


def test_resolution_to_dict():
    d = hardware.resolve_device(dev("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0")).to_dict()
    assert d["key"] == "rtx-pro-6000-blackwell"
    assert d["family"] == "Blackwell RTX"
    assert d["native_precisions"] == ["bf16", "fp8", "mxfp8", "nvfp4", "mxfp4"]
    assert d["spec"]["dense_peak_tflops"] == {"bf16": 503.8, "fp8": 1007.6, "fp4": 2015.0}
    assert d["spec"]["uncertain"] == ["fp4"]
    assert d["notes"]
