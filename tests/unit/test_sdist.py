"""The sdist (`pip install slm-parallax` from source) holds the package with its data, the native sources and
the tests, and not the measurements: docs/results alone made it 10 MB and 1,777 of its files. Built here with
scikit-build-core's own sdist builder, which compiles nothing (a few seconds). Installing it compiles the native
core (about a minute): `make test` does that last (`make test-sdist`, scripts/check_sdist_install.sh), in a fresh
virtualenv outside the checkout, then runs check-env and a tiny CPU train from there; here only its wiring."""

import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def names(tmp_path_factory):
    build = pytest.importorskip("scikit_build_core.build")
    import os

    out = tmp_path_factory.mktemp("sdist")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        sdist = out / build.build_sdist(str(out))
    finally:
        os.chdir(cwd)
    with tarfile.open(sdist) as tar:
        members = tar.getmembers()
    assert not [m.name for m in members if m.issym() or m.islnk()]  # links dangle once unpacked elsewhere
    top = members[0].name.split("/")[0]
    return {m.name.removeprefix(top + "/") for m in members if m.isfile()}, sdist.stat().st_size


def test_the_sdist_holds_the_package_its_data_native_sources_and_tests(names):
    files, _ = names
    for need in ("pyproject.toml", "CMakeLists.txt", "README.md", "LICENSE", "src/parallax/__init__.py",
                 "src/parallax/cli/__init__.py", "src/parallax/data/tinystories/train.txt",
                 "src/parallax/data/tinystories/SOURCE.md", "src/parallax/plans/three-frameworks.toml",
                 "csrc/loader/token_file.cpp", "tests/conftest.py", "tests/unit/test_sdist.py"):
        assert need in files, need
    tracked = {p.relative_to(ROOT).as_posix() for p in (ROOT / "src" / "parallax").rglob("*.py")}
    assert tracked <= files


def test_the_sdist_leaves_out_the_measurements_and_session_leftovers(names):
    files, size = names
    assert not [f for f in files if f.startswith(("docs/results/", "runs/", ".carry/", "build/", "lease/"))]
    assert not [f for f in files if f.endswith((".so", ".pyc"))]
    assert size < 2_000_000, size  # ~0.96 MB today; 10.2 MB with docs/results


def test_make_test_installs_the_sdist_and_trains_from_it():
    makefile = (ROOT / "Makefile").read_text()
    test = next(line for line in makefile.splitlines() if line.startswith("test:"))
    assert test.split() == ["test:", "setup", "test-cpp", "test-py", "test-sdist"]  # .ci/run runs `make test`
    target = makefile.split("\ntest-sdist: setup\n")[1].split("\n\n")[0]
    assert target.strip() == "JOBS=$(JOBS) bash scripts/check_sdist_install.sh $(VENV)"
    script = ROOT / "scripts" / "check_sdist_install.sh"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    text = script.read_text()
    assert "set -euo pipefail" in text and 'cd "$work/elsewhere"' in text
