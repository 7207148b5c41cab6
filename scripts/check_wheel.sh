#!/usr/bin/env bash
# The package as a user installs it: builds the sdist and the wheel (python -m build), checks
# their metadata (twine check), installs the wheel into a fresh virtual environment and, from a
# directory outside the checkout with no PYTHONPATH, runs `xengine backends`, the
# host-compiled AIE kernel against the reference and a short exact `xengine reprocess`
# (scripts/check_wheel.py). Build outputs go to a cache directory of its own.
#   bash scripts/check_wheel.sh [WORKDIR]    (default: a temporary directory, removed after)
set -euo pipefail
checkout="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d)}"
[ -n "${1:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
python=${PYTHON:-python3}

"$python" -m pip install -q build twine
rm -rf "$work/dist"
"$python" -m build --outdir "$work/dist" "$checkout" > "$work/build.log" 2>&1 \
    || { tail -40 "$work/build.log"; echo "check_wheel: python -m build failed" >&2; exit 1; }
"$python" -m twine check --strict "$work"/dist/*
"$python" -m venv --clear "$work/venv"
"$work/venv/bin/python" -m pip install -q "$work"/dist/*.whl

mkdir -p "$work/run"
cd "$work/run"
export XENGINE_CACHE_DIR="$work/cache"
unset PYTHONPATH
export PATH="$work/venv/bin:$PATH"
xengine backends
cp "$checkout/scripts/check_wheel.py" "$work/check_wheel.py"  # not run from the checkout
"$work/venv/bin/python" "$work/check_wheel.py" "$checkout" "$work/run"
