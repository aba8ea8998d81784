#!/usr/bin/env python3
"""Native tests of the C helper and a C row plugin, under AddressSanitizer, on both contracts.

    python3 plugins/sdk-c/test/native_tests.py [--gen GEN]... \\
        [--plugin plugins/examples/orders-c/orders.c --cases plugins/examples/orders-cases.jsonl]

Each GEN is a folder of wit-bindgen's C output, for contract 0.2
(`wit-bindgen c wit/transform-0.2.0 -w transformer --out-dir GEN`: transformer.h)
or 0.1 (`wit-bindgen c wit/transform-0.1.0 -w plugin --out-dir GEN`: plugin.h);
the tests run on the contract of each (scripts/build-plugins passes the one it
builds with). Without --gen this script runs the wit-bindgen of $WEIR_TOOLS_DIR
(default ~/.cache/weir-tools) into a temporary folder for each contract, and tests
both.

1. `test_helpers.c`: the decimal examples of the Rust SDK, the getters' and config
   lookups' fixed texts, the output row checks, and on 0.2 the input schema's
   name-to-position memory and `next`.
2. With --plugin and --cases: `native_cases.c` runs the plugin through the generated
   bindings' real export and post-return functions (see its header), every case of
   the case file (the format of plugins/sdk/src/cases.rs; on 0.2 with the schema
   that file describes: every column name in order of first appearance, each row's
   values by position), and compares rows, rejections and errors with the expected
   ones.

Both are built with the host's clang and `-fsanitize=address,undefined`, so a leak,
a double free or a free of memory the plugin does not own fails the run, which a
wasm build would not notice. Prints one line per failed case and a summary; exits
non-zero on any failure. Standard library only.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(SDK))

CFLAGS = ["-std=c11", "-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
          "-fno-sanitize-recover=undefined", "-Wall", "-Wextra", "-Wno-unknown-attributes"]
OPS = {"insert": 0, "update": 1, "delete": 2, "read": 3}
CONTRACTS = ("0.2", "0.1")
# Per contract: the WIT folder and world, the generated C file's base name, the
# preprocessor definitions a plugin is compiled with, and the generated name of the
# session constructor's resource-new (renamed for the native harness).
WIT = {"0.2": ("transform-0.2.0", "transformer"), "0.1": ("transform-0.1.0", "plugin")}
GEN_BASE = {"0.2": "transformer", "0.1": "plugin"}
DEFINES = {"0.2": [], "0.1": ["WEIR_CONTRACT_0_1"]}
SESSION_NEW = {"0.2": "exports_weir_transform_0_2_0_transform_session_new",
               "0.1": "exports_weir_transform_transform_session_new"}
# The type name the 0.2 schema gives a column, by the case of its first non-null value.
TYPE_NAMES = {"boolean": "boolean", "integer": "bigint", "float": "double precision",
              "text": "text", "bytes": "bytea", "decimal": "numeric", "date": "date",
              "timestamp": "timestamp", "json": "jsonb"}
ERROR_TAGS = {0: "invalid-config", 1: "invalid-input", 2: "other"}


def hexstr(s):
    return "x" + (s.encode("utf-8") if isinstance(s, str) else s).hex()


def value_to_tokens(v):
    if v is None:
        return ["n"]
    [(tag, inner)] = v.items()
    if tag == "boolean":
        return ["b", "1" if inner else "0"]
    if tag in ("integer", "timestamp", "date"):
        return [{"integer": "i", "timestamp": "T", "date": "D"}[tag], str(int(inner))]
    if tag == "float":
        f = float(inner)  # "NaN", "Infinity", "-Infinity" parse too
        return ["f", struct.pack(">d", f).hex()]
    if tag in ("text", "decimal", "json"):
        return [{"text": "t", "decimal": "d", "json": "j"}[tag], hexstr(inner)]
    if tag == "bytes":
        return ["y", "x" + inner.lower()]
    if tag == "unsupported":
        return ["u", hexstr(inner["type-name"]), hexstr(inner["text"])]
    raise ValueError(f"unknown value {v!r}")


def rows_of(case):
    return [row for chunk in case["chunks"] for row in chunk]


def schema_of(case):
    """The 0.2 input schema of a case, as plugins/sdk/src/cases.rs makes it: every
    column name in order of first appearance (with a type name from its first
    non-null value), and the key's positions (where the first row's key values sit
    among its columns)."""
    names, types = [], {}
    for row in rows_of(case):
        for name, v in row["columns"].items():
            if name not in names:
                names.append(name)
            if v is not None and not types.get(name):
                [(tag, inner)] = v.items()
                types[name] = inner["type-name"] if tag == "unsupported" else TYPE_NAMES[tag]
    key = []
    rows = rows_of(case)
    if rows:
        first = rows[0]
        for k in first["key"]:
            name = next((n for n, v in first["columns"].items() if v == k), None)
            if name is not None:
                key.append(names.index(name))
    return [(n, types.get(n, "")) for n in names], key


def case_to_tokens(case, contract="0.1"):
    out = ["case", "part", hexstr(case["partition"]["table"]), hexstr(case["partition"]["name"])]
    names = None
    if contract == "0.2":
        columns, key = schema_of(case)
        names = [n for n, _ in columns]
        out += ["schema", str(len(columns))]
        for name, type_name in columns:
            out += [hexstr(name), hexstr(type_name)]
        out += [str(len(key))] + [str(k) for k in key]
    config = sorted((case.get("config") or {}).items())
    out += ["config", str(len(config))]
    for k, v in config:
        out += [hexstr(k), hexstr(v)]
    out += ["chunks", str(len(case["chunks"]))]
    for chunk in case["chunks"]:
        out += ["rows", str(len(chunk))]
        for row in chunk:
            time = row.get("commit_time")
            out += ["row", str(OPS[row["op"]]), str(row.get("commit_position", 0)),
                    "0" if time is None else "1", "0" if time is None else str(time)]
            out.append(str(len(row["key"])))
            for v in row["key"]:
                out += value_to_tokens(v)
            if names is None:
                out.append(str(len(row["columns"])))
                for name, v in row["columns"].items():
                    out.append(hexstr(name))
                    out += value_to_tokens(v)
            else:
                out.append(str(len(names)))
                for name in names:
                    out += value_to_tokens(row["columns"][name]) if name in row["columns"] else ["-"]
    return " ".join(out)


class Tokens:
    def __init__(self, line):
        self.items = line.split()
        self.at = 0

    def next(self):
        self.at += 1
        return self.items[self.at - 1]

    def int(self):
        return int(self.next())

    def str(self):
        t = self.next()
        assert t[0] == "x", t
        return bytes.fromhex(t[1:]).decode("utf-8")

    def value(self):
        tag = self.next()
        if tag == "n":
            return None
        if tag == "b":
            return {"boolean": self.int() != 0}
        if tag in "iTD":
            return {{"i": "integer", "T": "timestamp", "D": "date"}[tag]: self.int()}
        if tag == "f":
            f = struct.unpack(">d", bytes.fromhex(self.next()))[0]
            return {"float": f if f == f and abs(f) != float("inf") else str(f)}
        if tag in "tdj":
            return {{"t": "text", "d": "decimal", "j": "json"}[tag]: self.str()}
        if tag == "y":
            return {"bytes": self.next()[1:]}
        if tag == "u":
            return {"unsupported": {"type-name": self.str(), "text": self.str()}}
        raise ValueError(tag)


def parse_result(line, columns):
    t = Tokens(line)
    kind = t.next()
    if kind == "err":
        tag = t.int()
        return {"error": {ERROR_TAGS[tag]: t.str()}}
    assert kind == "ok", line
    assert t.next() == "rows"
    rows = []
    for _ in range(t.int()):
        n = t.int()
        values = [t.value() for _ in range(n)]
        rows.append(dict(zip(columns, values)))
    assert t.next() == "rejections"
    rejections = []
    for _ in range(t.int()):
        key = [t.value() for _ in range(t.int())]
        rejections.append({"key": key, "reason": t.str()})
    return {"rows": rows, "rejections": rejections}


def canonical(expect):
    """The expected result with values as the harness returns them."""
    def value(v):
        if v is None:
            return None
        [(tag, inner)] = v.items()
        if tag in ("integer", "timestamp", "date"):
            return {tag: int(inner)}
        if tag == "bytes":
            return {tag: inner.lower()}
        return v
    if "error" in expect:
        return {"error": expect["error"]}
    return {
        "rows": [{k: value(v) for k, v in row.items()} for row in expect.get("rows", [])],
        "rejections": [{"key": [value(v) for v in r["key"]], "reason": r["reason"]}
                       for r in expect.get("rejections", [])],
    }


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def contract_of(gen):
    """The contract of a folder of generated bindings."""
    for contract in CONTRACTS:
        if os.path.exists(os.path.join(gen, GEN_BASE[contract] + ".h")):
            return contract
    raise SystemExit(f"{gen}: neither transformer.h nor plugin.h (not wit-bindgen's C output)")


def generate(contract, gen):
    """Runs the installed wit-bindgen for `contract` into `gen`; False if it fails."""
    tools = os.environ.get("WEIR_TOOLS_DIR", os.path.expanduser("~/.cache/weir-tools"))
    wit, world = WIT[contract]
    # It lists every file it writes on stderr: shown only if it fails.
    proc = subprocess.run(
        [os.path.join(tools, "wit-bindgen", "bin", "wit-bindgen"), "c",
         os.path.join(ROOT, "wit", wit), "-w", world, "--out-dir", gen],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout.decode(errors="replace"))
        return False
    return True


def gen_folders(given, tmp):
    """(contract, folder) for each --gen, or for both contracts generated into `tmp`
    (None if wit-bindgen failed)."""
    if given:
        return [(contract_of(g), g) for g in given]
    out = []
    for contract in CONTRACTS:
        gen = os.path.join(tmp, "gen-" + contract)
        if not generate(contract, gen):
            return None
        out.append((contract, gen))
    return out


def generated_c(gen, contract):
    return os.path.join(gen, GEN_BASE[contract] + ".c")


def compile_native(out, source, gen, contract, defines=()):
    """Builds `source` (with the contract's definitions and `defines`) and the
    generated C file (without them: the harness renames one of its functions) into
    the program `out`."""
    objects = []
    flags = [f"-D{d}" for d in (*DEFINES[contract], *defines)]
    # The generated code's own warnings (wasm32-only casts) are not ours: -w.
    for src, src_flags in ((source, flags), (generated_c(gen, contract), ["-w"])):
        obj = f"{out}.{len(objects)}.o"
        run(["clang", *CFLAGS, "-I", gen, "-I", SDK, "-I", HERE, *src_flags, "-c", "-o", obj, src])
        objects.append(obj)
    run(["clang", "-fsanitize=address,undefined", "-o", out, *objects])


def sanitizer_env():
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


def read_cases(path):
    cases = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                cases.append((n, json.loads(line)))
    return cases


def check_case_run(harness, cases, contract, label):
    """Runs the case harness `harness` on `cases`; prints failures and a summary
    line; returns 0 or 1."""
    stdin = "describe\n" + "".join(case_to_tokens(c, contract) + "\n" for _, c in cases)
    proc = subprocess.run([harness], input=stdin.encode(), stdout=subprocess.PIPE,
                          env=sanitizer_env())
    lines = proc.stdout.decode().splitlines()
    status = 0
    if proc.returncode != 0:
        print(f"native_cases exited with {proc.returncode} (a sanitizer report is above)")
        status = 1
    if len(lines) != len(cases) + 1:
        print(f"native_cases gave {len(lines)} lines for {len(cases)} cases")
        return 1
    ct = Tokens(lines[0])
    assert ct.next() == "columns"
    columns = [ct.str() for _ in range(ct.int())]
    failed = 0
    for (n, case), line in zip(cases, lines[1:]):
        got = parse_result(line, columns)
        want = canonical(case["expect"])
        if got != want:
            failed += 1
            print(f"line {n}: {case.get('case')} (contract {contract}): "
                  f"got {json.dumps(got, ensure_ascii=False)}, want {json.dumps(want, ensure_ascii=False)}")
    print(f"{label} (native, sanitized, contract {contract}): "
          f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen", action="append",
                    help="a folder of wit-bindgen's C output (repeatable; default: both contracts)")
    ap.add_argument("--plugin", help="a C row plugin's source (with WEIR_EXPORT_ROW_PLUGIN)")
    ap.add_argument("--cases", help="the JSON-lines cases to run it on")
    args = ap.parse_args()
    if bool(args.plugin) != bool(args.cases):
        ap.error("--plugin and --cases go together")

    with tempfile.TemporaryDirectory() as tmp:
        gens = gen_folders(args.gen, tmp)
        if gens is None:
            return 1
        status = 0
        for contract, gen in gens:
            work = os.path.join(tmp, "build-" + contract)
            os.makedirs(work, exist_ok=True)
            helpers = os.path.join(work, "test_helpers")
            compile_native(helpers, os.path.join(HERE, "test_helpers.c"), gen, contract)
            if subprocess.run([helpers], env=sanitizer_env()).returncode != 0:
                status = 1

            if args.plugin:
                harness = os.path.join(work, "native_cases")
                plugin = os.path.abspath(args.plugin)
                compile_native(harness, os.path.join(HERE, "native_cases.c"), gen, contract, defines=[
                    f'WEIR_TEST_PLUGIN_SOURCE="{plugin}"',
                    f"{SESSION_NEW[contract]}=weir_test_session_new",
                ])
                if check_case_run(harness, read_cases(args.cases), contract,
                                  os.path.basename(plugin)) != 0:
                    status = 1
        return status


if __name__ == "__main__":
    sys.exit(main())
