"""The componentize-py glue (`weir_plugin.component`), natively, against the bindings
componentize-py generates, for each contract: world `transformer` of
`wit/transform-0.2.0` and world `plugin` of `wit/transform-0.1.0`.

The bindings are made here, into a temporary folder, by the pinned componentize-py if
scripts/install-plugin-tools installed it (`$WEIR_TOOLS_DIR/py`, default
`~/.cache/weir-tools/py`); `WEIR_PY_BINDINGS=FOLDER` uses a folder made by

    PYTHONPATH=$HOME/.cache/weir-tools/py python3 $HOME/.cache/weir-tools/py/bin/componentize-py \\
        -d wit/transform-0.2.0 -w transformer bindings FOLDER

instead (its contract is read off it; the other contract's tests are skipped). Without
either the tests are skipped (the built components are tested end to end by
`weir plugin test --cases`, `plugins/tools/run-component-cases.mjs` and the engine's
integration tests).

Both contracts' bindings are the same modules (`wit_world`, `componentize_py_types`),
so each test class imports its own: it puts its folder first on `sys.path` and drops
the other's modules (and `weir_plugin.component`, which binds them at import)."""

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from test_session import Doubler, Many, Totals  # noqa: E402

WIT = HERE.parents[2] / "wit"
WORLDS = {"0.2": ("transform-0.2.0", "transformer"), "0.1": ("transform-0.1.0", "plugin")}
_BINDINGS = {}


def bindings(contract):
    """The folder of `contract`'s bindings, or why there is none."""
    if contract in _BINDINGS:
        return _BINDINGS[contract]
    given = os.environ.get("WEIR_PY_BINDINGS")
    if given:
        has_schema = "class InputSchema" in (Path(given) / "wit_world/exports/transform.py").read_text()
        found = given if has_schema == (contract == "0.2") else (None, f"WEIR_PY_BINDINGS is not of contract {contract}")
    else:
        tools = Path(os.environ.get("WEIR_TOOLS_DIR", Path.home() / ".cache/weir-tools")) / "py"
        wit_dir, world = WORLDS[contract]
        if not (tools / "bin/componentize-py").exists():
            found = (None, f"componentize-py is not installed in {tools} (scripts/install-plugin-tools)")
        elif not (WIT / wit_dir).is_dir():
            found = (None, f"no {WIT / wit_dir}")
        else:
            folder = tempfile.mkdtemp(prefix=f"weir-py-bindings-{contract}-")
            made = subprocess.run(
                [sys.executable, str(tools / "bin/componentize-py"), "-d", str(WIT / wit_dir), "-w", world,
                 "bindings", folder],
                env={**os.environ, "PYTHONPATH": str(tools)}, capture_output=True, text=True,
            )
            if made.returncode != 0:
                raise RuntimeError(f"componentize-py bindings failed: {made.stderr}")
            found = folder
    _BINDINGS[contract] = found
    return found


def tearDownModule():
    if not os.environ.get("WEIR_PY_BINDINGS"):
        for found in _BINDINGS.values():
            if isinstance(found, str):
                shutil.rmtree(found, ignore_errors=True)


