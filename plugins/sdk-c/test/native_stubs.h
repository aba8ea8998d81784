/*
 * What the generated bindings (`transformer.c` on contract 0.2, `plugin.c` on 0.1)
 * import, for a native build of a plugin's C code (the tests in this folder, under
 * AddressSanitizer): the `log` import writes to stderr, the resource intrinsics are
 * never reached (the case harness renames the session constructor's call, see
 * native_cases.c), and the component-type object (a wasm object file) is not
 * linked.
 *
 * Include it in exactly one file of a native test program, after weir_plugin.h (or
 * with WEIR_CONTRACT_0_1 defined for 0.1, as weir_plugin.h reads it).
 */
#ifndef WEIR_NATIVE_STUBS_H
#define WEIR_NATIVE_STUBS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef WEIR_CONTRACT_0_1
#define WEIR__STUB_LOG __wasm_import_weir_transform_log_log
#define WEIR__STUB_RESOURCE(name) __wasm_import_exports_weir_transform_transform_session_##name
#define WEIR__STUB_FORCE_LINK __component_type_object_force_link_plugin
#else
#define WEIR__STUB_LOG __wasm_import_weir_transform_0_1_0_log_log
#define WEIR__STUB_RESOURCE(name) __wasm_import_exports_weir_transform_0_2_0_transform_session_##name
#define WEIR__STUB_FORCE_LINK __component_type_object_force_link_transformer
#endif

void WEIR__STUB_LOG(int32_t level, uint8_t *ptr, size_t len) {
    fprintf(stderr, "[plugin log %d] %.*s\n", (int)level, (int)len, (const char *)ptr);
}

int32_t WEIR__STUB_RESOURCE(new)(int32_t rep) {
    (void)rep;
    fprintf(stderr, "native stubs: resource-new is not available natively\n");
    abort();
}

int32_t WEIR__STUB_RESOURCE(rep)(int32_t handle) {
    (void)handle;
    fprintf(stderr, "native stubs: resource-rep is not available natively\n");
    abort();
}

void WEIR__STUB_RESOURCE(drop)(int32_t handle) {
    (void)handle;
    fprintf(stderr, "native stubs: resource-drop is not available natively\n");
    abort();
}

void WEIR__STUB_FORCE_LINK(void) {}

#endif
