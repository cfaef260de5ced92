"""``--log tensorboard`` with the MaxText engine: MaxText's own scalars go into the run's
``tensorboard/maxtext`` (its decoupled mode would put them into its installation), and MaxText
writes none where the run is not watched. A fake MaxText stands in for the real one."""

from __future__ import annotations

import sys

import pytest

from fixtures.watch_readers import tensorboard_scalars

from parallax.engines.maxtext import child, launch
from parallax.run import live_log
from parallax.spec.config import RunConfig

FAKE_TRAIN = """\
from maxtext.utils import max_utils
writer = max_utils.initialize_summary_writer("/nowhere/tensorboard/", "parallax", True)
for step, loss in enumerate((9.0, 8.5, 8.25)):
    writer.add_scalar("learning/loss", loss, step)
writer.close()
"""
FAKE_MAX_UTILS = """\
def initialize_summary_writer(tensorboard_dir, run_name, enable_tensorboard=True):
    raise AssertionError("MaxText's own writer would write into its installation")
"""


@pytest.fixture
def fake_maxtext(tmp_path, monkeypatch):
    """maxtext.trainers.pre_train.train logging three losses through max_utils' writer."""
    root = tmp_path / "site" / "maxtext"
    for package, files in ((root / "trainers" / "pre_train", {"train.py": FAKE_TRAIN}),
                           (root / "utils", {"max_utils.py": FAKE_MAX_UTILS})):
        package.mkdir(parents=True, exist_ok=True)
        for folder in (package, package.parent, root):
            (folder / "__init__.py").touch()
        for name, text in files.items():
            (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ours = lambda: [n for n in sys.modules if n == "maxtext" or n.startswith("maxtext.")]
    for name in ours():
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(child, "peak_memory", lambda: {})
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    yield
    for name in ours():
        del sys.modules[name]


def test_maxtexts_scalars_go_into_the_runs_folder(fake_maxtext, tmp_path, monkeypatch):
    pytest.importorskip("tensorboardX")
    folder = tmp_path / "run" / "tensorboard" / "maxtext"
    monkeypatch.setenv(child.TENSORBOARD_ENV, str(folder))
    child.main(["/runs/x/maxtext.yml"])
    assert tensorboard_scalars(folder) == {"learning/loss": {0: 9.0, 1: 8.5, 2: 8.25}}


def test_the_config_turns_maxtexts_tensorboard_on_only_where_the_run_is_watched(tmp_path, monkeypatch):
    run = RunConfig(framework="maxtext", model="tiny", output_dir=str(tmp_path / "run"))
    monkeypatch.setenv(live_log.ENV_VAR, "wandb")
    assert launch.output_keys(run)["enable_tensorboard"] is False
    assert launch.tensorboard_folder(run) is None
    monkeypatch.setenv(live_log.ENV_VAR, "wandb,tensorboard")
    assert launch.output_keys(run)["enable_tensorboard"] is True
    assert launch.tensorboard_folder(run) == (tmp_path / "run" / "tensorboard" / "maxtext").resolve()
    assert launch.LOG_ENV == live_log.ENV_VAR  # the engine reads the variable the command line sets
