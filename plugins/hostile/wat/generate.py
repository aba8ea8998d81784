#!/usr/bin/env python3
"""Writes the hostile components that no guest language can express, as component text
(`jco parse` turns each into a binary; `scripts/build-plugins` runs both).

Each is a `weir:transform@0.1.0` component with a hand-written core module: `describe`
returns a fixed description (row plugin; `id bigint not null`, `order_date date`,
`filler text`; grain key `id`; partition column `order_date`) laid out by the canonical
ABI below, the session constructor makes a handle, `finish` returns no rows, and `push`
does the hostile act:

* `hostile-memories`: 15 linear memories besides the main one, each grown by 20 MiB:
  no one memory is large, together they pass the instance's memory cap.
* `hostile-table`: grows a table by 40 million elements (320 MB of host memory).
* `hostile-alias`: returns 100,000 output rows that all point at one 1 MiB text in
  its memory: 4 MiB of guest memory, 100 GB if the host copied every row.
* `hostile-instances`: 300 core instances (made at instantiation, so it fails to load).

Usage: generate.py OUT_DIR  (writes OUT_DIR/<name>.wat for each).
"""

import struct
import sys
from pathlib import Path

# Where the core module keeps things (one 64 KiB page is 65536 bytes).
DATA = 1024  # the description and its strings
RESULT = 4096  # push/finish's return area: result<push-output, error>
VALUES = 8192  # the one output row's three values (24 bytes each, 8-aligned)
ROWS = 16384  # 100,000 rows of (pointer, length) to VALUES
BUFFER = 1 << 20  # the 1 MiB text every row points at
HEAP = 2 << 20  # cabi_realloc's bump allocator starts here
PAGES = 48  # 3 MiB of initial memory
ALIAS_ROWS = 100_000
BUFFER_BYTES = 1 << 20


def description(name):
    """The description record and everything it points at, as bytes placed at DATA."""
    blob = bytearray()

    def put(b, align=1):
        while (DATA + len(blob)) % align:
            blob.append(0)
        at = DATA + len(blob)
        blob.extend(b)
        return at

    def string(s):
        b = s.encode()
        return put(b), len(b)

    name_s = string(name)
    version_s = string("0.1.0")
    columns = [
        ("id", 2, 0),  # column-type case 2: bigint; not null
        ("order_date", 9, 1),  # case 9: date; nullable
        ("filler", 6, 1),  # case 6: text; nullable
    ]
    column_names = [string(c[0]) for c in columns]
    # column record: name (ptr, len) @0, column-type variant @8 (discriminant u8,
    # payload at +4, 16 bytes), nullable bool @24; size 28, align 4.
    records = b""
    for (col, case, nullable), (ptr, length) in zip(columns, column_names):
        rec = struct.pack("<II", ptr, length)
        rec += struct.pack("<B3x12x", case)
        rec += struct.pack("<B3x", nullable)
        assert len(rec) == 28
        records += rec
    columns_at = put(records, 4)
    grain_at = put(struct.pack("<II", *column_names[0]), 4)
    partition_s = column_names[1]
    # description: name @0, version @8, kind enum u8 @16 (0: row), columns @20,
    # grain-key @28, partition-column @36; size 44.
    desc = struct.pack("<IIII", *name_s, *version_s)
    desc += struct.pack("<B3x", 0)
    desc += struct.pack("<II", columns_at, len(columns))
    desc += struct.pack("<II", grain_at, 1)
    desc += struct.pack("<II", *partition_s)
    assert len(desc) == 44
    desc_at = put(desc, 4)
    assert DATA + len(blob) < RESULT
    return desc_at, bytes(blob)


def wat_bytes(b):
    return "".join(f"\\{x:02x}" for x in b)


