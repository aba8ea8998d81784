"""`Row`: values converted by the declared output column type, and checked against the
description (the Rust SDK's `Row::into_values` texts)."""

import datetime as dt
import sys
import unittest
import uuid
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weir_plugin import Column, ColumnType, Json, Other, Row, Value  # noqa: E402
from weir_plugin.output import _Plan  # noqa: E402
from weir_plugin.session import NATIVE  # noqa: E402

T = ColumnType


def convert(column_type, value, nullable=True):
    """The one value of a one-column row."""
    plan = _Plan([Column("c", column_type, nullable)], NATIVE)
    return plan.values(Row(c=value))[0]


def failure(column_type, value, nullable=True):
    try:
        convert(column_type, value, nullable)
    except Other as error:
        return error.message
    raise AssertionError(f"{value!r} into {column_type} did not fail")


class ByDeclaredType(unittest.TestCase):
    def test_integers_in_range(self):
        self.assertEqual(convert(T.BIGINT, 2**63 - 1), Value.integer(2**63 - 1))
        self.assertEqual(convert(T.SMALLINT, -(2**15)), Value.integer(-(2**15)))
        self.assertEqual(convert(T.INTEGER, 7), Value.integer(7))
        self.assertEqual(failure(T.BIGINT, 2**63), "output column `c` (bigint) cannot take an int out of its range")
        self.assertEqual(failure(T.SMALLINT, 2**15), "output column `c` (smallint) cannot take an int out of its range")
        self.assertEqual(failure(T.INTEGER, 2**31), "output column `c` (integer) cannot take an int out of its range")
        self.assertEqual(failure(T.BIGINT, True), "output column `c` (bigint) cannot take a value of type bool")
        self.assertEqual(failure(T.BIGINT, "1"), "output column `c` (bigint) cannot take a value of type str")
        self.assertEqual(failure(T.BIGINT, Decimal(1)), "output column `c` (bigint) cannot take a value of type Decimal")

    def test_numeric_is_rescaled_by_adding_or_dropping_zeros_only(self):
        n = T.numeric(12, 2)
        self.assertEqual(convert(n, Decimal("7")), Value.decimal("7.00"))
        self.assertEqual(convert(n, Decimal("1.500")), Value.decimal("1.50"))
        self.assertEqual(convert(n, Decimal("-0.000")), Value.decimal("0.00"))
        self.assertEqual(convert(n, Decimal("1E+3")), Value.decimal("1000.00"))
        self.assertEqual(convert(n, 12), Value.decimal("12.00"))
        self.assertEqual(convert(n, Decimal("9999999999.99")), Value.decimal("9999999999.99"))
        self.assertEqual(convert(n, Decimal("-9999999999.990")), Value.decimal("-9999999999.99"))
        self.assertEqual(failure(n, Decimal("1.005")),
                         "output column `c` (numeric(12,2)) cannot take a decimal with more than 2 decimal places")
        self.assertEqual(failure(n, Decimal("10000000000")),
                         "output column `c` (numeric(12,2)) cannot take a decimal with more than 10 integer digits")
        self.assertEqual(failure(n, Decimal("NaN")), "output column `c` (numeric(12,2)) cannot take a non-finite decimal")
        self.assertEqual(failure(n, 1.5), "output column `c` (numeric(12,2)) cannot take a value of type float")
        self.assertEqual(failure(n, "1.50"), "output column `c` (numeric(12,2)) cannot take a value of type str")
        self.assertEqual(failure(T.numeric(2, 2), Decimal("1")),
                         "output column `c` (numeric(2,2)) cannot take a decimal with more than 0 integer digits")
        self.assertEqual(convert(T.numeric(2, 2), Decimal("0.5")), Value.decimal("0.50"))

    def test_unconstrained_numeric_keeps_the_scale_and_takes_special_values(self):
        n = T.numeric()
        self.assertEqual(convert(n, Decimal("1.500")), Value.decimal("1.500"))
        self.assertEqual(convert(n, Decimal("-0.0")), Value.decimal("0.0"))
        self.assertEqual(convert(n, Decimal("-Infinity")), Value.decimal("-Infinity"))
        self.assertEqual(convert(n, Decimal("NaN")), Value.decimal("NaN"))
        self.assertEqual(str(n), "numeric")

    def test_text_varchar_uuid(self):
        self.assertEqual(convert(T.TEXT, "\ufeffx"), Value.text("\ufeffx"))
        self.assertEqual(convert(T.varchar(3), "abc"), Value.text("abc"))
        self.assertEqual(convert(T.varchar(), "abcdef"), Value.text("abcdef"))
        self.assertEqual(failure(T.varchar(3), "abcd"),
                         "output column `c` (varchar(3)) cannot take text longer than 3 characters")
        u = uuid.UUID("12345678-1234-5678-1234-567812345678")
        self.assertEqual(convert(T.UUID, u), Value.text("12345678-1234-5678-1234-567812345678"))
        self.assertEqual(failure(T.TEXT, 1), "output column `c` (text) cannot take a value of type int")

    def test_floats_booleans_bytes_json(self):
        self.assertEqual(convert(T.DOUBLE_PRECISION, 1.5), Value.float(1.5))
        self.assertEqual(convert(T.REAL, 2), Value.float(2.0))
        self.assertEqual(failure(T.DOUBLE_PRECISION, 2**53 + 1),
                         "output column `c` (double precision) cannot take an int that a float does not hold exactly")
        self.assertEqual(failure(T.DOUBLE_PRECISION, Decimal("1.5")),
                         "output column `c` (double precision) cannot take a value of type Decimal")
        self.assertEqual(convert(T.BOOLEAN, True), Value.boolean(True))
        self.assertEqual(failure(T.BOOLEAN, 1), "output column `c` (boolean) cannot take a value of type int")
        self.assertEqual(convert(T.BYTEA, bytearray(b"ab")), Value.bytes(b"ab"))
        self.assertEqual(convert(T.JSONB, Json('{"a":1}')), Value.json('{"a":1}'))
        self.assertEqual(convert(T.JSON, Json.of({"b": [1, "é"]})), Value.json('{"b":[1,"é"]}'))
        self.assertEqual(failure(T.JSON, '{"a":1}'),
                         "output column `c` (json) cannot take a value of type str (JSON text is given as Json(text))")

    def test_dates_and_timestamps(self):
        self.assertEqual(convert(T.DATE, dt.date(2026, 3, 1)), Value.date(20513))
        self.assertEqual(convert(T.DATE, dt.date(1, 1, 1)), Value.date(-719162))
        self.assertEqual(convert(T.DATE, 2**31 - 1), Value.date(2**31 - 1))
        self.assertEqual(failure(T.DATE, 2**31),
                         "output column `c` (date) cannot take an int out of its range (days since 1970-01-01)")
        self.assertEqual(failure(T.DATE, dt.datetime(2026, 3, 1)),
                         "output column `c` (date) cannot take a value of type datetime")
        at = dt.datetime(2026, 3, 1, 12, 0, 0, 123456)
        self.assertEqual(convert(T.TIMESTAMP, at), Value.timestamp(1_772_366_400_123_456))
        self.assertEqual(convert(T.TIMESTAMP, dt.datetime(1969, 12, 31, 23, 59, 59, 999999)), Value.timestamp(-1))
        aware = dt.datetime(2026, 3, 1, 13, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=1)))
        self.assertEqual(convert(T.TIMESTAMPTZ, aware), Value.timestamp(1_772_366_400_123_456))
        self.assertEqual(convert(T.TIMESTAMPTZ, dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))),
                         Value.timestamp(-62135596800_000000 - 3600_000000))
        self.assertEqual(convert(T.TIMESTAMP, -(2**63)), Value.timestamp(-(2**63)))
        self.assertEqual(failure(T.TIMESTAMP, dt.date(2026, 3, 1)),
                         "output column `c` (timestamp) cannot take a value of type date")

    def test_null_and_values_as_they_are(self):
        self.assertEqual(convert(T.TEXT, None), Value.NULL)
        self.assertEqual(failure(T.BIGINT, None, nullable=False),
                         "output column `c` (bigint) is not nullable and cannot take None")
        # A Value is passed as it is (the host checks it against the column type).
        self.assertEqual(convert(T.DATE, Value.date(5)), Value.date(5))
        self.assertEqual(convert(T.BIGINT, Value.text("x")), Value.text("x"))


