"""engines/maxtext/child.py: MaxText's trainer module run as ``python -m`` runs it, then the
device's peak memory as one line that metrics.LogFacts reads into the result."""

from __future__ import annotations

import json
import sys

import pytest

from parallax.engines.maxtext import child, metrics

STATS = {"peak_bytes_in_use": 13_150_000_000, "peak_pool_bytes": 19_327_352_832, "bytes_limit": 112_583_507_968}


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    """A maxtext.trainers.pre_train.train that prints its argv and __name__, then exits with
    FAKE_EXIT (absl's app.run ends in sys.exit)."""
    module = tmp_path / "maxtext" / "trainers" / "pre_train"
    module.mkdir(parents=True)
    for folder in (module, module.parent, module.parent.parent):
        (folder / "__init__.py").write_text("")
    (module / "train.py").write_text(
        "import os, sys\nprint('trainer', __name__, sys.argv)\nsys.exit(int(os.environ.get('FAKE_EXIT', '0')))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ours = lambda: [n for n in sys.modules if n == "maxtext" or n.startswith("maxtext.")]
    for name in ours():
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(child, "peak_memory", lambda: dict(STATS))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    yield
    for name in ours():  # this fake's modules: later tests import the real (or the other fake) maxtext
        del sys.modules[name]


def test_the_trainer_runs_as_main_with_its_own_argv_then_the_peak_is_printed(trainer, tmp_path, capsys):
    child.main(["/runs/x/maxtext.yml", "steps=5"])
    out = capsys.readouterr().out.splitlines()
    # argv[0] the module's file, as `python -m` sets it; MaxText's pyconfig reads argv[1:]
    file = tmp_path / "maxtext" / "trainers" / "pre_train" / "train.py"
    assert out[0] == f"trainer __main__ ['{file}', '/runs/x/maxtext.yml', 'steps=5']"
    assert out[1] == child.MEMORY_TAG + json.dumps(STATS)
    facts = metrics.LogFacts()
    assert facts.read(out[1] + "\n") is None
    assert facts.peak == STATS


def test_a_failed_run_keeps_its_status_and_prints_no_memory(trainer, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_EXIT", "3")
    with pytest.raises(SystemExit) as done:
        child.main(["/runs/x/maxtext.yml"])
    assert done.value.code == 3
    assert child.MEMORY_TAG not in capsys.readouterr().out


def test_the_cpu_has_no_allocator_stats():
    import jax  # noqa: F401  (as the trainer has)

    assert child.peak_memory() == {"peak_bytes_in_use": None, "peak_pool_bytes": None, "bytes_limit": None}


def test_a_trainer_that_never_imported_jax_starts_no_backend(monkeypatch):
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert child.peak_memory() == {"peak_bytes_in_use": None, "peak_pool_bytes": None, "bytes_limit": None}
    assert "jax" not in sys.modules


def test_maxtext_s_data_loader_is_timed_once_a_step_and_read_back(trainer, tmp_path, capsys):
    """The import hook wraps DataLoader.load_next_batch when MaxText imports it; its lines are
    LogFacts' data waits, one a step; a count that is not one a step gives no waits."""
    from parallax.engines.maxtext import launch

    common = tmp_path / "maxtext" / "common"
    common.mkdir()
    (common / "__init__.py").write_text("")
    (common / "data_loader.py").write_text(
        "class DataLoader:\n    def load_next_batch(self, *args, **kwargs):\n        return 'batch'\n")
    (tmp_path / "maxtext" / "trainers" / "pre_train" / "train.py").write_text(
        "from maxtext.common.data_loader import DataLoader\n"
        "loader = DataLoader()\nprint([loader.load_next_batch(rampup_manager=None) for _ in range(3)])\n")
    child.main(["/runs/x/maxtext.yml"])
    out = capsys.readouterr().out.splitlines()
    assert out[3] == "['batch', 'batch', 'batch']"
    facts = metrics.LogFacts()
    for line in out:
        facts.read(line + "\n")
    assert len(facts.data_waits) == 3 and all(w >= 0.0 for w in facts.data_waits)
    assert launch.step_waits(facts, 3) == facts.data_waits
    assert launch.step_waits(facts, 4) == [None] * 4
