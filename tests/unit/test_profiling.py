"""parallax.engines.profiling on the CPU: the kernel classifier on real kernel names, the summary's
arithmetic and busy time, both frameworks' readers (a real CPU trace has no GPU events; GPU planes
and CUDA events are built by hand). ``parallax profile`` itself: tests/cli/test_profile_cli.py."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from parallax.engines import profiling
from parallax.engines.profiling import classify, summarize

# Real kernel names, as profilers print them (sources: cuBLAS/cuBLASLt kernels in torch and nsys
# profiles of _scaled_mm and bf16 mm on H100/B200, TransformerEngine's transpose/ and recipe/
# sources, Inductor kernels of torchao float8 training, XLA:GPU fusions, cuDNN/flash SDPA).
KERNELS = [
    # cuBLASLt fp8 GEMMs (Hopper xmma and nvjet; q = fp8 in nvjet's type letters)
    ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128_cgasize1x2x1_stage4_gmmastage2_"
     "warpgroupsize1x1x1_tensor64x128x32", "gemm-fp8"),
    ("sm90_xmma_gemm_e4m3f32_e4m3f32_f32_tn_n_tilesize128x128x128_warpgroupsize1x1x1_"
     "execute_segment_k_off_kernel__5x_cublas", "gemm-fp8"),
    ("nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT", "gemm-fp8"),
    ("nvjet_sm90_qqtst_128x128_128x6_1x2_h_bz_ovscale_TNT", "gemm-fp8"),
    ("nvjet_qqtst_112x128_128x7_2x1_v_bz_coopA_algo2_TNN", "gemm-fp8"),
    ("triton_tem_fused__scaled_mm_3", "gemm-fp8"),
    # 16-bit GEMMs (t = bf16, h = fp16, s = fp32 in nvjet names)
    ("nvjet_tst_128x128_64x4_1x2_h_bz_coopA", "gemm-bf16"),
    ("nvjet_hsh_256x128_64x4_2x1_v_bz_TNN", "gemm-bf16"),
    ("nvjet_sm100_tst_64x16_64x16_2x4_2cta_h_bz_splitK_TNT", "gemm-bf16"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
     "execute_segment_k_off_kernel__5x_cublas", "gemm-bf16"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8>"
     "(cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x6_tn_align8::Params)", "gemm-bf16"),
    ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "gemm-bf16"),
    ("triton_tem_fused_mm_0", "gemm-bf16"),
    ("triton_gemm_dot_4", "gemm-bf16"),
    ("gemm_fusion_dot_2", "gemm-bf16"),
    # attention (cuDNN, flash, memory-efficient)
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x128_4x1x1_kernel0_0", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x", "attention"),
    ("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 128, 4, false>>", "attention"),
    ("fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cutlass::bfloat16_t>)",
     "attention"),
    # fp8 casts and scales: TransformerEngine, torchao through Inductor
    ("void transformer_engine::transpose::(anonymous namespace)::cast_transpose_optimized_kernel"
     "<__nv_bfloat16, __nv_fp8_e4m3>", "quantize"),
    ("void transformer_engine::(anonymous namespace)::amax_kernel<16, true, __nv_bfloat16>", "quantize"),
    ("void transformer_engine::delayed_scaling_recipe::(anonymous namespace)::kernel_bulk<false>", "quantize"),
    ("block_scaled_1d_cast_transpose_kernel", "quantize"),
    ("triton_red_fused__to_copy_abs_max_view_0", "quantize"),
    ("triton_per_fused__to_copy_abs_clamp_max_mul_reciprocal_view_1", "quantize"),
    ("triton_red_fused_abs_max_2", "quantize"),
    # Parallax's NVFP4 kernels (csrc/quant/quant_cuda.cu), as CUPTI demangles them
    ("void (anonymous namespace)::nvfp4_1x16_kernel<unsigned short, false, true>((anonymous namespace)::Nvfp4Args)",
     "quantize"),
    ("void (anonymous namespace)::nvfp4_16x16_kernel<unsigned short, false, false>((anonymous namespace)::Nvfp4Args)",
     "quantize"),
    ("void (anonymous namespace)::amax_kernel<unsigned short, true>(const void *, unsigned long, "
     "(anonymous namespace)::Signs, float *)", "quantize"),
    ("void (anonymous namespace)::hadamard_kernel<float>(const void *, void *, unsigned long, unsigned int, bool)",
     "quantize"),
    ("triton_poi_fused__scaled_mm__to_copy_clamp_mul_reciprocal_t_view_4", "quantize"),
    # optimizer
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
     "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4>>", "optimizer"),
    # elementwise: Inductor, ATen, XLA
    ("triton_poi_fused_mul_silu_0", "elementwise"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", "elementwise"),
    ("triton_per_fused__log_softmax_2", "elementwise"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>>",
     "elementwise"),
    ("loop_fusion", "elementwise"),
    ("input_reduce_fusion", "elementwise"),
    ("loop_convert_fusion_3", "elementwise"),
    ("wrapped_transpose", "elementwise"),
    # copies and fills (torch's and XLA's names)
    ("Memcpy HtoD (Pageable -> Device)", "memcpy"),
    ("Memset (Device)", "memcpy"),
    ("MemcpyH2D", "memcpy"),
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "communication"),
    ("ncclKernel_ReduceScatter_RING_LL_Sum_float", "communication"),
]


# The classes that refine a coarser category of KERNELS above (attention: forward or backward).
REFINES = {"attention-fwd": "attention", "attention-bwd": "attention"}


@pytest.mark.parametrize("name,category", KERNELS)
def test_classify_real_kernel_names(name, category):
    assert REFINES.get(classify(name), classify(name)) == category


# Real names from the H200 profiles under docs/results (2026-12-01-h200-b/profiles,
# 2026-12-02-h200-b/profile, 2026-12-02-h200-c/nvfp4/profile; cut at 100 characters as the
# summaries keep them), each with the class it belongs in.
H200_KERNELS = [
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kerne...",
     "attention-fwd"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64_1x4x1_cga1x1x1_kerne...",
     "attention-bwd"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*...",
     "attention-bwd"),
    ("void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, un...",
     "attention-bwd"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, false, false, cutla...",
     "attention-fwd"),
    ("void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<64, 128,...",
     "attention-bwd"),
    ("void pytorch_flash::flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4...",
     "attention-bwd"),
    ("void pytorch_flash::flash_bwd_convert_dq_kernel<Flash_bwd_kernel_traits<64, 128, 128, 8, 4, 4, 4,...",
     "attention-bwd"),
    # fp8 GEMMs of a backward pass: r = E5M2 (the gradient), q = E4M3
    ("nvjet_sm90_rqsss_96x128_128x7_2x1_v_bz_coopA_algo2_TNN", "gemm-fp8"),
    ("nvjet_sm90_rqtst_112x128_128x7_1x2_h_bz_coopA_algo2_splitK_TNN", "gemm-fp8"),
    ("nvjet_sm90_qrtst_128x160_128x5_2x1_v_bz_coopA_algo2_TNT", "gemm-fp8"),
    ("nvjet_sm90_qqtst_128x160_128x5_2x1_v_bz_TNT", "gemm-fp8"),
    ("nvjet_sm90_tss_128x192_64x5_2x1_v_bz_coopB_NTN", "gemm-bf16"),
    ("nvjet_sm90_tst_304x128_64x3_1x2_h_bz_coopA_TNN", "gemm-bf16"),
    ("cast_transpose_optimized_kernel(__nv_bfloat16 const*, float const*, __nv_fp8_e5m2*, __nv_fp8_e5m2...",
     "quantize"),
    ("transpose_optimized_kernel(__nv_fp8_e4m3 const*, float const*, __nv_fp8_e4m3*, unsigned long, uns...",
     "quantize"),
    ("void (anonymous namespace)::nvfp4_16x1_kernel<unsigned short, true, true>((anonymous namespace)::...",
     "quantize"),
    ("void (anonymous namespace)::amax_16x1_kernel<unsigned short, true>(void const*, (anonymous namesp...",
     "quantize"),
    ("void transformer_engine::gated_act_kernel<16, true, float, transformer_engine::Empty, &(float tra...",
     "elementwise"),
    ("void transformer_engine::dgated_act_kernel<16, true, float, transformer_engine::Empty, &(float tr...",
     "elementwise"),
    ("void transformer_engine::normalization::rmsnorm_bwd_tuned_kernel<transformer_engine::normalizatio...",
     "elementwise"),
    ("triton_poi_fused__unsafe_view_cat_mul_silu_silu_backward_split_view_4", "elementwise"),
    ("triton_poi_fused__to_copy_add_mul_neg_slice_slice_backward_stack_transpose_unsqueeze_0", "elementwise"),
    ("input_convert_transpose_fusion_56", "elementwise"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespac...",
     "optimizer"),
    ("memcpy32_post", "memcpy"),
    ("Memset 3", "memcpy"),
]

# Names no H200 profile has shown: fp4 GEMMs (CUTLASS's and cuBLASLt's type names), the
# memory-efficient backward, torch's CPU operators.
OTHER_KERNELS = [
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::nv_float4_t<cutlass::float_e2m1_t>>>",
     "gemm-fp4"),
    ("sm100_xmma_gemm_e2m1e2m1_bf16f32_f32_tn_n_tilesize128x128x256", "gemm-fp4"),
    ("fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<cutlass::bfloat16_t>)",
     "attention-bwd"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu", "attention-fwd"),
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention-bwd"),
    ("aten::mm", "gemm-bf16"),
    ("aten::addmm", "gemm-bf16"),
    ("aten::_fused_adamw_", "optimizer"),
    ("aten::_foreach_mul_", "optimizer"),
    ("aten::_log_softmax", "elementwise"),
    ("aten::add_", "elementwise"),
    ("MmBackward0", "other"),
]


@pytest.mark.parametrize("name,expected", H200_KERNELS + OTHER_KERNELS)
def test_classify_into_the_profile_classes(name, expected):
    assert classify(name) == expected


def test_classify_reads_the_hlo_description_of_xla_kernels():
    assert classify("loop_convert_fusion_3", "loop_convert_fusion.3 -> f8e4m3fn[8,16]{1,0}") == "quantize"
    assert classify("loop_convert_fusion_3", "loop_convert_fusion.3 -> bf16[8,16]{1,0}") == "elementwise"
    assert classify("gemm_fusion_dot_2", "gemm_fusion_dot.2 -> bf16[8,16]{1,0} (f8 operands)") == "gemm-fp8"
    assert classify("gemm_fusion_dot_2", "gemm_fusion_dot.2 -> bf16[8,16]{1,0} (f4 operands)") == "gemm-fp4"
    assert classify("loop_multiply_fusion", "multiply_fusion.1 -> (f32[4]{0}, f8e5m2[4]{0})") == "quantize"


def test_classify_reads_the_scope_tags():
    assert classify("ynn_fusion.3", "ynn_fusion.3 -> f32[64,128]{1,0} (dot)") == "gemm-bf16"
    assert classify("dot.4", "dot.4 -> f32[2,4,64,64]{3,2,1,0} (dot) {attention forward}") == "attention-fwd"
    assert classify("loop_exp_fusion", "loop_exp_fusion -> f32[2,4,64,64] {attention backward}") == "attention-bwd"
    assert classify("loop_multiply_fusion.2", "multiply_fusion.2 -> f32[64,64]{1,0} {optimizer}") == "optimizer"
    assert classify("aten::mul_", "{optimizer}") == "optimizer"
    # cuDNN's attention kernels are told apart by their names, whatever their op
    assert classify(H200_KERNELS[1][0], "custom-call.7 -> (bf16[2,64,4,16]) {attention forward}") == "attention-bwd"


def test_rules_are_data_in_the_documented_order():
    assert profiling.CLASSES == ("communication", "memcpy", "attention-bwd", "attention-fwd", "gemm-fp4", "gemm-fp8",
                                 "gemm-bf16", "optimizer", "quantize", "elementwise", "other")


QQ = "nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT"
EVENTS = [(QQ, 300.0), (QQ, 300.0), ("block_scaled_1d_cast_transpose_kernel", 100.0),
          ("triton_poi_fused_mul_silu_0", 50.0), ("MemcpyH2D", 50.0, None)]


def test_summarize_exact_figures():
    s = summarize(EVENTS, steps=2)
    assert s["steps"] == 2 and s["events"] == 5
    assert s["kernel_ms_per_step"] == pytest.approx(0.4)
    assert s["busy_ms_per_step"] == pytest.approx(0.4) and s["busy_method"] == profiling.BUSY_SUM
    classes = s["classes"]
    assert list(classes) == list(profiling.CLASSES)
    assert classes["gemm-fp8"] == {"ms_per_step": pytest.approx(0.3), "calls_per_step": 1.0, "kernels": 1}
    assert classes["quantize"]["ms_per_step"] == pytest.approx(0.05) and classes["memcpy"]["calls_per_step"] == 0.5
    assert classes["attention-fwd"] == {"ms_per_step": 0.0, "calls_per_step": 0.0, "kernels": 0}
    assert [(k["name"], k["class"], k["ms_per_step"], k["calls_per_step"]) for k in s["top_kernels"]] == [
        (QQ, "gemm-fp8", pytest.approx(0.3), 1.0),
        ("block_scaled_1d_cast_transpose_kernel", "quantize", pytest.approx(0.05), 0.5),
        ("MemcpyH2D", "memcpy", pytest.approx(0.025), 0.5),  # ties: by name
        ("triton_poi_fused_mul_silu_0", "elementwise", pytest.approx(0.025), 0.5),
    ]


def test_busy_time_is_the_union_of_the_intervals():
    K = profiling.Kernel
    # two streams overlapping by 2 µs, a kernel nested in another, a gap of 5 µs
    kernels = [K("a", 10.0, None, 0.0, 10.0), K("b", 4.0, None, 8.0, 12.0), K("c", 1.0, None, 2.0, 3.0),
               K("d", 3.0, None, 17.0, 20.0)]
    assert profiling.busy_time(kernels) == (15.0, profiling.BUSY_UNION)
    s = summarize(kernels, steps=1)
    assert (s["kernel_ms_per_step"], s["busy_ms_per_step"]) == (pytest.approx(0.018), pytest.approx(0.015))
    assert profiling.busy_time(kernels + [K("no start", 1.0)]) == (19.0, profiling.BUSY_SUM)
    assert profiling.busy_time([]) == (0.0, profiling.BUSY_UNION)


def test_summarize_keeps_the_top_n_and_truncates_names():
    long = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align8>" + "x" * 60
    s = summarize([(long, 10.0), ("loop_fusion", 1.0)], steps=1, top=1)
    assert len(s["top_kernels"]) == 1
    assert s["top_kernels"][0]["name"] == long[:97] + "..." and len(s["top_kernels"][0]["name"]) == 100
    assert s["classes"]["elementwise"]["ms_per_step"] == pytest.approx(0.001)


def test_summarize_refuses_zero_steps():
    with pytest.raises(ValueError, match="steps must be positive"):
        summarize(EVENTS, steps=0)


# --- JAX ------------------------------------------------------------------------------------

def test_jax_kernel_events_of_a_real_cpu_trace_is_empty(tmp_path):
    jax = pytest.importorskip("jax")
    f = jax.jit(lambda x: (x @ x).sum())
    x = jax.numpy.ones((32, 32))
    f(x).block_until_ready()
    with jax.profiler.trace(str(tmp_path)):
        f(x).block_until_ready()
    assert list(tmp_path.rglob("*.xplane.pb"))
    assert profiling.jax_kernel_events(tmp_path) == []


def test_jax_kernel_events_needs_a_trace(tmp_path):
    pytest.importorskip("jax")
    with pytest.raises(FileNotFoundError, match="no \\*.xplane.pb"):
        profiling.jax_kernel_events(tmp_path)


# An XSpace as the CUPTI collector writes it: a GPU plane whose stream line holds kernels (with
# the hlo_op/hlo_module stats XLA's annotations give them) and a copy, a CUPTI-overhead line and
# a derived "XLA Ops" line that repeat time, and a host plane.
XSPACE = """
planes {
  id: 1 name: "/device:GPU:0"
  lines { id: 7 name: "Stream #7(Kernel,MemcpyH2D)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 2500000
             stats { metadata_id: 10 str_value: "loop_convert_fusion.3" } stats { metadata_id: 11 ref_value: 12 } }
    events { metadata_id: 2 offset_ps: 3000000 duration_ps: 1000000 } }
  lines { id: 8 name: "CUPTI overhead" events { metadata_id: 2 duration_ps: 4000000 } }
  lines { id: 99 name: "XLA Ops" events { metadata_id: 1 duration_ps: 2500000 } }
  event_metadata { key: 1 value { id: 1 name: "loop_convert_fusion_3" } }
  event_metadata { key: 2 value { id: 2 name: "MemcpyH2D" } }
  stat_metadata { key: 10 value { id: 10 name: "hlo_op" } }
  stat_metadata { key: 11 value { id: 11 name: "hlo_module" } }
  stat_metadata { key: 12 value { id: 12 name: "jit_train_step" } }
}
planes { id: 2 name: "/host:CPU"
  lines { id: 1 name: "tf_XLAEigen/1" timestamp_ns: 2000 events { metadata_id: 1 duration_ps: 5000 }
    events { metadata_id: 2 offset_ps: 10000 duration_ps: 7000 stats { metadata_id: 10 str_value: "dot.3" } } }
  event_metadata { key: 1 value { id: 1 name: "ThunkExecutor::Execute" } }
  event_metadata { key: 2 value { id: 2 name: "dot.3" } }
  stat_metadata { key: 10 value { id: 10 name: "hlo_op" } }
}
"""


def test_xspace_kernel_events_takes_gpu_stream_lines_only():
    pytest.importorskip("jax")
    from jax.profiler import ProfileData

    data = ProfileData.from_text_proto(XSPACE)
    assert profiling.xspace_kernel_events(data) == [("loop_convert_fusion_3", 2.5, "loop_convert_fusion.3", 1.0, 3.5),
                                                    ("MemcpyH2D", 1.0, None, 4.0, 5.0)]


def test_host_op_events_takes_the_xla_ops_of_the_host_plane():
    pytest.importorskip("jax")
    from jax.profiler import ProfileData

    data = ProfileData.from_text_proto(XSPACE)
    [(name, us, op, start, end)] = profiling.host_op_events(data)
    assert (name, op) == ("dot.3", "dot.3")
    assert (us, start, end) == pytest.approx((0.007, 2.01, 2.017))


def test_describe_hlo_ops_marks_f8_results_in_real_optimized_hlo():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    cast = jax.jit(lambda x: jnp.clip(x * 2, -448, 448).astype(jnp.float8_e4m3fn))
    hlo = cast.lower(jnp.ones((8, 16), jnp.bfloat16)).compile().as_text()
    fusion = re.search(r"%([\w.\-]+) = f8e4m3fn\[8,16\]\{1,0\} fusion\(", hlo).group(1)  # the cast
    (event,) = profiling.describe_hlo_ops([("k", 1.0, fusion)], hlo)
    assert event[2] == f"{fusion} -> f8e4m3fn[8,16]{{1,0}}"
    assert classify(event[0], event[2]) == "quantize"


GPU_HLO = """
ENTRY %main (p0: f8e4m3fn[16,32], p1: f8e4m3fn[32,64]) -> bf16[16,64] {
  %p0 = f8e4m3fn[16,32]{1,0} parameter(0)
  %p1 = f8e4m3fn[32,64]{1,0} parameter(1)
  %cublas-lt-matmul.1 = (bf16[16,64]{1,0}, s8[1024]{0}) custom-call(%p0, %p1), custom_call_target="__cublas$lt$matmul$f8"
  ROOT %get-tuple-element.2 = bf16[16,64]{1,0} get-tuple-element(%cublas-lt-matmul.1), index=0
}
"""


def test_describe_hlo_ops_marks_gemms_reading_f8():
    events = [("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n", 5.0, "cublas-lt-matmul.1"), ("x", 1.0, "unknown.3"),
              ("MemcpyH2D", 1.0, None)]
    assert [tuple(k[:3]) for k in profiling.describe_hlo_ops(events, GPU_HLO)] == [
        ("sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n", 5.0,
         "cublas-lt-matmul.1 -> (bf16[16,64]{1,0}, s8[1024]{0}) (f8 operands)"),
        ("x", 1.0, "unknown.3"), ("MemcpyH2D", 1.0, None)]


# The JAX step's scopes in the metadata of optimized HLO (as XLA:CPU writes it), and a dot.
SCOPED_HLO = """
  %dot.4 = f32[2,4,64,64]{3,2,1,0} dot(%a, %b), lhs_contracting_dims={3}, metadata={op_name="jit(train_step)/jvp(Llama)/layers_0/sdpa/vmap(BTNH,BSNH->BNTS)/dot_general"}
  %loop_exp_fusion = f32[2,4,64,64]{3,2,1,0} fusion(%dot.4), kind=kLoop, calls=%c1, metadata={op_name="jit(train_step)/transpose(jvp(Llama))/layers_0/sdpa/exp"}
  %ynn_fusion.3 = f32[64,128]{1,0} fusion(%x, %w), kind=kCustom, calls=%c2, metadata={op_name="jit(train_step)/transpose(jvp(Llama))/layers_1/w_gate/dot_general"}
  %convert_bitcast_fusion.13 = f32[2,64,10000]{2,1,0} fusion(%y), kind=kLoop, calls=%c3, metadata={op_name="jit(train_step)/jvp(Llama)/lm_head/dot_general"}
  %multiply_add_fusion.2 = f32[64,64]{1,0} fusion(%m, %g), kind=kLoop, calls=%c4, metadata={op_name="jit(train_step)/optimizer/mul"}
