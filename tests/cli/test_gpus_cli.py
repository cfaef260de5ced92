"""``--gpus`` and ``--sharding`` through the real command line: one error line and exit 2 before
any GPU work for a count this machine cannot give or a combination the engine refuses; a
benchmark's GPU counts are a matrix axis."""

from __future__ import annotations

import json

import pytest

from fixtures.cli import one_error_line
from fixtures.matrix import fake_command

from parallax.plan import world
from parallax.run import runner
from parallax.cli import main

TINY = ["--framework", "torch", "--model", "tiny", "--batch-size", "2", "--seq-len", "16", "--no-compile",
        "--steps", "3", "--warmup", "1"]


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine whose probe sees two GPUs (no GPU is touched: the errors come first)."""
    monkeypatch.setattr(world, "visible_gpus", lambda: 2)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(world, "visible_gpus", lambda: 0)


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "--gpus must be at least 1 (or 'all'), got 0"),
    (["--gpus", "-2", "--device", "cpu"], "--gpus must be at least 1 (or 'all'), got -2"),
    (["--gpus", "two"], "--gpus must be a number of GPUs or 'all', got 'two'"),
    (["--gpus", "3"], "--gpus 3: only 2 GPUs visible; use --gpus 2 or fewer, or --gpus all"),
    (["--gpus", "all", "--device", "cpu"], "--gpus all counts GPUs; with --device cpu give the number of CPU ranks"),
    (["--gpus", "2", "--device", "cuda:1"], "--device cuda:1 names one GPU; with --gpus 2 rank r takes GPU r"),
    (["--gpus", "2", "--cuda-graphs", "on"], "--cuda-graphs on with --gpus 2: CUDA graphs are not with several GPUs"),
    (["--gpus", "2", "--recipe", "te-fp8-delayed", "--sharding", "fsdp"],
     "recipe 'te-fp8-delayed' does not run with --sharding fsdp (TransformerEngine modules under FSDP2 are not "
     "wired here); use --sharding ddp"),
    (["--gpus", "2", "--sharding", "zero3"], "Invalid value for '--sharding'"),
    (["--gpus", "2", "--dist-timeout", "0", "--device", "cpu"], "dist_timeout_s must be positive"),
])
def test_bad_gpu_flags_are_one_line_exit_2_and_write_nothing(tmp_path, capsys, two_gpus, args, message):
    out = tmp_path / "run"
    code = main(["train", *TINY, "--output-dir", str(out), *args])
    assert code == 2
    assert message in one_error_line(capsys)
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("args, message", [
    (["--gpus", "all"], "--gpus all: no NVIDIA GPU is visible; use --device cpu --gpus N for N CPU ranks"),
    (["--gpus", "2", "--device", "cuda"], "--gpus 2: only 0 GPUs visible; use --device cpu --gpus 2 for 2 CPU ranks"),
    (["--gpus", "3"], "--gpus 3: only 0 GPUs visible; use --device cpu --gpus 3 for 3 CPU ranks"),
    (["--gpus", "2", "--framework", "maxtext", "--device", "cpu"], "the maxtext engine runs on one GPU here"),
    (["--gpus", "2", "--device", "cpu", "--recipe", "te-fp8-delayed"],
     "recipe 'te-fp8-delayed' needs an NVIDIA GPU of compute capability 8.9+; this run is on the CPU"),
])
def test_gpu_counts_on_a_machine_without_gpus(tmp_path, capsys, no_gpu, args, message):
    code = main(["train", *TINY, "--output-dir", str(tmp_path / "run"), *args])
    assert code == 2
    assert message in one_error_line(capsys)


def test_gpu_count_with_the_model_chosen_by_the_machine_is_still_a_gpu_count(tmp_path, capsys, no_gpu):
    # --model auto resolves the device to the CPU here; --gpus 3 must not become 3 CPU ranks silently
    code = main(["benchmark", "--frameworks", "torch", "--precisions", "bf16", "--gpus", "1,3", "--steps", "3",
                 "--warmup", "1", "--output-dir", str(tmp_path / "b")])
    assert code == 2
    assert "--gpus 3: only 0 GPUs visible; use --device cpu --gpus 3 for 3 CPU ranks" in one_error_line(capsys)
    code = main(["train", "--gpus", "3", "--steps", "3", "--warmup", "1", "--output-dir", str(tmp_path / "t")])
    assert code == 2
    assert "--gpus 3: only 0 GPUs visible" in one_error_line(capsys)


def test_resolve_gpus(monkeypatch):
    monkeypatch.setattr(world, "visible_gpus", lambda: 4)
    assert world.resolve_gpus("all", "auto") == 4
    assert world.resolve_gpus("ALL", "cuda") == 4
    assert world.resolve_gpus(3, "auto") == 3
    assert world.resolve_gpus("7", "cpu") == 7  # CPU ranks: any number
    monkeypatch.setattr(world, "visible_gpus", lambda: 0)
    assert world.resolve_gpus("1", "auto") == 1  # one GPU: as before, the engine decides


def test_the_train_help_names_the_flags(capsys):
    assert main(["train", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--gpus N|all" in text and "--sharding [ddp|fsdp]" in text and "--dist-timeout SECONDS" in text
    assert "--batch-size is per GPU" in text


@pytest.fixture
def fake_trainer(monkeypatch):
    monkeypatch.setattr(runner, "train_command", fake_command)
    monkeypatch.setattr(runner, "collect_environment", lambda: {"python": "3.x", "gpus": []})
    monkeypatch.setenv("FAKE_TRAIN_PLAN", "{}")


BENCH = ["benchmark", "--frameworks", "torch", "--precisions", "bf16", "--model", "tiny", "--batch-size", "4",
         "--seq-len", "32", "--steps", "6", "--warmup", "2", "--no-compile", "--device", "cpu"]


def test_a_benchmark_holds_one_and_two_gpu_cells(tmp_path, capsys, fake_trainer):
    out = tmp_path / "bench"
    assert main([*BENCH, "--gpus", "1,2", "--sharding", "fsdp", "--output-dir", str(out)]) == 0
    index = json.loads((out / "index.json").read_text())
    assert [(c["id"], c["gpus"]) for c in index["cells"]] == [("torch-bf16-seed0-rep0", 1),
                                                               ("torch-bf16-g2-seed0-rep0", 2)]
    matrix = json.loads((out / "matrix.json").read_text())
    assert matrix["gpus"] == [1, 2] and matrix["run"]["sharding"] == "fsdp" and "gpus" not in matrix["run"]
    cell = json.loads((out / "runs" / "torch-bf16-g2-seed0-rep0" / "config.json").read_text())
    assert cell["gpus"] == 2 and cell["batch_size"] == 4 and cell["sharding"] == "fsdp"


@pytest.mark.parametrize("args, message", [
    (["--gpus", "0"], "--gpus must be at least 1 (or 'all'), got 0"),
    (["--gpus", "1,1"], "--gpus lists 1 twice; list each once"),
    (["--gpus", ""], "--gpus is empty"),
    (["--gpus", "1,3", "--device", "auto"], "--gpus 3: only 2 GPUs visible"),
])
def test_bad_benchmark_gpu_counts_are_one_line(tmp_path, capsys, fake_trainer, two_gpus, args, message):
    code = main([*BENCH, "--output-dir", str(tmp_path / "bench"), *args])
    assert code == 2
    assert message in one_error_line(capsys)
    assert not (tmp_path / "bench" / "matrix.json").exists()


def test_inside_an_outer_launch_gpus_counts_the_world(monkeypatch, two_gpus):
    """Several hosts: each host's torchrun starts its ranks with RANK/WORLD_SIZE set."""
    from parallax.errors import ParallaxError

    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert world.resolve_gpus("4", "auto") == 4 and world.resolve_gpus("all", "cuda") == 4
    with pytest.raises(ParallaxError, match="started 4 ranks \\(2 on this host\\); give --gpus 4"):
        world.resolve_gpus("2", "auto")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "3")
    with pytest.raises(ParallaxError, match="3 ranks on this host but only 2 GPUs visible"):
        world.resolve_gpus("4", "auto")
