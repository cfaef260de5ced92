#!/usr/bin/env python3
"""Regenerate every committed report from its run records, plain and packed, and compare.

    python3 scripts/regenerate_reports.py docs/results        # a Markdown table on stdout

The tree is copied twice into a scratch folder: once with every ``records.tar.xz`` unpacked
(``parallax results unpack``), once with every benchmark folder (one holding matrix.json)
packed (``parallax results pack``). In each copy, every ``report.json`` is rebuilt with
``parallax compare`` and every ``crossover.json`` with ``parallax crossover``, from the folder
and with the arguments the report records (an absolute path of the GPU machine is made to exist
as a link to the copy). The table says, for each report, whether the plain rebuild equals the
committed files and whether the packed rebuild equals the plain one. Only the report's
"generated <time>" is left out of the comparison. Exit status 1 when a packed rebuild differs
from its plain one: that is what packing must never change.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from parallax.store.archive import ARCHIVE_FILE, pack, packable, unpack

GENERATED = re.compile(rb"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")


def normalised(path: Path) -> bytes | None:
    return GENERATED.sub(b"generated <time>", path.read_bytes()) if path.is_file() else None


def report_files(folder: Path, kind: str) -> list[str]:
    """The files of one report, relative to its folder."""
    if kind == "compare":
        return ["report.md", "report.json", "report.csv",
                *sorted(p.relative_to(folder).as_posix() for p in (folder / "plots").glob("*.png"))]
    return ["crossover.md", "crossover.json", "crossover.png"]


def where_to_run(folder: Path, recorded: list[str], top: Path) -> Path:
    """The folder to run in so that each recorded path names what it named (``top`` is the copy's
    repository root, holding docs/results)."""
    for candidate in [folder, *folder.parents]:
        if all(Path(r).is_absolute() or (candidate / r).is_dir() for r in recorded):
            own = len(recorded) > 1 or Path(recorded[0]).is_absolute() or (candidate / recorded[0]).resolve() == folder
            if own and (candidate == top or top in candidate.parents):
                return candidate
    raise SystemExit(f"{folder}: the recorded folders {recorded} are not in the copy")


def link_absolute(recorded: str, target: Path) -> None:
    """Make an absolute path of the GPU machine (/tmp/...) name ``target``."""
    path = Path(recorded)
    if path.is_symlink():
        path.unlink()
    if path.exists():
        raise SystemExit(f"{path} exists on this machine; cannot stand in for the recorded folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target, target_is_directory=True)


def rebuild(top: Path, report: Path, out: Path, extra: tuple[str, ...] = ()) -> bool:
    """Rebuild one report (its report.json or crossover.json) into ``out``; whether it ran."""
    import json

    record, folder = json.loads(report.read_text()), report.parent
    if report.name == "report.json":
        recorded = [record["results_dir"]]
        args = ["compare", "--results-dir", recorded[0], "--output-report", str(out / "report.md")]
    else:
        recorded = record["results_dirs"]
        args = ["crossover", *recorded, "--output-dir", str(out)]
    args += extra
    absolute = [r for r in recorded if Path(r).is_absolute()]
    for r in absolute:
        link_absolute(r, folder)
    try:
        done = subprocess.run([sys.executable, "-m", "parallax", *args], cwd=where_to_run(folder, recorded, top),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finally:
        for r in absolute:
            Path(r).unlink()
    return done.returncode == 0


def copy_tree(results: Path, scratch: Path, name: str) -> Path:
    """A copy of the repository's docs/results; returns the copy's root."""
    top = scratch / name
    shutil.copytree(results, top / "docs" / "results", symlinks=True)
    return top


def main(results: Path) -> int:
    results = results.resolve()
    reports = sorted([*results.rglob("report.json"), *results.rglob("crossover.json")])
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        plain, packed = copy_tree(results, scratch, "plain"), copy_tree(results, scratch, "packed")
        for archive in sorted((plain / "docs" / "results").rglob(ARCHIVE_FILE)):
            unpack(archive.parent)
        for matrix in sorted((packed / "docs" / "results").rglob("matrix.json")):
            if packable(matrix.parent)[0]:
                pack(matrix.parent)
        rows, broken = [], 0
        for report in reports:
            rel = report.parent.relative_to(results)
            kind = "compare" if report.name == "report.json" else "crossover"
            outs, extra = {}, ()
            for name, top in (("plain", plain), ("packed", packed)):
                outs[name] = scratch / f"out-{name}" / rel
                source = top / "docs" / "results" / rel / report.name
                if not rebuild(top, source, outs[name], extra) and not extra:
                    # a report made before the rule that refuses ratios between machines
                    extra = ("--cross-machine",)
                    rebuild(top, source, outs[name], extra)
            files = report_files(report.parent, kind)
            committed = [f for f in files if normalised(outs["plain"] / f) != normalised(report.parent / f)]
            # a plot with nothing to show is left out of both rebuilds (its committed copy is older)
            changed = [f for f in files if normalised(outs["packed"] / f) != normalised(outs["plain"] / f)
                       or (normalised(outs["plain"] / f) is None and not f.startswith("plots/"))]
            broken += bool(changed)
            rows.append(f"| {rel} | {' '.join([kind, *extra])} | {'identical' if not committed else 'differs: ' + ', '.join(committed)} "
                        f"| {'identical' if not changed else 'DIFFERS: ' + ', '.join(changed)} |")
    print("| report folder | command | plain rebuild vs committed | packed rebuild vs plain rebuild |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/results")))