def push_body(kind):
    """The core instructions of `push` (params: self, rows pointer, rows length)."""
    if kind == "memories":
        grow = "\n".join(
            f"    (drop (memory.grow $m{i} (i32.const 320)))" for i in range(1, 16)
        )
        return grow + "\n    (call $empty)"
    if kind == "table":
        return (
            "    (drop (table.grow $t (ref.null func) (i32.const 40000000)))\n"
            "    (call $empty)"
        )
    if kind == "alias":
        return f"""    (local $i i32)
    ;; The one row: integer(1), date(20513), text(BUFFER, 1 MiB).
    (i32.store8 (i32.const {VALUES}) (i32.const 2))
    (i64.store (i32.const {VALUES + 8}) (i64.const 1))
    (i32.store8 (i32.const {VALUES + 24}) (i32.const 7))
    (i32.store (i32.const {VALUES + 32}) (i32.const 20513))
    (i32.store8 (i32.const {VALUES + 48}) (i32.const 4))
    (i32.store (i32.const {VALUES + 56}) (i32.const {BUFFER}))
    (i32.store (i32.const {VALUES + 60}) (i32.const {BUFFER_BYTES}))
    ;; Every row is (VALUES, 3).
    (block $done
      (loop $rows
        (br_if $done (i32.ge_u (local.get $i) (i32.const {ALIAS_ROWS})))
        (i32.store (i32.add (i32.const {ROWS}) (i32.shl (local.get $i) (i32.const 3)))
          (i32.const {VALUES}))
        (i32.store (i32.add (i32.const {ROWS + 4}) (i32.shl (local.get $i) (i32.const 3)))
          (i32.const 3))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $rows)))
    (call $empty)
    (i32.store (i32.const {RESULT + 4}) (i32.const {ROWS}))
    (i32.store (i32.const {RESULT + 8}) (i32.const {ALIAS_ROWS}))"""
    return "    (call $empty)"


def core_module(name, kind):
    desc_at, blob = description(name)
    extra_memories = (
        "\n".join(f"  (memory $m{i} 0)" for i in range(1, 16))
        if kind == "memories"
        else ""
    )
    table = "  (table $t 1 funcref)" if kind == "table" else ""
    return f"""(core module $main
  (import "[export]weir:transform/transform@0.1.0" "[resource-new]session"
    (func $resource-new (param i32) (result i32)))
  (memory $memory {PAGES})
{extra_memories}
{table}
  (global $heap (mut i32) (i32.const {HEAP}))
  (data (i32.const {DATA}) "{wat_bytes(blob)}")
  (export "memory" (memory $memory))
  ;; A bump allocator; memory grows as the host needs room.
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $at i32) (local $end i32)
    (local.set $at (i32.and
      (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
      (i32.sub (i32.const 0) (local.get 2))))
    (local.set $end (i32.add (local.get $at) (local.get 3)))
    (if (i32.gt_u (local.get $end) (i32.mul (memory.size $memory) (i32.const 65536)))
      (then (if (i32.eq (i32.const -1) (memory.grow $memory
        (i32.add (i32.shr_u (i32.sub (local.get $end)
          (i32.mul (memory.size $memory) (i32.const 65536))) (i32.const 16)) (i32.const 1))))
        (then unreachable))))
    (global.set $heap (local.get $end))
    (local.get $at))
  ;; result<push-output, error> = ok with no rows and no rejections.
  (func $empty
    (i32.store8 (i32.const {RESULT}) (i32.const 0))
    (i32.store (i32.const {RESULT + 4}) (i32.const 0))
    (i32.store (i32.const {RESULT + 8}) (i32.const 0))
    (i32.store (i32.const {RESULT + 12}) (i32.const 0))
    (i32.store (i32.const {RESULT + 16}) (i32.const 0)))
  (func (export "describe") (result i32) (i32.const {desc_at}))
  (func (export "constructor") (param i32 i32 i32 i32 i32 i32) (result i32)
    (call $resource-new (i32.const 1)))
  (func (export "push") (param i32 i32 i32) (result i32)
{push_body(kind)}
    (i32.const {RESULT}))
  (func (export "finish") (param i32) (result i32)
    (call $empty)
    (i32.const {RESULT}))
)"""


