"""TE is pointed at pip's cuDNN in every process, a child that inherited CUDNN_PATH included
(``engines.torch.recipes.te.prefer_torch_cudnn``)."""

from __future__ import annotations

import ctypes

import pytest

from parallax.native import gpu
from parallax.engines.torch.recipes import te as te_hooks


@pytest.fixture
def pip_cudnn(tmp_path, monkeypatch):
    """A fake pip cuDNN folder and a record of what is loaded from it."""
    lib = tmp_path / "nvidia" / "cudnn" / "lib"
    lib.mkdir(parents=True)
    for name in ("libcudnn.so.9", "libcudnn_graph.so.9", "libcudnn_heuristic.so.9"):
        (lib / name).write_bytes(b"")
    loaded = []
    monkeypatch.setattr(gpu, "pip_cudnn_folder", lambda: str(lib))
    monkeypatch.setattr(ctypes, "CDLL", lambda path, mode=0: loaded.append(path.rsplit("/", 1)[1]))
    monkeypatch.delenv("CUDNN_HOME", raising=False)
    monkeypatch.delenv("CUDNN_PATH", raising=False)
    return lib, loaded


def test_pip_s_cudnn_is_loaded_graph_first_and_named_for_te(pip_cudnn):
    lib, loaded = pip_cudnn
    te_hooks.prefer_torch_cudnn()
    assert loaded[0] == "libcudnn_graph.so.9"  # the others resolve their symbols against it
    assert sorted(loaded[1:]) == ["libcudnn.so.9", "libcudnn_heuristic.so.9"]
    import os

    assert os.environ["CUDNN_PATH"] == str(lib.parent)


def test_a_child_that_inherited_our_cudnn_path_loads_pip_s_cudnn_again(pip_cudnn, monkeypatch):
    lib, loaded = pip_cudnn
    monkeypatch.setenv("CUDNN_PATH", str(lib.parent))  # as a parent process running TE left it
    te_hooks.prefer_torch_cudnn()
    assert "libcudnn_heuristic.so.9" in loaded


def test_a_cudnn_the_user_chose_is_left_alone(pip_cudnn, monkeypatch, tmp_path):
    lib, loaded = pip_cudnn
    monkeypatch.setenv("CUDNN_HOME", str(tmp_path / "mine"))
    te_hooks.prefer_torch_cudnn()
    assert loaded == []
