"""Native tests of the Python `orders` plugin (`orders.py`), with plain `python3`.

Every case of `../orders-cases.jsonl` (the cases the Rust and JavaScript versions pass
too) is one test: the session is run as the host runs it (constructed with the
partition and config, one `push` per chunk, then `finish`; outputs concatenated in
order) and its output, in the case file's JSON form, must equal the expected one
exactly (value cases and types included: `{"integer": 1}` is not `{"integer": 1.0}`).
The case file format is the Rust SDK's (`plugins/sdk/src/cases.rs`).

    python3 test_cases.py          # prints `orders-python: N passed, M failed` last
    python3 -m unittest -v         # the same tests, unittest's own output

Exits non-zero if any test fails.
"""

from __future__ import annotations

import decimal
import json
import sys
import unittest
from pathlib import Path
from typing import Any, Dict, List

import orders

CASES_PATH = Path(__file__).resolve().parent.parent / "orders-cases.jsonl"


# ----------------------------------------------------------------------------------
# The case file's JSON forms (as `plugins/sdk/src/cases.rs` reads and writes them)
# ----------------------------------------------------------------------------------

_TEXT_CASES = ("text", "decimal", "json")


def value_from_json(v: Any) -> orders.Value:
    """A value from its JSON form: `null`, or an object with exactly one case."""
    if v is None:
        return orders.NULL
    if not isinstance(v, dict) or len(v) != 1:
        raise ValueError(f"value {v!r} is neither null nor an object with one case")
    ((case, inner),) = v.items()

    def integer(x: Any) -> int:
        if isinstance(x, int) and not isinstance(x, bool):
            return x
        if isinstance(x, str):
            return int(x)
        raise ValueError(f"value {v!r} is not a valid {case}")

    def text(x: Any) -> str:
        if not isinstance(x, str):
            raise ValueError(f"value {v!r} is not a valid {case}")
        return x

    if case == "boolean":
        if not isinstance(inner, bool):
            raise ValueError(f"value {v!r} is not a valid boolean")
        return ("boolean", inner)
    if case in ("integer", "timestamp"):
        return (case, integer(inner))
    if case == "date":
        days = integer(inner)
        if not -(2**31) <= days < 2**31:
            raise ValueError(f"value {v!r} is not a valid date")
        return ("date", days)
    if case == "float":
        # The plugin never computes with a float; this only carries an input value.
        if inner in ("NaN", "Infinity", "-Infinity"):
            return ("float", float(inner.lower().replace("infinity", "inf")))
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return ("float", float(inner))
        raise ValueError(f"value {v!r} is not a valid float")
    if case in _TEXT_CASES:
        return (case, text(inner))
    if case == "bytes":
        return ("bytes", bytes.fromhex(text(inner)))
    if case == "unsupported":
        return ("unsupported", (text(inner["type-name"]), text(inner["text"])))
    raise ValueError(f"value {v!r} has an unknown case")


def value_to_json(value: orders.Value) -> Any:
    """A value in its JSON form."""
    case, payload = value
    if case == "null":
        return None
    if case == "bytes":
        return {"bytes": payload.hex()}
    if case == "unsupported":
        return {"unsupported": {"type-name": payload[0], "text": payload[1]}}
    return {case: payload}


def staged_row_from_json(j: Dict[str, Any]) -> orders.StagedRow:
    """A staged row from its JSON form."""
    if j["op"] not in ("insert", "update", "delete", "read"):
        raise ValueError("op is not insert, update, delete or read")
    return orders.StagedRow(
        key=[value_from_json(v) for v in j["key"]],
        op=j["op"],
        columns=[(name, value_from_json(v)) for name, v in j["columns"].items()],
    )


def run_case(case: Dict[str, Any]) -> Dict[str, Any]:
    """Runs one case's session as the host would; its output in the `expect` form."""
    config = [(k, v) for k, v in (case.get("config") or {}).items()]
    for key, value in config:
        if not isinstance(value, str):
            raise ValueError(f"config `{key}` is not a string")
    partition = (case["partition"]["table"], case["partition"]["name"])
    chunks = [[staged_row_from_json(r) for r in chunk] for chunk in case["chunks"]]
    columns = [c.name for c in orders.describe().columns]
    rows: List[Any] = []
    rejections: List[Any] = []
    try:
        session = orders.Session(partition, config)
        outputs = [session.push(chunk) for chunk in chunks]
        outputs.append(session.finish())
    except orders.PluginError as error:
        return {"error": {error.kind: error.message}}
    for out in outputs:
        for row in out.rows:
            if len(row) != len(columns):
                raise AssertionError(f"a row has {len(row)} values for {len(columns)} columns")
            rows.append({name: value_to_json(v) for name, v in zip(columns, row)})
        for key, reason in out.rejections:
            rejections.append({"key": [value_to_json(v) for v in key], "reason": reason})
    return {"rows": rows, "rejections": rejections}


