"""A benchmark's run records packed into records.tar.xz read exactly as the plain files did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.fake_runs import generated_steps, tiny_config, write_ok_run
from fixtures.matrix import fake_command, small_matrix

from parallax.store import archive, results
from parallax.run import runner
from parallax.store.archive import ARCHIVE_FILE, CorruptArchive, pack, read_record, unpack
from parallax.cli import main
from parallax.analysis.compare import build_comparison
from parallax.store.results import load_steps, write_run


class Warnings(runner.NullDisplay):
    def __init__(self):
        self.seen = []

    def warning(self, text):
        self.seen.append(text)


def run_matrix(out: Path, matrix, monkeypatch, **kw):
    monkeypatch.setenv("FAKE_TRAIN_PLAN", "{}")
    return runner.run_matrix(matrix, out, command_for=fake_command, poll_s=0.05, environment=lambda: {"fake": True},
                             **kw)


def make_benchmark(root: Path) -> Path:
    """Two ok torch runs and two jax runs with known steps, a failed MaxText run with its data
    indices and a link to the machine's token file, as a benchmark leaves them."""
    for framework in ("torch", "jax"):
        for seed in (0, 1):
            run_dir = root / "runs" / f"{framework}-bf16-seed{seed}-rep0"
            run = tiny_config(framework=framework, seed=seed)
            write_ok_run(run_dir, run, generated_steps(run))
            (run_dir / "config.json").write_text(json.dumps(run.to_dict()))
            (run_dir / "run.log").write_text(f"{framework} seed {seed}\n")
    failed = root / "runs" / "maxtext-bf16-seed0-rep0"
    write_run(failed, {"status": "failed", "error": "killed", "config": tiny_config().to_dict()})
    (failed / "run.log").write_bytes(b"")
    (failed / "maxtext" / "data" / "npy").mkdir(parents=True)
    (failed / "maxtext" / "data" / "npy" / "a-sample_index.npy").write_bytes(bytes(range(256)) * 3)
    (failed / "maxtext" / "data" / "train.bin").symlink_to("/nonexistent/carry/train.bin")
    (root / "matrix.json").write_text("{}\n")
    return root


