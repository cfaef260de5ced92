# Two entry points (see README): `make run` sets up and runs the main job; `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU build of torch that this project's CI machines carry; GPU machines bring their own.
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= torch,jax,torchao,data,dev
JOBS ?= 2

.PHONY: setup run test test-cpp test-py clean

$(VENV)/.setup-done: pyproject.toml CMakeLists.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $@

setup: $(VENV)/.setup-done

# Main job: train on the GPU if there is one (llama-100m), else the tiny preset on the CPU.
run: setup
	$(VENV)/bin/parallax train --model auto --output-dir runs/main

test: setup test-cpp test-py

test-cpp:
	cmake -S . -B build/cpp -G Ninja -DPARALLAX_BUILD_PYTHON=OFF -DPARALLAX_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release
	cmake --build build/cpp -j $(JOBS)
	ctest --test-dir build/cpp --output-on-failure -j $(JOBS)

test-py: setup
	$(PY) -m pytest -q tests

clean:
	rm -rf build $(VENV)
