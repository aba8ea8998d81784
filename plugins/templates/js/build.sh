#!/usr/bin/env sh
# Builds {{name}}.wasm, a WebAssembly component of contract weir:transform@0.2.0
# (wit/transform-0.2.0, world `transformer`), from plugin.js and Weir's JavaScript
# SDK (sdk/): the SDK's bundler makes one module of them (with the prelude that keeps a
# leading U+FEFF in strings the host passes in), then ComponentizeJS 0.23.0, installed
# on first use into $WEIR_TOOLS_DIR (default ~/.cache/weir-tools; needs node 20.19+
# with npm), builds the component, run by the SDK's sdk/node/componentize.js, which
# patches the bindings ComponentizeJS generates where they are slow. (The same bundle
# builds on contract 0.1 with `--wit wit/transform-0.2.0/deps/transform-0.1.0
# --world-name plugin`.) `weir plugin build` runs this; its last line is the
# component's path.
set -eu
cd "$(dirname "$0")"
tools="${WEIR_TOOLS_DIR:-$HOME/.cache/weir-tools}"
componentize_js_version=0.23.0

# An unchanged project is not built again: componentize output differs from build to
# build, and a new component's sha256 would make every partition it wrote stale.
inputs=$({ echo "componentize-js $componentize_js_version"; find . -type f ! -path './.git/*' ! -path './build/*' ! -path '*/node_modules/*' \
    ! -name '{{name}}.wasm*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum; } | sha256sum | cut -d' ' -f1)
if [ -f {{name}}.wasm ] && [ "$(cat {{name}}.wasm.inputs 2>/dev/null)" = "$inputs" ]; then
    echo "== {{name}}.wasm is up to date (its inputs are unchanged)" >&2
    echo "$PWD/{{name}}.wasm"
    exit 0
fi

# ComponentizeJS: the one Weir's own build installed, if it is this version.
js="$tools/js"
version_of() {
    node -e 'try { console.log(require(process.argv[1]).version) } catch { }' \
        "$1/node_modules/@bytecodealliance/componentize-js/package.json"
}
if [ "$(version_of "$js")" != "$componentize_js_version" ]; then
    js="$tools/componentize-js-$componentize_js_version"
    if [ "$(version_of "$js")" != "$componentize_js_version" ]; then
        command -v npm >/dev/null 2>&1 || { echo "build.sh: npm not found (ComponentizeJS is installed with it)" >&2; exit 1; }
        echo "== installing @bytecodealliance/componentize-js $componentize_js_version into $js" >&2
        mkdir -p "$js"
        (cd "$js" && npm install --no-audit --no-fund --loglevel=error \
            "@bytecodealliance/componentize-js@$componentize_js_version" >&2)
    fi
fi

rm -rf build
mkdir build
node sdk/node/bundle.js plugin.js -o build/bundle.js >&2
node sdk/node/componentize.js --tools "$js" build/bundle.js --wit wit/transform-0.2.0 \
    --world-name transformer --disable http fetch-event -o {{name}}.wasm.tmp >&2
mv -f {{name}}.wasm.tmp {{name}}.wasm
echo "$inputs" > {{name}}.wasm.inputs
echo "$PWD/{{name}}.wasm"
