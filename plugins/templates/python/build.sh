#!/usr/bin/env sh
# Builds {{name}}.wasm, a WebAssembly component of the plugin contract
# weir:transform@0.2.0 (wit/transform-0.2.0, world `transformer`), from app.py and
# Weir's Python SDK (sdk/weir_plugin) with componentize-py 0.25.1, installed on first
# use into $WEIR_TOOLS_DIR (default ~/.cache/weir-tools) with pip (needs python3 with
# pip). `weir plugin build` runs this; its last line is the component's path. The same
# app.py builds on the first contract, 0.1, with `-d wit/transform-0.1.0 -w plugin`
# (the SDK serves whichever contract componentize-py generated the bindings of).
set -eu
cd "$(dirname "$0")"
tools="${WEIR_TOOLS_DIR:-$HOME/.cache/weir-tools}"
componentize_py_version=0.25.1

# An unchanged project is not built again: componentize output differs from build to
# build, and a new component's sha256 would make every partition it wrote stale.
inputs=$({ echo "componentize-py $componentize_py_version"; find . -type f ! -path './.git/*' ! -path '*/__pycache__/*' \
    ! -name '{{name}}.wasm*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)
if [ -f {{name}}.wasm ] && [ "$(cat {{name}}.wasm.inputs 2>/dev/null)" = "$inputs" ]; then
    echo "== {{name}}.wasm is up to date (its inputs are unchanged)" >&2
    echo "$PWD/{{name}}.wasm"
    exit 0
fi

# componentize-py: the one Weir's own build installed, if it is this version.
py="$tools/py"
if [ ! -d "$py/componentize_py-$componentize_py_version.dist-info" ]; then
    py="$tools/componentize-py-$componentize_py_version"
    if [ ! -d "$py/componentize_py-$componentize_py_version.dist-info" ]; then
        python3 -m pip --version >/dev/null 2>&1 || { echo "build.sh: pip not found for python3 (on Debian: apt-get install python3-pip)" >&2; exit 1; }
        echo "== installing componentize-py $componentize_py_version into $py" >&2
        rm -rf "$py.tmp"
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
            --no-input --target "$py.tmp" "componentize-py==$componentize_py_version" >&2
        mv "$py.tmp" "$py"
    fi
fi

# The sources are copied out, so that componentize-py's bytecode stays out of them.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp app.py "$stage/"
cp -r sdk/weir_plugin "$stage/"
PYTHONPATH="$py" python3 "$py/bin/componentize-py" --quiet -d wit/transform-0.2.0 -w transformer \
    componentize -p "$stage" app -o {{name}}.wasm.tmp >&2
mv -f {{name}}.wasm.tmp {{name}}.wasm
echo "$inputs" > {{name}}.wasm.inputs
echo "$PWD/{{name}}.wasm"
