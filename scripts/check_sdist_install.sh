#!/usr/bin/env bash
# The sdist installs and runs without the repository (issue 29; `make test-sdist`, part of `make test`):
#
#   scripts/check_sdist_install.sh [VENV]    VENV: the set-up virtualenv (default: .venv)
#
# Builds the sdist, installs it with pip into a fresh virtualenv outside the checkout (pip compiles
# the native core from it in an isolated build environment, as for a user), then, from a folder
# outside the checkout, runs `parallax check-env` and a tiny CPU train on the TinyStories sample
# the package ships, and checks that run.json says ok. Exit 0 when all pass; otherwise 1 with
# the failing step and its output's tail.
#
# The fresh virtualenv reaches VENV's packages (torch, JAX, numpy, ...) through a .pth file: it
# spares a download of ~1 GB and keeps the versions the suite ran with. parallax itself comes
# only from the sdist (checked: its modules lie in the fresh virtualenv): VENV's editable install
# is a .pth of VENV's own, which Python does not read from a folder added this way. VENV's CMake
# and Ninja (the `dev` extra) build the native core: Debian 12's cmake is too old. JOBS (default
# 2) compile jobs.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(cd "${1:-$root/.venv}" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/parallax-sdist.XXXXXX")
trap 'rm -rf "$work"' EXIT
unset PYTHONPATH
export PARALLAX_CACHE_DIR=$work/cache  # the sample's tokens made anew, by the installed package
started=$SECONDS

say() { echo "check_sdist_install [$((SECONDS - started)) s]: $*"; }

fail() {  # the step that failed and the tail of its log
  say "FAILED: $1"
  [ -f "${2:-}" ] && tail -n 40 "$2"
  exit 1
}

purelib() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'; }

say "building the sdist"
(cd "$root" && "$venv/bin/python" -c 'import sys, scikit_build_core.build as b; b.build_sdist(sys.argv[1])' \
  "$work/dist") >"$work/sdist.log" 2>&1 || fail "the sdist did not build" "$work/sdist.log"
sdist=$(echo "$work"/dist/*.tar.gz)

say "installing $(basename "$sdist") into a fresh virtualenv"
"$venv/bin/python" -m venv --without-pip "$work/venv"
py=$work/venv/bin/python
purelib "$venv/bin/python" >"$(purelib "$py")/parallax-check-deps.pth"
# --no-cache-dir: never a wheel built by an earlier check, and none left behind in pip's cache
PATH="$venv/bin:$PATH" CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2} \
  "$py" -m pip install --no-cache-dir "$sdist" >"$work/pip.log" 2>&1 || fail "pip install of the sdist" "$work/pip.log"

mkdir "$work/elsewhere"
cd "$work/elsewhere"
"$py" -c 'import parallax, parallax._native as n; print(parallax.__file__); print(n.__file__)' >"$work/where.log"
while read -r file; do
  case "$file" in
    "$work/venv/"*) ;;
    *) fail "parallax is not the sdist's: $file" ;;
  esac
done <"$work/where.log"

say "parallax check-env"
"$work/venv/bin/parallax" check-env >"$work/check-env.log" 2>&1 || fail "parallax check-env" "$work/check-env.log"

say "parallax train: the tiny preset on the CPU, on the TinyStories sample"
"$work/venv/bin/parallax" train --model tiny --device cpu --data tinystories-sample --steps 10 --warmup 2 \
  --output-dir "$work/run" >"$work/train.log" 2>&1 || fail "parallax train" "$work/train.log"
status=$("$py" -c 'import json, sys; print(json.load(open(sys.argv[1]))["status"])' "$work/run/run.json")
[ "$status" = ok ] || fail "run.json's status is '$status', not ok" "$work/train.log"

say "ok: the sdist built, installed in a fresh virtualenv and trained from there"
