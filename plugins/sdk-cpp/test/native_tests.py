#!/usr/bin/env python3
"""Native tests of the C++ helper and a C++ row plugin, under AddressSanitizer.

    python3 plugins/sdk-cpp/test/native_tests.py --gen GEN \\
        [--plugin plugins/examples/orders-cpp/orders.cpp --cases plugins/examples/orders-cases.jsonl]

GEN is the folder `wit-bindgen c wit/transform-0.1.0 -w plugin --out-dir GEN` wrote
(scripts/build-plugins makes one; without --gen this script runs the wit-bindgen of
$WEIR_TOOLS_DIR, default ~/.cache/weir-tools, into a temporary folder).

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
import json
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


def compile_program(out, gen, units):
    """Builds `units` ((source, is_cpp, extra flags) each) and the generated plugin.c
    (as C, its own warnings silenced: they are wasm32-only casts) into `out`."""
    objects = []
    for src, cpp, flags in [*units, (os.path.join(gen, "plugin.c"), False, ["-w"])]:
        obj = f"{out}.{len(objects)}.o"
        compiler, std_flags = ("clang++", CXXFLAGS) if cpp else ("clang", CFLAGS)
        c_tests.run([compiler, *std_flags, "-I", gen, *INCLUDES, *flags, "-c", "-o", obj, src])
        objects.append(obj)
    c_tests.run(["clang++", "-fsanitize=address,undefined", "-o", out, *objects])


def run_cases(tmp, gen, plugin, cases_file):
    """The C harness (with no plugin of its own: it includes only the helper) and the
    C++ plugin, in two translation units; the session constructor's rename (see
    native_cases.c) applies to the plugin's."""
    harness = os.path.join(tmp, "native_cases")
    rename = "-Dexports_weir_transform_transform_session_new=weir_test_session_new"
    compile_program(harness, gen, [
        (os.path.join(C_TEST, "native_cases.c"), False,
         ['-DWEIR_TEST_PLUGIN_SOURCE="weir_plugin.h"', rename]),
        (plugin, True, [rename]),
    ])
    cases = []
    with open(cases_file, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                cases.append((n, json.loads(line)))
    stdin = "describe\n" + "".join(c_tests.case_to_tokens(c) + "\n" for _, c in cases)
    proc = subprocess.run([harness], input=stdin.encode(), stdout=subprocess.PIPE,
                          env=c_tests.sanitizer_env())
    lines = proc.stdout.decode().splitlines()
    status = 0
    if proc.returncode != 0:
        print(f"native_cases exited with {proc.returncode} (a sanitizer report is above)")
        status = 1
    if len(lines) != len(cases) + 1:
        print(f"native_cases gave {len(lines)} lines for {len(cases)} cases")
        return 1
    ct = c_tests.Tokens(lines[0])
    assert ct.next() == "columns"
    columns = [ct.str() for _ in range(ct.int())]
    failed = 0
    for (n, case), line in zip(cases, lines[1:]):
        got = c_tests.parse_result(line, columns)
        want = c_tests.canonical(case["expect"])
        if got != want:
            failed += 1
            print(f"line {n}: {case.get('case')}: got {json.dumps(got, ensure_ascii=False)}, "
                  f"want {json.dumps(want, ensure_ascii=False)}")
    print(f"{os.path.basename(plugin)} (native, sanitized): "
          f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen", help="the folder of wit-bindgen's C output")
    ap.add_argument("--plugin", help="a C++ row plugin's source (with WEIR_EXPORT_CPP_ROW_PLUGIN)")
    ap.add_argument("--cases", help="the JSON-lines cases to run it on")
    args = ap.parse_args()
    if bool(args.plugin) != bool(args.cases):
        ap.error("--plugin and --cases go together")

    with tempfile.TemporaryDirectory() as tmp:
        gen = args.gen
        if gen is None:
            tools = os.environ.get("WEIR_TOOLS_DIR", os.path.expanduser("~/.cache/weir-tools"))
            gen = os.path.join(tmp, "gen")
            # It lists every file it writes on stderr: shown only if it fails.
            gen_run = subprocess.run(
                [os.path.join(tools, "wit-bindgen", "bin", "wit-bindgen"), "c",
                 os.path.join(ROOT, "wit", "transform-0.1.0"), "-w", "plugin", "--out-dir", gen],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if gen_run.returncode != 0:
                sys.stderr.write(gen_run.stdout.decode(errors="replace"))
                return 1
        status = 0

        helpers = os.path.join(tmp, "test_helpers")
        compile_program(helpers, gen, [(os.path.join(HERE, "test_helpers.cpp"), True, [])])
        if subprocess.run([helpers], env=c_tests.sanitizer_env()).returncode != 0:
            status = 1

        if args.plugin:
            if run_cases(tmp, gen, os.path.abspath(args.plugin), args.cases) != 0:
                status = 1
        return status


if __name__ == "__main__":
    sys.exit(main())
