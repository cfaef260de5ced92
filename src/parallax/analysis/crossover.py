"""Where fp8 starts to pay: each low-precision recipe's speedup over its framework's bf16, at
every model size benchmarked.

A benchmark of a model preset (``parallax benchmark --model llama-330m ...``) gives one
comparison record (``compare.build_comparison``) whose speedups already carry their bootstrap
CIs; this module lines them up by model size. It computes nothing new: the ratios and intervals
are the records' own, so a speedup's recipe and its bf16 baseline always come from one benchmark
(one machine). A preset may take several benchmarks (one that lacked a recipe, and a later one
that measured it beside fresh bf16 twins), as long as no speedup is in two of them."""

from __future__ import annotations

from pathlib import Path

from parallax.spec.config import get_preset
from parallax.errors import ParallaxError

SCHEMA = "parallax.crossover/1"


def crossover(results_dirs: list[Path], n_boot: int, level: float, cross_machine: bool = False) -> dict:
    """The crossover record of several benchmark folders, one model preset each or more. Each
    folder's ratios are judged as ``parallax compare`` judges them (like cells only; with
    ``cross_machine`` its cross-machine speedups are rows too, marked)."""
    from parallax.analysis.compare import build_comparison

    _refuse_a_folder_named_twice(results_dirs)
    records = [build_comparison(Path(d), n_boot=n_boot, level=level, cross_machine=cross_machine)
               for d in results_dirs]
    models = [_model_of(r, d) for r, d in zip(records, results_dirs)]
    rows = [row for record, model, d in zip(records, models, results_dirs)
            for row in speedup_rows(record, model, str(d))]
    _refuse_twice_measured(rows)
    _refuse_nothing_to_compare(rows, records, results_dirs)
    rows.sort(key=lambda r: (r["framework"], r["recipe"], r["gpus"], r["parameters"], r["baseline"]))
    return {"schema": SCHEMA, "level": level, "results_dirs": [str(d) for d in results_dirs],
            "models": sorted(({"model": m, "parameters": get_preset(m).param_count()} for m in set(models)),
                             key=lambda m: m["parameters"]),
            "rows": rows, "problems": [p for r in records for p in r["problems"]],
            "excluded": [{**e, "results_dir": str(d)} for r, d in zip(records, results_dirs) for e in r["excluded"]]}


def _refuse_a_folder_named_twice(results_dirs: list[Path]) -> None:
    """The same folder twice would count every speedup in it twice (and pass the check below)."""
    named = [Path(d).resolve() for d in results_dirs]
    twice = next((d for d, r in zip(results_dirs, named) if named.count(r) > 1), None)
    if twice is not None:
        raise ParallaxError(f"the results folder {twice} is named twice; name each folder once")


def _key(row: dict) -> tuple:
    return row["model"], row["framework"], row["recipe"], row["baseline"], row["gpus"]


def _refuse_twice_measured(rows: list[dict]) -> None:
    """One speedup per preset: a recipe over its baseline found in two folders is ambiguous."""
    seen: dict[tuple, str] = {}
    for row in rows:
        first = seen.setdefault(_key(row), row["results_dir"])
        if first != row["results_dir"]:
            raise ParallaxError(
                f"{row['model']}: {row['framework']} {row['recipe']} over {row['baseline']} is in both {first} and "
                f"{row['results_dir']}; give each speedup's cells in one folder")


def _refuse_nothing_to_compare(rows: list[dict], records: list[dict], results_dirs: list[Path]) -> None:
    """No speedup in any folder would be an empty table and an empty plot: say why instead."""
    if rows:
        return
    problems = [p for r in records for p in r["problems"]]
    why = f"first problem: {problems[0]}" if problems else (
        "each holds no low-precision recipe beside its framework's bf16; benchmark both, e.g. "
        "parallax benchmark --precisions bf16,fp8")
    raise ParallaxError(f"no speedup over bf16 to line up in {', '.join(map(str, results_dirs))}; {why}")


def _model_of(record: dict, results_dir: Path) -> str:
    model = (record.get("config") or {}).get("model")
    if not model:
        raise ParallaxError(f"{results_dir} holds no finished run to read its model from; run the benchmark first")
    return model


def speedup_rows(record: dict, model: str, results_dir: str) -> list[dict]:
    """The record's recipe-over-bf16 speedups, with the model they were measured on, the folder
    they came from (and the GPU count, a speedup being between cells of one count)."""
    parameters = get_preset(model).param_count()
    data = "synthetic" if (record.get("config") or {}).get("synthetic") else "real"
    cross = (record.get("cross_machine") or {}).get("speedups") or []
    return [{"model": model, "parameters": parameters, "framework": s["framework"], "recipe": s["a"],
             "gpus": s.get("gpus", 1), "results_dir": results_dir, "data": data,
             "machine": " / ".join(dict.fromkeys(m for m in s.get("machines") or [] if m)) or None,
             "cross_machine": bool(s.get("cross_machine")),
             "baseline": s["b"], "ratio": s["ratio"], "ci": s["ci"], "distinguishable": s["distinguishable"]}
            for s in record["speedups"] + cross if s["kind"] == "precision"]
