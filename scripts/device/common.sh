# Sourced by the scripts in scripts/device/ (not run on its own):
#
#   source "$(dirname "$0")/common.sh" parallax.train
#
# Moves to the repository root, sets PYTHON (default python3) and OUT (default a new temporary
# folder, created), and puts the source tree on PYTHONPATH when the named module cannot be
# imported from an installed parallax, so the scripts run with or without `pip install`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PYTHON=${PYTHON:-python3}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
if ! "$PYTHON" -c "import $1" 2>/dev/null; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
