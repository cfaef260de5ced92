"""parallax.analysis.profile and its renderers on the CPU: the class table's arithmetic for
llama-100m te-fp8-delayed from a hand-made H200 profile, attention's limit from measured
backends, the shares adding up to the step, and the comparison's refusal of two machines."""

from __future__ import annotations

import pytest

from parallax.analysis import profile as table
from parallax.analysis.report import profile as report
from parallax.engines.profiling import Kernel, summarize
from parallax.errors import ParallaxError
from parallax.spec import registry, step_work
from parallax.spec.config import PRESETS, RunConfig

MODEL = PRESETS["llama-100m"]
RECIPE = registry.get("torch", "te-fp8-delayed")
WORK = step_work.step_work(MODEL, 32, 1024, RECIPE)
GEMM = {"fp8": {"value": 1100.0, "source": "measured now: cuBLASLt at the step's fp8 GEMM shapes"},
        "bf16": {"value": 700.0, "source": "measured now: cuBLASLt at the step's bf16 GEMM shapes"}}
HBM = {"value": 4.8e12, "source": "datasheet: 4.8 TB/s, NVIDIA H200 datasheet (not measured)"}
ATTENTION = {"forward": {"value": 450.0, "source": "measured now: torch cudnn attention forward"},
             "backward": {"value": 350.0, "source": "measured now: torch cudnn attention backward"}}
# One profiled step, µs: (name, duration); back to back from t = 0 except the last two, which overlap by 100 µs.
STEP = [("nvjet_sm90_qqtst_256x128_128x4_1x2_h_bz_coopA_TNT", 20_000.0),
        ("nvjet_sm90_tst_304x128_64x3_1x2_h_bz_coopA_TNN", 2_500.0),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0", 4_000.0),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kernel0",
         9_000.0),
        ("cast_transpose_optimized_kernel(__nv_bfloat16 const*, float const*, __nv_fp8_e5m2*)", 6_000.0),
        ("triton_poi_fused__to_copy_add_mul_neg_slice_unbind_unsqueeze_view_0", 10_000.0),
        ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>", 1_000.0),
        ("Memcpy HtoD (Pageable -> Device)", 500.0)]


def kernels() -> list[Kernel]:
    out, t = [], 0.0
    for name, us in STEP:
        out.append(Kernel(name, us, None, t, t + us))
        t += us
    last = out[-1]
    out[-1] = last._replace(start_us=last.start_us - 100.0, end_us=last.end_us - 100.0)  # overlaps the optimizer
    return out


def record(step_ms: float = 60.0, **changes) -> dict:
    summary = summarize(kernels(), steps=1)
    run = RunConfig(recipe="te-fp8-delayed", precision=None)
    fields = dict(title="torch te-fp8-delayed", config=run.to_dict(), recipe=RECIPE.to_dict(),
                  framework={"name": "torch", "device": "cuda:0", "version": "2.11.0", "attention": "cudnn",
                             "compiled": True, "compile_scope": "torch.compile of the glue"},
                  environment={"hostname": "h200-a", "nvml": {"driver_version": "580.1"},
                               "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-aaaa1111"}]},
                  timing={"step_ms": step_ms, "tokens_per_s": 32768 / step_ms * 1e3, "warmup_steps": 15,
                          "timed_steps": 5, "profiled_steps": 1, "method": "host clock"},
                  on_gpu=True, summary=summary, work=WORK,
                  limits={"gemm": GEMM, "hbm": HBM, "attention": {**ATTENTION, "rates": []}}, notes=[])
    fields.update(changes)
    return table.build_record(**fields)


def rows(rec: dict) -> dict[str, dict]:
    return {r["class"]: r for r in rec["classes"]}


def test_gemm_rows_against_the_cublaslt_ceilings():
    r = rows(record())
    fp8 = r["gemm-fp8"]
    # 16,698,832,846,848 FLOP in 20 ms: 834.94 TFLOP/s of 1,100; 15.181 ms at the limit
    assert fp8["work"] == 16_698_832_846_848 and fp8["unit"] == "TFLOP/s"
    assert fp8["achieved"] == pytest.approx(834.9416, rel=1e-6)
    assert fp8["fraction"] == pytest.approx(834.9416 / 1100, rel=1e-6)
    assert fp8["ms_at_limit"] == pytest.approx(15.18076, rel=1e-6) and fp8["ms_left"] == pytest.approx(4.81924, rel=1e-5)
    assert fp8["limit_source"] == GEMM["fp8"]["source"]
    bf16 = r["gemm-bf16"]  # lm_head: 1,509,949,440,000 FLOP in 2.5 ms
    assert (bf16["achieved"], bf16["ms_at_limit"]) == (pytest.approx(603.9798), pytest.approx(2.157071, rel=1e-6))


