# The pinned tools a C or C++ plugin's build.sh needs, for `.` (source) from it: sets
# `wb` (wit-bindgen-cli, for the C bindings of wit/), `jco_dir` (jco, to make the
# component) and `adapter` (the WASI preview 1 reactor adapter jco ships), installing
# each on first use into $WEIR_TOOLS_DIR (default ~/.cache/weir-tools), or using the
# copy Weir's own build installed there if it is the same version. Vendored by
# `weir plugin new`; needs cargo and npm only when something must be installed.
tools="${WEIR_TOOLS_DIR:-$HOME/.cache/weir-tools}"
wit_bindgen_version=0.63.0
jco_version=1.35.0

# wit-bindgen: the one Weir's own build installed, if it is this version.
wb="$tools/wit-bindgen/bin/wit-bindgen"
if ! "$wb" --version 2>/dev/null | grep -q " $wit_bindgen_version\$"; then
    wb="$tools/wit-bindgen-$wit_bindgen_version/bin/wit-bindgen"
    if [ ! -x "$wb" ]; then
        command -v cargo >/dev/null 2>&1 || { echo "build.sh: cargo not found (wit-bindgen-cli is installed with it)" >&2; exit 1; }
        echo "== installing wit-bindgen-cli $wit_bindgen_version (C generator) into $tools" >&2
        env -u CARGO_TARGET_DIR cargo install --locked --debug --no-default-features --features c \
            --version "$wit_bindgen_version" --root "$tools/wit-bindgen-$wit_bindgen_version" wit-bindgen-cli >&2
    fi
fi
# jco: likewise.
jco_dir="$tools/js"
if ! "$jco_dir/node_modules/.bin/jco" --version 2>/dev/null | grep -qx "$jco_version"; then
    jco_dir="$tools/jco-$jco_version"
    if [ ! -x "$jco_dir/node_modules/.bin/jco" ]; then
        command -v npm >/dev/null 2>&1 || { echo "build.sh: npm not found (jco is installed with it)" >&2; exit 1; }
        echo "== installing @bytecodealliance/jco $jco_version into $jco_dir" >&2
        mkdir -p "$jco_dir"
        (cd "$jco_dir" && npm install --no-audit --no-fund --loglevel=error "@bytecodealliance/jco@$jco_version" >&2)
    fi
fi
adapter="$jco_dir/node_modules/@bytecodealliance/jco/lib/wasi_snapshot_preview1.reactor.wasm"
