"""scripts/check_results_index.py: docs/results/INDEX.md lists every results folder, in date order."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_results_index.py"


def load_script():
    spec = importlib.util.spec_from_file_location("check_results_index", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(not (ROOT / "docs" / "results").is_dir(), reason="no docs/results in this tree (an sdist)")
def test_the_committed_index_lists_every_results_folder():
    check = load_script()
    assert check.problems(ROOT / "docs" / "results") == []
    assert len(check.rows((ROOT / "docs" / "results" / "INDEX.md").read_text())) == len(
        check.folders(ROOT / "docs" / "results"))


def index(tmp_path, *lines):
    (tmp_path / "INDEX.md").write_text("| date | folder |\n|---|---|\n" + "".join(f"{line}\n" for line in lines))


def test_a_folder_without_a_row_a_row_without_a_folder_and_a_repeat_are_named(tmp_path):
    for name in ("2026-01-01-cpu", "2026-01-02-h200"):
        (tmp_path / name).mkdir()
    index(tmp_path, "| 2026-01-01 | [2026-01-01-cpu](2026-01-01-cpu/README.md) |",
          "| 2026-01-01 | [2026-01-01-cpu](2026-01-01-cpu/README.md) |",
          "| 2026-01-03 | [2026-01-03-gone](2026-01-03-gone/README.md) |")
    found = load_script().problems(tmp_path)
    assert found == [f"{tmp_path / 'INDEX.md'}: no row for 2026-01-02-h200/; add one",
                     f"{tmp_path / 'INDEX.md'}: a row for 2026-01-03-gone, which is not a folder of {tmp_path}",
                     f"{tmp_path / 'INDEX.md'}: 2026-01-01-cpu is listed 2 times"]


def test_rows_out_of_date_order_or_misdated_are_refused(tmp_path):
    for name in ("2026-01-01-cpu", "2026-01-02-h200"):
        (tmp_path / name).mkdir()
    index(tmp_path, "| 2026-01-02 | [2026-01-02-h200](2026-01-02-h200/README.md) |",
          "| 2026-01-02 | [2026-01-01-cpu](2026-01-01-cpu/README.md) |")
    found = load_script().problems(tmp_path)
    assert found == [f"{tmp_path / 'INDEX.md'}: 2026-01-01-cpu is dated 2026-01-02 but its name says otherwise"]
    index(tmp_path, "| 2026-01-02 | [2026-01-02-h200](2026-01-02-h200/README.md) |",
          "| 2026-01-01 | [2026-01-01-cpu](2026-01-01-cpu/README.md) |")
    assert load_script().problems(tmp_path) == [f"{tmp_path / 'INDEX.md'}: rows are not sorted by date"]


def test_a_missing_index_says_what_to_write(tmp_path):
    (tmp_path / "2026-01-01-cpu").mkdir()
    assert load_script().problems(tmp_path) == [f"{tmp_path / 'INDEX.md'}: missing; write one row per results folder"]
    assert load_script().main([str(tmp_path)]) == 1