class FastPaths(unittest.TestCase):
    """Each column type's inline common case (`output._fast_path`) gives exactly what the
    general conversion gives, value or failure, on many values."""

    TYPES = [T.BIGINT, T.SMALLINT, T.INTEGER, T.DATE, T.TIMESTAMP, T.TIMESTAMPTZ, T.TEXT, T.UUID, T.varchar(),
             T.varchar(3), T.REAL, T.DOUBLE_PRECISION, T.BOOLEAN, T.numeric(), T.numeric(12, 2),
             T.numeric(2, 2), T.numeric(3, 0), T.numeric(1, 0), T.numeric(1000, 500), T.numeric(5, 1),
             T.numeric(10, 5), T.numeric(9, 4)]

    @staticmethod
    def values():
        import random

        rng = random.Random(20)
        texts = ["0", "-0", "0.0", "-0.00", "7", "7.", ".5", "1.50", "1.500", "1.005", "99.99", "999.99", "-12.34",
                 "100", "1E+3", "1E-3", "0.001", "9999999999.99", "10000000000.00", "12345.678", "NaN", "sNaN",
                 "Infinity", "-Infinity", "0E+2", "0E-5", "5E-2", "123", "1E-7", "1.23E-7", "1.2E-7", "-1E-7",
                 "12E-9", "1.2345E-7"]
        for _ in range(400):
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 14)))
            cut = rng.randint(0, len(digits))
            texts.append(rng.choice(["", "-"]) + digits[:cut] + "." + digits[cut:])
            texts.append(f"{rng.randint(-10**6, 10**6)}E{rng.randint(-8, 8)}")
        yield from (Decimal(t) for t in texts)
        yield from [0, 1, -1, 2**15, 2**31 - 1, 2**31, -(2**31) - 1, 2**63, -(2**63), True, False, 1.5, 2**53 + 1,
                    float("nan"), "", "abc", "abcd", "x" * 4, None, Value.text("v"), dt.date(2026, 3, 1), b"x"]

    def test_the_fast_path_gives_what_the_general_conversion_gives(self):
        for column_type in self.TYPES:
            for nullable in (True, False):
                columns = [Column("c", column_type, nullable)]
                fast, slow = _Plan(columns, NATIVE), _Plan(columns, NATIVE, fast=False)
                for value in self.values():
                    def outcome(plan):
                        try:
                            return ("ok", plan.values(Row(c=value)))
                        except Other as error:
                            return ("error", error.message)

                    self.assertEqual(outcome(fast), outcome(slow), f"{value!r} into {column_type}")

    def test_rows_of_another_shape_fail_as_the_general_conversion_fails(self):
        columns = [Column("a", T.BIGINT, False), Column("b", T.numeric(5, 2)), Column("c", T.JSON)]
        fast, slow = _Plan(columns, NATIVE), _Plan(columns, NATIVE, fast=False)

        class Sub(Row):
            __slots__ = ()

        rows = [Row(a=1, b=Decimal("1.5"), c=Json("1")), Row(a=1, b=None), Row(a=1, b=None, c=None, d=1),
                Row(a=1, b=None, d=1), Row(b=None, a=None, c=None), Row(a=1, b=Decimal("1234.5"), c=None),
                Sub(a=1, b=Decimal("-0.50"), c=None), {"a": 1, "b": None, "c": None}, None, Row()]
        for row in rows:
            def outcome(plan):
                try:
                    return ("ok", plan.values(row))
                except Other as error:
                    return ("error", error.message)

            self.assertEqual(outcome(fast), outcome(slow), repr(row))
        self.assertEqual(fast.values(rows[0]), [Value.integer(1), Value.decimal("1.50"), Value.json("1")])


