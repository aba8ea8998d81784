"""`Input` getters and `Config` lookups: values, and the fixed texts of the Rust SDK, on
rows of both contracts."""

import datetime as dt
import sys
import unittest
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weir_plugin import (  # noqa: E402
    DATE_INFINITY,
    DATE_NEG_INFINITY,
    TIMESTAMP_INFINITY,
    TIMESTAMP_NEG_INFINITY,
    Config,
    Input,
    InvalidConfig,
    PositionalRow,
    Reject,
    Schema,
    Unsupported,
    Value,
)
from weir_plugin.decimal import MAX_DIGITS  # noqa: E402
from weir_plugin.input import _PositionalInput, typed_positional_input  # noqa: E402
from weir_plugin.types import VALUE_CASES  # noqa: E402

ROW = Input.of(
    {
        "id": Value.integer(5),
        "name": Value.text("\ufeffa"),
        "none": Value.NULL,
        "flag": Value.boolean(False),
        "ratio": Value.float(0.5),
        "blob": Value.bytes(b"\x00\xff"),
        "amount": Value.decimal("1.50"),
        "nan": Value.decimal("NaN"),
        "inf": Value.decimal("-Infinity"),
        "bad": Value.decimal("1e5"),
        "long": Value.decimal("1" * (MAX_DIGITS + 1)),
        "day": Value.date(20513),
        "forever": Value.date(DATE_INFINITY),
        "never": Value.date(DATE_NEG_INFINITY),
        "ancient": Value.date(-800_000),
        "at": Value.timestamp(1_772_366_400_123_456),
        "ts_forever": Value.timestamp(TIMESTAMP_INFINITY),
        "ts_never": Value.timestamp(TIMESTAMP_NEG_INFINITY),
        "ts_far": Value.timestamp(300_000_000_000_000_000),
        "doc": Value.json('{"a": 1}'),
        "odd": Value.unsupported("interval", "1 day"),
        "dup": Value.integer(1),
    }.items(),
    key=[Value.integer(1)],
    op="update",
    commit_position=7,
    commit_time=1_000,
)
ROW._row.columns.append(ROW._row.columns[-1]._replace(value=Value.integer(2)))  # a second `dup`

# The same row on contract 0.2: by position in a schema that also has a column the row
# has no value for (`gone`: `None`) and one past the end of its values (`short`).
NAMES = [c.name for c in ROW._row.columns]
SCHEMA = Schema(NAMES[:3] + ["gone"] + NAMES[3:] + ["short"], key=[0])
VALUES = [c.value for c in ROW._row.columns]
ROW_0_2 = _PositionalInput(
    PositionalRow(key=[Value.integer(1)], values=VALUES[:3] + [None] + VALUES[3:], op="update",
                  commit_position=7, commit_time=1_000),
    SCHEMA,
)


class Typed:
    """A representation with a class per value case, the payload in `.value` (as
    componentize-py's bindings have), and its reader."""

    CLASSES = {case: type(f"Value_{case}", (), {"__slots__": ("value",)}) for case in VALUE_CASES}
    CASES = {cls: case for case, cls in CLASSES.items()}

    @classmethod
    def of(cls, value):
        raw = object.__new__(cls.CLASSES[value.case])
        raw.value = value.payload
        return raw

    @classmethod
    def decode(cls, raw):
        return cls.CASES[type(raw)], raw.value

    @staticmethod
    def op(raw):
        return raw


ROW_TYPED = typed_positional_input(Typed.CLASSES)(
    PositionalRow(key=[Typed.of(Value.integer(1))], values=[None if v is None else Typed.of(v) for v in ROW_0_2._row.values],
                  op="update", commit_position=7, commit_time=1_000),
    Schema(SCHEMA.names, SCHEMA.key, Typed),
)


def reason(call, *args):
    try:
        call(*args)
    except Reject as reject:
        return reject.reason
    raise AssertionError(f"{call.__name__}{args} did not reject")


