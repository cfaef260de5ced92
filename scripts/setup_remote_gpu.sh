#!/usr/bin/env bash
# Set up Parallax on a remote Linux machine with NVIDIA GPUs (H100/H200, B200, RTX PRO 6000, ...).
#
#   git clone <repo_url> parallax && cd parallax
#   bash scripts/setup_remote_gpu.sh
#   source ~/parallax_venv/bin/activate && parallax check-env
#
# What it does: checks the driver (nvidia-smi), makes a virtual environment, installs PyTorch
# and JAX builds for the driver's CUDA major version, installs this package with its extras
# (the native core builds with scikit-build-core + CMake + nanobind), then runs
# `parallax check-env`. TransformerEngine is optional (INSTALL_TE=1); see the notes it prints.
#
# Environment (all optional):
#   VENV=~/parallax_venv   PYTHON=python3   EXTRAS=torch,jax,data,report
#   CUDA_MAJOR=12|13        (default: from the driver, as nvidia-smi reports it)
#   TORCH_INDEX_URL=...     (default: https://download.pytorch.org/whl/cu126 or cu130)
#   INSTALL_TE=1            also build TransformerEngine for PyTorch (needs nvcc and cuDNN headers)
#   DRY_RUN=1               print the commands instead of running them
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$HOME/parallax_venv}"
PYTHON="${PYTHON:-python3}"
EXTRAS="${EXTRAS:-torch,jax,data,report}"
INSTALL_TE="${INSTALL_TE:-0}"

say() { echo "setup: $*" >&2; }
die() { echo "setup: error: $*" >&2; exit 2; }

source "$(dirname "${BASH_SOURCE[0]}")/dry_run.sh"  # show, run (DRY_RUN=1 prints)

driver_cuda_major() {
    # nvidia-smi's banner: "... Driver Version: 580.65.06    CUDA Version: 13.0 ..."
    nvidia-smi | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -n 1
}

# 1. The driver.
command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: install the NVIDIA driver first"
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader \
    | sed 's/^/setup: GPU: /' >&2 || die "nvidia-smi cannot talk to the driver"
CUDA_MAJOR="${CUDA_MAJOR:-$(driver_cuda_major)}"
case "$CUDA_MAJOR" in
    12) TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu126}"; JAX_EXTRA="cuda12" ;;
    13) TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu130}"; JAX_EXTRA="cuda13" ;;
    *) die "the driver supports CUDA '${CUDA_MAJOR}'; Parallax needs 12 or 13 (set CUDA_MAJOR to override)" ;;
esac
say "driver supports CUDA $CUDA_MAJOR: torch from $TORCH_INDEX_URL, jax[$JAX_EXTRA]"

# 2. Python and the virtual environment.
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
    || die "$PYTHON is older than 3.11; set PYTHON to a newer interpreter"
[[ -x "$VENV/bin/python" ]] || run "$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
run "${PIP[@]}" install --upgrade pip

# 3. The frameworks, built for this CUDA, then Parallax itself (its native core compiles here).
run "${PIP[@]}" install torch --index-url "$TORCH_INDEX_URL"
run "${PIP[@]}" install "jax[$JAX_EXTRA]" flax optax
run "${PIP[@]}" install -e "$REPO[$EXTRAS]"

# 4. TransformerEngine (optional): its PyTorch extension compiles at install time.
if [[ "$INSTALL_TE" == 1 ]]; then
    command -v nvcc >/dev/null 2>&1 || die "INSTALL_TE=1 needs nvcc (the CUDA toolkit) on PATH"
    run "${PIP[@]}" install pybind11 ninja
    run env NVTE_FRAMEWORK=pytorch "${PIP[@]}" install --no-build-isolation "transformer_engine[pytorch]"
else
    cat >&2 <<'NOTES'
setup: TransformerEngine is not installed (fp8/nvfp4 through TE will be reported as skipped).
setup:   To add it: INSTALL_TE=1 bash scripts/setup_remote_gpu.sh
setup:   It needs nvcc and cuDNN headers (pip's nvidia-cudnn wheel ships them under
setup:   site-packages/nvidia/cudnn/include); the torch extension builds from source with
setup:   --no-build-isolation and takes several minutes. Without internet, set
setup:   NVTE_PYTORCH_FORCE_BUILD=1. NVFP4 needs compute capability 10.x for the full recipe.
NOTES
fi

# 5. What Parallax sees.
run "$VENV/bin/parallax" check-env
say "done. Next: source $VENV/bin/activate && bash scripts/run_benchmarks.sh benchmark_results 32 200 20"
