"""The files the MaxText engine writes (engines/maxtext/launch.py, profile.py) go through the one
writer (store/files.py): its config, the streamed train.log, the logs of initial_weights.py and
count_params.py, the weights checkpoint's completion mark and the parameter count in the cache,
and the profile's trace archive. Each on a full disk (ENOSPC) and a read-only folder (EROFS,
injected at the writer's flush: tests run as root, whom chmod does not stop): one line naming
the file and what it needs, no temporary file left, the earlier file whole. MaxText itself is
not needed: its children are stand-ins (a short Python child, subprocess.run faked)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import tarfile

import pytest

from fixtures.full_disk import fail_writes_under

from parallax.engines.base import NullProgress
from parallax.engines.maxtext import launch
from parallax.errors import ParallaxError
from parallax.plan.resolve import planned
from parallax.spec.config import RunConfig

NEEDS = {errno.ENOSPC: "the disk is full; free space there or choose another folder",
         errno.EROFS: "the file system is read-only; choose a writable folder"}
CODES = pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["ENOSPC", "EROFS"])
RUN = RunConfig(framework="maxtext", precision="bf16", model="tiny")


def files_under(folder) -> dict:
    """Every file below ``folder`` (temporary ones included) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def child(*lines: str, code: int = 0) -> list[str]:
    script = "".join(f"print({line!r})\n" for line in lines) + f"raise SystemExit({code})\n"
    return [sys.executable, "-c", script]


# --- the config

def test_the_config_is_written_with_its_header(tmp_path):
    from parallax.engines.maxtext import config

    recipe = planned(RUN).recipe
    sections = config.sections(RUN, recipe, "tuned")
    path = launch.write_config(tmp_path, RUN, recipe, sections, "tuned")
    assert path == tmp_path / "maxtext-tiny-bf16.yml"
    text = path.read_text()
    assert text == config.render(sections, config.header(RUN, recipe, path.name, "tuned"))
    assert "\nbase_config: base.yml\n" in text and list(tmp_path.iterdir()) == [path]


@CODES
def test_a_config_the_disk_refuses_is_one_line(tmp_path, monkeypatch, code):
    from parallax.engines.maxtext import config

    recipe = planned(RUN).recipe
    (tmp_path / "maxtext-tiny-bf16.yml").write_text("# the earlier config\n")
    fail_writes_under(monkeypatch, tmp_path, code, probes=False)
    with pytest.raises(ParallaxError) as refused:
        launch.write_config(tmp_path, RUN, recipe, config.sections(RUN, recipe, "tuned"), "tuned")
    assert str(refused.value) == f"cannot write {tmp_path / 'maxtext-tiny-bf16.yml'} (from --output-dir): {NEEDS[code]}"
    assert files_under(tmp_path) == {"maxtext-tiny-bf16.yml": b"# the earlier config\n"}


# --- the streamed train.log

