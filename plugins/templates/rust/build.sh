#!/usr/bin/env sh
# Builds {{name}}.wasm, a WebAssembly component, with the pinned Rust toolchain setup
# `weir plugin new` wrote: cargo for wasm32-wasip2 (the rustup target is added if
# missing), the SDK in sdk/, the versions in Cargo.lock. `weir plugin build` runs this.
set -eu
cd "$(dirname "$0")"
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
    echo "== rustup target add wasm32-wasip2" >&2
    rustup target add wasm32-wasip2
fi
cargo build --release --target wasm32-wasip2 >&2
cp "${CARGO_TARGET_DIR:-target}/wasm32-wasip2/release/{{crate}}.wasm" {{name}}.wasm.tmp
mv -f {{name}}.wasm.tmp {{name}}.wasm
echo "$PWD/{{name}}.wasm"
