"""The RunConfig -> MaxText keys mapping (engines/maxtext/config.py), read back with PyYAML key by
key against the model and the run; every key it writes exists in MaxText 0.2.5's base.yml."""

from __future__ import annotations

from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

from parallax.spec.config import PRESETS, RunConfig  # noqa: E402
from parallax.engines.maxtext import config as mt  # noqa: E402
from parallax.errors import ParallaxError  # noqa: E402
from parallax.spec import registry  # noqa: E402

# Key names (only) of maxtext 0.2.5's configs/base.yml, read from the PyPI wheel.
BASE_KEYS = Path(__file__).parent.parent / "fixtures" / "maxtext_0_2_5_base_yml_keys.txt"
MODES = {"bf16": ("", False), "bf16-defaults": ("", False), "fp8": ("fp8", False), "fp8_gpu": ("fp8_gpu", True),
         "te_fp8_delayedscaling": ("te_fp8_delayedscaling", False),
         "te_fp8_currentscaling": ("te_fp8_currentscaling", False),
         "te_mxfp8": ("te_mxfp8", False), "te_nvfp4": ("te_nvfp4", False),
         "te_nvfp4_no_rht": ("te_nvfp4_no_rht", False)}
# The performance settings each recipe runs with: base.yml's own for bf16-defaults.
# Grain's feeding of real tokens: eight workers, 16 samples ahead each; base.yml's 1 and 1.
TUNED = {"scan_layers": False, "remat_policy": "minimal", "attention": "cudnn_flash_jax", "grain_worker_count": 8,
         "grain_per_worker_buffer_size": 16, "grain_num_threads": 16, "grain_prefetch_buffer_size": 500}
SETTINGS = {name: TUNED for name in MODES} | {
    "bf16-defaults": {"scan_layers": True, "remat_policy": "full", "attention": "autoselected", "grain_worker_count": 1,
                      "grain_per_worker_buffer_size": 1, "grain_num_threads": 16, "grain_prefetch_buffer_size": 500}}


def run_of(recipe: str, model: str = "llama-100m", **given) -> RunConfig:
    base = RunConfig.for_preset(model, **given) if model in ("llama-100m", "tiny") else RunConfig(model=model, **given)
    spec = registry.get("maxtext", recipe)
    return base.replace(framework="maxtext", precision=spec.format, recipe=recipe).validate()


def parsed(run: RunConfig, tuning: str | None = None) -> dict:
    spec = registry.get("maxtext", run.recipe)
    tuning = tuning or mt.recipe_tuning(spec)
    sections = mt.sections(run, spec, tuning)
    return yaml.safe_load(mt.render(sections, mt.header(run, spec, mt.file_name(run, spec), tuning)))


def test_the_registry_has_maxtexts_modes_and_the_defaults_cell_all_runnable_by_the_engine():
    assert {r.name for r in registry.of_framework("maxtext")} == set(MODES)
    assert all(r.implemented for r in registry.of_framework("maxtext"))
    assert {r.name: mt.recipe_tuning(r) for r in registry.of_framework("maxtext")} == {
        name: "defaults" if name == "bf16-defaults" else "tuned" for name in MODES}


def test_a_recipe_naming_an_unknown_tuning_is_a_programming_error():
    from dataclasses import replace

    odd = replace(registry.get("maxtext", "bf16"), params={"quantization": "", "tuning": "fast"})
    with pytest.raises(RuntimeError, match="unknown MaxText tuning 'fast'"):
        mt.recipe_tuning(odd)


