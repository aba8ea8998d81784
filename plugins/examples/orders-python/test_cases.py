"""Native tests of the Python `orders` plugin (`orders.py`), with plain `python3`.

Every case of `../orders-cases.jsonl` (the cases the Rust and JavaScript versions pass
too) is one test, run by the SDK's case runner (`weir_plugin.cases`) as the host runs
a session, on both contracts (0.2 and 0.1); plus what the case file does not cover. The SDK is taken from
`../../sdk-python/src` (this repository's copy, ahead of any installed one).

    python3 -B test_cases.py       # prints `orders-python: N passed, M failed` last
    python3 -B -m unittest -v      # the same tests, unittest's own output

Exits non-zero if any test fails.
"""

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "sdk-python" / "src"))

from weir_plugin import (  # noqa: E402
    Config,
    Input,
    InputSchema,
    InvalidConfig,
    PartitionInfo,
    RowSession,
    StagedRow,
    Value,
    describe,
    run_session,
)
from weir_plugin.cases import case_tests, unittest_main  # noqa: E402
from weir_plugin.decimal import MAX_DIGITS  # noqa: E402

from orders import Orders, Transform, ascii_upper  # noqa: E402

SharedCases = case_tests(Orders, HERE.parent / "orders-cases.jsonl")

PARTITION = PartitionInfo("public.orders", "2026-03-01")


def row(**columns):
    base = {
        "id": Value.integer(1),
        "customer": Value.text("c"),
        "order_date": Value.date(1),
        "amount": Value.decimal("1.00"),
        "status": Value.text("s"),
    }
    base.update(columns)
    return StagedRow.of(base, key=[Value.text("k")])


class Plugin(unittest.TestCase):
    """What the case file does not cover."""

    def test_describes_a_row_plugin_partitioned_by_order_date(self):
        d = describe(Orders)
        self.assertEqual((d.name, d.version, d.kind), ("orders", "0.1.0", "row"))
        self.assertEqual(tuple(d.grain_key), ("id",))
        self.assertEqual(d.partition_column, "order_date")
        self.assertEqual(
            [(c.name, str(c.type), c.nullable) for c in d.columns],
            [
                ("id", "bigint", False),
                ("customer", "text", True),
                ("order_date", "date", True),
                ("amount", "numeric(12,2)", True),
                ("amount_eur", "numeric(14,2)", True),
                ("status", "text", True),
            ],
        )
        self.assertIsNone(Transform)  # export() is a no-op natively

    def test_upper_cases_ascii_only(self):
        self.assertEqual(ascii_upper("straße é ǆ ﬁ a-z"), "STRAßE é ǆ ﬁ A-Z")

    def test_a_config_error_fails_every_call(self):
        expected = InvalidConfig("config `rate` is not valid decimal text")
        for schema in (None, InputSchema.of(["id"])):  # contract 0.1, then 0.2
            session = RowSession(Orders, PARTITION, [("rate", "x")], schema=schema)
            for call in (lambda: session.push([]), session.finish, session.finish):
                with self.assertRaises(InvalidConfig) as raised:
                    call()
                self.assertEqual(raised.exception, expected)

    def test_a_too_long_rate_names_the_key(self):
        with self.assertRaises(InvalidConfig) as raised:
            run_session(Orders, PARTITION, {"rate": "1" * (MAX_DIGITS + 1)}, [])
        self.assertEqual(raised.exception.message, "config `rate` has too many digits")

    def test_rejection_reasons_for_mistyped_and_odd_columns(self):
        def reason(**columns):
            reasons = set()
            for contract in ("0.2", "0.1"):
                out = run_session(Orders, PARTITION, {"rate": "1"}, [[row(**columns)]], contract=contract)
                self.assertEqual(out.rows, [])
                ((key, why),) = out.rejections
                self.assertEqual(key, [Value.text("k")])
                reasons.add(why)
            (why,) = reasons
            return why

        too_long = "1" * (MAX_DIGITS + 1)
        self.assertEqual(reason(id=Value.NULL), "column `id` is null")
        self.assertEqual(reason(id=Value.text("1")), "column `id` is not an integer")
        self.assertEqual(reason(customer=Value.integer(1)), "column `customer` is not text")
        self.assertEqual(reason(order_date=Value.timestamp(1)), "column `order_date` is not a date")
        self.assertEqual(reason(amount=Value.decimal("1e5")), "column `amount` is not valid decimal text")
        self.assertEqual(reason(amount=Value.decimal("-Infinity")), "column `amount` is not a finite decimal")
        self.assertEqual(reason(amount=Value.decimal(too_long)), "column `amount` has too many digits")
        # The first failed check is the reason: `id` before `amount`.
        self.assertEqual(reason(id=Value.NULL, amount=Value.NULL), "column `id` is null")

    def test_infinite_order_dates_are_copied_as_rust_copies_them(self):
        out = run_session(Orders, PARTITION, {"rate": "1"}, [[row(order_date=Value.date(2**31 - 1))]])
        self.assertEqual(out.rows[0][2], Value.date(2**31 - 1))

    def test_a_huge_rate_is_exact(self):
        rate = "0." + "0" * 100_000 + "5"
        out = run_session(Orders, PARTITION, {"rate": rate}, [[row(amount=Value.decimal("9999999999.99"))]])
        self.assertEqual(out.rows[0][4], Value.decimal("0.00"))
        # The plugin's logic is exact outside a session too (it never relies on the
        # session's decimal context).
        plugin = Orders.open(PARTITION, Config({"rate": "1." + "0" * 60 + "1"}))
        self.assertEqual(str(plugin.transform(Input(row(amount=Value.decimal("0.50"))))["amount_eur"]), "0.50")


if __name__ == "__main__":
    sys.exit(unittest_main("orders-python"))
