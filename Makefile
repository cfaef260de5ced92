# Two entry points (see README): `make run` sets up and runs the main job; `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch that this project's CI machines carry; GPU machines bring their own.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= torch,jax,torchao,data,dev
JOBS ?= 2

.PHONY: setup system-deps system-deps-tests run test test-cpp test-py test-sdist clean

# System packages (a C++ compiler, python3-venv, GoogleTest): installed with apt-get when
# missing and run as root, else one line saying what to install. Idempotent and silent when
# nothing is missing.
system-deps:
	PYTHON=$(PYTHON) bash scripts/ensure_system_deps.sh

system-deps-tests:
	PYTHON=$(PYTHON) bash scripts/ensure_system_deps.sh --tests

# The editable install builds parallax._native once: a change to the native sources rebuilds it.
NATIVE_SOURCES := $(shell find csrc -name "*.cpp" -o -name "*.h" -o -name "*.cu" -o -name "*.py" -o -name "CMakeLists.txt")

$(VENV)/.setup-done: pyproject.toml CMakeLists.txt $(NATIVE_SOURCES)
	PYTHON=$(PYTHON) bash scripts/ensure_system_deps.sh
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	# Once more now that the extras are installed: pip builds the package before it installs
	# jax, and the JAX FFI handlers compile only where jaxlib's headers are (incremental build).
	$(PY) -m pip install -q --no-deps -e .
	touch $@

setup: $(VENV)/.setup-done

# Main job: train on the GPU if there is one (llama-100m), else the tiny preset on the CPU, on the
# TinyStories sample shipped in the package (tokenized once into the cache), into a fresh folder
# under runs/main/, then a small report beside it.
RUN_DIR ?= runs/main/$(shell date +%Y%m%d-%H%M%S)
run: setup
	$(VENV)/bin/parallax train --model auto --data tinystories-sample --output-dir $(RUN_DIR)
	$(VENV)/bin/parallax compare --results-dir $(RUN_DIR) --output-report $(RUN_DIR)/report.md
	@echo "run: $(RUN_DIR)/run.json; report: $(RUN_DIR)/report.md"

test: setup test-cpp test-py test-sdist

# CMake and Ninja are the venv's (PyPI, the `dev` extra): Debian 12's cmake is too old.
test-cpp: setup system-deps-tests
	PATH="$(abspath $(VENV))/bin:$$PATH" cmake -S . -B build/cpp -G Ninja -DPARALLAX_BUILD_PYTHON=OFF \
		-DPARALLAX_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release
	PATH="$(abspath $(VENV))/bin:$$PATH" cmake --build build/cpp -j $(JOBS)
	PATH="$(abspath $(VENV))/bin:$$PATH" ctest --test-dir build/cpp --output-on-failure -j $(JOBS)

# pytest in JOBS worker processes (pytest-xdist, the `dev` extra): alone it keeps one core busy
# (most tests wait on one interpreter or subprocess at a time), so two workers take about half
# the time on the 2-core CI. --dist loadfile keeps each file in one worker, in order, so a
# module fixture runs once; the workers take the longest files first (tests/conftest.py,
# LONGEST_FIRST; hence --no-loadscope-reorder). `python -m pytest tests` runs the same tests in
# one process.
test-py: setup
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile --no-loadscope-reorder tests

# The sdist builds, installs with pip into a fresh virtualenv outside the checkout, and runs
# `parallax check-env` and a tiny CPU train from there (issue 29); the virtualenv reaches the
# venv's dependencies, parallax comes only from the sdist. About a minute on 2 cores, most of it
# compiling the native core.
test-sdist: setup
	JOBS=$(JOBS) bash scripts/check_sdist_install.sh $(VENV)

clean:
	rm -rf build $(VENV)
