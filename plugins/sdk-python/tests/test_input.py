"""`Input` getters and `Config` lookups: values, and the fixed texts of the Rust SDK."""

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
    Reject,
    Unsupported,
    Value,
)
from weir_plugin.decimal import MAX_DIGITS  # noqa: E402

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


def reason(call, *args):
    try:
        call(*args)
    except Reject as reject:
        return reject.reason
    raise AssertionError(f"{call.__name__}{args} did not reject")


class Getters(unittest.TestCase):
    def test_read_typed_values(self):
        self.assertEqual(ROW.int("id"), 5)
        self.assertEqual(ROW.text("name"), "\ufeffa")
        self.assertIs(ROW.boolean("flag"), False)
        self.assertEqual(ROW.float("ratio"), 0.5)
        self.assertEqual(ROW.bytes("blob"), b"\x00\xff")
        self.assertEqual(str(ROW.decimal("amount")), "1.50")
        self.assertEqual(ROW.decimal_text("nan"), "NaN")
        self.assertEqual(ROW.date("day"), dt.date(2026, 3, 1))
        self.assertEqual(ROW.date_days("day"), 20513)
        self.assertEqual(ROW.date_days("forever"), DATE_INFINITY)
        self.assertEqual(ROW.timestamp("at"), dt.datetime(2026, 3, 1, 12, 0, 0, 123456))
        self.assertEqual(ROW.timestamp_micros("ts_forever"), TIMESTAMP_INFINITY)
        self.assertEqual(ROW.json("doc"), '{"a": 1}')
        self.assertEqual(ROW.value("odd"), Value("unsupported", Unsupported("interval", "1 day")))
        self.assertEqual(ROW.value("dup"), Value.integer(1))  # the first of that name
        self.assertIsNone(ROW.get("nope"))
        self.assertEqual(ROW.get("none"), Value.NULL)

    def test_or_null_forms_return_none_for_null(self):
        for getter in [
            ROW.int_or_null, ROW.text_or_null, ROW.boolean_or_null, ROW.float_or_null,
            ROW.bytes_or_null, ROW.decimal_or_null, ROW.decimal_text_or_null, ROW.date_or_null,
            ROW.date_days_or_null, ROW.timestamp_or_null, ROW.timestamp_micros_or_null, ROW.json_or_null,
        ]:
            self.assertIsNone(getter("none"), getter.__name__)
        self.assertEqual(ROW.int_or_null("id"), 5)

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
        self.assertEqual(reason(ROW.value, "nope"), "column `nope` is missing")
        # No coercion, not even integer to decimal.
        self.assertEqual(reason(ROW.decimal, "id"), "column `id` is not a decimal")
        self.assertEqual(reason(ROW.float, "id"), "column `id` is not a float")

    def test_decimal_texts(self):
        self.assertEqual(reason(ROW.decimal, "nan"), "column `nan` is not a finite decimal")
        self.assertEqual(reason(ROW.decimal_or_null, "inf"), "column `inf` is not a finite decimal")
        self.assertEqual(reason(ROW.decimal, "bad"), "column `bad` is not valid decimal text")
        self.assertEqual(reason(ROW.decimal, "long"), "column `long` has too many digits")

    def test_datetime_getters_refuse_infinities_and_what_python_cannot_hold(self):
        self.assertEqual(reason(ROW.date, "forever"), "column `forever` is not a finite date")
        self.assertEqual(reason(ROW.date_or_null, "never"), "column `never` is not a finite date")
        self.assertEqual(reason(ROW.date, "ancient"), "column `ancient` is out of Python's date range")
        self.assertEqual(reason(ROW.timestamp, "ts_forever"), "column `ts_forever` is not a finite timestamp")
        self.assertEqual(reason(ROW.timestamp, "ts_never"), "column `ts_never` is not a finite timestamp")
        self.assertEqual(reason(ROW.timestamp, "ts_far"), "column `ts_far` is out of Python's datetime range")
        self.assertEqual(ROW.date_days("ancient"), -800_000)

    def test_metadata(self):
        self.assertEqual(ROW.key(), [Value.integer(1)])
        self.assertEqual(ROW.op(), "update")
        self.assertEqual(ROW.commit_position(), 7)
        self.assertEqual(ROW.commit_time(), 1_000)
        self.assertEqual([c.name for c in ROW.columns()][:3], ["id", "name", "none"])
        self.assertIn("op='update'", repr(ROW))


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
