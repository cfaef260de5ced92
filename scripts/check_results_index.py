#!/usr/bin/env python3
"""Check that docs/results/INDEX.md lists every results folder once, names no folder that is not
there, and keeps its rows sorted by date.

    python3 scripts/check_results_index.py [docs/results]

A row of the index is a table line whose second cell links the folder: ``| DATE | [NAME](NAME/...) |``.
Exit 1 with one line per problem; nothing printed and exit 0 when the index is complete.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROW = re.compile(r"^\|\s*(\d{4}-\d{2}-\d{2})\s*\|\s*\[([^\]]+)\]\(")


def folders(root: Path) -> list[str]:
    """The results folders: every directory directly under root."""
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def rows(index: str) -> list[tuple[str, str]]:
    """(date, folder) of every row of the index, in the order written."""
    return [m.groups() for m in map(ROW.match, index.splitlines()) if m]


def problems(root: Path) -> list[str]:
    """What is wrong with root/INDEX.md; empty when every folder is listed once, in date order."""
    path = root / "INDEX.md"
    if not path.is_file():
        return [f"{path}: missing; write one row per results folder"]
    listed = rows(path.read_text())
    names = [name for _, name in listed]
    present = folders(root)
    found = [f"{path}: no row for {name}/; add one" for name in present if name not in names]
    found += [f"{path}: a row for {name}, which is not a folder of {root}" for name in sorted(set(names) - set(present))]
    found += [f"{path}: {name} is listed {names.count(name)} times" for name in sorted(set(names)) if names.count(name) > 1]
    found += [f"{path}: {name} is dated {date} but its name says otherwise" for date, name in listed
              if re.match(r"\d{4}-\d{2}-\d{2}", name) and not name.startswith(date)]
    dates = [date for date, _ in listed]
    if dates != sorted(dates):
        found.append(f"{path}: rows are not sorted by date")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1] / "docs" / "results"
    found = problems(root)
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
