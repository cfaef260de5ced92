"""scripts/device/ceiling_crosscheck.py off the GPU: nvidia-smi parsing and sampling (against a
scripted nvidia-smi), the statistics, the issue-2 verdict and the table."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device" / "ceiling_crosscheck.py"


@pytest.fixture(scope="module")
def cc():
    spec = importlib.util.spec_from_file_location("ceiling_crosscheck", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# An nvidia-smi of an older driver: it refuses clocks_event_reasons.active, knows the old name,
# and with -lms prints a line every 10 ms until terminated.
FAKE_SMI = textwrap.dedent("""\
    import sys, time
    from datetime import datetime
    query = next(a for a in sys.argv if a.startswith("--query-gpu=")).split("=", 1)[1].split(",")
    if "clocks_event_reasons.active" in query:
        print("Field \\"clocks_event_reasons.active\\" is not a valid field to query.")
        sys.exit(2)
    values = {"clocks.sm": "1755", "clocks.max.sm": "1980", "power.draw": "699.50", "power.limit": "700.00",
              "temperature.gpu": "61", "clocks_throttle_reasons.active": "0x0000000000000004"}
    def line():
        stamp = datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        return ", ".join(stamp if f == "timestamp" else values[f] for f in query)
    if "-lms" not in sys.argv:
        print(line())
        sys.exit(0)
    while True:
        print(line())
        time.sleep(0.01)
