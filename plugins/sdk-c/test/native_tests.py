#!/usr/bin/env python3
"""Native tests of the C helper and a C row plugin, under AddressSanitizer.

    python3 plugins/sdk-c/test/native_tests.py --gen GEN \\
        [--plugin plugins/examples/orders-c/orders.c --cases plugins/examples/orders-cases.jsonl]

GEN is the folder `wit-bindgen c wit/transform-0.1.0 -w plugin --out-dir GEN` wrote
(scripts/build-plugins makes one; without --gen this script runs the wit-bindgen of
$WEIR_TOOLS_DIR, default ~/.cache/weir-tools, into a temporary folder).

1. `test_helpers.c`: the decimal examples of the Rust SDK, the getters' and config
   lookups' fixed texts, the output row checks.
2. With --plugin and --cases: `native_cases.c` runs the plugin through the generated
   bindings' real export and post-return functions (see its header), every case of
   the case file (the format of plugins/sdk/src/cases.rs), and compares rows,
   rejections and errors with the expected ones.

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


def case_to_tokens(case):
    out = ["case", "part", hexstr(case["partition"]["table"]), hexstr(case["partition"]["name"])]
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
            out.append(str(len(row["columns"])))
            for name, v in row["columns"].items():
                out.append(hexstr(name))
                out += value_to_tokens(v)
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


def compile_native(out, source, gen, defines=()):
    """Builds `source` (with `defines`) and the generated plugin.c (without them: the
    harness renames one of its functions) into the program `out`."""
    objects = []
    # The generated code's own warnings (wasm32-only casts) are not ours: -w.
    for src, flags in ((source, [f"-D{d}" for d in defines]),
                       (os.path.join(gen, "plugin.c"), ["-w"])):
        obj = f"{out}.{len(objects)}.o"
        run(["clang", *CFLAGS, "-I", gen, "-I", SDK, "-I", HERE, *flags, "-c", "-o", obj, src])
        objects.append(obj)
    run(["clang", "-fsanitize=address,undefined", "-o", out, *objects])


def sanitizer_env():
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0:exitcode=23"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gen", help="the folder of wit-bindgen's C output")
    ap.add_argument("--plugin", help="a C row plugin's source (with WEIR_EXPORT_ROW_PLUGIN)")
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
        compile_native(helpers, os.path.join(HERE, "test_helpers.c"), gen)
        if subprocess.run([helpers], env=sanitizer_env()).returncode != 0:
            status = 1

        if args.plugin:
            harness = os.path.join(tmp, "native_cases")
            plugin = os.path.abspath(args.plugin)
            compile_native(harness, os.path.join(HERE, "native_cases.c"), gen, defines=[
                f'WEIR_TEST_PLUGIN_SOURCE="{plugin}"',
                "exports_weir_transform_transform_session_new=weir_test_session_new",
            ])
            cases = []
            with open(args.cases, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        cases.append((n, json.loads(line)))
            stdin = "describe\n" + "".join(case_to_tokens(c) + "\n" for _, c in cases)
            proc = subprocess.run([harness], input=stdin.encode(), stdout=subprocess.PIPE,
                                  env=sanitizer_env())
            lines = proc.stdout.decode().splitlines()
            failed = 0
            if proc.returncode != 0:
                print(f"native_cases exited with {proc.returncode} (a sanitizer report is above)")
                status = 1
            if len(lines) != len(cases) + 1:
                print(f"native_cases gave {len(lines)} lines for {len(cases)} cases")
                status = 1
            else:
                ct = Tokens(lines[0])
                assert ct.next() == "columns"
                columns = [ct.str() for _ in range(ct.int())]
                for (n, case), line in zip(cases, lines[1:]):
                    got = parse_result(line, columns)
                    want = canonical(case["expect"])
                    if got != want:
                        failed += 1
                        print(f"line {n}: {case.get('case')}: got {json.dumps(got, ensure_ascii=False)}, "
                              f"want {json.dumps(want, ensure_ascii=False)}")
                print(f"{os.path.basename(plugin)} (native, sanitized): "
                      f"{len(cases) - failed} passed, {failed} failed")
                if failed:
                    status = 1
        return status


if __name__ == "__main__":
    sys.exit(main())