# The component around the core module: the types interface imported, the exported
# interface re-exported through a shim component that names its types, as
# wit-component lays a component out.
TYPES = """  (type $types-type
    (instance
      (type (;0;) (record (field "type-name" string) (field "text" string)))
      (export (;1;) "unsupported-value" (type (eq 0)))
      (type (;2;) (list u8))
      (type (;3;) (variant (case "null") (case "boolean" bool) (case "integer" s64) (case "float" f64) (case "text" string) (case "bytes" 2) (case "decimal" string) (case "date" s32) (case "timestamp" s64) (case "json" string) (case "unsupported" 1)))
      (export (;4;) "value" (type (eq 3)))
      (type (;5;) (list 4))
      (export (;6;) "row" (type (eq 5)))
      (type (;7;) (record (field "precision" u32) (field "scale" u32)))
      (export (;8;) "numeric-type" (type (eq 7)))
      (type (;9;) (option 8))
      (type (;10;) (option u32))
      (type (;11;) (variant (case "smallint") (case "integer") (case "bigint") (case "real") (case "double-precision") (case "numeric" 9) (case "text") (case "varchar" 10) (case "boolean") (case "date") (case "timestamp") (case "timestamptz") (case "uuid") (case "json") (case "jsonb") (case "bytea")))
      (export (;12;) "column-type" (type (eq 11)))
      (type (;13;) (record (field "name" string) (field "type" 12) (field "nullable" bool)))
      (export (;14;) "column" (type (eq 13)))
      (type (;15;) (record (field "name" string) (field "value" 4)))
      (export (;16;) "column-value" (type (eq 15)))
      (type (;17;) (variant (case "invalid-config" string) (case "invalid-input" string) (case "other" string)))
      (export (;18;) "error" (type (eq 17)))
    )
  )
  (import "weir:transform/types@0.1.0" (instance $types (type $types-type)))
  (alias export $types "value" (type $value))
  (alias export $types "row" (type $row))
  (alias export $types "column" (type $column))
  (alias export $types "column-value" (type $column-value))
  (alias export $types "error" (type $error))
  (alias export $types "unsupported-value" (type $unsupported-value))
  (alias export $types "numeric-type" (type $numeric-type))
  (alias export $types "column-type" (type $column-type))
  (type $kind (enum "row" "partition"))
  (type $columns (list $column))
  (type $strings (list string))
  (type $description (record (field "name" string) (field "version" string) (field "kind" $kind) (field "columns" $columns) (field "grain-key" $strings) (field "partition-column" string)))
  (type $partition-info (record (field "table" string) (field "name" string)))
  (type $op (enum "insert" "update" "delete" "read"))
  (type $values (list $value))
  (type $time (option s64))
  (type $column-values (list $column-value))
  (type $staged-row (record (field "key" $values) (field "op" $op) (field "commit-position" u64) (field "commit-time" $time) (field "columns" $column-values)))
  (type $rejection (record (field "key" $values) (field "reason" string)))
  (type $rows (list $row))
  (type $rejections (list $rejection))
  (type $push-output (record (field "rows" $rows) (field "rejections" $rejections)))
  (type $session (resource (rep i32)))
  (core func $resource-new (canon resource.new $session))
  (core instance $session-exports
    (export "[resource-new]session" (func $resource-new)))
"""

LIFTS = """  (alias core export $main "memory" (core memory $mem))
  (alias core export $main "cabi_realloc" (core func $realloc))
  (type $pair (tuple string string))
  (type $config (list $pair))
  (type $own-session (own $session))
  (type $constructor-type (func (param "partition" $partition-info) (param "config" $config) (result $own-session)))
  (alias core export $main "constructor" (core func $core-constructor))
  (func $constructor (type $constructor-type) (canon lift (core func $core-constructor) (memory $mem) (realloc $realloc) string-encoding=utf8))
  (type $borrow-session (borrow $session))
  (type $staged-rows (list $staged-row))
  (type $push-result (result $push-output (error $error)))
  (type $push-type (func (param "self" $borrow-session) (param "rows" $staged-rows) (result $push-result)))
  (alias core export $main "push" (core func $core-push))
  (func $push (type $push-type) (canon lift (core func $core-push) (memory $mem) (realloc $realloc) string-encoding=utf8))
  (type $finish-type (func (param "self" $borrow-session) (result $push-result)))
  (alias core export $main "finish" (core func $core-finish))
  (func $finish (type $finish-type) (canon lift (core func $core-finish) (memory $mem) string-encoding=utf8))
  (type $describe-type (func (result $description)))
  (alias core export $main "describe" (core func $core-describe))
  (func $describe (type $describe-type) (canon lift (core func $core-describe) (memory $mem) string-encoding=utf8))
"""

