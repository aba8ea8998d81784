/*
 * What the generated bindings (`plugin.c`) import, for a native build of a plugin's
 * C code (the tests in this folder, under AddressSanitizer): the `log` import writes
 * to stderr, the resource intrinsics are never reached (the case harness renames
 * the session constructor's call, see native_cases.c), and the component-type
 * object (a wasm object file) is not linked.
 *
 * Include it in exactly one file of a native test program.
 */
#ifndef WEIR_NATIVE_STUBS_H
#define WEIR_NATIVE_STUBS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

void __wasm_import_weir_transform_log_log(int32_t level, uint8_t *ptr, size_t len) {
    fprintf(stderr, "[plugin log %d] %.*s\n", (int)level, (int)len, (const char *)ptr);
}

int32_t __wasm_import_exports_weir_transform_transform_session_new(int32_t rep) {
    (void)rep;
    fprintf(stderr, "native stubs: resource-new is not available natively\n");
    abort();
}

int32_t __wasm_import_exports_weir_transform_transform_session_rep(int32_t handle) {
    (void)handle;
    fprintf(stderr, "native stubs: resource-rep is not available natively\n");
    abort();
}

void __wasm_import_exports_weir_transform_transform_session_drop(int32_t handle) {
    (void)handle;
    fprintf(stderr, "native stubs: resource-drop is not available natively\n");
    abort();
}

void __component_type_object_force_link_plugin(void) {}

#endif