def canonical(j: Any) -> str:
    """JSON text that is equal only for equal values of equal types."""
    return json.dumps(j, sort_keys=True, ensure_ascii=False)


def load_cases() -> List[Dict[str, Any]]:
    cases = []
    for n, line in enumerate(CASES_PATH.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            case = json.loads(line)
            case["_line"] = n
            cases.append(case)
    return cases


# ----------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------


class SharedCases(unittest.TestCase):
    """One test per case of `../orders-cases.jsonl` (added below)."""

    def test_the_case_file_has_cases(self) -> None:
        self.assertGreater(len(load_cases()), 0, f"no cases in {CASES_PATH}")


def _case_test(case: Dict[str, Any]):
    def test(self: unittest.TestCase) -> None:
        actual = run_case(case)
        expected = case["expect"]
        self.assertEqual(
            canonical(actual),
            canonical(expected),
            f"line {case['_line']}: case `{case['case']}`:\n"
            f"  expected {canonical(expected)}\n  actual   {canonical(actual)}",
        )

    test.__doc__ = f"line {case['_line']}: {case['case']}"
    return test


for _case in load_cases():
    setattr(SharedCases, f"test_line_{_case['_line']:03d}", _case_test(_case))


def d(text: str) -> decimal.Decimal:
    return orders.parse_decimal(text)


class Decimals(unittest.TestCase):
    """The decimal rules, with the examples of the Rust SDK's `decimal.rs` tests."""

    def test_parses_and_prints_postgres_text_keeping_the_scale(self) -> None:
        for text, printed in [
            ("0", "0"),
            ("0.00", "0.00"),
            ("-0.00", "0.00"),
            ("12.340", "12.340"),
            ("-12.340", "-12.340"),
            ("007.5", "7.5"),
            (".5", "0.5"),
            ("7.", "7"),
            ("+3", "3"),
            ("0.05", "0.05"),
            (
                "123456789012345678901234567890.123456789",
                "123456789012345678901234567890.123456789",
            ),
        ]:
            self.assertEqual(orders.decimal_text(d(text)), printed, text)

    def test_refuses_what_is_not_finite_decimal_text(self) -> None:
        invalid = ["", "-", ".", "1e5", "1.2.3", " 1", "1 ", "abc", "--1", "0x10", "١", "1_0", "inf", "1\n"]
        for bad in invalid:
            with self.assertRaises(orders.InvalidDecimal, msg=repr(bad)):
                d(bad)
        for special in ["NaN", "Infinity", "+Infinity", "-Infinity"]:
            with self.assertRaises(orders.NotFiniteDecimal, msg=special):
                d(special)
        with self.assertRaises(orders.TooManyDigits):
            d("9" * (orders.MAX_DIGITS + 1))
        self.assertEqual(len(orders.decimal_text(d("9" * orders.MAX_DIGITS))), orders.MAX_DIGITS)

    def test_multiplication_is_exact_where_floats_are_not(self) -> None:
        for a, b, product in [
            ("0.29", "100", "29.00"),
            ("0.1", "3", "0.3"),
            ("100.00", "1.0825", "108.250000"),
            ("-1.5", "2", "-3.0"),
            ("-1.5", "-2", "3.0"),
            ("-1.5", "0.00", "0.000"),
            (
                "99999999999999999999.99",
                "99999999999999999999.99",
                "9999999999999999999998000000000000000000.0001",
            ),
        ]:
            self.assertEqual(orders.decimal_text(orders.multiply(d(a), d(b))), product)

    def test_rounds_half_to_even_symmetrically(self) -> None:
        for text, scale, rounded in [
            ("0.125", 2, "0.12"),
            ("0.135", 2, "0.14"),
            ("0.1250001", 2, "0.13"),
            ("0.1249999", 2, "0.12"),
            ("-0.125", 2, "-0.12"),
            ("-0.135", 2, "-0.14"),
            ("2.5", 0, "2"),
            ("3.5", 0, "4"),
            ("0.5", 0, "0"),
            ("-0.5", 0, "0"),
            ("9.995", 2, "10.00"),
            ("0.004", 2, "0.00"),
            ("0.005", 2, "0.00"),
            ("0.015", 2, "0.02"),
            ("1.2", 3, "1.200"),
            ("5", 2, "5.00"),
            ("0.0000005", 2, "0.00"),
            ("-0.004", 2, "0.00"),
        ]:
            self.assertEqual(
                orders.decimal_text(orders.round_half_even(d(text), scale)),
                rounded,
                f"{text} at {scale}",
            )

    def test_exact_rescaling_refuses_to_drop_digits(self) -> None:
        self.assertEqual(orders.decimal_text(orders.rescale_exact(d("1.500"), 2)), "1.50")
        self.assertEqual(orders.decimal_text(orders.rescale_exact(d("7"), 2)), "7.00")
        with self.assertRaises(decimal.Inexact):
            orders.rescale_exact(d("1.005"), 2)

    def test_checks_numeric_bounds_and_signs(self) -> None:
        self.assertTrue(orders.fits(d("9999999999.99"), 12, 2))
        self.assertTrue(orders.fits(d("9999999999.990"), 12, 2))
        self.assertFalse(orders.fits(d("10000000000.00"), 12, 2))
        self.assertFalse(orders.fits(d("1.005"), 12, 2))
        self.assertEqual(orders.integer_digits(d("0.05")), 0)
        self.assertEqual(orders.integer_digits(d("-123.4")), 3)
        self.assertFalse(orders.is_negative(d("-0.00")))
        self.assertTrue(orders.is_negative(d("-0.001")))


class Plugin(unittest.TestCase):
    """What the case file does not cover."""

    def test_describes_a_row_plugin_partitioned_by_order_date(self) -> None:
        desc = orders.describe()
        self.assertEqual((desc.name, desc.version, desc.kind), ("orders", "0.1.0", "row"))
        self.assertEqual(desc.grain_key, ("id",))
        self.assertEqual(desc.partition_column, "order_date")
        self.assertEqual(
            [(c.name, c.type, c.nullable) for c in desc.columns],
            [
                ("id", ("bigint", None), False),
                ("customer", ("text", None), True),
                ("order_date", ("date", None), True),
                ("amount", ("numeric", (12, 2)), True),
                ("amount_eur", ("numeric", (14, 2)), True),
                ("status", ("text", None), True),
            ],
        )

    def test_upper_cases_ascii_only(self) -> None:
        self.assertEqual(orders.ascii_upper("straße é ǆ ﬁ a-z"), "STRAßE é ǆ ﬁ A-Z")

    def test_a_config_error_fails_every_call(self) -> None:
        session = orders.Session(("public.orders", "2026-03-01"), [("rate", "x")])
        expected = orders.PluginError("invalid-config", "config `rate` is not valid decimal text")
        for call in (lambda: session.push([]), session.finish, session.finish):
            with self.assertRaises(orders.PluginError) as raised:
                call()
            self.assertEqual(raised.exception, expected)

    def test_a_too_long_rate_names_the_key(self) -> None:
        session = orders.Session(None, [("rate", "1" * (orders.MAX_DIGITS + 1))])
        with self.assertRaises(orders.PluginError) as raised:
            session.finish()
        self.assertEqual(raised.exception.message, "config `rate` has too many digits")

    def test_rejection_reasons_for_mistyped_and_odd_columns(self) -> None:
        def reason(**columns: orders.Value) -> str:
            base = {
                "id": ("integer", 1),
                "customer": ("text", "c"),
                "order_date": ("date", 1),
                "amount": ("decimal", "1.00"),
                "status": ("text", "s"),
            }
            base.update(columns)
            out = orders.Session(None, [("rate", "1")]).push(
                [orders.StagedRow(key=["k"], op="insert", columns=list(base.items()))]
            )
            self.assertEqual(out.rows, [])
            ((key, why),) = out.rejections
            self.assertEqual(key, ["k"])
            return why

        self.assertEqual(reason(id=orders.NULL), "column `id` is null")
        self.assertEqual(reason(id=("text", "1")), "column `id` is not an integer")
        self.assertEqual(reason(customer=("integer", 1)), "column `customer` is not text")
        self.assertEqual(reason(order_date=("timestamp", 1)), "column `order_date` is not a date")
        too_long = "1" * (orders.MAX_DIGITS + 1)
        self.assertEqual(reason(amount=("decimal", "1e5")), "column `amount` is not valid decimal text")
        self.assertEqual(reason(amount=("decimal", "-Infinity")), "column `amount` is not a finite decimal")
        self.assertEqual(reason(amount=("decimal", too_long)), "column `amount` has too many digits")
        # The first failed check is the reason: `id` before `amount`.
        self.assertEqual(reason(id=orders.NULL, amount=orders.NULL), "column `id` is null")

    def test_a_huge_rate_is_exact(self) -> None:
        rate = "0." + "0" * 100_000 + "5"
        out = orders.Session(None, [("rate", rate)]).push(
            [
                orders.StagedRow(
                    key=[],
                    op="insert",
                    columns=[("id", ("integer", 1)), ("amount", ("decimal", "1.00"))],
                )
            ]
        )
        # customer, order_date and status are missing: the first missing one rejects.
        self.assertEqual(out.rejections, [([], "column `customer` is missing")])
        row = orders.Input(
            [
                ("id", ("integer", 1)),
                ("customer", orders.NULL),
                ("order_date", orders.NULL),
                ("amount", ("decimal", "9999999999.99")),
                ("status", orders.NULL),
            ]
        )
        values = orders.Orders.open([("rate", rate)]).transform(row)
        self.assertEqual(values[4], ("decimal", "0.00"))


def main() -> int:
    """Runs every test; prints `orders-python: N passed, M failed` last."""
    suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])
    result = unittest.TextTestRunner(verbosity=1, stream=sys.stderr).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    print(f"orders-python: {result.testsRun - failed} passed, {failed} failed")
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