""")


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text(f"#!{sys.executable}\n" + FAKE_SMI)
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(smi.parent))
    return smi


def test_reasons_decode_by_nvml_bits(cc):
    assert cc.decode_reasons("0x0000000000000004") == ["sw_power_cap"]
    assert cc.decode_reasons("0x0000000000000041") == ["gpu_idle", "hw_thermal"]
    assert cc.decode_reasons("0x0000000000000000") == []
    assert cc.decode_reasons("0x1004") == ["sw_power_cap", "0x1000"]
    assert cc.decode_reasons("[N/A]") is None


def test_smi_lines_parse_numbers_and_unknowns(cc):
    fields = ["timestamp", "clocks.sm", "power.draw", "temperature.gpu", "clocks_event_reasons.active"]
    row = cc.parse_smi_line("2026/11/29 12:00:00.250, 1980, [N/A], 45, 0x0000000000000001\r\n", fields)
    assert row == {"t": cc.parse_timestamp("2026/11/29 12:00:00.250"), "clocks.sm": 1980.0, "power.draw": None,
                   "temperature.gpu": 45.0, "reasons": ["gpu_idle"]}
    assert cc.parse_timestamp("2026/11/29 12:00:01.250") - row["t"] == pytest.approx(1.0)
    assert cc.parse_timestamp("not a time") is None
    with pytest.raises(ValueError, match="2 values for 3 fields"):
        cc.parse_smi_line("1, 2", ["a", "b", "c"])


def test_smi_falls_back_to_the_old_reasons_field_and_reads(cc, fake_smi):
    smi = cc.Smi("GPU-1234")
    assert smi.fields == cc.SMI_FIELDS + ["clocks_throttle_reasons.active"]
    assert smi.error is None
    reading = smi.read()
    assert {k: v for k, v in reading.items() if k != "t"} == {
        "clocks.sm": 1755.0, "clocks.max.sm": 1980.0, "power.draw": 699.5, "power.limit": 700.0,
        "temperature.gpu": 61.0, "reasons": ["sw_power_cap"],
    }


def test_sampler_collects_lines_as_they_come_and_stops(cc, fake_smi):
    sampler = cc.Smi("GPU-1234").sampler(10)
    assert sampler.wait_first()
    samples = sampler.stop()
    assert sampler._proc.poll() is not None
    assert samples and all(s["clocks.sm"] == 1755.0 and s["reasons"] == ["sw_power_cap"] for s in samples)
    summary = cc.during(samples, samples[0]["t"], samples[-1]["t"])
    assert summary == {"samples": len(samples), "sm_mhz_min": 1755.0, "sm_mhz_max": 1755.0,
                       "sm_mhz_median": 1755.0, "power_w_max": 699.5, "reasons": ["sw_power_cap"]}


def test_without_nvidia_smi_measurements_still_run(cc, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    smi = cc.Smi("GPU-1234")
    assert smi.fields is None and smi.error.startswith("nvidia-smi: ")
    assert smi.read() is None and smi.sampler(10) is None
    row = cc.measured(smi, 0, 10, lambda: {"name": "work"})
    assert row["smi_before"] is None and row["smi_after"] is None and row["smi_sampling_live"] is False
    assert row["smi_during"] == {"samples": 0, "sm_mhz_min": None, "sm_mhz_max": None, "sm_mhz_median": None,
                                 "power_w_max": None, "reasons": []}


def test_during_keeps_only_samples_inside_the_measurement(cc):
    samples = [{"t": 0.5, "clocks.sm": 1980.0, "power.draw": 100.0, "reasons": ["gpu_idle"]},
               {"t": 1.0, "clocks.sm": 1830.0, "power.draw": 690.0, "reasons": []},
               {"t": 1.5, "clocks.sm": 1700.0, "power.draw": 700.0, "reasons": ["sw_power_cap"]},
               {"t": 2.5, "clocks.sm": 1980.0, "power.draw": 90.0, "reasons": ["gpu_idle"]}]
    assert cc.during(samples, 1.0, 2.0) == {"samples": 2, "sm_mhz_min": 1700.0, "sm_mhz_max": 1830.0,
                                            "sm_mhz_median": 1765.0, "power_w_max": 700.0,
                                            "reasons": ["sw_power_cap"]}


def test_summarize_gives_the_rate_of_the_mean_median_and_best_call(cc):
    s = cc.summarize([2.0, 1.0, 6.0, 3.0], flops=3e12)
    assert (s["mean_ms"], s["median_ms"], s["min_ms"], s["max_ms"]) == (3.0, 2.5, 1.0, 6.0)
    assert s["tflops_mean"] == pytest.approx(1000.0)
    assert s["tflops_median"] == pytest.approx(1200.0)
    assert s["tflops_best"] == pytest.approx(3000.0)


def _row(cc, name, warmup, iters, mean, median, best, **extra):
    return {"name": name, "warmup": warmup, "iters": iters, "tflops_mean": mean, "tflops_median": median,
            "tflops_best": best, "smi_before": {"clocks.sm": 1980.0}, "smi_after": {"clocks.sm": 1755.0},
            "smi_during": cc.during([{"t": 1.0, "clocks.sm": 1700.0, "power.draw": 700.0,
                                      "reasons": ["sw_power_cap"]}], 0.0, 2.0), **extra}


def _result(cc, rows, settings=(10, 50)):
    return {"measurements": rows, "verdict": cc.verdict(rows, settings), "smi_error": None,
            "device": {"name": "NVIDIA H200", "uuid": "GPU-1234", "power_limit_w": 700},
            "environment": {"torch": "2.11.0+cu130"}, "measured_at": "2026-11-29T12:00:00Z"}


def test_verdict_compares_the_tuned_native_median_with_the_torch_burst_mean(cc):
    rows = [_row(cc, "torch.matmul", 3, 10, 790.0, 792.0, 805.0),
            _row(cc, "native tuned", 3, 10, None, 800.0, 806.0),
            _row(cc, "native tuned", 10, 50, None, 740.0, 800.0)]
    v = cc.verdict(rows, (10, 50))
    assert v["reference_tflops"] == 790.0 and v["native_median_tflops"] == 740.0
    assert v["median_vs_reference"] == pytest.approx(740 / 790)
    assert v["best_vs_reference"] == pytest.approx(800 / 790)
    assert v["within_5_percent"] is False
    assert cc.verdict(rows, (3, 10))["within_5_percent"] is True
    failed = rows[:2] + [{"name": "native tuned", "warmup": 10, "iters": 50, "error": "cuInit failed"}]
    assert cc.verdict(failed, (10, 50))["reference_tflops"] is None
    assert cc.verdict(rows[1:], (10, 50))["within_5_percent"] is None


def test_table_ends_with_the_verdict_and_the_device(cc):
    long = _row(cc, "torch.matmul long", 10, 2000, 720.0, 715.0, 801.0, tflops_first10=798.0,
                tflops_last50=702.5, seconds=3.1)
    rows = [_row(cc, "torch.matmul", 3, 10, 790.0, 792.0, 805.0),
            {"name": "native heuristic-first", "warmup": 3, "iters": 10, "error": "cuInit failed"},
            _row(cc, "native tuned", 10, 50, None, 760.0, 800.0), long]
    lines = cc.table(_result(cc, rows)).splitlines()
    assert lines[2].split() == ["torch.matmul", "3/10", "790.0", "792.0", "805.0", "1980/1700-1700/1755", "700",
                                "1", "sw_power_cap"]
    assert lines[3].split()[:3] == ["native", "heuristic-first", "3/10"] and lines[3].endswith("error: cuInit failed")
    assert lines[4].split()[:6] == ["native", "tuned", "10/50", "-", "760.0", "800.0"]
    assert lines[-3] == ("torch.matmul long run: first 10 calls 798.0 TFLOP/s, last 50 702.5 TFLOP/s "
                         "over 2000 calls (3.1 s)")
    assert lines[-2] == ("issue 2: native sustained median 760.0 = 96.2% and best call 800.0 = 101.3% of "
                         "torch.matmul 3/10 mean 790.0 TFLOP/s; within 5%: yes")
    assert lines[-1] == "NVIDIA H200 (GPU-1234), 700 W limit, torch 2.11.0+cu130, 2026-11-29T12:00:00Z"


def test_defaults_are_issue_twos_shape_and_parallaxs_sustained_settings(cc):
    args = cc.parse_args([])
    assert (args.size, args.warmup, args.iters, args.device) == (8192, 10, 50, 0)
    assert (args.long_iters, args.rest_s, args.sample_ms) == (2000, 3.0, 20)