class Getters(unittest.TestCase):
    """On a contract-0.1 row (columns by name); the subclasses run the same tests on
    contract-0.2 rows."""

    ROW = ROW

    def test_read_typed_values(self):
        self.assertEqual(self.ROW.int("id"), 5)
        self.assertEqual(self.ROW.text("name"), "\ufeffa")
        self.assertIs(self.ROW.boolean("flag"), False)
        self.assertEqual(self.ROW.float("ratio"), 0.5)
        self.assertEqual(self.ROW.bytes("blob"), b"\x00\xff")
        self.assertEqual(str(self.ROW.decimal("amount")), "1.50")
        self.assertEqual(self.ROW.decimal_text("nan"), "NaN")
        self.assertEqual(self.ROW.date("day"), dt.date(2026, 3, 1))
        self.assertEqual(self.ROW.date_days("day"), 20513)
        self.assertEqual(self.ROW.date_days("forever"), DATE_INFINITY)
        self.assertEqual(self.ROW.timestamp("at"), dt.datetime(2026, 3, 1, 12, 0, 0, 123456))
        self.assertEqual(self.ROW.timestamp_micros("ts_forever"), TIMESTAMP_INFINITY)
        self.assertEqual(self.ROW.json("doc"), '{"a": 1}')
        self.assertEqual(self.ROW.value("odd"), Value("unsupported", Unsupported("interval", "1 day")))
        self.assertEqual(self.ROW.value("dup"), Value.integer(1))  # the first of that name
        self.assertIsNone(self.ROW.get("nope"))
        self.assertEqual(self.ROW.get("none"), Value.NULL)

    def test_or_null_forms_return_none_for_null(self):
        for getter in [
            self.ROW.int_or_null, self.ROW.text_or_null, self.ROW.boolean_or_null, self.ROW.float_or_null,
            self.ROW.bytes_or_null, self.ROW.decimal_or_null, self.ROW.decimal_text_or_null, self.ROW.date_or_null,
            self.ROW.date_days_or_null, self.ROW.timestamp_or_null, self.ROW.timestamp_micros_or_null, self.ROW.json_or_null,
        ]:
            self.assertIsNone(getter("none"), getter.__name__)
        self.assertEqual(self.ROW.int_or_null("id"), 5)

    def test_reject_with_the_rust_sdk_texts(self):
        getters = {
            "int": "an integer", "text": "text", "boolean": "a boolean", "float": "a float",
            "bytes": "bytes", "decimal": "a decimal", "decimal_text": "a decimal", "date": "a date",
            "date_days": "a date", "timestamp": "a timestamp", "timestamp_micros": "a timestamp",
            "json": "json",
        }
        for name, kind in getters.items():
            getter, or_null = getattr(ROW, name), getattr(ROW, name + "_or_null")
            self.assertEqual(reason(getter, "none"), "column `none` is null")
            self.assertEqual(reason(getter, "nope"), "column `nope` is missing")
            self.assertEqual(reason(or_null, "nope"), "column `nope` is missing")
            wrong = "odd"
            self.assertEqual(reason(getter, wrong), f"column `odd` is not {kind}")
            self.assertEqual(reason(or_null, wrong), f"column `odd` is not {kind}")
        self.assertEqual(reason(self.ROW.value, "nope"), "column `nope` is missing")
        # No coercion, not even integer to decimal.
        self.assertEqual(reason(self.ROW.decimal, "id"), "column `id` is not a decimal")
        self.assertEqual(reason(self.ROW.float, "id"), "column `id` is not a float")

    def test_decimal_texts(self):
        self.assertEqual(reason(self.ROW.decimal, "nan"), "column `nan` is not a finite decimal")
        self.assertEqual(reason(self.ROW.decimal_or_null, "inf"), "column `inf` is not a finite decimal")
        self.assertEqual(reason(self.ROW.decimal, "bad"), "column `bad` is not valid decimal text")
        self.assertEqual(reason(self.ROW.decimal, "long"), "column `long` has too many digits")

    def test_datetime_getters_refuse_infinities_and_what_python_cannot_hold(self):
        self.assertEqual(reason(self.ROW.date, "forever"), "column `forever` is not a finite date")
        self.assertEqual(reason(self.ROW.date_or_null, "never"), "column `never` is not a finite date")
        self.assertEqual(reason(self.ROW.date, "ancient"), "column `ancient` is out of Python's date range")
        self.assertEqual(reason(self.ROW.timestamp, "ts_forever"), "column `ts_forever` is not a finite timestamp")
        self.assertEqual(reason(self.ROW.timestamp, "ts_never"), "column `ts_never` is not a finite timestamp")
        self.assertEqual(reason(self.ROW.timestamp, "ts_far"), "column `ts_far` is out of Python's datetime range")
        self.assertEqual(self.ROW.date_days("ancient"), -800_000)

    def test_metadata(self):
        self.assertEqual(self.ROW.key(), [Value.integer(1)])
        self.assertEqual(self.ROW.op(), "update")
        self.assertEqual(self.ROW.commit_position(), 7)
        self.assertEqual(self.ROW.commit_time(), 1_000)
        self.assertEqual([c.name for c in self.ROW.columns()][:3], ["id", "name", "none"])
        self.assertIn("op='update'", repr(ROW))


