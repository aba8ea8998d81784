"""`orders`: the example row plugin, in Python on the SDK `weir_plugin`
(`plugins/sdk-python/`). Its output is byte-identical to the Rust version's
(`../orders-rust/src/lib.rs`) for the same input; `../orders-cases.jsonl` holds the
cases every language's version is tested with (`test_cases.py`). This module is also
the component's app module (`Transform = export(Orders)` at the end), unchanged for
either contract: `scripts/build-plugins` builds it on `weir:transform@0.2.0` as
`orders-python.wasm` and on `0.1.0` as `orders-python-0-1.wasm`.

Input: rows of an `orders` table with columns `id` (integer), `customer` (text),
`order_date` (date), `amount` (decimal), `status` (text). Config: `rate`, a decimal
text (EUR per unit of `amount`), required, finite, not negative.

The rules, exactly:

* `id` is copied (required: a missing or null `id` rejects the row); `customer` and
  `order_date` are copied (null stays null; `order_date` is the partition column, so
  it is never changed, infinities included).
* `amount` is required and finite. A negative amount rejects the row with `amount is
  negative`. The output `amount` is the input at exactly 2 decimal places: trailing
  zeros are added (`7` -> `7.00`) or removed (`1.500` -> `1.50`); if a non-zero digit
  would be dropped the row is rejected with `amount has more than 2 decimal places`
  (no rounding of input), and if it has more than 10 integer digits with `amount does
  not fit numeric(12,2)`.
* `amount_eur` is the exact product `amount x rate`, rounded once to 2 decimal places
  **half to even** (a product exactly halfway goes to the even last digit: `5.125` ->
  `5.12`, `5.175` -> `5.18`; otherwise to the nearest). No float is involved at any
  step. More than 12 integer digits rejects the row with `amount_eur does not fit
  numeric(14,2)`.
* `status` is upper-cased by the ASCII rule only: `a`-`z` become `A`-`Z` and every
  other character is kept as it is (`straße` -> `STRAßE`), so that every language
  agrees whatever its Unicode tables; null stays null.
* `customer` must be text or null, `order_date` a date or null.
* The checks run in this order, and the first failure is the reason: `id`,
  `customer`, `order_date`, `amount` (present, not null, a decimal, finite, not
  negative, 2 places, fits), `amount_eur` fits, `status` (text or null). The reasons
  for a missing, null, mistyped or non-finite column are the SDK getters' fixed texts
  (``column `amount` is null``, ``column `id` is missing``, ``column `status` is not
  text``, ``column `amount` is not a finite decimal``).
* A deleted row (op `delete`) has no output.

Config errors are the SDK's texts (``missing config key `rate` ``, ``config `rate` is
not valid decimal text``, ...) and this plugin's ``config `rate` is negative``; as in
every SDK row session, a config error is returned by every `push` and by `finish`.
"""

from weir_plugin import Column, ColumnType, Description, InvalidConfig, Reject, Row, RowPlugin, export
from weir_plugin.decimal import Inexact, fits, mul, rescale_exact, round_half_even

_ASCII_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def ascii_upper(text):
    """`a`-`z` to `A`-`Z`; every other character kept (`straße` -> `STRAßE`)."""
    return text.translate(_ASCII_UPPER)


class Orders(RowPlugin):
    """The orders plugin for one partition job: holds the parsed `rate`."""

    @staticmethod
    def describe():
        return Description(
            "orders",
            "0.1.0",  # the Rust version's (the plugins' workspace version)
            columns=[
                Column("id", ColumnType.BIGINT, nullable=False),
                Column("customer", ColumnType.TEXT),
                Column("order_date", ColumnType.DATE),
                Column("amount", ColumnType.numeric(12, 2)),
                Column("amount_eur", ColumnType.numeric(14, 2)),
                Column("status", ColumnType.TEXT),
            ],
            grain_key=["id"],
            partition_column="order_date",
        )

    def __init__(self, rate):
        self.rate = rate

    @classmethod
    def open(cls, partition, config):
        rate = config.decimal("rate")
        if rate < 0:
            raise InvalidConfig("config `rate` is negative")
        return cls(rate)

    def transform(self, row):
        id_ = row.int("id")
        customer = row.text_or_null("customer")
        # Days as they are, as the Rust version copies them (infinities too).
        order_date = row.date_days_or_null("order_date")
        amount = row.decimal("amount")
        if amount < 0:
            raise Reject("amount is negative")
        try:
            amount = rescale_exact(amount, 2)
        except Inexact:
            raise Reject("amount has more than 2 decimal places") from None
        if not fits(amount, 12, 2):
            raise Reject("amount does not fit numeric(12,2)")
        amount_eur = round_half_even(mul(amount, self.rate), 2)
        if not fits(amount_eur, 14, 2):
            raise Reject("amount_eur does not fit numeric(14,2)")
        status = row.text_or_null("status")
        return Row(
            id=id_,
            customer=customer,
            order_date=order_date,
            amount=amount,
            amount_eur=amount_eur,
            status=None if status is None else ascii_upper(status),
        )


Transform = export(Orders)