def test_attention_and_memory_bound_rows():
    r = rows(record())
    fwd, bwd = r["attention-fwd"], r["attention-bwd"]
    assert fwd["achieved"] == pytest.approx(1_236.950581248 / 4.0)  # TFLOP in 4 ms
    assert fwd["ms_at_limit"] == pytest.approx(1_236.950581248 / 450.0)
    assert bwd["fraction"] == pytest.approx(2_473.901162496 / 9.0 / 350.0)
    quantize = r["quantize"]  # 19,667,091,456 B in 6 ms, against 4.8 TB/s
    assert quantize["unit"] == "TB/s" and quantize["limit"] == 4.8
    assert quantize["achieved"] == pytest.approx(3.277848576)
    assert quantize["ms_at_limit"] == pytest.approx(4.097310720) and quantize["fraction"] == pytest.approx(3.277848576 / 4.8)
    optimizer = r["optimizer"]  # 3,210,043,392 B in 1 ms
    assert (optimizer["achieved"], optimizer["ms_at_limit"]) == (pytest.approx(3.210043392), pytest.approx(0.66875904))
    assert r["memcpy"]["work"] is None and r["memcpy"]["ms_per_step"] == 0.5


def test_host_gaps_and_overlap_make_the_shares_add_up_to_the_step():
    rec = record(step_ms=60.0)
    r = rows(rec)
    # 53 ms of kernels, 52.9 ms busy (the copy overlaps the optimizer by 0.1 ms): 7.1 ms of host gaps
    assert rec["busy"]["ms_per_step"] == pytest.approx(52.9) and rec["busy"]["kernel_ms_per_step"] == pytest.approx(53.0)
    assert r["host gaps"]["ms_per_step"] == pytest.approx(7.1) and r["overlap"]["ms_per_step"] == pytest.approx(-0.1)
    assert sum(row["share"] for row in rec["classes"]) == pytest.approx(1.0)
    assert sum(row["ms_per_step"] for row in rec["classes"]) == pytest.approx(60.0)


def test_a_class_without_a_known_limit_keeps_its_time():
    gemm = {**GEMM, "fp8": {"value": None, "source": "unknown: no trusted datasheet peak"}}
    fp8 = rows(record(limits={"gemm": gemm, "hbm": HBM, "attention": {**ATTENTION, "rates": []}}))["gemm-fp8"]
    assert fp8["achieved"] == pytest.approx(834.9416, rel=1e-6)
    assert (fp8["limit"], fp8["fraction"], fp8["ms_at_limit"], fp8["ms_left"]) == (None, None, None, None)


def test_attention_limits_take_the_fastest_backend_each_way():
    rates = [{"backend": "cudnn", "forward_ms": 0.25, "backward_ms": 0.8, "error": None},
             {"backend": "flash", "forward_ms": 0.30, "backward_ms": 0.7, "error": None},
             {"backend": "efficient", "forward_ms": None, "backward_ms": None, "error": "not for sm90"}]
    found = table.attention_limits(rates, 100e9, 200e9, "B×S×H×D 32×1024×12×64", "torch")
    assert found["forward"] == {"value": pytest.approx(400.0), "source": "measured now: torch cudnn attention forward "
                                "at B×S×H×D 32×1024×12×64, the fastest of cudnn, flash"}
    assert found["backward"]["value"] == pytest.approx(200e9 / 0.7e-3 / 1e12)
    assert found["backward"]["source"].startswith("measured now: torch flash attention backward")
    none = table.attention_limits(rates[2:], 100e9, 200e9, "B×S×H×D 2×64×4×16", "jax")
    assert none["forward"] == {"value": None, "source": "unknown: no attention backend ran at B×S×H×D 2×64×4×16 "
                                                        "(efficient: not for sm90)"}


