"""scripts/device/fp8_attention_probe.py off the GPU: its arguments, its dry run (no framework
imported), how a group's records are collected (crashed, skipped), the summary and its table from
fake records, the orchestration with fake group processes, and each group's code on the CPU
against stand-ins of cudnn-frontend, TransformerEngine and JAX's FP8 attention that refuse the
backward at head_dim 64 as the real ones say they do."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import os
import subprocess
import sys
import types
from functools import partial
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "device" / "fp8_attention_probe.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("fp8_attention_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fp8_attention_probe"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


# ---- arguments and the dry run


def test_arguments_default_to_the_three_shapes_and_every_group(probe, tmp_path):
    args = probe.parse_args(["--out", str(tmp_path / "o")])
    assert [s.label for s in args.shape_list] == ["12x64", "6x128", "12x128"]
    assert args.group_list == ("torch", "cudnn", "jax")
    assert (args.batch, args.seq, args.warmup, args.iters) == (32, 1024, 3, 20)
    assert args.out == (tmp_path / "o").resolve()


def test_shapes_parse_and_a_bad_one_names_itself(probe):
    assert probe.parse_shapes(" 12x64, 6X128 ,12x64") == (probe.Shape(12, 64), probe.Shape(6, 128))
    with pytest.raises(ValueError, match="shape '12-64' is not HEADSxHEAD_DIM"):
        probe.parse_shapes("12-64")
    with pytest.raises(ValueError, match="no shape given"):
        probe.parse_shapes(" , ")


@pytest.mark.parametrize("argv, said", [
    ([], "--out is required (or --dry-run)"),
    (["--out", "x", "--shapes", "0x64"], "shape '0x64' is not HEADSxHEAD_DIM"),
    (["--out", "x", "--groups", "torch,tf"], "--groups takes some of torch, cudnn, jax"),
    (["--out", "x", "--iters", "0"], "--iters must be positive"),
])
def test_bad_arguments_stop_with_one_line(probe, capsys, argv, said):
    with pytest.raises(SystemExit) as stop:
        probe.parse_args(argv)
    assert stop.value.code == 2
    assert said in capsys.readouterr().err


def test_dry_run_lists_every_candidate_and_imports_no_framework():
    code = (f"import runpy, sys; sys.argv = [{str(SCRIPT)!r}, '--dry-run', '--shapes', '12x64'];\n"
            "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\nexcept SystemExit as e:\n    assert e.code == 0\n"
            "print('IMPORTED', sorted(m for m in ('torch', 'jax', 'transformer_engine', 'cudnn') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "IMPORTED []" in out
    assert "batch 32 x seq 1024, causal, shapes 12x64" in out
    for name in ("torch-sdpa-bf16", "te-dpa-fp8", "te-dpa-fp8-fwd", "te-dpa-fp8-emulated", "torchao-fa3-fp8", "cudnn-fe-fp8",
                 "cudnn-fe-fp8fwd-bf16bwd", "jax-cudnn-fp8", "te-jax-fp8-query"):
        assert f" {name} " in out
    assert "te-dpa-fp8 " in out and "(against te-dpa-bf16)" in out
    assert "torch defaults (unless set): NVTE_DEBUG=1, NVTE_DEBUG_LEVEL=2, NVTE_FLASH_ATTN=0" in out
    assert "NVTE_FUSED_ATTN" in out and "XLA_PYTHON_CLIENT_PREALLOCATE" in out


def test_a_group_process_gets_its_defaults_where_the_caller_set_none(probe):
    env = probe.child_env("torch", {"NVTE_DEBUG": "0", "PATH": "/bin"})
    assert env["NVTE_DEBUG"] == "0" and env["NVTE_DEBUG_LEVEL"] == "2" and env["NVTE_FUSED_ATTN"] == "1"
    assert probe.child_env("jax", {})["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert probe.child_env("cudnn", {"A": "1"}) == {"A": "1"}


def test_pow2_scale_rounds_fp8_max_over_amax_down_to_a_power_of_two(probe):
    assert probe.pow2_scale(1.0) == 256.0  # 448 / 1 -> 256
    assert probe.pow2_scale(4.5) == 64.0  # 448 / 4.5 = 99.6 -> 64
    assert probe.pow2_scale(1000.0) == 0.25
    assert probe.pow2_scale(0.0) == probe.pow2_scale(float("nan")) == 1.0


# ---- records, the summary and the table


def fake_records(probe):
    shape64, shape128 = probe.Shape(12, 64), probe.Shape(6, 128)
    c = probe.BY_NAME
    err = {"max_abs": 0.02, "rel": 0.004}
    return [
        probe.record(c["te-dpa-bf16"], shape64, "ran", fwd_ms=0.2, fwd_bwd_ms=0.8, backend="FusedAttention sub-backend 1 (F16_arbitrary_seqlen)"),
        probe.record(c["te-dpa-fp8"], shape64, "refused",
                     fwd_error="ValueError: No dot product attention backend is available for the provided inputs.",
                     log=["Disabling FusedAttention as no backend supports the provided input"]),
        probe.record(c["cudnn-fe-bf16"], shape64, "ran", fwd_ms=0.18, fwd_bwd_ms=0.7),
        probe.record(c["cudnn-fe-fp8"], shape64, "fwd-only", fwd_ms=0.12,
                     bwd_error="cudnnGraphNotSupportedError: hidden_dim shoud be equal to 128 and hidden_dim should be multiple of 16",
                     accuracy={"out": err}),
        probe.record(c["te-dpa-bf16"], shape128, "ran", fwd_ms=0.3, fwd_bwd_ms=1.0),
        probe.record(c["te-dpa-fp8"], shape128, "ran", fwd_ms=0.2, fwd_bwd_ms=0.8,
                     accuracy={"out": err, "dq": {"max_abs": 0.5, "rel": 0.03}, "dk": {"max_abs": 0.1, "rel": 0.05},
                               "dv": {"max_abs": 0.1, "rel": None}}),
    ]


def test_collect_keeps_results_and_names_the_crashed_and_the_skipped(probe):
    shapes = (probe.Shape(12, 64),)
    c = probe.BY_NAME
    lines = [{"event": "env", "gpu": "x"},
             {"event": "start", "candidate": "cudnn-fe-bf16", "shape": "12x64"},
             {"event": "result", **probe.record(c["cudnn-fe-bf16"], shapes[0], "ran", fwd_ms=1.0, fwd_bwd_ms=2.0)},
             {"event": "start", "candidate": "cudnn-fe-fp8", "shape": "12x64"}]
    out = probe.collect("cudnn", shapes, lines, -11, "building...\nSegmentation fault\n")
    assert [(r["candidate"], r["status"]) for r in out] == [
        ("cudnn-fe-bf16", "ran"), ("cudnn-fe-fp8", "crashed"), ("cudnn-fe-fp8fwd-bf16bwd", "skipped")]
    assert out[1]["fwd_error"] == ("the cudnn process exited with code -11 while running it; "
                                   "last log line: Segmentation fault")
    assert out[2]["fwd_error"] == "not started: the cudnn process exited with code -11 first"
    killed = probe.collect("cudnn", shapes, [], None, "")
    assert killed[0]["fwd_error"] == "not started: the cudnn process was killed past its deadline first"


def test_a_record_refuses_a_field_it_does_not_know(probe):
    with pytest.raises(KeyError, match="speed"):
        probe.record(probe.BY_NAME["te-dpa-fp8"], probe.Shape(12, 64), "ran", speed=1)


def test_summary_gives_speedups_over_each_baseline_and_the_answer_per_shape(probe, tmp_path):
    args = probe.parse_args(["--out", str(tmp_path), "--shapes", "12x64,6x128"])
    summary = probe.summarise(args, fake_records(probe), {"gpu": "NVIDIA H200", "variables": {"torch": {"NVTE_DEBUG": "1"}}},
                              "2026-12-05T00:00:00+00:00", 61.04)
    by = {(r["candidate"], r["shape"]): r for r in summary["records"]}
    assert by[("te-dpa-fp8", "6x128")]["speedup"] == {"fwd_ms": 1.5, "fwd_bwd_ms": 1.25}
    assert by[("cudnn-fe-fp8", "12x64")]["speedup"] == {"fwd_ms": 1.5, "fwd_bwd_ms": None}
    assert by[("te-dpa-fp8", "12x64")]["speedup"] == {"fwd_ms": None, "fwd_bwd_ms": None}
    assert summary["verdicts"] == [
        {"shape": "12x64", "head_dim": 64, "fwd_bwd": [], "fwd_only": ["cudnn-fe-fp8"], "not_run": {"te-dpa-fp8": "refused"}},
        {"shape": "6x128", "head_dim": 128, "fwd_bwd": ["te-dpa-fp8"], "fwd_only": [], "not_run": {}}]
    assert summary["schema"] == "parallax.fp8_attention_probe/1" and summary["wall_s"] == 61.0

    json_path, md_path = probe.write_outputs(tmp_path, summary)
    assert json.loads(json_path.read_text())["verdicts"] == summary["verdicts"]
    text = md_path.read_text()
    assert text.startswith("# fp8 attention probe: NVIDIA H200, batch 32 × 1024, causal\n")
    assert ("- **12x64** (head_dim 64): fp8 forward and backward ran in: none; fp8 forward only: cudnn-fe-fp8; "
            "neither: te-dpa-fp8 (refused).") in text
    assert "- **6x128** (head_dim 128): fp8 forward and backward ran in: te-dpa-fp8; fp8 forward only: none." in text
    # the worst gradient by its share of the baseline; dv's baseline is all zero (no share), so dv is it
    assert "| 6x128 | te-dpa-fp8 | ran | 0.200 | 0.800 | te-dpa-bf16 | 1.50× | 1.25× | 0.02 (0.4%) | 0.1 |  |" in text
    assert ("| 12x64 | cudnn-fe-fp8 | fwd-only | 0.120 | — | cudnn-fe-bf16 | 1.50× | — | 0.02 (0.4%) | — | "
            "cudnnGraphNotSupportedError: hidden_dim shoud be equal to 128 and hidden_dim should be multiple of 16 |") in text
    assert "| 12x64 | te-dpa-fp8 | refused | — | — | te-dpa-bf16 | — | — | — | — | ValueError: No dot product" in text
    assert "| 12x64 | te-dpa-bf16 | ran | 0.200 | 0.800 | torch-sdpa-bf16 | — | — | — | — | FusedAttention sub-backend 1" in text
    assert "- torch: NVTE_DEBUG=1" in text
    assert "`te-dpa-fp8` at 12x64:\n\n```text\nDisabling FusedAttention as no backend supports the provided input\n```" in text


def test_orchestration_runs_each_group_and_writes_one_summary(probe, tmp_path, capsys):
    args = probe.parse_args(["--out", str(tmp_path / "out"), "--shapes", "12x64", "--groups", "torch,jax",
                             "--budget-s", "10"])
    calls = []

    def fake_group(args, group, deadline, stop, raw, log):
        calls.append((group, deadline <= stop))
        w = probe.Writer(raw)
        w.write({"event": "env", "group": group, "variables": {"X": group}, f"{group}_version": "1.0"})
        first, *rest = probe.group_order(group, args.shape_list)
        w.write({"event": "start", "candidate": first[0].name, "shape": "12x64"})
        w.write({"event": "result", **probe.record(first[0], first[1], "ran", fwd_ms=1.0, fwd_bwd_ms=3.0)})
        if group == "jax":
            w.write({"event": "start", "candidate": rest[0][0].name, "shape": "12x64"})
            log.write_text("XlaRuntimeError: boom\n")
            return 1
        for c, s in rest:
            w.write({"event": "result", **probe.record(c, s, "refused", fwd_error="no")})
        return 0

    summary = probe.orchestrate(args, run_group=fake_group)
    assert calls == [("torch", True), ("jax", True)]
    statuses = {r["candidate"]: r["status"] for r in summary["records"]}
    assert statuses == {"torch-sdpa-bf16": "ran", "te-dpa-bf16": "refused", "te-dpa-fp8": "refused",
                        "te-dpa-fp8-fwd": "refused", "te-dpa-fp8-emulated": "refused", "torchao-fa3-fp8": "refused",
                        "jax-cudnn-bf16": "ran", "jax-cudnn-fp8": "crashed", "te-jax-fp8-query": "skipped"}
    assert summary["environment"]["variables"] == {"torch": {"X": "torch"}, "jax": {"X": "jax"}}
    assert summary["environment"]["torch_version"] == "1.0" and summary["environment"]["jax_version"] == "1.0"
    assert (tmp_path / "out" / "probe.json").exists() and (tmp_path / "out" / "probe.md").exists()
    assert ("12x64 (head_dim 64): fp8 forward and backward ran in: none; fp8 forward only: none; neither: te-dpa-fp8 "
            "(refused), te-dpa-fp8-fwd (refused), torchao-fa3-fp8 (refused), jax-cudnn-fp8 (crashed)."
            in capsys.readouterr().out.splitlines())


# ---- the group code on the CPU, against stand-ins


class FakeTimer:
    def ms(self, fn) -> float:
        fn()
        fn()
        return 1.0


def reference_attention(torch, q, k, v, scale):
    """Causal softmax(q·kᵀ·scale)·v for [B, H, S, D] float32 tensors; also P and the log-sum-exp."""
    s = (q @ k.transpose(-1, -2)) * scale
    n = s.shape[-1]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.exp(s - lse)
    return p @ v, p, lse


class FakeCudnn:
    """The part of cudnn-frontend's pygraph API the probe uses, computing with torch on the CPU;
    check_support refuses an FP8 backward at head_dim != 128, as cudnn-frontend does on Hopper."""

    class data_type:  # noqa: N801 (the library's name)
        BFLOAT16, FLOAT, FP8_E4M3 = "BFLOAT16", "FLOAT", "FP8_E4M3"

    class heur_mode:  # noqa: N801
        A, FALLBACK = "A", "FALLBACK"

    class cudnnGraphNotSupportedError(Exception):  # noqa: N818
        pass

    __version__ = "fake"

    @staticmethod
    def backend_version_string():
        return "9.19.0"

    @staticmethod
    def create_handle():
        return object()

    @staticmethod
    def set_stream(handle, stream):
        pass

    class Tensor:
        def __init__(self, dim=None):
            self.dim = dim

        def _set(self, *_):
            return self

        set_output = set_stride = set_data_type = set_name = _set

        def set_dim(self, dim):
            self.dim = dim
            return self

    class pygraph:  # noqa: N801
        def __init__(self, io_data_type=None, intermediate_data_type=None, compute_data_type=None):
            self.ops = []

        def tensor_like(self, t, name=""):
            return FakeCudnn.Tensor(list(t.shape))

        def _op(self, kind, n_out, **ports):
            outs = [FakeCudnn.Tensor() for _ in range(n_out)]
            self.ops.append((kind, ports, outs))
            return outs

        def sdpa(self, name="", q=None, k=None, v=None, generate_stats=None, attn_scale=None, use_causal_mask=False):
            assert use_causal_mask and generate_stats
            return self._op("sdpa", 2, q=q, k=k, v=v, scale=attn_scale)

        def sdpa_backward(self, name="", q=None, k=None, v=None, o=None, dO=None, stats=None, attn_scale=None,  # noqa: N803
                          use_causal_mask=False):
            assert use_causal_mask
            return self._op("sdpa_backward", 3, q=q, k=k, v=v, dO=dO, scale=attn_scale)

        def sdpa_fp8(self, q, k, v, descale_q, descale_k, descale_v, descale_s, scale_s, scale_o,
                     generate_stats=None, attn_scale=None, use_causal_mask=False):
            assert use_causal_mask and generate_stats
            return self._op("sdpa_fp8", 4, q=q, k=k, v=v, descale_q=descale_q, descale_k=descale_k,
                            descale_v=descale_v, scale_o=scale_o, scale=attn_scale)

        def sdpa_fp8_backward(self, q, k, v, o, dO, stats, descale_q, descale_k, descale_v, descale_o, descale_dO,  # noqa: N803
                              descale_s, descale_dP, scale_s, scale_dQ, scale_dK, scale_dV, scale_dP,
                              attn_scale=None, use_causal_mask=False):
            assert use_causal_mask
            return self._op("sdpa_fp8_backward", 7, q=q, k=k, v=v, dO=dO, descale_q=descale_q,
                            descale_k=descale_k, descale_v=descale_v, descale_dO=descale_dO, scale_dQ=scale_dQ,
                            scale_dK=scale_dK, scale_dV=scale_dV, scale=attn_scale)

        def validate(self):
            pass

        build_operation_graph = build_plans = validate

        def create_execution_plans(self, modes):
            assert modes == ["A", "FALLBACK"]

        def check_support(self):
            for kind, ports, _ in self.ops:
                if kind == "sdpa_fp8_backward" and ports["q"].dim[-1] != 128:
                    raise FakeCudnn.cudnnGraphNotSupportedError(
                        "[cudnn_frontend] Error: hidden_dim shoud be equal to 128 and hidden_dim should be multiple of 16")

        def get_workspace_size(self):
            return 0

        def execute(self, pack, workspace, handle=None):
            import torch

            for kind, ports, outs in self.ops:
                val = {k: (pack[p] if isinstance(p, FakeCudnn.Tensor) else p) for k, p in ports.items()}
                ds = {k: val[k].item() for k in val if k.startswith(("descale", "scale_"))}
                q, k, v = (val[n].float() * ds.get(f"descale_{n}", 1.0) for n in ("q", "k", "v"))
                if kind in ("sdpa", "sdpa_fp8"):
                    out, p, lse = reference_attention(torch, q, k, v, val["scale"])
                    scale_o = ds.get("scale_o", 1.0)
                    pack[outs[0]].copy_((out * scale_o).to(pack[outs[0]].dtype))
                    pack[outs[1]].copy_(lse)
                    if kind == "sdpa_fp8":
                        pack[outs[2]].fill_(p.max().item())
                        pack[outs[3]].fill_(out.abs().max().item())
                    continue
                q, k, v = (t.requires_grad_(True) for t in (q, k, v))
                out, p, _ = reference_attention(torch, q, k, v, val["scale"])
                do = val["dO"].float() * ds.get("descale_dO", 1.0)
                grads = torch.autograd.grad(out, (q, k, v), do)
                for t, g, name in zip(outs, grads, ("dQ", "dK", "dV")):
                    pack[t].copy_((g * ds.get(f"scale_{name}", 1.0)).to(pack[t].dtype))
                if kind == "sdpa_fp8_backward":
                    for t, g in zip(outs[3:6], grads):
                        pack[t].fill_(g.abs().max().item())
                    pack[outs[6]].fill_(1.0)


def cpu_group(probe, cls, monkeypatch, tmp_path, shapes="2x64,2x128", **setup):
    args = probe.parse_args(["--out", str(tmp_path), "--shapes", shapes, "--batch", "2", "--seq", "16",
                             "--warmup", "1", "--iters", "2"])
    for name, value in setup.items():
        monkeypatch.setattr(probe, name, value)
    group = cls(args)
    group.device = "cpu"
    group.timer = FakeTimer()
    group.sync = lambda: None
    return group, args


def test_cudnn_group_runs_bf16_and_fp8_and_reports_the_backward_refusal_at_64(probe, monkeypatch, tmp_path):
    group, args = cpu_group(probe, probe.CudnnGroup, monkeypatch, tmp_path, import_cudnn_frontend=lambda: FakeCudnn)
    assert group.environment() == {"cudnn_frontend": "fake", "cudnn_frontend_backend": "9.19.0"}
    out = {(c.name, s.label): group.run(c, s) for c, s in probe.group_order("cudnn", args.shape_list)}
    assert {k: r["status"] for k, r in out.items()} == {
        ("cudnn-fe-bf16", "2x64"): "ran", ("cudnn-fe-fp8", "2x64"): "fwd-only",
        ("cudnn-fe-fp8fwd-bf16bwd", "2x64"): "ran",
        ("cudnn-fe-bf16", "2x128"): "ran", ("cudnn-fe-fp8", "2x128"): "ran", ("cudnn-fe-fp8fwd-bf16bwd", "2x128"): "ran"}
    refused = out[("cudnn-fe-fp8", "2x64")]
    assert refused["bwd_error"] == ("cudnnGraphNotSupportedError: [cudnn_frontend] Error: hidden_dim shoud be equal "
                                    "to 128 and hidden_dim should be multiple of 16")
    assert refused["fwd_ms"] == 1.0 and refused["fwd_bwd_ms"] is None and set(refused["accuracy"]) == {"out"}
    ran = out[("cudnn-fe-fp8", "2x128")]
    assert set(ran["accuracy"]) == {"out", "dq", "dk", "dv"}
    # E4M3 keeps 3 mantissa bits: a few percent of the largest value, never a wrong scale (which is 2× off or worse)
    assert all(e["rel"] < 0.1 for e in ran["accuracy"].values()), ran["accuracy"]
    assert ran["details"]["scales"]["scale_s"] == 256.0  # amax of P is 1 (causal: the first row is one 1)
    hybrid = out[("cudnn-fe-fp8fwd-bf16bwd", "2x64")]
    assert all(e["rel"] < 0.1 for e in hybrid["accuracy"].values()), hybrid["accuracy"]


def test_cudnn_group_is_unavailable_without_the_module(probe, monkeypatch, tmp_path):
    def missing():
        raise ModuleNotFoundError("No module named 'cudnn'")

    group, args = cpu_group(probe, probe.CudnnGroup, monkeypatch, tmp_path, import_cudnn_frontend=missing)
    result = group.run(probe.BY_NAME["cudnn-fe-fp8"], args.shape_list[0])
    assert result["status"] == "unavailable"
    assert result["fwd_error"] == "cudnn-frontend: ModuleNotFoundError: No module named 'cudnn'"


def fake_te(torch):
    """TransformerEngine's DotProductAttention and autocast as far as the probe uses them:
    bshd in, [b, s, h·d] out; under an fp8_dpa recipe at head_dim != 128 no backend runs (as TE
    2.20 says on Hopper), unless NVTE_UnfusedDPA_Emulate_FP8=1."""
    state = {"recipe": None}

    class DotProductAttention(torch.nn.Module):
        def __init__(self, heads, head_dim, qkv_format="sbhd", attn_mask_type="causal", attention_dropout=0.0):
            super().__init__()
            assert qkv_format == "bshd" and attn_mask_type == "causal" and attention_dropout == 0.0
            self.head_dim = head_dim

        def forward(self, q, k, v):
            log = logging.getLogger("DotProductAttention")
            fp8 = state["recipe"] is not None and state["recipe"].fp8_dpa
            if fp8 and self.head_dim != 128 and os.environ.get("NVTE_UnfusedDPA_Emulate_FP8") != "1":
                log.debug("Disabling FusedAttention as no backend supports the provided input")
                raise ValueError("No dot product attention backend is available for the provided inputs. Please run "
                                 "with NVTE_DEBUG=1 NVTE_DEBUG_LEVEL=2 to find out the reasons for disabling all backends.")
            log.info("Running with FusedAttention backend (sub-backend %s)", 2 if fp8 else 1)
            b, s, h, d = q.shape
            out = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
            return out.transpose(1, 2).reshape(b, s, h * d)

    @contextlib.contextmanager
    def autocast(enabled=True, recipe=None):
        state["recipe"] = recipe
        try:
            yield
        finally:
            state["recipe"] = None

    return types.SimpleNamespace(DotProductAttention=DotProductAttention, autocast=autocast)


@pytest.fixture
def fake_te_recipe(monkeypatch):
    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.Format = types.SimpleNamespace(HYBRID="HYBRID")
    recipe.DelayedScaling = lambda **kw: types.SimpleNamespace(**kw)
    for name in ("transformer_engine", "transformer_engine.common"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "transformer_engine.common.recipe", recipe)


def test_torch_group_te_candidates_with_a_stand_in_te(probe, monkeypatch, tmp_path, fake_te_recipe):
    import torch

    group, args = cpu_group(probe, probe.TorchGroup, monkeypatch, tmp_path)
    group.te = fake_te(torch)
    monkeypatch.setenv("NVTE_FP8_DPA_BWD", "1")
    out = {(c.name, s.label): group.run(c, s) for c, s in probe.group_order("torch", args.shape_list)}
    status = {k: r["status"] for k, r in out.items()}
    assert status[("torch-sdpa-bf16", "2x64")] == "refused"  # the cuDNN SDPA backend has no CPU kernel
    assert status[("te-dpa-bf16", "2x64")] == status[("te-dpa-fp8", "2x128")] == "ran"
    assert status[("te-dpa-fp8", "2x64")] == status[("te-dpa-fp8-fwd", "2x64")] == "refused"
    assert status[("te-dpa-fp8-emulated", "2x64")] == "ran"
    assert status[("torchao-fa3-fp8", "2x64")] == "unavailable"  # no FA3 build (nor torchao) here
    refused = out[("te-dpa-fp8", "2x64")]
    assert refused["fwd_error"].startswith("ValueError: No dot product attention backend is available")
    assert refused["log"] == ["Disabling FusedAttention as no backend supports the provided input"]
    assert out[("te-dpa-fp8", "2x128")]["log"] == ["Running with FusedAttention backend (sub-backend 2)"]
    assert out[("te-dpa-fp8-fwd", "2x64")]["details"] == {"env": {"NVTE_FP8_DPA_BWD": "0"}}
    assert os.environ["NVTE_FP8_DPA_BWD"] == "1" and "NVTE_UnfusedDPA_Emulate_FP8" not in os.environ  # restored
    same = out[("te-dpa-fp8", "2x128")]["accuracy"]
    assert set(same) == {"out", "dq", "dk", "dv"} and all(e["max_abs"] == 0 for e in same.values())


def test_torch_group_without_te_marks_te_unavailable(probe, monkeypatch, tmp_path):
    group, args = cpu_group(probe, probe.TorchGroup, monkeypatch, tmp_path)
    group.te, group.te_error = None, "ModuleNotFoundError: No module named 'transformer_engine'"
    result = group.run(probe.BY_NAME["te-dpa-fp8"], args.shape_list[0])
    assert result["status"] == "unavailable" and "No module named 'transformer_engine'" in result["fwd_error"]
    assert group.environment()["transformer_engine"].startswith("not importable: ModuleNotFoundError")


def fake_jax_fp8(jax, jnp):
    """JAX's FP8 fused attention as cuDNN computes it (descale in, scale out, amaxes as the
    scale parameters' gradients), refusing the training forward at head_dim != 128 with JAX's
    own message; the inference forward takes any multiple of 16."""

    def attend(q, k, v, scale):
        s = jnp.einsum("btnh,bsnh->bnts", q, k) * scale
        n = s.shape[-1]
        s = jnp.where(jnp.tril(jnp.ones((n, n), bool)), s, -jnp.inf)
        p = jax.nn.softmax(s, axis=-1)
        return jnp.einsum("bnts,bsnh->btnh", p, v), p

    def dequant(x, d):
        return x.astype(jnp.float32) * d.reshape(())

    @partial(jax.custom_vjp, nondiff_argnums=(4,))
    def fp8(q, k, v, p, scale):
        out, probs = attend(dequant(q, p["descale_q"]), dequant(k, p["descale_k"]), dequant(v, p["descale_v"]), scale)
        return ((out * p["scale_o"].reshape(())).astype(q.dtype), jnp.max(probs).reshape(1, 1, 1, 1),
                jnp.max(jnp.abs(out)).reshape(1, 1, 1, 1))

    def fwd(q, k, v, p, scale):
        t, h = q.shape[1], q.shape[-1]
        if h != 128:
            raise NotImplementedError(f"Unsupported sequence length Q {t}, KV {t} and head dim {h} for FP8.")
        return fp8(q, k, v, p, scale), (q, k, v, p)

    def bwd(scale, res, g):
        q, k, v, p = res
        qf, kf, vf = (dequant(x, p[f"descale_{n}"]) for x, n in ((q, "q"), (k, "k"), (v, "v")))
        _, pullback = jax.vjp(lambda a, b, c: attend(a, b, c, scale)[0], qf, kf, vf)
        grads = pullback(dequant(g[0], p["descale_dO"]))
        dp = {n: jnp.zeros_like(x) for n, x in p.items()}
        for name, gr in zip(("amax_dQ", "amax_dK", "amax_dV"), grads):
            dp[name] = jnp.max(jnp.abs(gr)).reshape(1, 1, 1, 1)
        dp["amax_dP"] = jnp.ones((1, 1, 1, 1), jnp.float32)
        return (*((gr * p[f"scale_d{n}"].reshape(())).astype(q.dtype) for gr, n in zip(grads, "QKV")), dp)

    fp8.defvjp(fwd, bwd)

    def dot_product_attention(q, k, v, fp8_params=None, *, scale=1.0, mask_type=None, qkv_layout="BTNH", use_fp8=False):
        assert use_fp8 and qkv_layout == "BTNH" and mask_type.name == "CAUSAL"
        assert set(fp8_params) == set(fa_keys())
        return fp8(q, k, v, fp8_params, scale)

    return dot_product_attention


def fa_keys():
    from jax._src.cudnn import fused_attention_stablehlo as fa

    return fa.fp8_params_keys


def test_jax_group_on_the_cpu_refuses_cudnn_and_lacks_te(probe, monkeypatch, tmp_path):
    group, args = cpu_group(probe, probe.JaxGroup, monkeypatch, tmp_path, shapes="2x64")
    out = {c.name: group.run(c, s) for c, s in probe.group_order("jax", args.shape_list)}
    assert out["jax-cudnn-bf16"]["status"] == "refused" and out["jax-cudnn-bf16"]["fwd_error"]
    assert out["jax-cudnn-fp8"]["status"] == "refused" and out["jax-cudnn-fp8"]["fwd_error"]
    assert out["te-jax-fp8-query"]["status"] == "unavailable"
    assert "jax" in group.environment()


def test_jax_group_fp8_scales_from_amaxes_and_matches_bf16(probe, monkeypatch, tmp_path):
    import jax
    import jax.numpy as jnp
    from jax._src.cudnn import fused_attention_stablehlo as fa

    real = jax.nn.dot_product_attention
    monkeypatch.setattr(jax.nn, "dot_product_attention",
                        lambda *a, implementation=None, **kw: real(*a, implementation="xla", **kw))
    monkeypatch.setattr(fa, "dot_product_attention", fake_jax_fp8(jax, jnp))
    group, args = cpu_group(probe, probe.JaxGroup, monkeypatch, tmp_path)
    out = {(c.name, s.label): group.run(c, s) for c, s in probe.group_order("jax", args.shape_list)}
    assert out[("jax-cudnn-bf16", "2x64")]["status"] == "ran"
    at64, at128 = out[("jax-cudnn-fp8", "2x64")], out[("jax-cudnn-fp8", "2x128")]
    assert at64["status"] == "fwd-only"
    assert at64["bwd_error"] == "NotImplementedError: Unsupported sequence length Q 16, KV 16 and head dim 64 for FP8."
    assert at128["status"] == "ran" and at128["fwd_ms"] > 0 and at128["fwd_bwd_ms"] > 0
    assert at128["details"]["scales"]["scale_s"] == 256.0
    assert set(at128["accuracy"]) == {"out", "dq", "dk", "dv"}
    assert all(e["rel"] < 0.1 for e in at128["accuracy"].values()), at128["accuracy"]
    assert not math.isnan(at64["accuracy"]["out"]["max_abs"])


def test_inputs_are_the_same_in_every_group(probe):
    a = probe.inputs(probe.Shape(2, 8), 2, 4, seed=3)
    b = probe.inputs(probe.Shape(2, 8), 2, 4, seed=3)
    assert len(a) == 4 and all(np.array_equal(x, y) for x, y in zip(a, b)) and a[0].shape == (2, 4, 2, 8)
