"""Sessions as the host runs them: row and partition plugins, errors, `export`."""

import decimal as std
import sys
import unittest
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weir_plugin import (  # noqa: E402
    PART_ROWS,
    Column,
    ColumnType,
    Description,
    InputColumn,
    InputSchema,
    InvalidConfig,
    InvalidInput,
    Other,
    PartitionInfo,
    PartitionPlugin,
    PartitionSession,
    PositionalRow,
    PushOutput,
    Reject,
    Rejection,
    Row,
    RowPlugin,
    RowSession,
    StagedRow,
    Value,
    describe,
    export,
    positional,
    run_session,
    run_session_0_2,
)

PARTITION = PartitionInfo("public.t", "2026-03-01")


def staged(i, op="insert", **columns):
    return StagedRow.of({"id": Value.integer(i), **columns}, key=[Value.integer(i)], op=op)


class Doubler(RowPlugin):
    """id -> id, x -> 2x (exact); drops id 0, rejects negative ids."""

    @staticmethod
    def describe():
        return Description(
            "doubler",
            "1.0.0",
            columns=[Column("id", ColumnType.BIGINT, nullable=False), Column("x", ColumnType.numeric(10, 3))],
            grain_key=["id"],
            partition_column="id",
        )

    def __init__(self, factor):
        self.factor = factor

    @classmethod
    def open(cls, partition, config):
        return cls(config.decimal("factor"))

    def transform(self, row):
        i = row.int("id")
        if i == 0:
            return None
        if i < 0:
            raise Reject("id is negative")
        if i == 99:
            raise InvalidInput("column `id` is 99")
        if i == 98:
            return Row(id=i, x=Decimal(1) / Decimal(3))  # rounds: refused by the session's context
        if i == 97:
            return {"id": i}
        if i == 96:
            raise KeyError("oops")
        x = row.decimal_or_null("x")
        # `*` is exact here: the session runs plugins in weir_plugin.decimal.EXACT.
        return Row(id=i, x=None if x is None else x * self.factor)


class RowSessions(unittest.TestCase):
    def test_transforms_drops_rejects_and_skips_deletes(self):
        out = run_session(
            Doubler,
            PARTITION,
            {"factor": "2"},
            [
                [staged(1, x=Value.decimal("1.5")), staged(0), staged(-1)],
                [staged(2, op="delete"), staged(3, op="read", x=Value.NULL), staged(4, op="update", x=Value.decimal("0.0005"))],
            ],
        )
        self.assertEqual(
            out.rows,
            [
                [Value.integer(1), Value.decimal("3.000")],
                [Value.integer(3), Value.NULL],
                [Value.integer(4), Value.decimal("0.001")],  # 0.0010: a zero dropped
            ],
        )
        self.assertEqual(out.rejections, [Rejection([Value.integer(-1)], "id is negative")])

    def test_keeps_precision_beyond_the_default_context(self):
        factor = "1." + "0" * 40 + "1"
        with self.assertRaises(Other) as raised:  # 1.5 x factor has 42 places: numeric(10,3) refuses it
            run_session(Doubler, PARTITION, {"factor": factor}, [[staged(1, x=Value.decimal("1.5"))]])
        self.assertEqual(raised.exception.message,
                         "output column `x` (numeric(10,3)) cannot take a decimal with more than 3 decimal places")

    def test_a_config_error_is_returned_by_every_call(self):
        session = RowSession(Doubler, PARTITION, [])
        for call in (lambda: session.push([staged(1)]), session.finish, session.finish):
            with self.assertRaises(InvalidConfig) as raised:
                call()
            self.assertEqual(raised.exception.message, "missing config key `factor`")

    def test_errors_and_plugin_bugs_fail_the_call(self):
        def error(i):
            with self.assertRaises((InvalidInput, Other)) as raised:
                run_session(Doubler, PARTITION, {"factor": "1"}, [[staged(1), staged(i)]])
            return raised.exception

        self.assertEqual(error(99), InvalidInput("column `id` is 99"))
        self.assertEqual(error(97), Other("transform returned a dict, not a Row or None"))
        self.assertEqual(error(96), Other("transform raised KeyError: 'oops'"))
        self.assertTrue(error(98).message.startswith("transform raised decimal.Inexact: "), error(98).message)

    def test_the_ambient_context_is_restored(self):
        before = std.getcontext().prec
        run_session(Doubler, PARTITION, {"factor": "1"}, [[staged(1)]])
        self.assertEqual(std.getcontext().prec, before)

    def test_a_failing_open_is_reported_as_other(self):
        class Broken(Doubler):
            @classmethod
            def open(cls, partition, config):
                raise ValueError("bad")

        class Wrong(Doubler):
            @classmethod
            def open(cls, partition, config):
                return 5

        with self.assertRaises(Other) as raised:
            run_session(Broken, PARTITION, {}, [])
        self.assertEqual(raised.exception.message, "open raised ValueError: bad")
        with self.assertRaises(Other) as raised:
            run_session(Wrong, PARTITION, {}, [])
        self.assertEqual(raised.exception.message, "Wrong.open returned a int, not a Wrong")

    def test_the_partition_and_the_default_open(self):
        seen = []

        class Plain(RowPlugin):
            describe = Doubler.describe

            def transform(self, row):
                seen.append((row.op(), row.commit_position()))
                return Row(id=row.int("id"), x=None)

        class Opens(Plain):
            @classmethod
            def open(cls, partition, config):
                seen.append(partition)
                return cls()

        run_session(Plain, ("public.t", "p"), [], [[staged(1)]])
        run_session(Opens, ("public.t", "p"), [], [])
        self.assertEqual(seen, [("insert", 0), PartitionInfo("public.t", "p")])


