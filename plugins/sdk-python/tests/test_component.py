"""The componentize-py glue (`weir_plugin.component`), natively, against the bindings
componentize-py generates. Skipped unless `WEIR_PY_BINDINGS` names a folder made by

    PYTHONPATH=$HOME/.cache/weir-tools/py python3 $HOME/.cache/weir-tools/py/bin/componentize-py \\
        -d wit/transform-0.1.0 -w plugin bindings FOLDER

(the built component itself is tested end to end by `plugins/tools/run-component-cases.mjs`
and by the engine's integration tests)."""

import os
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

BINDINGS = os.environ.get("WEIR_PY_BINDINGS")
if BINDINGS:
    sys.path.insert(0, BINDINGS)

from test_session import Doubler, Totals  # noqa: E402


@unittest.skipUnless(BINDINGS, "WEIR_PY_BINDINGS is not set")
class Glue(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from componentize_py_types import Err
        from wit_world.exports import transform as wit
        from wit_world.imports import types as wt

        from weir_plugin import component

        cls.Err, cls.wit, cls.wt, cls.component = Err, wit, wt, component

    def staged(self, i, op=None, **columns):
        wit, wt = self.wit, self.wt
        return wit.StagedRow(
            key=[wt.Value_Integer(i)],
            op=op or wit.Op.INSERT,
            commit_position=1,
            commit_time=None,
            columns=[wt.ColumnValue(name="id", value=wt.Value_Integer(i))]
            + [wt.ColumnValue(name=n, value=v) for n, v in columns.items()],
        )

    def test_describe_and_a_row_session(self):
        wit, wt = self.wit, self.wt
        transform_class = self.component.export(Doubler)
        d = transform_class().describe()
        self.assertEqual((d.name, d.kind, d.grain_key, d.partition_column), ("doubler", wit.Kind.ROW, ["id"], "id"))
        self.assertEqual(d.columns[1].type, wt.ColumnType_Numeric(wt.NumericType(precision=10, scale=3)))
        session_class = sys.modules["transform"].Session
        session = session_class(wit.PartitionInfo(table="t", name="p"), [("factor", "2")])
        out = session.push([
            self.staged(1, x=wt.Value_Decimal("1.5")),
            self.staged(2, op=wit.Op.DELETE),
            self.staged(-1),
            self.staged(3, x=wt.Value_Null()),
        ])
        self.assertEqual(out.rows, [[wt.Value_Integer(1), wt.Value_Decimal("3.000")],
                                    [wt.Value_Integer(3), wt.Value_Null()]])
        self.assertEqual(out.rejections, [wit.Rejection(key=[wt.Value_Integer(-1)], reason="id is negative")])
        self.assertEqual(session.finish(), wit.PushOutput(rows=[], rejections=[]))

    def test_errors_are_wit_errors(self):
        wit, wt = self.wit, self.wt
        self.component.export(Doubler)
        session = sys.modules["transform"].Session(wit.PartitionInfo(table="t", name="p"), [])
        with self.assertRaises(self.Err) as raised:
            session.push([])
        self.assertEqual(raised.exception.value, wt.Error_InvalidConfig("missing config key `factor`"))
        session = sys.modules["transform"].Session(wit.PartitionInfo(table="t", name="p"), [("factor", "1")])
        with self.assertRaises(self.Err) as raised:
            session.push([self.staged(96)])
        self.assertEqual(raised.exception.value, wt.Error_Other("transform raised KeyError: 'oops'"))

    def test_a_partition_session_and_input_values(self):
        wit, wt = self.wit, self.wt
        d = self.component.export(Totals)().describe()
        self.assertEqual(d.kind, wit.Kind.PARTITION)
        session = sys.modules["transform"].Session(wit.PartitionInfo(table="t", name="p"), [])
        no_id = wit.StagedRow(key=[wt.Value_Text("k")], op=wit.Op.READ, commit_position=0, commit_time=None,
                              columns=[wt.ColumnValue(name="u", value=wt.Value_Unsupported(
                                  wt.UnsupportedValue(type_name="interval", text="1 day")))])
        out = session.push([self.staged(1), no_id])
        self.assertEqual(out.rejections, [wit.Rejection(key=[wt.Value_Text("k")], reason="no id")])
        out = session.finish()
        self.assertEqual(out.rows, [[wt.Value_Text("insert"), wt.Value_Integer(1)]])

    def test_input_reads_every_value_case(self):
        wt = self.wt
        from weir_plugin import Input, Unsupported, Value

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
        row = Input(self.staged(1, **{k: raw for k, (raw, _) in values.items()}), self.component.CODEC)
        for name, (_, value) in values.items():
            self.assertEqual(row.value(name), value)
            self.assertEqual(self.component.CODEC.encode(value), values[name][0])
        self.assertEqual(row.op(), "insert")
        self.assertEqual(row.key(), [Value.integer(1)])


if __name__ == "__main__":
    unittest.main()