def files_of(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json"))


def test_packed_records_read_back_exactly_as_the_plain_files(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    plain = {d: (load_steps(d), read_record(d, "run.log")) for d in run_dirs(bench) if d.name != "maxtext-bf16-seed0-rep0"}
    before = files_of(bench)
    done = pack(bench)
    assert done["packed"] == done["members"] == 10 and done["links"] == [
        f"{bench}/runs/maxtext-bf16-seed0-rep0/maxtext/data/train.bin -> /nonexistent/carry/train.bin"]
    kept = [f"runs/{f}-bf16-seed{s}-rep0/{name}" for f in ("jax", "torch") for s in (0, 1)
            for name in ("config.json", "run.json")]
    assert sorted(p.relative_to(bench).as_posix() for p in bench.rglob("*") if p.is_file()) == [
        "matrix.json", "records.tar.xz", *kept[:4], "runs/maxtext-bf16-seed0-rep0/run.json", *kept[4:]]
    assert {d: (load_steps(d), read_record(d, "run.log")) for d in plain} == plain
    steps = load_steps(bench / "runs" / "jax-bf16-seed1-rep0")
    expected = generated_steps(tiny_config(framework="jax", seed=1))
    assert [s["loss"] for s in steps] == [s["loss"] for s in expected] and steps[5]["step_ms"] == expected[5]["step_ms"]
    assert read_record(bench / "runs" / "maxtext-bf16-seed0-rep0", "maxtext/data/npy/a-sample_index.npy") == \
        bytes(range(256)) * 3
    unpack(bench)
    assert files_of(bench) == before and not (bench / ARCHIVE_FILE).exists()


def test_compare_builds_the_same_record_from_packed_records(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    plain = build_comparison(bench, n_boot=200)
    pack(bench)
    assert json.dumps(build_comparison(bench, n_boot=200), sort_keys=True) == json.dumps(plain, sort_keys=True)


def test_a_missing_record_is_missing_packed_or_plain(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    pack(bench)
    with pytest.raises(FileNotFoundError) as caught:
        read_record(bench / "runs" / "maxtext-bf16-seed0-rep0", "steps.jsonl")
    assert caught.value.filename == str(bench / "runs" / "maxtext-bf16-seed0-rep0" / "steps.jsonl")


def test_a_plain_file_written_after_the_pack_wins_and_packs_again(tmp_path):
    bench = make_benchmark(tmp_path / "bench")
    pack(bench)
    first = (bench / ARCHIVE_FILE).read_bytes()
    run_dir = bench / "runs" / "torch-bf16-seed0-rep0"
    (run_dir / "run.log").write_text("rewritten\n")
    assert read_record(run_dir, "run.log") == b"rewritten\n"
    done = pack(bench)
    assert (done["packed"], done["members"]) == (1, 10) and not (run_dir / "run.log").exists()
    assert read_record(run_dir, "run.log") == b"rewritten\n"
    (run_dir / "run.log").write_text("torch seed 0\n")
    pack(bench)
    assert (bench / ARCHIVE_FILE).read_bytes() == first  # the same files give the same bytes


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_corrupt_archive_is_one_line_naming_it_and_loses_nothing(tmp_path, damage):
    bench = make_benchmark(tmp_path / "bench")
    pack(bench)
    path = bench / ARCHIVE_FILE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"not an archive" + data[14:])
    damaged = path.read_bytes()
    (bench / "runs" / "torch-bf16-seed0-rep0" / "run.log").write_text("plain\n")
    for attempt in (lambda: load_steps(bench / "runs" / "jax-bf16-seed0-rep0"), lambda: pack(bench),
                    lambda: unpack(bench)):
        with pytest.raises(CorruptArchive) as caught:
            attempt()
        message = str(caught.value)
        assert "\n" not in message
        assert message.startswith(f"{path}: corrupt or truncated archive (")
        assert message.endswith(f"restore it (git checkout -- {path}) or re-run the benchmark")
    assert path.read_bytes() == damaged
    assert (bench / "runs" / "torch-bf16-seed0-rep0" / "run.log").read_text() == "plain\n"
    assert sorted(p.name for p in (bench / "runs" / "jax-bf16-seed0-rep0").iterdir()) == ["config.json", "run.json"]


def test_compare_on_a_corrupt_archive_fails_with_one_line(tmp_path, capsys):
    bench = make_benchmark(tmp_path / "bench")
    pack(bench)
    path = bench / ARCHIVE_FILE
    path.write_bytes(path.read_bytes()[:100])
    assert main(["compare", "--results-dir", str(bench), "--bootstraps", "100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"parallax: error: {path}: corrupt or truncated archive (")


def test_results_pack_and_unpack_commands(tmp_path, capsys):
    bench = make_benchmark(tmp_path / "bench")
    before = files_of(bench)
    assert main(["results", "pack", str(bench)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"removed the link {bench}/runs/maxtext-bf16-seed0-rep0/maxtext/data/train.bin -> "
                      "/nonexistent/carry/train.bin: not a result")
    assert out[1].startswith(f"{bench / ARCHIVE_FILE}: 10 files (10 added), ")
    assert not (bench / "runs" / "maxtext-bf16-seed0-rep0" / "maxtext").exists()  # emptied folders go
    assert main(["results", "unpack", str(bench)]) == 0
    assert capsys.readouterr().out == f"{bench / ARCHIVE_FILE}: 10 of 10 files written back; archive deleted\n"
    assert files_of(bench) == before  # the commands held the benchmark's lock and removed it


def test_pack_refuses_a_folder_without_runs(tmp_path, capsys):
    assert main(["results", "pack", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"parallax: error: {tmp_path} holds no run records to pack; "
                                       "name a benchmark's --output-dir\n")


def test_a_resumed_packed_benchmark_keeps_its_finished_runs(tmp_path, monkeypatch):
    out, calls = tmp_path / "out", tmp_path / "calls.txt"
    one_seed = small_matrix(recipes=("bf16",), frameworks=("torch",))
    run_matrix(out, one_seed, monkeypatch)
    finished = out / "runs" / "torch-bf16-seed0-rep0"
    steps, run_json = load_steps(finished), (finished / "run.json").read_text()
    pack(out)
    monkeypatch.setenv("FAKE_TRAIN_CALLS", str(calls))
    shown = Warnings()
    two_seeds = small_matrix(recipes=("bf16",), frameworks=("torch",), seeds=(0, 1))
    cells = run_matrix(out, two_seeds, monkeypatch, resume=True, display=shown)
    assert {c.cell.id: (c.status, c.reused) for c in cells} == {
        "torch-bf16-seed0-rep0": ("ok", True), "torch-bf16-seed1-rep0": ("ok", False)}
    assert calls.read_text().splitlines() == ["torch bf16 1"]
    assert load_steps(finished) == steps and (finished / "run.json").read_text() == run_json
    assert (finished / "steps.jsonl").is_file() and not (out / ARCHIVE_FILE).exists()
    assert shown.seen[1:] == [f"unpacked {ARCHIVE_FILE} to run the rest; pack it again with "
                          f"'parallax results pack {out.resolve()}'"]
    pack(out)
    assert [len(load_steps(c.run_dir)) for c in cells] == [12, 12]


def test_the_files_kept_plain_are_the_results_names():
    assert archive.KEPT_PLAIN == (results.RUN_FILE, results.CONFIG_FILE)


RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_every_committed_benchmark_is_packed_and_has_no_links():
    unpacked = [m.parent.relative_to(RESULTS).as_posix() for m in sorted(RESULTS.rglob("matrix.json"))
                if archive.packable(m.parent) != ({}, [])]
    assert unpacked == [], "run 'parallax results pack' on these folders before committing them"
    assert [p for p in RESULTS.rglob("*") if p.is_symlink()] == []


def test_a_committed_report_rebuilds_from_its_packed_records(tmp_path, monkeypatch):
    from parallax.analysis.report import export

    folder = RESULTS / "2026-12-03-h200"
    assert (folder / "crossover" / "llama-330m" / ARCHIVE_FILE).is_file()
    monkeypatch.chdir(folder)  # the report records the folder as it was named
    export.write_json(build_comparison(Path("crossover/llama-330m")), tmp_path / "report.json")
    assert (tmp_path / "report.json").read_text() == (folder / "crossover" / "llama-330m" / "report.json").read_text()
