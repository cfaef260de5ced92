"""The TinyStories sample inside the package: there, and exactly the bytes SOURCE.md describes."""

from __future__ import annotations

import hashlib
import re

from parallax.data import sample

EOT_LINE = "<|endoftext|>"


def documented() -> dict[str, tuple[int, int, str]]:
    """SOURCE.md's table: file name -> (bytes, stories, sha256)."""
    rows = {}
    for line in sample.SOURCE.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\| `([\w.]+)` \| ([\d,]+) \| (\d+) \| .* \| ([0-9a-f]{64}) \|$", line)
        if match:
            name, size, stories, sha = match.groups()
            rows[name] = (int(size.replace(",", "")), int(stories), sha)
    return rows


def test_the_sample_files_are_in_the_package():
    assert sample.SAMPLE_DIR.is_dir() and sample.SAMPLE_DIR.parent.name == "data"
    assert sorted(p.name for p in sample.SAMPLE_DIR.iterdir()) == ["SOURCE.md", "train.txt", "valid.txt"]
    assert sample.TRAIN.name == "train.txt" and sample.VALID.name == "valid.txt"
    assert "CDLA-Sharing-1.0" in sample.SOURCE.read_text() and "CDLA-Sharing-1.0" in sample.__doc__


def test_bytes_and_hashes_are_the_documented_ones():
    rows = documented()
    assert sorted(rows) == ["train.txt", "valid.txt"]
    for path in (sample.TRAIN, sample.VALID):
        size, _, sha = rows[path.name]
        raw = path.read_bytes()
        assert len(raw) == size
        assert hashlib.sha256(raw).hexdigest() == sha


def test_story_counts_are_the_documented_ones():
    rows = documented()
    assert (rows["train.txt"][1], rows["valid.txt"][1]) == (400, 100)
    for path in (sample.TRAIN, sample.VALID):
        lines = path.read_text(encoding="utf-8").splitlines()
        # Each story ends with a line that is the separator alone, and no story is blank.
        ends = [i for i, line in enumerate(lines) if line == EOT_LINE]
        assert len(ends) == rows[path.name][1]
        assert ends[-1] == len(lines) - 1
        starts = [0] + [i + 1 for i in ends[:-1]]
        assert all(any(line.strip() for line in lines[a:b]) for a, b in zip(starts, ends))
        assert sum(EOT_LINE in line for line in lines) == len(ends)  # no separator inside a line