class PositionalGetters(Getters):
    """Contract 0.2, the native form (`Value`s by position, read through `decode`)."""

    ROW = ROW_0_2

    def test_a_column_without_a_value_is_missing(self):
        for name in ("gone", "short"):
            self.assertIsNone(self.ROW.get(name))
            self.assertEqual(reason(self.ROW.int_or_null, name), f"column `{name}` is missing")
            self.assertEqual(reason(self.ROW.decimal, name), f"column `{name}` is missing")
        self.assertNotIn("gone", [c.name for c in self.ROW.columns()])
        self.assertEqual(self.ROW.columns(), ROW.columns())
        self.assertEqual(SCHEMA.position("gone"), 3)
        self.assertEqual(SCHEMA.position("dup"), len(NAMES) - 1)  # the first of that name


class TypedPositionalGetters(PositionalGetters):
    """Contract 0.2 in a component's form (a class per value case): the getters
    written out per case (`typed_positional_input`)."""

    ROW = ROW_TYPED

    def test_the_getters_are_the_written_out_ones(self):
        self.assertIsNot(type(self.ROW).int, Input.int)
        self.assertIsNot(type(self.ROW).decimal, Input.decimal)
        self.assertIsInstance(self.ROW, Input)
        self.assertEqual(type(self.ROW).int.__doc__, Input.int.__doc__)


class Configs(unittest.TestCase):
    def test_lookups_name_the_key_not_the_value(self):
        config = Config([("rate", "1.5"), ("bad", "secret"), ("inf", "Infinity"), ("long", "1" * (MAX_DIGITS + 1))])
        self.assertEqual(config.get("rate"), "1.5")
        self.assertIsNone(config.get("missing"))
        self.assertEqual(config.require("bad"), "secret")
        self.assertEqual(config.decimal("rate"), Decimal("1.5"))
        self.assertEqual([k for k, _ in config.entries()], ["bad", "inf", "long", "rate"])
        cases = [
            (lambda: config.decimal("bad"), "config `bad` is not valid decimal text"),
            (lambda: config.decimal("inf"), "config `inf` is not a finite decimal"),
            (lambda: config.decimal("long"), "config `long` has too many digits"),
            (lambda: config.require("missing"), "missing config key `missing`"),
            (lambda: config.decimal("missing"), "missing config key `missing`"),
        ]
        for call, text in cases:
            with self.assertRaises(InvalidConfig) as raised:
                call()
            self.assertEqual(raised.exception.message, text)
            self.assertEqual(raised.exception.kind, "invalid-config")
        self.assertNotIn("secret", repr(config))

    def test_takes_a_mapping_too(self):
        self.assertEqual(Config({"b": "2", "a": "1"}).entries(), [("a", "1"), ("b", "2")])
        self.assertEqual(Config().entries(), [])


if __name__ == "__main__":
    unittest.main()