def test_the_markdown_table():
    text = report.markdown(record())
    assert text.startswith("# Where the step goes: torch te-fp8-delayed\n\n- machine: NVIDIA H200 aaaa1111, host "
                           "h200-a, driver 580.1\n")
    lines = text.splitlines()
    assert ("| gemm-fp8 | 20.000 | 33.3% | 16.70 TFLOP | 834.9 TFLOP/s | 1,100 TFLOP/s (measured now) | 75.9% | "
            "15.181 | 4.819 |") in lines
    assert "| quantize | 6.000 | 10.0% | 19.67 GB | 3.278 TB/s | 4.800 TB/s (datasheet) | 68.3% | 4.097 | 1.903 |" in lines
    assert "| host gaps | 7.100 | 11.8% |  |  |  |  |  |  |" in lines
    assert "| overlap | -0.100 | -0.2% |  |  |  |  |  |  |" in lines
    assert "| step (without the profiler) | 60.000 | 100.0% | | | | | | |" in lines
    assert ("- memory-bound limit: HBM 4.800 TB/s (datasheet: 4.8 TB/s, NVIDIA H200 datasheet (not measured)); "
            "bytes from the byte model of parallax.spec.step_work") in lines
    assert "| gemm-fp4 |" not in text  # neither time nor work
    assert "- attention: cudnn; compiled: torch.compile of the glue" in lines
    refused = record(framework={"name": "torch", "device": "cuda:0", "attention": "flash",
                                "attention_refused": {"cudnn": "head_dim 96 unsupported"}})
    assert "- attention: flash (cudnn refused: head_dim 96 unsupported); compiled: no (eager)" in report.markdown(
        refused).splitlines()


def test_the_plot_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    assert report.write_plot(record(), tmp_path / "profile.png").stat().st_size > 0


def test_compare_puts_classes_side_by_side_and_refuses_two_machines(tmp_path):
    a, b = record(step_ms=60.0), record(step_ms=50.0, title="torch bf16")
    compared = table.comparison([a, b], ["a/profile.json", "b/profile.json"])
    step = compared["rows"][0]
    assert step == {"class": "step (without the profiler)", "ms_per_step": [60.0, 50.0], "share": [1.0, 1.0],
                    "delta_ms": [-10.0], "fraction": [None, None]}
    text = report.compare_markdown(compared)
    assert "| host gaps | 7.100 (11.8%) | -2.900 (-5.8%) | -10.000 |  |  |" in text.splitlines()
    table.check_one_machine([a, b], ["a", "b"], cross_machine=False)
    other = record(environment={"hostname": "h200-b", "nvml": {"driver_version": "580.1"},
                                "gpus": [{"name": "NVIDIA H200", "uuid": "GPU-bbbb2222"}]})
    with pytest.raises(ParallaxError) as refused:
        table.check_one_machine([a, other], ["a/profile.json", "c/profile.json"], cross_machine=False)
    assert str(refused.value) == (
        "refusing to compare profiles of two machines: a/profile.json ran on NVIDIA H200 aaaa1111, c/profile.json on "
        "NVIDIA H200 bbbb2222; profile both on one machine, or pass --cross-machine")
    table.check_one_machine([a, other], ["a", "c"], cross_machine=True)


def two_steps(faster: dict[str, float]) -> list[Kernel]:
    """Two profiled steps: the first as ``STEP``, the second with the kernels of ``faster``
    (name fragment -> µs) at those times, all back to back."""
    out, t = [], 0.0
    for second in (False, True):
        for name, us in STEP:
            us = next((v for part, v in faster.items() if second and part in name), us)
            out.append(Kernel(name, us, None, t, t + us))
            t += us
    return out


def test_a_faster_kernel_of_the_step_becomes_the_limit():
    # the second step's fp8 GEMM runs 14 ms (1,192.8 TFLOP/s, above cuBLASLt's 1,100) and its
    # attention backward 6 ms (412.3 TFLOP/s, above the backends' 350): the step's mean beats both
    summary = summarize(two_steps({"qqtst": 14_000.0, "flash_bprop": 6_000.0}), steps=2)
    r = rows(record(summary=summary))
    fp8, bwd = r["gemm-fp8"], r["attention-bwd"]
    assert fp8["achieved"] == pytest.approx(16_698.832846848 / 17.0)  # above 1,100: the old limit did not hold
    assert fp8["limit"] == pytest.approx(16_698.832846848 / 14.0)
    assert fp8["fraction"] == pytest.approx(14.0 / 17.0) and fp8["ms_left"] == pytest.approx(3.0)
    assert fp8["limit_source"].startswith("the step's own: its gemm-fp8 kernels, each op at its fastest profiled call "
                                          "(1,192.8 TFLOP/s), faster than the reference (measured now: cuBLASLt")
    assert bwd["achieved"] == pytest.approx(2_473.901162496 / 7.5) and bwd["fraction"] == pytest.approx(6.0 / 7.5)
    assert r["gemm-bf16"]["limit_source"] == GEMM["bf16"]["source"]  # cuBLASLt still the faster
    assert r["attention-fwd"]["limit_source"] == ATTENTION["forward"]["source"]
    assert all(row["fraction"] <= 1.0 for row in r.values() if row["fraction"] is not None)
    md = report.markdown(record(summary=summary))
    assert "- gemm-fp8 limit: the step's own: its gemm-fp8 kernels" in md
    assert "| 1,193 TFLOP/s (the step's own) | 82.4% |" in md