class Totals(PartitionPlugin):
    """Counts rows by op; rejects rows without `id`."""

    @staticmethod
    def describe():
        return Description(
            "totals", "1.0.0",
            columns=[Column("op", ColumnType.TEXT, nullable=False), Column("n", ColumnType.BIGINT)],
            grain_key=["op"], partition_column="op",
        )

    def __init__(self):
        self.counts = {}

    def push(self, rows, out):
        for row in rows:
            if row.get("id") is None:
                out.reject(row, "no id")
                continue
            if row.int("id") == 99:
                raise InvalidInput("99")
            self.counts[row.op()] = self.counts.get(row.op(), 0) + 1

    def finish(self, out):
        for op in sorted(self.counts):
            out.row(Row(op=op, n=self.counts[op]))


class PartitionSessions(unittest.TestCase):
    def test_sees_every_row_and_emits_in_finish(self):
        no_id = StagedRow.of({}, key=[Value.text("k")])
        out = run_session(Totals, PARTITION, {}, [[staged(1), staged(2, op="delete")], [no_id, staged(3)]])
        self.assertEqual(out.rows, [[Value.text("delete"), Value.integer(1)], [Value.text("insert"), Value.integer(2)]])
        self.assertEqual(out.rejections, [Rejection([Value.text("k")], "no id")])
        self.assertEqual(describe(Totals).kind, "partition")

    def test_the_first_error_sticks_and_finish_ends_the_session(self):
        session = PartitionSession(Totals, PARTITION, [])
        with self.assertRaises(InvalidInput):
            session.push([staged(99)])
        with self.assertRaises(InvalidInput):
            session.finish()
        session = PartitionSession(Totals, PARTITION, [])
        session.finish()
        with self.assertRaises(Other) as raised:
            session.push([])
        self.assertEqual(raised.exception.message, "session called after finish")


class Many(PartitionPlugin):
    """Emits `n` rows in `finish` (config `n`); config `bad` makes row `bad` unconvertible."""

    describe = Totals.describe

    def __init__(self, n, bad):
        self.n, self.bad = n, bad

    @classmethod
    def open(cls, partition, config):
        bad = config.get("bad")
        return cls(int(config.require("n")), None if bad is None else int(bad))

    def push(self, rows, out):
        for row in rows:
            out.reject(row, "seen")

    def finish(self, out):
        for i in range(self.n):
            out.row(Row(op=f"r{i}", n="oops" if i == self.bad else i))


