"""A full disk (ENOSPC) and a read-only file system (EROFS) for each writer of Parallax: one
line naming the path and what it needs, exit 2, no half record and no temporary file left.
The failure is injected at the one writer's flush (``fixtures/full_disk.py``); CI has no tmpfs."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from fixtures.cli import one_error_line
from fixtures.fake_runs import generated_steps, tiny_config, write_ok_run
from fixtures.full_disk import fail_writes_under
from fixtures.matrix import fake_command

from parallax.cli import main
from parallax.errors import ParallaxError
from parallax.run import runner

TRAIN = ["train", "--model", "tiny", "--device", "cpu", "--no-compile", "--batch-size", "2", "--seq-len", "16",
         "--steps", "3", "--warmup", "1"]
BENCH = ["benchmark", "--frameworks", "torch", "--precisions", "bf16", "--model", "tiny", "--batch-size", "2",
         "--seq-len", "16", "--steps", "4", "--warmup", "1", "--device", "cpu", "--no-compile"]
NEEDS = {errno.ENOSPC: "the disk is full", errno.EROFS: "the file system is read-only"}
CODES = pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])


def error_line(capsys) -> str:
    """The one ``parallax: error:`` line, last on stderr after any progress, and no traceback."""
    err = capsys.readouterr().err.strip().splitlines()
    assert not any("Traceback" in row for row in err), err
    assert [row for row in err if row.startswith("parallax: error: ")] == err[-1:], err
    return err[-1]


def leftovers(root) -> list[str]:
    """Temporary files of the writer, probes, and steps without their run.json."""
    found = [str(p) for p in root.rglob(".*") if p.is_file() and p.name != ".parallax.lock"]
    return found + [str(p) for p in root.rglob("steps.jsonl") if not (p.parent / "run.json").exists()]


@CODES
def test_train_refuses_a_full_folder_before_it_starts(tmp_path, capsys, monkeypatch, code):
    fail_writes_under(monkeypatch, tmp_path, code)
    assert main([*TRAIN, "--output-dir", str(tmp_path / "run")]) == 2
    line = one_error_line(capsys)
    assert f"'{tmp_path / 'run'}' is not writable" in line and "--output-dir" in line
    assert list(tmp_path.iterdir()) == []


@CODES
def test_train_whose_disk_fills_while_it_runs_leaves_no_half_record(tmp_path, capsys, monkeypatch, code):
    fail_writes_under(monkeypatch, tmp_path, code, probes=False)
    assert main([*TRAIN, "--output-dir", str(tmp_path / "run")]) == 2
    line = error_line(capsys)
    assert line.startswith(f"parallax: error: cannot write {tmp_path / 'run'}") and NEEDS[code] in line
    assert leftovers(tmp_path) == [] and not (tmp_path / "run" / "run.json").exists()


@CODES
def test_benchmark_on_a_disk_that_fills_is_one_line(tmp_path, capsys, monkeypatch, code):
    monkeypatch.setattr(runner, "train_command", fake_command)
    monkeypatch.setattr(runner, "collect_environment", lambda: {"python": "3.x", "gpus": []})
    monkeypatch.setenv("FAKE_TRAIN_PLAN", "{}")
    fail_writes_under(monkeypatch, tmp_path, code, probes=False)
    assert main([*BENCH, "--output-dir", str(tmp_path / "bench")]) == 2
    line = error_line(capsys)
    assert f"cannot write {tmp_path / 'bench'}" in line and NEEDS[code] in line
    assert leftovers(tmp_path) == []


@pytest.fixture
def results_dir(tmp_path):
    for framework in ("torch", "jax"):
        run = tiny_config(framework=framework)
        write_ok_run(tmp_path / "results" / "runs" / framework, run, generated_steps(run))
    return tmp_path / "results"


@CODES
def test_compare_report_on_a_full_disk_leaves_no_empty_plot(tmp_path, results_dir, capsys, monkeypatch, code):
    pytest.importorskip("matplotlib")
    out = tmp_path / "report"
    fail_writes_under(monkeypatch, out, code, probes=False)
    assert main(["compare", "--results-dir", str(results_dir), "--output-report", str(out / "r.md"),
                 "--bootstraps", "100"]) == 2
    line = error_line(capsys)
    assert line.startswith(f"parallax: error: cannot write {out}") and NEEDS[code] in line
    assert not out.exists()  # no empty plots/ and no 0-byte PNG: the folders made for it went with it


def test_compare_never_writes_onto_what_it_reads(results_dir, capsys):
    for target in (results_dir / "runs" / "torch" / "run.json", results_dir / "runs" / "torch" / "run.md"):
        before = (results_dir / "runs" / "torch" / "steps.jsonl").read_bytes(), target.exists()
        assert main(["compare", "--results-dir", str(results_dir), "--output-report", str(target)]) == 2
        assert "would replace a file this command reads" in one_error_line(capsys)
        assert (results_dir / "runs" / "torch" / "steps.jsonl").read_bytes() == before[0]


def test_a_report_named_json_is_refused(results_dir, tmp_path, capsys):
    assert main(["compare", "--results-dir", str(results_dir), "--output-report", str(tmp_path / "r.json")]) == 2
    assert "--output-report" in one_error_line(capsys)


@CODES
def test_data_prepare_on_a_full_disk_leaves_no_staging(tmp_path, capsys, monkeypatch, code):
    pytest.importorskip("tokenizers")
    from fixtures.samples import TRAIN as STORIES

    fail_writes_under(monkeypatch, tmp_path, code, probes=False)
    assert main(["data", "prepare", str(STORIES), "--out", str(tmp_path / "data"), "-q",
                 "--vocab-size", "300", "--tokenizer-sample-mb", "0.05"]) == 2
    line = error_line(capsys)
    assert f"cannot write {tmp_path / 'data'}" in line and NEEDS[code] in line
    assert list(tmp_path.iterdir()) == []


@CODES
def test_export_configs_on_a_full_disk(tmp_path, capsys, monkeypatch, code):
    fail_writes_under(monkeypatch, tmp_path, code, probes=False)
    assert main(["export-configs", "--output-dir", str(tmp_path / "yml"), "--model", "tiny"]) == 2
    line = error_line(capsys)
    assert line.startswith(f"parallax: error: cannot write {tmp_path / 'yml'}") and NEEDS[code] in line
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
    assert not (tmp_path / "yml").exists()


def test_export_configs_whose_disk_fills_half_way_leaves_no_file(tmp_path, capsys, monkeypatch):
    from parallax.store import files

    real, seen = files._sync, []

    def third_fails(fd, path):  # two files go through, the third finds the disk full
        if not path.rsplit("/", 1)[-1].startswith(".parallax-probe."):
            seen.append(path)
            if len(seen) == 3:
                raise OSError(errno.ENOSPC, "No space left on device", path)
        real(fd, path)

    monkeypatch.setattr(files, "_sync", third_fails)
    assert main(["export-configs", "--output-dir", str(tmp_path / "yml"), "--model", "tiny"]) == 2
    assert "the disk is full" in error_line(capsys)
    assert not (tmp_path / "yml").exists()


@CODES
def test_results_pack_and_unpack_of_a_folder_that_cannot_take_files(results_dir, capsys, monkeypatch, code):
    before = {p: p.read_bytes() for p in results_dir.rglob("*") if p.is_file()}
    with monkeypatch.context() as patch:
        fail_writes_under(patch, results_dir, code)
        assert main(["results", "pack", str(results_dir)]) == 2
        assert f"folder '{results_dir}' is not writable" in one_error_line(capsys)
    assert {p: p.read_bytes() for p in results_dir.rglob("*") if p.is_file()} == before
    assert main(["results", "pack", str(results_dir)]) == 0
    capsys.readouterr()
    with monkeypatch.context() as patch:
        fail_writes_under(patch, results_dir, code)
        assert main(["results", "unpack", str(results_dir)]) == 2
        assert f"folder '{results_dir}' is not writable" in one_error_line(capsys)
    assert (results_dir / "records.tar.xz").exists()


def test_unpack_of_a_folder_without_an_archive_is_one_line(tmp_path, capsys):
    assert main(["results", "unpack", str(tmp_path)]) == 2
    assert one_error_line(capsys) == (f"parallax: error: {tmp_path} holds no records.tar.xz; nothing to unpack "
                                      "(name a folder 'parallax results pack' packed)")


# --- never onto what is there without asking ---

def test_profile_keeps_a_profile_without_overwrite(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("parallax.run.profile.profile_run", lambda *a, **k: pytest.fail("the work started"))
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "profile.json").write_text("{}")
    assert main(["profile", "--model", "tiny", "--device", "cpu", "--output-dir", str(tmp_path / "p")]) == 2
    assert one_error_line(capsys) == (f"parallax: error: {tmp_path / 'p'} already holds a profile (profile.json); "
                                      "pass --overwrite to replace it, or pick a fresh --output-dir")


def test_benchmark_into_a_train_runs_folder_is_refused_before_any_cell(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "train_command", lambda *a: pytest.fail("a cell ran"))
    run = tiny_config()
    write_ok_run(tmp_path / "run", run, generated_steps(run))
    assert main([*BENCH, "--output-dir", str(tmp_path / "run")]) == 2
    assert one_error_line(capsys) == (f"parallax: error: {tmp_path / 'run'} holds a train run (run.json); pick a "
                                      "fresh --output-dir")
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["run.json", "steps.jsonl"]


@pytest.mark.parametrize("value", ["-1", "0", "x"])
def test_a_bad_process_count_is_one_line(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv("PARALLAX_NUM_PROCESSES", value)
    assert main([*TRAIN, "--output-dir", str(tmp_path / "run")]) == 2
    assert "PARALLAX_NUM_PROCESSES" in one_error_line(capsys)


def test_a_host_of_several_keeps_the_run_there_without_overwrite(tmp_path, capsys, monkeypatch):
    run = tiny_config()
    write_ok_run(tmp_path / "run", run, generated_steps(run))
    before = (tmp_path / "run" / "run.json").read_bytes()
    monkeypatch.setenv("PARALLAX_NUM_PROCESSES", "2")
    monkeypatch.setattr("parallax.run.train.run_training", lambda *a, **k: pytest.fail("the run started"))
    assert main([*TRAIN, "--framework", "jax", "--output-dir", str(tmp_path / "run")]) == 2
    assert "already holds a run (run.json); pass --overwrite" in one_error_line(capsys)
    assert (tmp_path / "run" / "run.json").read_bytes() == before


def test_results_pack_of_a_train_run_moves_nothing(tmp_path, capsys):
    run = tiny_config()
    write_ok_run(tmp_path / "run", run, generated_steps(run))
    (tmp_path / "run" / "notes.txt").write_text("mine")
    (tmp_path / "run" / "link").symlink_to(tmp_path / "run" / "notes.txt")
    assert main(["results", "pack", str(tmp_path / "run")]) == 2
    assert "holds one train run (run.json), not a benchmark" in one_error_line(capsys)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["link", "notes.txt", "run.json", "steps.jsonl"]


def test_a_benchmark_whose_every_cell_train_refuses_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(runner, "train_command", fake_command)
    monkeypatch.setattr(runner, "collect_environment", lambda: {"python": "3.x", "gpus": []})
    monkeypatch.setenv("FAKE_TRAIN_PLAN", '{"*": "skip"}')
    assert main([*BENCH, "--output-dir", str(tmp_path / "b")]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("parallax: error: every cell was refused, nothing was measured; the first: torch")


def test_a_full_disk_met_outside_the_writer_is_still_one_line(results_dir, capsys, monkeypatch):
    """A write that a new helper makes without store/files.py (the net in parallax.cli.main)."""
    def full(root):
        raise OSError(errno.ENOSPC, "No space left on device", str(root / "new.bin"))

    monkeypatch.setattr("parallax.store.archive.pack", full)
    assert main(["results", "pack", str(results_dir)]) == 2
    assert one_error_line(capsys) == (f"parallax: error: cannot write {results_dir / 'new.bin'}: the disk is full; "
                                      "free space there or choose another folder")


PROC = "/proc/parallax-cannot-be-made"  # os.access says root may write there; a write says no


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("argv", [
    [*TRAIN, "--output-dir", PROC],
    [*BENCH, "--output-dir", PROC],
    ["profile", "--model", "tiny", "--device", "cpu", "--output-dir", PROC],
    ["crossover", ".", "--output-dir", PROC],
    ["data", "prepare", "corpus.txt", "--out", PROC],
    ["export-configs", "--model", "tiny", "--output-dir", PROC],
    ["parity", "--json", f"{PROC}/parity.json"],
], ids=["train", "benchmark", "profile", "crossover", "data", "export-configs", "parity"])
def test_a_folder_under_proc_is_one_line(argv, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert PROC in one_error_line(capsys)


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("variable", ["PARALLAX_CACHE_DIR", "XDG_CACHE_HOME", "HOME"])
def test_a_cache_folder_that_cannot_be_made_is_one_line(variable, monkeypatch):
    from parallax.store.cache import cache_root

    for name in ("PARALLAX_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, PROC)
    with pytest.raises(ParallaxError, match=rf"^the cache folder {PROC}\S* \(from {variable}\) is not writable"):
        cache_root()
