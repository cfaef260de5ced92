"""Where fp8 starts to pay: each low-precision recipe's speedup over its framework's bf16, at
every model size benchmarked.

One benchmark per model preset (``parallax benchmark --model llama-330m ...``) gives one
comparison record (``compare.build_comparison``) whose speedups already carry their bootstrap
CIs; this module lines them up by model size. It computes nothing new: the ratios and intervals
are the records' own."""

from __future__ import annotations

from pathlib import Path

from parallax.config import get_preset
from parallax.errors import ParallaxError

SCHEMA = "parallax.crossover/1"


def crossover(results_dirs: list[Path], n_boot: int, level: float) -> dict:
    """The crossover record of several benchmark folders, one model preset each."""
    from parallax.compare import build_comparison

    records = [build_comparison(Path(d), n_boot=n_boot, level=level) for d in results_dirs]
    models = [_model_of(r, d) for r, d in zip(records, results_dirs)]
    twice = sorted({m for m in models if models.count(m) > 1})
    if twice:
        raise ParallaxError(f"two results folders hold the model '{twice[0]}'; give one folder per model preset")
    rows = [row for record, model in zip(records, models) for row in speedup_rows(record, model)]
    rows.sort(key=lambda r: (r["framework"], r["recipe"], r["gpus"], r["parameters"]))
    return {"schema": SCHEMA, "level": level, "results_dirs": [str(d) for d in results_dirs],
            "models": sorted(({"model": m, "parameters": get_preset(m).param_count()} for m in set(models)),
                             key=lambda m: m["parameters"]),
            "rows": rows, "problems": [p for r in records for p in r["problems"]]}


def _model_of(record: dict, results_dir: Path) -> str:
    model = (record.get("config") or {}).get("model")
    if not model:
        raise ParallaxError(f"{results_dir} holds no finished run to read its model from; run the benchmark first")
    return model


def speedup_rows(record: dict, model: str) -> list[dict]:
    """The record's recipe-over-bf16 speedups, with the model they were measured on (and the GPU
    count, a speedup being between cells of one count)."""
    parameters = get_preset(model).param_count()
    return [{"model": model, "parameters": parameters, "framework": s["framework"], "recipe": s["a"],
             "gpus": s.get("gpus", 1),
             "baseline": s["b"], "ratio": s["ratio"], "ci": s["ci"], "distinguishable": s["distinguishable"]}
            for s in record["speedups"] if s["kind"] == "precision"]
