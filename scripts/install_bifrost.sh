#!/usr/bin/env bash
# Build and install real Bifrost, CPU only, into the CURRENT Python environment.
#
#   scripts/install_bifrost.sh TARBALL_OR_SOURCE_DIR [PREFIX]
#
# TARBALL_OR_SOURCE_DIR: a Bifrost source tree or a .tar.gz of one (the project vendors
#   bifrost-c482892.tar.gz, ledatelescope/bifrost 0.10.0, BSD-3-Clause, for CI: .ci/run).
# PREFIX: where libbifrost goes (PREFIX/lib, PREFIX/include). Default: the environment's own
#   prefix (python -c 'import sys; print(sys.prefix)'), where xengine_block.bifrost looks for
#   it, so neither our blocks nor the tests need LD_LIBRARY_PATH. The Python package and
#   Bifrost's tools (like_top.py, ...) are pip-installed into the environment itself.
#
# Idempotent: does nothing when this source is already installed there and imports.
# Needs a C++ compiler and make (both in the project image); Python packages come from PyPI.
set -euo pipefail

SRC=${1:?usage: $0 TARBALL_OR_SOURCE_DIR [PREFIX]}
PYTHON=$(command -v python)
PREFIX=${2:-$("$PYTHON" -c 'import sys; print(sys.prefix)')}
SRC=$(cd "$(dirname "$SRC")" && pwd)/$(basename "$SRC")
[ -e "$SRC" ] || { echo "install_bifrost: $SRC does not exist" >&2; exit 2; }
STAMP="$PREFIX/lib/xengine_block-bifrost.stamp"
ID="$(basename "$SRC") $(stat -c %s "$SRC")"

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$ID" ] && \
   LD_LIBRARY_PATH="$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
   "$PYTHON" -c 'import bifrost.telemetry as t; t.disable(); import bifrost' 2>/dev/null; then
    echo "install_bifrost: $(basename "$SRC") already installed in $PREFIX, nothing to do"
    exit 0
fi

BUILD=$(mktemp -d "${TMPDIR:-/tmp}/bifrost-build.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
if [ -d "$SRC" ]; then
    cp -a "$SRC/." "$BUILD/"
else
    tar xzf "$SRC" -C "$BUILD" --strip-components=1
fi

"$PYTHON" -m pip install -q ctypesgen==1.0.2 contextlib2 pint graphviz simplejson
cd "$BUILD"
# --disable-native-arch: the library must run on any x86-64 of the project's machine kinds
# (built on Zen 5, run in CI on Sapphire Rapids and back), not only on the CPU it was built on.
./configure -q --disable-cuda --disable-native-arch --prefix="$PREFIX" --with-python="$PYTHON"
make -j"$(nproc)" >build.log 2>&1 || { tail -40 build.log >&2; exit 1; }
make install >install.log 2>&1 || { tail -40 install.log >&2; exit 1; }
echo "$ID" >"$STAMP"

# Bifrost reports usage over the network on import unless disabled (xengine_block.bifrost also
# disables it on import); nothing here may call out.
LD_LIBRARY_PATH="$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$PYTHON" -c 'import bifrost.telemetry as t; t.disable(); import bifrost, bifrost.version as v; print("install_bifrost: Bifrost", v.__version__, "imports")'
echo "install_bifrost: installed into $PREFIX"
echo "  xengine_block.bifrost finds $PREFIX/lib by itself (or set XENGINE_BIFROST_PREFIX)."
echo "  For Bifrost's own tools and a plain 'import bifrost':"
echo "    export LD_LIBRARY_PATH=$PREFIX/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
