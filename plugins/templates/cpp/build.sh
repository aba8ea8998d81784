#!/usr/bin/env sh
# Builds {{name}}.wasm, a WebAssembly component, from plugin.cpp and Weir's C++ helper
# (sdk/weir_plugin.hpp, over the C helper sdk/weir_plugin.h), with pinned tools,
# installed on first use into $WEIR_TOOLS_DIR (default ~/.cache/weir-tools) by
# sdk/wasi-tools.sh:
#
#   wit-bindgen-cli 0.63.0 (C bindings of the contract weir:transform@0.2.0,
#   wit/transform-0.2.0 with its deps/, world `transformer`, generated into build/;
#   needs cargo);
#   jco 1.35.0 (wraps the core module into a component with the WASI preview 1
#   reactor adapter it ships; needs node 20.19+ with npm).
#
# And Debian's clang and clang++ for wasm32-wasi: apt-get install clang lld wasi-libc
# libclang-rt-dev-wasm32 libc++-dev-wasm32 libc++abi-14-dev-wasm32. `weir plugin
# build` runs this; its last line is the component's path.
set -eu
cd "$(dirname "$0")"
. sdk/wasi-tools.sh
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
"$wb" c wit/transform-0.2.0 -w transformer --out-dir build >build/wit-bindgen.log 2>&1 || { cat build/wit-bindgen.log >&2; exit 1; }
# The generated bindings are C: compiled by clang, the plugin by clang++ (no
# exceptions: clang 14 has none for wasm), linked as a WASI reactor.
clang --target=wasm32-wasi -O2 -mbulk-memory -std=c11 -Wall -Wextra -I build \
    -c -o build/transformer.o build/transformer.c >&2
clang++ --target=wasm32-wasi -O2 -mbulk-memory -mexec-model=reactor -std=c++20 -fno-exceptions \
    -Wall -Wextra -I build -I sdk -o build/core.wasm plugin.cpp build/transformer.o \
    build/transformer_component_type.o -Wl,--strip-debug >&2
"$jco_dir/node_modules/.bin/jco" new build/core.wasm --adapt "wasi_snapshot_preview1=$adapter" \
    -o {{name}}.wasm.tmp >&2
mv -f {{name}}.wasm.tmp {{name}}.wasm
echo "$PWD/{{name}}.wasm"
