"""Experiment plans (``parallax.plans``): every shipped plan loads, resolves to the benchmark options of the
command line it replaces, and every bad plan fails in one line naming the key and the fix."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from parallax import plans
from parallax.cli.benchmark import command
from parallax.errors import ParallaxError

SHIPPED = ["blackwell-formats", "convergence", "crossover", "curves", "fp8-attention", "fp8-attn-long", "fp8-matrix",
           "nvfp4-emulation", "nvfp4-long", "three-frameworks", "tuning"]
COMMON = "--model llama-100m --seeds 0 --batch-size 32 --seq-len 1024"
FP8_RECIPES = ("torch:te-bf16,torch:te-fp8-current,torch:torchao-fp8-tensorwise,torch:torchao-fp8-rowwise,"
               "jax:flax-fp8-direct,jax:te-bf16,jax:te-fp8-delayed")
# The command lines the plans replace, as the results folders record them (<tokens> and <out> filled in).
COMMAND_LINES = {
    # docs/results/2026-12-02-h200-d/: the matrix part (MATRIX_FRAMEWORKS=torch,jax, every fp8 recipe, REPEATS 3)
    "fp8-matrix": [f"--frameworks torch,jax --precisions bf16,fp8 --recipes {FP8_RECIPES} {COMMON} --steps 60 "
                   "--warmup 20 --repeats 3 --data <tokens> --epochs 20 --timeout-per-run 360 --output-dir <out> "
                   "--resume --report"],
    # docs/results/2026-12-03-h200/README.md, "The benchmarks as the pipeline ran them"
    "three-frameworks": [f"--frameworks torch,jax,maxtext --precisions bf16,fp8 --recipes "
                         f"{FP8_RECIPES},maxtext:te_fp8_delayedscaling {COMMON} --steps 60 --warmup 20 --repeats 1 "
                         "--data <tokens> --epochs 20 --timeout-per-run 360 --output-dir <out> --resume --report"],
    # docs/results/2026-12-02-h200-d/README.md, call 4; the plan states its protocol (--convergence)
    "convergence": ["--frameworks jax --precisions bf16 --recipes jax:te-fp8-delayed --model llama-100m --seeds 0,1 "
                    "--batch-size 32 --seq-len 1024 --steps 1000 --warmup 20 --repeats 1 --data <tokens> --epochs 40 "
                    "--eval-every 100 --eval-batches 5 --concurrent 1 --timeout-per-run 500 --output-dir <out> "
                    "--resume --report --convergence"],
    # scripts/device/session.sh before plans: the curves part (docs/results/2026-12-01-h200-f/README.md)
    "curves": [f"--frameworks jax,maxtext --precisions bf16 {COMMON} --steps 300 --warmup 20 --repeats 1 "
               "--data <tokens> --epochs 20 --timeout-per-run 400 --output-dir <out> --resume --report"],
    # ... its nvfp4 part's benchmark (docs/results/2026-12-02-h200-c/logs/nvfp4-bench.txt)
    "nvfp4-emulation": [f"--frameworks torch,jax --precisions bf16 --recipes emulated-nvfp4 {COMMON} --steps 60 "
                        "--warmup 20 --repeats 3 --data <tokens> --epochs 20 --timeout-per-run 200 --output-dir <out> "
                        "--resume --report"],
    # ... and its nvfp4long part (docs/results/2026-12-02-h200-b/); the plan states its protocol (--convergence)
    "nvfp4-long": ["--frameworks torch,jax --precisions bf16 --recipes emulated-nvfp4 --model llama-100m --seeds 0,1 "
                   "--batch-size 32 --seq-len 1024 --steps 1000 --warmup 20 --repeats 1 --data <tokens> --epochs 40 "
                   "--eval-every 100 --eval-batches 5 --concurrent 8 --timeout-per-run 670 --output-dir <out> "
                   "--resume --report --convergence"],
    # docs/results/2026-12-03-h200/README.md: the crossover's TE cells, one benchmark per preset
    "crossover": [f"--frameworks torch --precisions bf16 --recipes torch:te-bf16,torch:te-fp8-delayed --model {m} "
                  "--seeds 0 --batch-size 32 --seq-len 1024 --steps 30 --warmup 10 --synthetic --repeats 1 "
                  f"--timeout-per-run 240 --output-dir <out>/{m} --resume --report"
                  for m in ("llama-100m", "llama-330m", "llama-860m")],
    # issue 38: not yet run; the command line it stands for
    "blackwell-formats": ["--frameworks torch,jax --precisions bf16 --recipes te-fp8-delayed,emulated-mxfp8,"
                          "emulated-mxfp4,emulated-nvfp4,torch:torchao-mxfp8-emulated --model llama-100m --seeds 0,1 "
                          "--batch-size 32 --seq-len 1024 --steps 1000 --warmup 20 --repeats 1 --data <tokens> "
                          "--epochs 40 --eval-every 100 --eval-batches 5 --concurrent 4 --timeout-per-run 1500 "
                          "--output-dir <out> --resume --report --convergence"],
    # issue 30: not yet run; the command lines they stand for
    "fp8-attention": ["--frameworks torch --precisions bf16 --recipes torch:te-bf16,torch:te-fp8-delayed,"
                      f"torch:te-fp8-dpa --model {m} --seeds 0 --batch-size 32 --seq-len 1024 --steps 60 --warmup 20 "
                      f"--synthetic --repeats 3 --timeout-per-run 300 --output-dir <out>/{m} --resume --report"
                      for m in ("llama-100m", "llama-100m-hd128")],
    "fp8-attn-long": ["--frameworks torch --precisions bf16 --recipes torch:te-fp8-delayed,torch:te-fp8-dpa "
                                  "--model llama-100m-hd128 --seeds 0,1 --batch-size 32 --seq-len 1024 --steps 1000 "
                                  "--warmup 20 --repeats 1 --data <tokens> --epochs 40 --eval-every 100 --eval-batches 5 "
                                  "--concurrent 1 --timeout-per-run 500 --output-dir <out> --resume --report "
                                  "--convergence"],
    # issue 35: the stock-tuning sweep (docs/tuning.md)
    "tuning": ["--frameworks torch,jax,maxtext --precisions bf16 --recipes torch:te-fp8-delayed,jax:te-fp8-delayed,"
               "maxtext:te_fp8_delayedscaling --tunings default,torch:reduce-overhead,torch:coordinate-descent,"
               "jax:lhs-no-triton-gemm,jax:command-buffers,jax:lhs-no-triton-gemm-cb,maxtext:lhs-no-triton-gemm "
               f"{COMMON} --steps 60 --warmup 20 --repeats 1 --data <tokens> --epochs 20 --timeout-per-run 360 "
               "--output-dir <out> --resume --report"],
}


def parse(argv: list[str]):
    """``parallax benchmark ARGV`` parsed by the real command: its option values and which were given."""
    ctx = command.make_context("benchmark", argv)
    given = {k for k in ctx.params if ctx.get_parameter_source(k).name != "DEFAULT"}
    return ctx.params, given


def resolved(argv: list[str]) -> list[dict]:
    params, given = parse(argv)
    options = {k: v for k, v in params.items() if k not in ("plan", "list_plans")}
    return plans.benchmark_runs(plans.load(params["plan"]), options, given - {"plan"})


def test_every_shipped_plan_loads_and_is_listed_once():
    assert list(plans.shipped()) == SHIPPED
    listed = plans.listing()
    assert [name for name, _ in listed] == SHIPPED
    assert listed[6] == ("fp8-matrix", "torch and jax: bf16 and every fp8 recipe, llama-100m, 3 repeats (speed)")
    for name in SHIPPED:
        path = plans.shipped()[name]
        assert path.read_text().startswith("# ")  # each file says what it answers
        assert plans.load(name).values == plans.load(str(path)).values


@pytest.mark.parametrize("name", SHIPPED)
def test_each_plan_resolves_to_the_command_lines_it_replaces(tmp_path, name):
    tokens, out = tmp_path / "tokens", tmp_path / "out"
    tokens.mkdir()
    fill = {"<tokens>": str(tokens), "<out>": str(out)}
    data = [] if name in ("crossover", "fp8-attention") else ["--data", str(tokens)]
    runs = resolved(["--plan", name, *data, "--output-dir", str(out)])
    expected = []
    for line in COMMAND_LINES[name]:
        for key, value in fill.items():
            line = line.replace(key, value)
        params, _ = parse(shlex.split(line))
        expected.append({k: v for k, v in params.items() if k not in ("plan", "list_plans")})
    assert runs == expected
    assert [{k: type(v) for k, v in r.items()} for r in runs] == [{k: type(v) for k, v in e.items()} for e in expected]


def test_the_resolved_options_hold_the_plans_values():
    crossover = resolved(["--plan", "crossover", "--output-dir", "xo"])
    assert [(r["model"], r["output_dir"]) for r in crossover] == [
        ("llama-100m", "xo/llama-100m"), ("llama-330m", "xo/llama-330m"), ("llama-860m", "xo/llama-860m")]
    run = crossover[1]
    assert (run["frameworks"], run["precisions"], run["recipes"], run["steps"], run["warmup"], run["synthetic"],
            run["timeout_per_run"], run["seeds"], run["convergence"]) == (
        "torch", "bf16", "torch:te-bf16,torch:te-fp8-delayed", 30, 10, True, 240, "0", False)
    conv, = resolved(["--plan", "convergence", "--data", "."])
    assert (conv["convergence"], conv["seeds"], conv["steps"], conv["eval_every"], conv["eval_batches"],
            conv["epochs"], conv["data"]) == (True, "0,1", 1000, 100, 5, 40, ".")


def test_an_option_on_the_command_line_replaces_the_plans_value():
    run, = resolved(["--plan", "three-frameworks", "--data", ".", "--repeats", "3", "--frameworks", "torch"])
    assert (run["repeats"], run["frameworks"], run["steps"]) == (3, "torch", 60)
    run, = resolved(["--plan", "fp8-matrix", "--synthetic"])  # the command line's data replaces the plan's
    assert (run["synthetic"], run["data"]) == (True, None)
    run, = resolved(["--plan", "fp8-matrix", "--data", ".", "--recipes", ""])  # given, even empty
    assert (run["recipes"], run["precisions"]) == ("", "bf16,fp8")


def test_model_narrows_a_crossover_to_one_preset_in_its_own_folder():
    runs = resolved(["--plan", "crossover", "--model", "llama-330m", "--output-dir", "xo"])
    assert [(r["model"], r["output_dir"]) for r in runs] == [("llama-330m", "xo/llama-330m")]


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mine.toml"
    path.write_text(text)
    return str(path)


GOOD = 'description = "d"\nprotocol = "throughput"\nframeworks = ["torch"]\nprecisions = ["bf16"]\nmodel = "tiny"\n'


@pytest.mark.parametrize("text, message", [
    (GOOD + "stepz = 3\n", "mine.toml: unknown key 'stepz'; remove it (the keys: description, protocol,"),
    (GOOD + 'steps = "60"\n', "mine.toml: 'steps' must be an integer, got '60'"),
    (GOOD + "steps = true\n", "mine.toml: 'steps' must be an integer, got True"),
    (GOOD + "seeds = [0, \"1\"]\n", "mine.toml: 'seeds' must be a list of integers (not empty), got [0, '1']"),
    (GOOD + "recipes = []\n", "mine.toml: 'recipes' must be a list of strings (not empty), got []"),
    (GOOD + "gpus = [1, \"two\"]\n", "mine.toml: 'gpus' must be a list of integers or \"all\" (not empty)"),
    (GOOD + "report = 1\n", "mine.toml: 'report' must be true or false, got 1"),
    (GOOD.replace('protocol = "throughput"\n', ""), "mine.toml: missing key 'protocol'; add it (one of "
                                                    "throughput, convergence)"),
    (GOOD.replace('"throughput"', '"speed"'), "mine.toml: 'protocol' must be one of throughput, convergence, "
                                              "got 'speed'"),
    (GOOD + 'data = "tinystories"\n', "mine.toml: 'data' must be one of synthetic, hf, tokens, got 'tinystories'"),
    (GOOD + 'presets = ["tiny"]\n', "mine.toml: give either 'model' (one benchmark) or 'presets' (a crossover), "
                                    "not both"),
    (GOOD.replace('model = "tiny"\n', ""), "not neither"),
    (GOOD.replace('"tiny"', '"llama-7b"'), "mine.toml: unknown model preset 'llama-7b'; choose one of: llama-100m"),
    (GOOD + 'recipes = ["te-fp9"]\n', "mine.toml: no framework of torch has a recipe 'te-fp9'"),
    (GOOD.replace('["torch"]', '["mxt"]'), "mine.toml: unknown framework 'mxt'; choose one of: torch, jax"),
    (GOOD + 'tunings = ["torch:lhs"]\n', "mine.toml: unknown --tuning 'lhs' for torch (a knob set of jax, not of torch); "
                                        "choose one of: tuned, default, reduce-overhead"),
    (GOOD + 'tunings = ["fast"]\n', "mine.toml: unknown --tuning 'fast' for torch; choose one of: tuned, default"),
    (GOOD + "steps = 60\nsteps = 61\n", "mine.toml:7: not valid TOML"),
    ('description = "d"\nprotocol = \n', "mine.toml:2: not valid TOML"),
])
def test_a_bad_plan_is_one_error_naming_the_key(tmp_path, text, message):
    with pytest.raises(ParallaxError) as err:
        plans.load(write(tmp_path, text))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_name_lists_the_plans_and_a_missing_file_is_named(tmp_path):
    with pytest.raises(ParallaxError) as err:
        plans.load("fp9-matrix")
    assert str(err.value) == ("unknown plan 'fp9-matrix'; choose one of: blackwell-formats, convergence, crossover, curves, "
                              "fp8-attention, fp8-attn-long, fp8-matrix, nvfp4-emulation, nvfp4-long, "
                              "three-frameworks, tuning (or give a .toml file)")
    with pytest.raises(ParallaxError, match="^no plan file nope/x.toml; give a TOML file or a plan name"):
        plans.load("nope/x.toml")


def test_a_tokens_plan_without_data_names_the_option():
    with pytest.raises(ParallaxError, match=r"^plan 'fp8-matrix' trains on a prepared token folder; give --data "
                                            r"DIR \(see 'parallax data prepare'\)$"):
        resolved(["--plan", "fp8-matrix"])


def test_the_plans_travel_in_the_wheel_and_the_sdist():
    """scikit-build-core copies the whole package folder into the wheel and every tracked file into the sdist
    but what its exclude list names (measurements and session leftovers): none of it may reach the package.
    tests/unit/test_sdist.py builds the sdist and finds a plan in it."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    build = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["scikit-build"]
    assert build["wheel"]["packages"] == ["src/parallax"]
    assert "exclude" not in build.get("wheel", {})
    assert [p for p in build.get("sdist", {}).get("exclude", []) if p.lstrip("/").startswith("src")] == []
    assert all(p.parent == root / "src" / "parallax" / "plans" for p in plans.shipped().values())


def test_docs_name_every_shipped_plan():
    text = (Path(__file__).resolve().parents[2] / "docs" / "benchmark.md").read_text()
    assert [name for name in SHIPPED if f"`{name}`" not in text] == []