SHIM = """  (component $shim
    (type (;0;) (record (field "type-name" string) (field "text" string)))
    (import "import-type-unsupported-value" (type (;1;) (eq 0)))
    (type (;2;) (list u8))
    (type (;3;) (variant (case "null") (case "boolean" bool) (case "integer" s64) (case "float" f64) (case "text" string) (case "bytes" 2) (case "decimal" string) (case "date" s32) (case "timestamp" s64) (case "json" string) (case "unsupported" 1)))
    (import "import-type-value" (type (;4;) (eq 3)))
    (type (;5;) (list 4))
    (import "import-type-row" (type (;6;) (eq 5)))
    (type (;7;) (record (field "precision" u32) (field "scale" u32)))
    (import "import-type-numeric-type" (type (;8;) (eq 7)))
    (type (;9;) (option 8))
    (type (;10;) (option u32))
    (type (;11;) (variant (case "smallint") (case "integer") (case "bigint") (case "real") (case "double-precision") (case "numeric" 9) (case "text") (case "varchar" 10) (case "boolean") (case "date") (case "timestamp") (case "timestamptz") (case "uuid") (case "json") (case "jsonb") (case "bytea")))
    (import "import-type-column-type" (type (;12;) (eq 11)))
    (type (;13;) (record (field "name" string) (field "type" 12) (field "nullable" bool)))
    (import "import-type-column" (type (;14;) (eq 13)))
    (type (;15;) (record (field "name" string) (field "value" 4)))
    (import "import-type-column-value" (type (;16;) (eq 15)))
    (type (;17;) (variant (case "invalid-config" string) (case "invalid-input" string) (case "other" string)))
    (import "import-type-error" (type (;18;) (eq 17)))
    (import "import-type-session" (type (;19;) (sub resource)))
    (type (;20;) (record (field "table" string) (field "name" string)))
    (import "import-type-partition-info" (type (;21;) (eq 20)))
    (type (;22;) (tuple string string))
    (type (;23;) (list 22))
    (type (;24;) (own 19))
    (type (;25;) (func (param "partition" 21) (param "config" 23) (result 24)))
    (import "import-constructor-session" (func (;0;) (type 25)))
    (type (;26;) (borrow 19))
    (type (;27;) (list 4))
    (type (;28;) (enum "insert" "update" "delete" "read"))
    (import "import-type-op" (type (;29;) (eq 28)))
    (type (;30;) (option s64))
    (type (;31;) (list 16))
    (type (;32;) (record (field "key" 27) (field "op" 29) (field "commit-position" u64) (field "commit-time" 30) (field "columns" 31)))
    (import "import-type-staged-row" (type (;33;) (eq 32)))
    (type (;34;) (list 33))
    (type (;35;) (list 6))
    (type (;36;) (record (field "key" 27) (field "reason" string)))
    (import "import-type-rejection" (type (;37;) (eq 36)))
    (type (;38;) (list 37))
    (type (;39;) (record (field "rows" 35) (field "rejections" 38)))
    (import "import-type-push-output" (type (;40;) (eq 39)))
    (type (;41;) (result 40 (error 18)))
    (type (;42;) (func (param "self" 26) (param "rows" 34) (result 41)))
    (import "import-method-session-push" (func (;1;) (type 42)))
    (type (;43;) (func (param "self" 26) (result 41)))
    (import "import-method-session-finish" (func (;2;) (type 43)))
    (type (;44;) (enum "row" "partition"))
    (import "import-type-kind" (type (;45;) (eq 44)))
    (type (;46;) (list 14))
    (type (;47;) (list string))
    (type (;48;) (record (field "name" string) (field "version" string) (field "kind" 45) (field "columns" 46) (field "grain-key" 47) (field "partition-column" string)))
    (import "import-type-description" (type (;49;) (eq 48)))
    (type (;50;) (func (result 49)))
    (import "import-func-describe" (func (;3;) (type 50)))
    (export (;51;) "value" (type 4))
    (export (;52;) "row" (type 6))
    (export (;53;) "column" (type 14))
    (export (;54;) "column-value" (type 16))
    (export (;55;) "error" (type 18))
    (type (;56;) (enum "row" "partition"))
    (export (;57;) "kind" (type 56))
    (type (;58;) (list 53))
    (type (;59;) (list string))
    (type (;60;) (record (field "name" string) (field "version" string) (field "kind" 57) (field "columns" 58) (field "grain-key" 59) (field "partition-column" string)))
    (export (;61;) "description" (type 60))
    (type (;62;) (record (field "table" string) (field "name" string)))
    (export (;63;) "partition-info" (type 62))
    (type (;64;) (enum "insert" "update" "delete" "read"))
    (export (;65;) "op" (type 64))
    (type (;66;) (list 51))
    (type (;67;) (option s64))
    (type (;68;) (list 54))
    (type (;69;) (record (field "key" 66) (field "op" 65) (field "commit-position" u64) (field "commit-time" 67) (field "columns" 68)))
    (export (;70;) "staged-row" (type 69))
    (type (;71;) (record (field "key" 66) (field "reason" string)))
    (export (;72;) "rejection" (type 71))
    (type (;73;) (list 52))
    (type (;74;) (list 72))
    (type (;75;) (record (field "rows" 73) (field "rejections" 74)))
    (export (;76;) "push-output" (type 75))
    (export (;77;) "session" (type 19))
    (type (;78;) (tuple string string))
    (type (;79;) (list 78))
    (type (;80;) (own 77))
    (type (;81;) (func (param "partition" 63) (param "config" 79) (result 80)))
    (export (;4;) "[constructor]session" (func 0) (func (type 81)))
    (type (;82;) (borrow 77))
    (type (;83;) (list 70))
    (type (;84;) (result 76 (error 55)))
    (type (;85;) (func (param "self" 82) (param "rows" 83) (result 84)))
    (export (;5;) "[method]session.push" (func 1) (func (type 85)))
    (type (;86;) (func (param "self" 82) (result 84)))
    (export (;6;) "[method]session.finish" (func 2) (func (type 86)))
    (type (;87;) (func (result 61)))
    (export (;7;) "describe" (func 3) (func (type 87)))
  )
  (instance $transform (instantiate $shim
      (with "import-constructor-session" (func $constructor))
      (with "import-method-session-push" (func $push))
      (with "import-method-session-finish" (func $finish))
      (with "import-func-describe" (func $describe))
      (with "import-type-unsupported-value" (type $unsupported-value))
      (with "import-type-value" (type $value))
      (with "import-type-row" (type $row))
      (with "import-type-numeric-type" (type $numeric-type))
      (with "import-type-column-type" (type $column-type))
      (with "import-type-column" (type $column))
      (with "import-type-column-value" (type $column-value))
      (with "import-type-error" (type $error))
      (with "import-type-session" (type $session))
      (with "import-type-partition-info" (type $partition-info))
      (with "import-type-op" (type $op))
      (with "import-type-staged-row" (type $staged-row))
      (with "import-type-rejection" (type $rejection))
      (with "import-type-push-output" (type $push-output))
      (with "import-type-kind" (type $kind))
      (with "import-type-description" (type $description))
    )
  )
  (export "weir:transform/transform@0.1.0" (instance $transform))
"""


def component(name, kind):
    module = core_module(name, kind if kind != "instances" else "none")
    many = ""
    if kind == "instances":
        # 300 instances of an empty module, made when the component is instantiated.
        many = "  (core module $tiny)\n" + "".join(
            f"  (core instance (instantiate $tiny))\n" for _ in range(300)
        )
    indented = "\n".join("  " + line for line in module.split("\n"))
    return (
        "(component\n"
        + TYPES
        + indented
        + "\n  (core instance $main (instantiate $main\n"
        + '      (with "[export]weir:transform/transform@0.1.0" (instance $session-exports))))\n'
        + many
        + LIFTS
        + SHIM
        + ")\n"
    )


BOMBS = {
    "hostile-memories": "memories",
    "hostile-table": "table",
    "hostile-alias": "alias",
    "hostile-instances": "instances",
}

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: generate.py OUT_DIR")
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, kind in BOMBS.items():
        (out / f"{name}.wat").write_text(component(name, kind))
        print(out / f"{name}.wat")