class Glue:
    """The tests of one contract's glue (a mixin: `CONTRACT` says which)."""

    CONTRACT = ""

    @classmethod
    def setUpClass(cls):
        found = bindings(cls.CONTRACT)
        if not isinstance(found, str):
            raise unittest.SkipTest(found[1])
        for name in list(sys.modules):
            if name.split(".")[0] in ("wit_world", "componentize_py_types", "transform") or name == "weir_plugin.component":
                del sys.modules[name]
        sys.path.insert(0, found)
        cls.folder = found
        try:
            cls.Err = importlib.import_module("componentize_py_types").Err
            cls.wit = importlib.import_module("wit_world.exports.transform")
            cls.wt = importlib.import_module("wit_world.imports.types")
            cls.component = importlib.import_module("weir_plugin.component")
        finally:
            sys.path.remove(found)

    def session(self, plugin, config):
        """A `Session` of the exported `transform` module (as componentize-py makes
        it) for `plugin`."""
        self.component.export(plugin)
        session_class = sys.modules["transform"].Session
        partition = self.wit.PartitionInfo(table="t", name="p")
        if self.CONTRACT == "0.2":
            columns = [self.wit.InputColumn(name=n, type_name="") for n in self.NAMES]
            return session_class(partition, self.wit.InputSchema(columns=columns, key=[0]), config)
        return session_class(partition, config)

    NAMES = ["id", "x", "u"]

    def staged(self, i, op=None, key=None, **columns):
        """A staged row of this contract: `id` (unless `key` is given) and `columns`."""
        wit, wt = self.wit, self.wt
        values = {} if key is not None else {"id": wt.Value_Integer(i)}
        values.update(columns)
        fields = dict(key=key or [wt.Value_Integer(i)], op=op or wit.Op.INSERT, commit_position=1, commit_time=None)
        if self.CONTRACT == "0.2":
            return wit.StagedRow(values=[values.get(n) for n in self.NAMES], **fields)
        return wit.StagedRow(columns=[wt.ColumnValue(name=n, value=v) for n, v in values.items()], **fields)

    def output(self, rows, rejections, more=False):
        if self.CONTRACT == "0.2":
            return self.wit.PushOutput(rows=rows, rejections=rejections, more=more)
        return self.wit.PushOutput(rows=rows, rejections=rejections)

    def test_the_contract_is_read_off_the_bindings(self):
        self.assertEqual(self.component.CONTRACT, self.CONTRACT)
        self.component.export(Doubler)
        self.assertEqual(hasattr(sys.modules["transform"].Session, "next"), self.CONTRACT == "0.2")

    def test_describe_and_a_row_session(self):
        wit, wt = self.wit, self.wt
        transform_class = self.component.export(Doubler)
        d = transform_class().describe()
        self.assertEqual((d.name, d.kind, d.grain_key, d.partition_column), ("doubler", wit.Kind.ROW, ["id"], "id"))
        self.assertEqual(d.columns[1].type, wt.ColumnType_Numeric(wt.NumericType(precision=10, scale=3)))
        session = self.session(Doubler, [("factor", "2")])
        out = session.push([
            self.staged(1, x=wt.Value_Decimal("1.5")),
            self.staged(2, op=wit.Op.DELETE),
            self.staged(-1),
            self.staged(3, x=wt.Value_Null()),
            self.staged(4),  # no `x`: a missing column
        ])
        self.assertEqual(out, self.output(
            [[wt.Value_Integer(1), wt.Value_Decimal("3.000")], [wt.Value_Integer(3), wt.Value_Null()]],
            [wit.Rejection(key=[wt.Value_Integer(-1)], reason="id is negative"),
             wit.Rejection(key=[wt.Value_Integer(4)], reason="column `x` is missing")]))
        self.assertEqual(session.finish(), self.output([], []))

    def test_errors_are_wit_errors(self):
        wt = self.wt
        session = self.session(Doubler, [])
        with self.assertRaises(self.Err) as raised:
            session.push([])
        self.assertEqual(raised.exception.value, wt.Error_InvalidConfig("missing config key `factor`"))
        session = self.session(Doubler, [("factor", "1")])
        with self.assertRaises(self.Err) as raised:
            session.push([self.staged(96)])
        self.assertEqual(raised.exception.value, wt.Error_Other("transform raised KeyError: 'oops'"))

    def test_a_partition_session_and_input_values(self):
        wit, wt = self.wit, self.wt
        d = self.component.export(Totals)().describe()
        self.assertEqual(d.kind, wit.Kind.PARTITION)
        session = self.session(Totals, [])
        unsupported = wt.Value_Unsupported(wt.UnsupportedValue(type_name="interval", text="1 day"))
        no_id = self.staged(0, op=wit.Op.READ, key=[wt.Value_Text("k")], u=unsupported)
        out = session.push([self.staged(1), no_id])
        self.assertEqual(out.rejections, [wit.Rejection(key=[wt.Value_Text("k")], reason="no id")])
        out = session.finish()
        self.assertEqual(out.rows, [[wt.Value_Text("insert"), wt.Value_Integer(1)]])

    def test_input_reads_every_value_case(self):
        wt = self.wt
        from weir_plugin import Input, Schema, Unsupported, Value

        values = {
            "n": (wt.Value_Null(), Value.NULL),
            "b": (wt.Value_Boolean(True), Value.boolean(True)),
            "f": (wt.Value_Float(0.5), Value.float(0.5)),
            "y": (wt.Value_Bytes(b"\x01"), Value.bytes(b"\x01")),
            "d": (wt.Value_Date(3), Value.date(3)),
            "t": (wt.Value_Timestamp(4), Value.timestamp(4)),
            "j": (wt.Value_Json("{}"), Value.json("{}")),
            "u": (wt.Value_Unsupported(wt.UnsupportedValue(type_name="x", text="y")),
                  Value("unsupported", Unsupported("x", "y"))),
        }
        codec = self.component.CODEC
        if self.CONTRACT == "0.2":
            names = ["id", *values]
            row = codec.positional_input(
                self.wit.StagedRow(key=[wt.Value_Integer(1)], values=[wt.Value_Integer(1)] + [raw for raw, _ in values.values()],
                                   op=self.wit.Op.INSERT, commit_position=1, commit_time=None),
                Schema(names, [0], codec))
            self.assertIsNot(type(row).int, Input.int)  # the getters written out for the bindings' classes
            self.assertIs(row.boolean("b"), True)
            self.assertEqual(row.date_days("d"), 3)
            self.assertEqual(row.bytes("y"), b"\x01")
            self.assertIsNone(row.json_or_null("n"))
        else:
            row = Input(self.staged(1, **{k: raw for k, (raw, _) in values.items()}), codec)
        for name, (raw, value) in values.items():
            self.assertEqual(row.value(name), value)
            self.assertEqual(codec.encode(value), raw)
        self.assertEqual(row.op(), "insert")
        self.assertEqual(row.key(), [Value.integer(1)])


class Glue02(Glue, unittest.TestCase):
    """Contract 0.2 (world `transformer`)."""

    CONTRACT = "0.2"

    def test_output_comes_in_parts(self):
        from weir_plugin import PART_ROWS

        session = self.session(Many, [("n", str(PART_ROWS + 1))])
        first = session.finish()
        self.assertEqual((len(first.rows), first.more), (PART_ROWS, True))
        last = session.next()
        self.assertEqual(last, self.output([[self.wt.Value_Text(f"r{PART_ROWS}"), self.wt.Value_Integer(PART_ROWS)]],
                                           [], False))
        with self.assertRaises(self.Err) as raised:
            session.next()
        self.assertEqual(raised.exception.value, self.wt.Error_Other("`next` called with no output pending"))
        row_session = self.session(Doubler, [("factor", "1")])
        self.assertEqual(row_session.push([self.staged(1)]).more, False)
        with self.assertRaises(self.Err):
            row_session.next()


class Glue01(Glue, unittest.TestCase):
    """Contract 0.1 (world `plugin`)."""

    CONTRACT = "0.1"


if __name__ == "__main__":
    unittest.main()