class Contract02(unittest.TestCase):
    """Contract 0.2: sessions constructed with the input schema, rows by position,
    output in parts."""

    CHUNKS = [
        [staged(1, x=Value.decimal("1.5")), staged(0), staged(-1)],
        [staged(2, op="delete"), staged(3, op="read", x=Value.NULL), staged(4, op="update", x=Value.decimal("0.0005"))],
        [StagedRow.of({"x": Value.decimal("2"), "id": Value.integer(5)}, key=[Value.integer(5)]),
         StagedRow.of({"y": Value.text("no id")}, key=[Value.text("k")])],
    ]

    def test_positional_rows_are_the_named_ones_by_position(self):
        schema, chunks = positional(self.CHUNKS)
        self.assertEqual(schema, InputSchema([InputColumn("id"), InputColumn("x"), InputColumn("y")], [0]))
        self.assertEqual(chunks[0][1], PositionalRow([Value.integer(0)], [Value.integer(0), None, None]))
        self.assertEqual(chunks[2][0].values, [Value.integer(5), Value.decimal("2"), None])
        self.assertEqual(chunks[2][1].values, [None, None, Value.text("no id")])
        self.assertEqual((chunks[1][0].op, chunks[1][2].op), ("delete", "update"))
        self.assertEqual(positional([]), (InputSchema([], []), []))

    def test_row_and_partition_plugins_give_what_they_give_on_0_1(self):
        for plugin, config in ((Doubler, {"factor": "2"}), (Totals, {})):
            chunks = self.CHUNKS if plugin is Totals else self.CHUNKS[:2]
            self.assertEqual(run_session(plugin, PARTITION, config, chunks, contract="0.2"),
                             run_session(plugin, PARTITION, config, chunks))
        out = run_session(Doubler, PARTITION, {"factor": "2"}, self.CHUNKS[:2], contract="0.2")
        self.assertEqual(out.rows[0], [Value.integer(1), Value.decimal("3.000")])
        with self.assertRaises(ValueError):
            run_session(Doubler, PARTITION, {}, [], contract="0.3")

    def test_a_row_session_answers_in_one_part_and_has_no_next(self):
        schema = InputSchema.of(["id", "x"], key=[0])
        session = RowSession(Doubler, PARTITION, [("factor", "3")], schema=schema)
        out = session.push([PositionalRow([Value.integer(2)], [Value.integer(2), Value.decimal("1")]),
                            PositionalRow([Value.integer(6)], [Value.integer(6)]),  # values shorter than the schema
                            PositionalRow([Value.integer(7)], [Value.integer(7), None])])
        # A row without a value for `x` (a `None`, or values shorter than the schema)
        # has no such column: `decimal_or_null` refuses it, as on 0.1.
        missing = "column `x` is missing"
        self.assertEqual(out, PushOutput([[Value.integer(2), Value.decimal("3.000")]],
                                         [Rejection([Value.integer(6)], missing), Rejection([Value.integer(7)], missing)],
                                         False))
        self.assertEqual(session.finish(), PushOutput([], [], False))
        with self.assertRaises(Other) as raised:
            session.next()
        self.assertEqual(raised.exception.message, "`next` called with no output pending")
        failing = RowSession(Doubler, PARTITION, [], schema=schema)
        for call in (lambda: failing.push([]), failing.finish):
            with self.assertRaises(InvalidConfig):
                call()

    def test_a_partition_session_hands_big_output_in_parts(self):
        n = 2 * PART_ROWS + 5
        schema, (chunk,) = positional([[staged(1), staged(2)]])
        session = PartitionSession(Many, PARTITION, [("n", str(n))], schema=schema)
        out = session.push(chunk)
        self.assertEqual((out.rows, len(out.rejections), out.more), ([], 2, False))
        with self.assertRaises(Other):
            session.next()
        parts = [session.finish()]
        while parts[-1].more:
            parts.append(session.next())
        self.assertEqual([(len(p.rows), len(p.rejections), p.more) for p in parts],
                         [(PART_ROWS, 0, True), (PART_ROWS, 0, True), (5, 0, False)])
        rows = [r for p in parts for r in p.rows]
        self.assertEqual(rows[PART_ROWS], [Value.text(f"r{PART_ROWS}"), Value.integer(PART_ROWS)])
        self.assertEqual(len(rows), n)
        with self.assertRaises(Other) as raised:
            session.next()
        self.assertEqual(raised.exception.message, "`next` called with no output pending")
        total = run_session_0_2(Many, PARTITION, schema, {"n": str(n)}, [chunk])
        self.assertEqual((total.rows, len(total.rejections), total.more), (rows, 2, False))
        self.assertEqual(total.rows, run_session(Many, PARTITION, {"n": str(n)}, [[staged(1), staged(2)]]).rows)
        exactly = PartitionSession(Many, PARTITION, [("n", str(PART_ROWS))], schema=schema)
        self.assertFalse(exactly.finish().more)

    def test_a_part_that_cannot_be_converted_fails_next_and_every_later_call(self):
        schema = InputSchema.of(["id"])
        session = PartitionSession(Many, PARTITION, [("n", str(PART_ROWS + 3)), ("bad", str(PART_ROWS + 1))],
                                   schema=schema)
        self.assertTrue(session.finish().more)
        expected = "output column `n` (bigint) cannot take a value of type str"
        for call in (session.next, session.finish):
            with self.assertRaises(Other) as raised:
                call()
            self.assertEqual(raised.exception.message, expected)


class Descriptions(unittest.TestCase):
    def test_kind_comes_from_the_base_class_and_is_checked(self):
        self.assertEqual(describe(Doubler).kind, "row")

        def bad(**changes):
            class Bad(RowPlugin):
                @staticmethod
                def describe():
                    fields = dict(name="bad", version="1", columns=[Column("a", ColumnType.TEXT)],
                                  grain_key=["a"], partition_column="a")
                    fields.update(changes)
                    return Description(**fields)

            with self.assertRaises(ValueError) as raised:
                describe(Bad)
            return str(raised.exception)

        self.assertEqual(bad(columns=[]), "plugin `bad` declares no output columns")
        self.assertEqual(bad(columns=[Column("a", ColumnType.TEXT)] * 2), "plugin `bad` declares column `a` twice")
        self.assertEqual(bad(grain_key=["b"]), "plugin `bad`: grain key column `b` is not declared")
        self.assertEqual(bad(partition_column="b"), "plugin `bad`: partition column `b` is not declared")
        with self.assertRaises(ValueError):
            ColumnType.numeric(3, 4)
        with self.assertRaises(ValueError):
            ColumnType.numeric(1001, 0)

    def test_export_is_a_no_op_natively(self):
        self.assertIsNone(export(Doubler))


if __name__ == "__main__":
    unittest.main()