"""


def test_describe_hlo_ops_tags_dots_and_the_steps_scopes():
    names = ["dot.4", "loop_exp_fusion", "ynn_fusion.3", "convert_bitcast_fusion.13", "multiply_add_fusion.2"]
    described = profiling.describe_hlo_ops([(n, 1.0, n) for n in names], SCOPED_HLO)
    assert [k.context for k in described] == [
        "dot.4 -> f32[2,4,64,64]{3,2,1,0} (dot) {attention forward}",
        "loop_exp_fusion -> f32[2,4,64,64]{3,2,1,0} {attention backward}",
        "ynn_fusion.3 -> f32[64,128]{1,0} (dot)",
        "convert_bitcast_fusion.13 -> f32[2,64,10000]{2,1,0}",  # a loop fusion after a dot is not one
        "multiply_add_fusion.2 -> f32[64,64]{1,0} {optimizer}"]
    assert [classify(k.name, k.context) for k in described] == [
        "attention-fwd", "attention-bwd", "gemm-bf16", "elementwise", "optimizer"]


# --- torch ----------------------------------------------------------------------------------

def test_torch_kernel_events_of_a_cpu_profile_is_empty():
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x = torch.ones(32, 32)
        (x @ x).sum()
    assert len(prof.events()) > 0
    assert profiling.torch_kernel_events(prof) == []


def _event(name, device, us, activity, annotation=False):
    return SimpleNamespace(name=name, device_type=device, activity_type=activity, is_user_annotation=annotation,
                           time_range=SimpleNamespace(elapsed_us=lambda: us, start=0.0, end=us))


def test_torch_kernel_events_picks_cuda_work():
    pytest.importorskip("torch")
    from torch.autograd import DeviceType

    events = [_event("aten::mm", DeviceType.CPU, 40.0, "cpu_op"),
              _event("cudaLaunchKernel", DeviceType.CPU, 3.0, "cuda_runtime"),
              _event("nvjet_tst_128x128_64x4_1x2_h_bz_coopA", DeviceType.CUDA, 12.5, "kernel"),
              _event("Memcpy HtoD (Pageable -> Device)", DeviceType.CUDA, 2.0, "gpu_memcpy"),
              _event("Memset (Device)", DeviceType.CUDA, 1.0, "gpu_memset"),
              _event("ProfilerStep*", DeviceType.CUDA, 900.0, "gpu_user_annotation", annotation=True),
              _event("train_step", DeviceType.CUDA, 800.0, None, annotation=True),
              _event("flash_fwd_kernel", DeviceType.CUDA, 7.0, None)]  # a torch without activity_type
    prof = SimpleNamespace(events=lambda: events)
    assert [k[:2] for k in profiling.torch_kernel_events(prof)] == [
        ("nvjet_tst_128x128_64x4_1x2_h_bz_coopA", 12.5), ("Memcpy HtoD (Pageable -> Device)", 2.0),
        ("Memset (Device)", 1.0), ("flash_fwd_kernel", 7.0)]


def test_find_hlo_text_takes_the_largest_dump_of_the_module(tmp_path):
    assert profiling.find_hlo_text(tmp_path / "none") is None
    (tmp_path / "module_0001.jit_train_step.sm_9.0_gpu_after_optimizations.txt").write_text("small")
    (tmp_path / "module_0002.jit_train_step.sm_9.0_gpu_after_optimizations.txt").write_text("the larger one")
    (tmp_path / "module_0003.jit_other.sm_9.0_gpu_after_optimizations.txt").write_text("another module, larger")
    (tmp_path / "module_0002.jit_train_step.before_optimizations.txt").write_text("before, and the largest of all")
    assert profiling.find_hlo_text(tmp_path) == "the larger one"
    assert profiling.find_hlo_text(tmp_path, "jit_other") == "another module, larger"


def test_best_class_time_takes_each_op_at_its_fastest_call():
    K = profiling.Kernel
    # one GEMM kernel name for two ops a step (a small and a large shape), over two steps; its
    # fastest calls are op 1 of step 1 and op 2 of step 2: 10 + 90 µs, not 2 × 10 µs
    gemm = "nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT"
    events = [K(gemm, 10.0, None, 0.0, 10.0), K(gemm, 100.0, None, 10.0, 110.0),
              K(gemm, 12.0, None, 200.0, 212.0), K(gemm, 90.0, None, 212.0, 302.0),
              K("triton_poi_fused_mul_silu_0", 30.0, None, 400.0, 430.0)]  # 1 call in 2 steps: its mean
    best = profiling.best_class_time(events, steps=2)
    assert best["gemm-bf16"] == pytest.approx(0.1) and best["elementwise"] == pytest.approx(0.015)
    assert best["attention-fwd"] == 0.0
    assert summarize(events, steps=2)["best_ms_per_step"] == best