class AgainstTheDescription(unittest.TestCase):
    PLAN = _Plan([Column("a", T.BIGINT), Column("b", T.TEXT), Column("c", T.BOOLEAN)], NATIVE)

    def test_values_are_put_in_declared_order(self):
        row = Row(c=True, a=1).set("b", "x")
        self.assertEqual(self.PLAN.values(row), [Value.integer(1), Value.text("x"), Value.boolean(True)])
        row = Row()
        row["a"], row["b"], row["c"] = 1, None, False
        self.assertEqual(self.PLAN.values(row), [Value.integer(1), Value.NULL, Value.boolean(False)])
        self.assertEqual(Row(a=1).set("a", 2)["a"], 2)

    def test_a_missing_or_undeclared_column_fails_with_the_rust_texts(self):
        def message(row):
            with self.assertRaises(Other) as raised:
                self.PLAN.values(row)
            return raised.exception.message

        self.assertEqual(message(Row(a=1, b="x")), "output row does not set declared column `c`")
        self.assertEqual(message(Row(a=1, z=2)), "output row sets column `z`, which describe does not declare")
        self.assertEqual(message(Row(a=1, b="x", c=True, z=2)),
                         "output row sets column `z`, which describe does not declare")
        self.assertEqual(message([1, "x", True]), "transform returned a list, not a Row or None")

    def test_a_column_named_self_can_be_set(self):
        self.assertEqual(Row(self=1).items(), [("self", 1)])


if __name__ == "__main__":
    unittest.main()
