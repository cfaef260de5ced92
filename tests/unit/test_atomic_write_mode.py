"""Result files get the mode a plain open() would give them, not mkstemp's 0600."""

import os
import stat

import pytest

from parallax.store.results import atomic_write_json, atomic_write_text


@pytest.mark.parametrize("umask, expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_write_respects_umask(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "run.json", "{}\n")
        atomic_write_json(tmp_path / "index.json", {"a": 1})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "run.json").stat().st_mode) == expected
    assert stat.S_IMODE((tmp_path / "index.json").stat().st_mode) == expected
    assert (tmp_path / "index.json").read_text() == '{\n  "a": 1\n}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "run.json"]


def test_atomic_write_matches_open(tmp_path):
    atomic_write_text(tmp_path / "a.json", "x")
    with open(tmp_path / "b.json", "w") as f:
        f.write("x")
    assert (tmp_path / "a.json").stat().st_mode == (tmp_path / "b.json").stat().st_mode