def test_maxtexts_output_becomes_train_log_when_it_ends(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("the earlier run\n")
    launch.stream(child("I1201 compiling", "done"), {}, log, NullProgress())
    assert files_under(tmp_path) == {"train.log": b"I1201 compiling\ndone\n"}


def test_the_log_of_a_failed_maxtext_is_kept_and_its_tail_raised(tmp_path):
    log = tmp_path / "train.log"
    with pytest.raises(launch.MaxTextFailed) as failed:
        launch.stream(child("step 1", "ValueError: no such key", code=3), {}, log, NullProgress())
    assert str(failed.value) == "MaxText exited with status 3: ValueError: no such key"
    assert failed.value.log_tail == "step 1\nValueError: no such key"
    assert files_under(tmp_path) == {"train.log": b"step 1\nValueError: no such key\n"}


@CODES
def test_a_train_log_the_disk_refuses_is_one_line(tmp_path, monkeypatch, code):
    log = tmp_path / "train.log"
    log.write_text("the earlier run\n")
    fail_writes_under(monkeypatch, tmp_path, code, probes=False)
    with pytest.raises(ParallaxError) as refused:
        launch.stream(child("step 1"), {}, log, NullProgress())
    assert str(refused.value) == f"cannot write {log} (from --output-dir): {NEEDS[code]}"
    assert files_under(tmp_path) == {"train.log": b"the earlier run\n"}


# --- the logs of initial_weights.py and count_params.py

@pytest.fixture
def children(monkeypatch):
    """subprocess.run's stand-in: both children print their count and exit 0."""
    def run(command, **kw):
        return subprocess.CompletedProcess(command, 0, "parallax-maxtext-weights: x\nparallax-maxtext-parameters: 7\n",
                                           "a warning\n")

    monkeypatch.setattr(launch.subprocess, "run", run)


def test_the_childrens_logs_are_their_output(tmp_path, children):
    where = launch.Layout(tmp_path)
    where.root.mkdir()
    recipe = planned(RUN).recipe
    assert launch.write_initial_weights(RUN, recipe, tmp_path / "c.yml", where, tmp_path / "w", {}) == 7
    assert launch.count_parameters(tmp_path / "c.yml", {}, where.root / "count_params.log").parameters == 7
    expected = b"parallax-maxtext-weights: x\nparallax-maxtext-parameters: 7\na warning\n"
    assert files_under(where.root) == {"initial_weights.log": expected, "count_params.log": expected}


@CODES
@pytest.mark.parametrize("name", ["initial_weights.log", "count_params.log"])
def test_a_childs_log_the_disk_refuses_is_one_line(tmp_path, children, monkeypatch, code, name):
    where = launch.Layout(tmp_path)
    where.root.mkdir()
    (where.root / name).write_text("the earlier run\n")
    fail_writes_under(monkeypatch, where.root, code, probes=False)
    with pytest.raises(ParallaxError) as refused:
        if name == "initial_weights.log":
            launch.write_initial_weights(RUN, planned(RUN).recipe, tmp_path / "c.yml", where, tmp_path / "w", {})
        else:
            launch.count_parameters(tmp_path / "c.yml", {}, where.root / name)
    assert str(refused.value) == f"cannot write {where.root / name} (from --output-dir): {NEEDS[code]}"
    assert files_under(where.root) == {name: b"the earlier run\n"}


# --- the weights checkpoint in the cache

@pytest.fixture
def weights(tmp_path, monkeypatch):
    """initial_weights.py's stand-in: it writes one file into the folder it is given."""
    def write(run, recipe, yml, where, out_dir, env):
        out_dir.mkdir(parents=True)
        (out_dir / "params.bin").write_bytes(b"weights")
        return None

    monkeypatch.setattr(launch, "write_initial_weights", write)
    where = launch.Layout(tmp_path / "run")
    where.root.mkdir(parents=True)
    return where, tmp_path / "cache" / "maxtext-weights" / "abc"


def test_a_checkpoint_is_renamed_into_the_cache_when_complete(weights):
    where, checkpoint = weights
    record = launch.cached_initial_weights(RUN, planned(RUN).recipe, where.root / "c.yml", where, checkpoint, {})
    assert record["load_parameters_path"] == str(checkpoint) and record["cached_from"] is None
    assert files_under(checkpoint.parent) == {
        "abc/params.bin": b"weights", f"abc/{launch.WEIGHTS_DONE}": b"parallax.engines.weights.init_weights(tiny, seed 0)\n"}
    again = launch.cached_initial_weights(RUN, planned(RUN).recipe, where.root / "c.yml", where, checkpoint, {})
    assert again["cached_from"] == str(checkpoint)
    assert (where.root / "initial_weights.log").read_text() == f"kept from an earlier run: {checkpoint}\n"


@CODES
def test_a_cache_that_refuses_the_checkpoint_is_one_line_and_keeps_no_partial(weights, monkeypatch, code):
    where, checkpoint = weights
    fail_writes_under(monkeypatch, checkpoint.parent, code, probes=False)
    with pytest.raises(ParallaxError) as refused:
        launch.cached_initial_weights(RUN, planned(RUN).recipe, where.root / "c.yml", where, checkpoint, {})
    partial = checkpoint.with_name(f"abc.tmp-{os.getpid()}")
    assert str(refused.value) == f"cannot write {partial / launch.WEIGHTS_DONE} (from PARALLAX_CACHE_DIR): {NEEDS[code]}"
    assert files_under(checkpoint.parent) == {}  # no partial checkpoint, no checkpoint without its mark


# --- the parameter count in the cache

def test_a_kept_count_is_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    recipe = planned(RUN).recipe
    launch.keep_count(RUN, recipe, 1234, "count_params.py")
    counted = launch.cached_count(RUN, recipe, lambda: pytest.fail("counted again"))
    assert counted.parameters == 1234 and counted.cached_from.endswith(", counted by count_params.py")


@CODES
def test_a_count_the_cache_refuses_costs_a_recount_only(tmp_path, monkeypatch, code):
    monkeypatch.setenv("PARALLAX_CACHE_DIR", str(tmp_path / "cache"))
    recipe = planned(RUN).recipe
    fail_writes_under(monkeypatch, tmp_path / "cache", code, probes=False)
    launch.keep_count(RUN, recipe, 1234, "count_params.py")  # not raised: the run goes on
    assert files_under(tmp_path) == {}
    assert launch.cached_count(RUN, recipe, lambda: launch.Counted(1234)).parameters == 1234


# --- the profile's trace archive

def test_the_trace_archive_holds_the_xplanes(tmp_path):
    from parallax.engines.maxtext.profile import _tar_xplanes

    (tmp_path / "trace" / "plugins" / "profile").mkdir(parents=True)
    (tmp_path / "trace" / "plugins" / "profile" / "host.xplane.pb").write_bytes(b"xplane")
    (tmp_path / "trace" / "other.txt").write_text("left out")
    path = _tar_xplanes(tmp_path / "trace", tmp_path / "out" / "trace.xplane.tar.gz")
    with tarfile.open(path) as tar:
        assert tar.getnames() == ["plugins/profile/host.xplane.pb"]
        assert tar.extractfile("plugins/profile/host.xplane.pb").read() == b"xplane"


@CODES
def test_a_trace_archive_the_disk_refuses_is_one_line(tmp_path, monkeypatch, code):
    from parallax.engines.maxtext.profile import _tar_xplanes

    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "host.xplane.pb").write_bytes(b"xplane")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "trace.xplane.tar.gz").write_bytes(b"the earlier archive")
    fail_writes_under(monkeypatch, tmp_path / "out", code, probes=False)
    with pytest.raises(ParallaxError) as refused:
        _tar_xplanes(tmp_path / "trace", tmp_path / "out" / "trace.xplane.tar.gz")
    assert str(refused.value) == (f"cannot write {tmp_path / 'out' / 'trace.xplane.tar.gz'} (from --output-dir): "
                                  f"{NEEDS[code]}")
    assert files_under(tmp_path / "out") == {"trace.xplane.tar.gz": b"the earlier archive"}