@pytest.mark.parametrize("recipe", sorted(MODES))
def test_llama_100m_yaml_is_reference_section_5_key_by_key(recipe):
    keys = parsed(run_of(recipe))
    assert keys == {
        "base_config": "base.yml",
        "model_name": "default", "decoder_block": "llama2", "base_num_decoder_layers": 12, "base_emb_dim": 768,
        "base_num_query_heads": 12, "base_num_kv_heads": 12, "head_dim": 64, "base_mlp_dim": 2048,
        "mlp_activations": ["silu", "linear"], "normalization_layer_epsilon": 1e-5, "rope_max_timescale": 10000,
        "vocab_size": 10000, "logits_via_embedding": False, "dropout_rate": 0.0, "dtype": "bfloat16",
        "weight_dtype": "float32",
        "max_target_length": 1024, "per_device_batch_size": 32, "steps": 200, "init_weights_seed": 0,
        "data_shuffle_seed": 0, "enable_checkpointing": False, "hardware": "gpu",
        "learning_rate": 6e-4, "lr_schedule_type": "cosine", "learning_rate_final_fraction": 0.1,
        "warmup_steps_fraction": 0.1, "learning_rate_schedule_steps": 200,
        "opt_type": "adamw", "adam_b1": 0.9, "adam_b2": 0.95, "adam_eps": 1e-8, "adam_eps_root": 0.0,
        "adam_weight_decay": 0.1, "adamw_mask": ["norm"], "gradient_clipping_threshold": 1.0,
        "quantization": MODES[recipe][0], "use_qwix_quantization": MODES[recipe][1],
        **SETTINGS[recipe],
        "dataset_type": "synthetic",
    }
    for key in ("adam_eps", "normalization_layer_epsilon", "learning_rate"):
        assert isinstance(keys[key], float), key  # YAML 1.1 reads '1e-08' as a string


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_every_preset_exports_its_own_shape_and_run(model):
    run = run_of("fp8_gpu", model, batch_size=4, seq_len=64, steps=50, seed=3)
    keys = parsed(run, "defaults")
    m = PRESETS[model]
    assert (keys["base_num_decoder_layers"], keys["base_emb_dim"], keys["base_num_query_heads"],
            keys["base_num_kv_heads"], keys["head_dim"], keys["base_mlp_dim"], keys["vocab_size"]) == (
        m.n_layers, m.d_model, m.n_heads, m.n_heads, m.d_model // m.n_heads, m.d_ff, m.vocab_size)
    assert (keys["max_target_length"], keys["per_device_batch_size"], keys["steps"],
            keys["learning_rate_schedule_steps"], keys["init_weights_seed"], keys["data_shuffle_seed"]) == (
        64, 4, 50, 50, 3, 3)
    assert int(keys["steps"] * keys["warmup_steps_fraction"]) == 20
    assert (keys["scan_layers"], keys["remat_policy"], keys["attention"]) == (True, "full", "autoselected")


def test_the_optimizer_and_schedule_follow_optim_config():
    run = run_of("bf16", steps=300)
    run = run.replace(optim=run.optim.__class__(lr=3e-4, min_lr_ratio=0.05, beta1=0.8, beta2=0.99, eps=1e-6,
                                                weight_decay=0.02, grad_clip=0.5, lr_warmup_steps=37))
    keys = parsed(run)
    assert (keys["learning_rate"], keys["learning_rate_final_fraction"], keys["adam_b1"], keys["adam_b2"],
            keys["adam_eps"], keys["adam_weight_decay"], keys["gradient_clipping_threshold"]) == (
        3e-4, 0.05, 0.8, 0.99, 1e-6, 0.02, 0.5)
    assert int(300 * keys["warmup_steps_fraction"]) == 37


def test_warmup_fraction_gives_maxtexts_int_steps_times_fraction_exactly():
    for steps in range(1, 400):
        for warm in range(0, min(steps, 60)):
            assert int(steps * mt.warmup_fraction(warm, steps)) == warm, (warm, steps)


@pytest.mark.parametrize("steps,warm", [(10, 20), (20, 20), (21, 20), (22, 20), (200, 20), (1, 0), (2, 0), (7, 3)])
def test_maxtexts_schedule_is_ours_one_step_behind_in_warmup_for_any_steps(steps, warm):
    """MaxText's learning rate (its create_learning_rate_schedule, ported in the fake) from the
    keys written: ours at step - 1 during warm-up (its ramp starts at 0), ours exactly after it,
    also for runs that end inside the warm-up (steps <= W) or one step after it."""
    from fixtures.fake_maxtext import maxtext_lr
    from parallax.spec.config import OptimConfig
    from parallax.engines.schedule import lr_at

    optim = OptimConfig(lr_warmup_steps=warm)
    keys = mt.schedule_keys(RunConfig(model="tiny", steps=steps, optim=optim))
    assert 0.0 <= keys["warmup_steps_fraction"] <= 1.0  # MaxText's config rejects more
    ours = [float(lr_at(step, optim, steps)) for step in range(steps)]
    theirs = [maxtext_lr(keys, step) for step in range(steps)]
    expected = [ours[step] if step >= warm else ours[step - 1] if step else 0.0 for step in range(steps)]
    assert theirs == pytest.approx(expected, rel=1e-12, abs=1e-15)


def base_yml_without(tmp_path, *left_out) -> Path:
    """A base.yml with 0.2.5's key names (values do not matter to the check)."""
    names = [k for k in BASE_KEYS.read_text().split("\n") if k and not k.startswith("#")]
    path = tmp_path / "base.yml"
    path.write_text("".join(f"{k}: 0\n" for k in names if k not in left_out))
    return path


def test_every_key_written_is_a_key_of_maxtext_0_2_5_base_yml(tmp_path):
    from parallax.engines.maxtext import data

    keys = mt.flat(mt.sections(run_of("fp8_gpu"), registry.get("maxtext", "fp8_gpu"), data=data.keys_for("n", "p", 0),
                               output={"run_name": "r", "base_output_directory": "o", "metrics_file": "m"},
                               weights=mt.weights_keys(Path("/w"))))
    assert len(keys) == 16 + 7 + 5 + 8 + 2 + 6 + 8 + 1 + 3
    mt.check_keys(keys, base_yml_without(tmp_path))


def test_the_initial_weights_section_names_the_checkpoint_and_the_seed():
    run = run_of("bf16", seed=3)
    spec = registry.get("maxtext", run.recipe)
    text = mt.render(mt.sections(run, spec, weights=mt.weights_keys(Path("/runs/r/maxtext/initial_weights"))),
                     mt.header(run, spec, mt.file_name(run, spec), "tuned"))
    assert ("# initial weights: parallax.engines.weights.init_weights(llama-100m, seed 3)\n"
            'load_parameters_path: "/runs/r/maxtext/initial_weights"\n') in text
    assert yaml.safe_load(text)["load_parameters_path"] == "/runs/r/maxtext/initial_weights"
    # export-configs writes none, and says how to make one
    exported = mt.render(mt.sections(run, spec), mt.header(run, spec, mt.file_name(run, spec), "tuned"))
    assert "load_parameters_path" not in yaml.safe_load(exported)
    assert ("#   python3 -m parallax.engines.maxtext.initial_weights maxtext-llama-100m-bf16.yml /tmp/weights "
            "llama-100m 3\n") in exported


def test_the_parameter_counts_overrides_are_keys_of_maxtext_0_2_5(tmp_path):
    from parallax.engines.maxtext import count_params

    mt.check_keys(dict(o.split("=", 1) for o in count_params.OVERRIDES), base_yml_without(tmp_path))


def test_a_key_base_yml_lacks_is_one_line_naming_it(tmp_path):
    base = base_yml_without(tmp_path, "adamw_mask")
    with pytest.raises(ParallaxError) as err:
        mt.check_keys(mt.flat(mt.sections(run_of("bf16"), registry.get("maxtext", "bf16"))), base, "9.9")
    assert str(err.value) == (f"MaxText 9.9 has no config key 'adamw_mask' in {base}; Parallax writes the keys "
                              "of MaxText 0.2.5: pip install 'maxtext==0.2.5'")


def test_the_header_says_what_it_needs_and_how_to_run_it():
    run = run_of("te_nvfp4")
    spec = registry.get("maxtext", run.recipe)
    text = mt.render(mt.sections(run, spec), mt.header(run, spec, mt.file_name(run, spec), "tuned"))
    assert mt.file_name(run, spec) == "maxtext-llama-100m-te_nvfp4.yml"
    assert "# Hardware: one NVIDIA GPU of compute capability 10.0+ (nvfp4)." in text
    assert "# Packages: Python >= 3.12, maxtext 0.2.5, transformer_engine_jax" in text
    assert ("#   DECOUPLE_GCLOUD=TRUE python3 -m maxtext.trainers.pre_train.train "
            "maxtext-llama-100m-te_nvfp4.yml \\") in text
    fp8 = run_of("fp8")
    spec = registry.get("maxtext", fp8.recipe)
    assert "compute capability 8.9+ (fp8)" in mt.render(mt.sections(fp8, spec), mt.header(fp8, spec, "f.yml", "tuned"))


@pytest.mark.parametrize("value,text", [(1e-8, "1.0e-08"), (6e-4, "0.0006"), (1e-05, "1.0e-05"), (1.0, "1.0"),
                                        (2e20, "2.0e+20"), (True, "true"), ("", '""'), (["silu", "linear"],
                                                                                       '["silu", "linear"]')])
def test_yaml_values_read_back_as_themselves(value, text):
    assert mt.yaml_value(value) == text
    assert yaml.safe_load(f"k: {text}")["k"] == value


def test_grain_feeding_is_written_as_maxtext_keys_that_base_yml_has(tmp_path):
    """How Grain feeds real tokens: the worker count and each worker's buffer (samples: 0.2.5's
    mmap_npy pipeline prefetches before batching), written in every tuned file and recorded in
    run.json's framework.settings; base.yml's own values in the defaults tuning."""
    tuned, defaults = parsed(run_of("bf16")), parsed(run_of("bf16-defaults"))
    grain = ("grain_worker_count", "grain_per_worker_buffer_size", "grain_num_threads", "grain_prefetch_buffer_size")
    assert [tuned[k] for k in grain] == [8, 16, 16, 500]
    assert [defaults[k] for k in grain] == [1, 1, 16, 500]
    mt.check_keys({k: tuned[k] for k in grain}, base_yml_without(tmp_path))  # keys MaxText 0.2.5 reads
