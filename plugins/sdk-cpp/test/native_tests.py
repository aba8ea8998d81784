#!/usr/bin/env python3
"""Native tests of the C++ helper and a C++ row plugin, under AddressSanitizer, on both contracts.

    python3 plugins/sdk-cpp/test/native_tests.py [--gen GEN]... \\
        [--plugin plugins/examples/orders-cpp/orders.cpp --cases plugins/examples/orders-cases.jsonl]

Each GEN is a folder of wit-bindgen's C output, for contract 0.2
(`wit-bindgen c wit/transform-0.2.0 -w transformer --out-dir GEN`) or 0.1
(`wit-bindgen c wit/transform-0.1.0 -w plugin --out-dir GEN`); the tests run on
the contract of each (scripts/build-plugins passes the one it builds with).
Without --gen this script runs the wit-bindgen of $WEIR_TOOLS_DIR (default
~/.cache/weir-tools) into a temporary folder for each contract, and tests both.

1. `test_helpers.cpp`: the C++ layer (RAII and moves, results and WEIR_TRY, the
   getters' and config lookups' fixed texts, every `Row::set` overload and every
   form of plugin class through the C driver).
2. With --plugin and --cases: the C helper's case harness
   (`plugins/sdk-c/test/native_cases.c`, compiled as C) runs the C++ plugin (compiled
   as C++) through the generated bindings' real export and post-return functions,
   every case of the case file, and compares rows, rejections and errors with the
   expected ones. The case conversions are the C helper's (`native_tests.py` there).

Everything is built with the host's clang/clang++ (and libstdc++) with
`-fsanitize=address,undefined` and `-fno-exceptions`, so a leak, a double free or a
free of memory the plugin does not own fails the run, which a wasm build would not
notice. Prints one line per failed case and a summary; exits non-zero on any
failure. Standard library only.
"""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(SDK))
C_SDK = os.path.join(ROOT, "plugins", "sdk-c")
C_TEST = os.path.join(C_SDK, "test")

# Imported without writing bytecode into the repository.
sys.dont_write_bytecode = True
_spec = importlib.util.spec_from_file_location("weir_c_native_tests",
                                               os.path.join(C_TEST, "native_tests.py"))
c_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(c_tests)

SANITIZE = ["-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
            "-fno-sanitize-recover=undefined", "-Wall", "-Wextra", "-Wno-unknown-attributes"]
CXXFLAGS = ["-std=c++20", "-fno-exceptions", *SANITIZE]
CFLAGS = ["-std=c11", *SANITIZE]
INCLUDES = ["-I", SDK, "-I", C_SDK, "-I", C_TEST]


def compile_program(out, gen, contract, units):
    """Builds `units` ((source, is_cpp, extra flags) each, with the contract's
    definitions) and the generated C file (as C, its own warnings silenced: they are
    wasm32-only casts) into `out`."""
    defines = [f"-D{d}" for d in c_tests.DEFINES[contract]]
    objects = []
    for src, cpp, flags in [*[(u[0], u[1], [*defines, *u[2]]) for u in units],
                            (c_tests.generated_c(gen, contract), False, ["-w"])]:
        obj = f"{out}.{len(objects)}.o"
        compiler, std_flags = ("clang++", CXXFLAGS) if cpp else ("clang", CFLAGS)
        c_tests.run([compiler, *std_flags, "-I", gen, *INCLUDES, *flags, "-c", "-o", obj, src])
        objects.append(obj)
    c_tests.run(["clang++", "-fsanitize=address,undefined", "-o", out, *objects])


def run_cases(work, gen, contract, plugin, cases_file):
    """The C harness (with no plugin of its own: it includes only the helper) and the
    C++ plugin, in two translation units; the session constructor's rename (see
    native_cases.c) applies to the plugin's."""
    harness = os.path.join(work, "native_cases")
    rename = f"-D{c_tests.SESSION_NEW[contract]}=weir_test_session_new"
    compile_program(harness, gen, contract, [
        (os.path.join(C_TEST, "native_cases.c"), False,
         ['-DWEIR_TEST_PLUGIN_SOURCE="weir_plugin.h"', rename]),
        (plugin, True, [rename]),
    ])
    return c_tests.check_case_run(harness, c_tests.read_cases(cases_file), contract,
                                  os.path.basename(plugin))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen", action="append",
                    help="a folder of wit-bindgen's C output (repeatable; default: both contracts)")
    ap.add_argument("--plugin", help="a C++ row plugin's source (with WEIR_EXPORT_CPP_ROW_PLUGIN)")
    ap.add_argument("--cases", help="the JSON-lines cases to run it on")
    args = ap.parse_args()
    if bool(args.plugin) != bool(args.cases):
        ap.error("--plugin and --cases go together")

    with tempfile.TemporaryDirectory() as tmp:
        gens = c_tests.gen_folders(args.gen, tmp)
        if gens is None:
            return 1
        status = 0
        for contract, gen in gens:
            work = os.path.join(tmp, "build-" + contract)
            os.makedirs(work, exist_ok=True)
            helpers = os.path.join(work, "test_helpers")
            compile_program(helpers, gen, contract,
                            [(os.path.join(HERE, "test_helpers.cpp"), True, [])])
            if subprocess.run([helpers], env=c_tests.sanitizer_env()).returncode != 0:
                status = 1
            if args.plugin:
                if run_cases(work, gen, contract, os.path.abspath(args.plugin), args.cases) != 0:
                    status = 1
        return status


if __name__ == "__main__":
    sys.exit(main())
