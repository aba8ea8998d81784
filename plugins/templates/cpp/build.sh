#!/usr/bin/env sh
# Builds {{name}}.wasm, a WebAssembly component, from plugin.cpp and Weir's C++ helper
# (sdk/weir_plugin.hpp, over the C helper sdk/weir_plugin.h), with pinned tools,
# installed on first use into $WEIR_TOOLS_DIR (default ~/.cache/weir-tools):
#
#   wit-bindgen-cli 0.63.0 (C bindings of wit/, generated into build/; needs cargo);
#   jco 1.35.0 (wraps the core module into a component with the WASI preview 1
#   reactor adapter it ships; needs node 20.19+ with npm).
#
# And Debian's clang and clang++ for wasm32-wasi: apt-get install clang lld wasi-libc
# libclang-rt-dev-wasm32 libc++-dev-wasm32 libc++abi-14-dev-wasm32. `weir plugin
# build` runs this; its last line is the component's path.
set -eu
cd "$(dirname "$0")"
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
if [ ! -e /usr/lib/wasm32-wasi/libc.a ] && [ ! -e /usr/lib/wasm32-wasi/libc.so ]; then
    echo "build.sh: wasi-libc not found: apt-get install clang lld wasi-libc libclang-rt-dev-wasm32 libc++-dev-wasm32 libc++abi-14-dev-wasm32" >&2
    exit 1
fi
if [ ! -e /usr/lib/wasm32-wasi/libc++.a ] || [ ! -e /usr/lib/wasm32-wasi/libc++abi.a ]; then
    echo "build.sh: the wasm32 libc++ not found: apt-get install libc++-dev-wasm32 libc++abi-14-dev-wasm32" >&2
    exit 1
fi

rm -rf build
mkdir build
"$wb" c wit/transform-0.1.0 -w plugin --out-dir build >build/wit-bindgen.log 2>&1 || { cat build/wit-bindgen.log >&2; exit 1; }
# The generated bindings are C: compiled by clang, the plugin by clang++ (no
# exceptions: clang 14 has none for wasm), linked as a WASI reactor.
clang --target=wasm32-wasi -O2 -mbulk-memory -std=c11 -Wall -Wextra -I build \
    -c -o build/plugin.o build/plugin.c >&2
clang++ --target=wasm32-wasi -O2 -mbulk-memory -mexec-model=reactor -std=c++20 -fno-exceptions \
    -Wall -Wextra -I build -I sdk -o build/core.wasm plugin.cpp build/plugin.o \
    build/plugin_component_type.o -Wl,--strip-debug >&2
"$jco_dir/node_modules/.bin/jco" new build/core.wasm --adapt "wasi_snapshot_preview1=$adapter" \
    -o {{name}}.wasm.tmp >&2
mv -f {{name}}.wasm.tmp {{name}}.wasm
echo "$PWD/{{name}}.wasm"
