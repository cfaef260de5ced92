#!/usr/bin/env bash
# The system packages `make` needs beyond Python, installed when missing (idempotent).
#
#   scripts/ensure_system_deps.sh          build: a C++17 compiler, Python's venv module
#   scripts/ensure_system_deps.sh --tests  build + GoogleTest (the C++ suite of `make test`) + Chromium
#                                          (the HTML report's test opens report.html in it, headless)
#
# CMake and Ninja come from PyPI into the venv (the `dev` extra): Debian 12's cmake is 3.25,
# older than the 3.26 this project needs. Google Benchmark (libbenchmark-dev) is needed only for
# -DPARALLAX_BUILD_BENCH=ON, by hand.
#
# On Debian/Ubuntu as root: `apt-get update` once, then `apt-get install` of what is missing.
# Not root: one line naming what to install, exit 1. Without dpkg/apt: a note, exit 0 (CMake
# then says what it cannot find). Nothing missing: silent, exit 0.
# DRY_RUN=1 prints the apt-get commands instead of running them.
set -euo pipefail

PYTHON=${PYTHON:-python3}
CXX_COMPILER=${CXX:-c++}
want_tests=0
for arg in "$@"; do
  case "$arg" in
    --tests) want_tests=1 ;;
    *) echo "ensure_system_deps: unknown argument '$arg' (use --tests or nothing)" >&2; exit 2 ;;
  esac
done

installed() {  # a Debian package, by its dpkg status
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

if ! command -v dpkg-query >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  missing_here=()
  command -v "$CXX_COMPILER" >/dev/null 2>&1 || missing_here+=("a C++17 compiler")
  [ "$want_tests" = 1 ] && missing_here+=("GoogleTest (CMake's GTest package), if not installed" "Chromium")
  if [ "${#missing_here[@]}" -gt 0 ]; then
    echo "ensure_system_deps: not a Debian system; make sure these are installed: ${missing_here[*]}" >&2
  fi
  exit 0
fi

missing=()
command -v "$CXX_COMPILER" >/dev/null 2>&1 || missing+=(g++)
"$PYTHON" -c "import ensurepip, venv" >/dev/null 2>&1 || missing+=(python3-venv)
if [ "$want_tests" = 1 ]; then
  installed libgtest-dev || missing+=(libgtest-dev)
  installed chromium || missing+=(chromium)
fi
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "ensure_system_deps: missing system packages: ${missing[*]}; install them with: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then echo "$*"; else "$@"; fi
}
export DEBIAN_FRONTEND=noninteractive
echo "ensure_system_deps: installing ${missing[*]}" >&2
run apt-get update -qq
run apt-get install -y -qq --no-install-recommends "${missing[@]}"
