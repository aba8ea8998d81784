"""`orders`: the example row plugin, in Python. Its output is byte-identical to the Rust
version's (`../orders-rust/src/lib.rs`) for the same input; `../orders-cases.jsonl`
holds the cases every language's version is tested with (`test_cases.py`).

This module is the plugin's logic, with the standard library only: it knows nothing
of the component bindings, so it runs and is tested with plain `python3`. `app.py`
and `transform.py` adapt it to the WIT contract (`weir:transform@0.1.0`, world
`plugin`) when componentize-py builds the component.

Input: rows of an `orders` table with columns `id` (integer), `customer` (text),
`order_date` (date), `amount` (decimal), `status` (text). Config: `rate`, a decimal
text (EUR per unit of `amount`), required, finite, not negative.

The rules, exactly:

* `id` is copied (required: a missing or null `id` rejects the row); `customer` and
  `order_date` are copied (null stays null; `order_date` is the partition column, so
  it is never changed).
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
  for a missing, null, mistyped or non-finite column are the Rust SDK getters' fixed
  texts (``column `amount` is null``, ``column `id` is missing``, ``column `status`
  is not text``, ``column `amount` is not a finite decimal``).
* A deleted row (op `delete`) has no output.

Config errors are the Rust SDK's texts too (`invalid-config`, naming the key, never
the value): ``missing config key `rate` ``, ``config `rate` is not valid decimal
text``, ``config `rate` is not a finite decimal``, ``config `rate` has too many
digits``, and this plugin's ``config `rate` is negative``. As in the Rust SDK's row
session, a config error is returned by every `push` and by `finish` (the contract's
constructor cannot fail).

Decimal text (the Rust SDK's `weir_plugin::decimal`): PostgreSQL's `numeric` text,
an optional sign, ASCII digits, and optionally `.` and ASCII digits (`12.50`, `-0.5`,
`.5`, `7.`, `+3`; no exponent, no white space, at least one digit); `NaN`,
`Infinity`, `+Infinity` and `-Infinity` are not finite; at most 147,455 digits.
Arithmetic is `decimal.Decimal` in explicit local contexts whose precision holds
every exact result, so that the only rounding is the one half-to-even step; printing
keeps the scale and never puts a sign on zero.

Values cross this module as `(case, payload)` pairs named after the WIT `value`
cases: `("null", None)`, `("integer", 5)`, `("text", "new")`, `("decimal", "1.50")`,
`("date", 20513)`, ...
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Optional, Sequence, Tuple

NAME = "orders"
"""The plugin's name, as the Rust version describes itself."""

VERSION = "0.1.0"
"""The plugin's version: the same as the Rust version's (the plugins' workspace version)."""

MAX_DIGITS = 131_072 + 16_383
"""The most digits a decimal text may have (PostgreSQL's `numeric` limit)."""

Value = Tuple[str, Any]
"""A WIT `value` as `(case, payload)`: `("integer", 5)`, `("null", None)`, ..."""

NULL: Value = ("null", None)


# ----------------------------------------------------------------------------------
# Exact decimals
# ----------------------------------------------------------------------------------


class DecimalError(ValueError):
    """Why a text is not a finite decimal (the Rust SDK's `DecimalError`)."""


class InvalidDecimal(DecimalError):
    """The text is not decimal text."""


class NotFiniteDecimal(DecimalError):
    """`NaN`, `Infinity`, `+Infinity` or `-Infinity`."""


class TooManyDigits(DecimalError):
    """More than `MAX_DIGITS` digits."""


# Exact results: a precision that holds the product of two decimals of MAX_DIGITS
# digits each, so that nothing is ever rounded by precision; `Inexact` is trapped so
# that a rounding that drops a non-zero digit raises instead of happening silently.
_EXACT = decimal.Context(
    prec=2 * MAX_DIGITS + 2,
    rounding=decimal.ROUND_HALF_EVEN,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow, decimal.Inexact],
)

# The one rounding step: to a fixed number of places, half to even.
_HALF_EVEN = decimal.Context(
    prec=2 * MAX_DIGITS + 2,
    rounding=decimal.ROUND_HALF_EVEN,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow],
)

_NOT_FINITE_TEXTS = frozenset(("NaN", "Infinity", "+Infinity", "-Infinity"))


def _ascii_digits(text: str) -> bool:
    """Whether `text` is empty or only ASCII digits (`str.isdigit` alone takes `١`)."""
    return text == "" or (text.isascii() and text.isdigit())


def parse_decimal(text: str) -> decimal.Decimal:
    """Parses PostgreSQL `numeric` text exactly (see the module documentation).

    The result keeps the text's scale (`1.50` has scale 2); zero is never negative.
    Raises `NotFiniteDecimal`, `InvalidDecimal` or `TooManyDigits`, in the Rust SDK's
    order: the special values first, then the form, then the length.
    """
    if text in _NOT_FINITE_TEXTS:
        raise NotFiniteDecimal(text)
    negative = text.startswith("-")
    rest = text[1:] if text[:1] in ("-", "+") else text
    int_part, _, frac_part = rest.partition(".")
    if not int_part and not frac_part:
        raise InvalidDecimal("no digits")
    if not (_ascii_digits(int_part) and _ascii_digits(frac_part)):
        raise InvalidDecimal("not decimal text")
    if len(int_part) + len(frac_part) > MAX_DIGITS:
        raise TooManyDigits(f"more than {MAX_DIGITS} digits")
    digits = tuple(int(c) for c in int_part + frac_part)
    value = decimal.Decimal((1 if negative else 0, digits, -len(frac_part)))
    return _unsigned_zero(value)


def _unsigned_zero(value: decimal.Decimal) -> decimal.Decimal:
    """`value`, with the sign dropped if it is a (negative) zero."""
    return value.copy_abs() if value.is_zero() else value


def is_negative(value: decimal.Decimal) -> bool:
    """Whether the value is below zero (zero never is, whatever its sign bit)."""
    return value.is_signed() and not value.is_zero()


def _quantum(scale: int) -> decimal.Decimal:
    return decimal.Decimal((0, (1,), -scale))


def rescale_exact(value: decimal.Decimal, scale: int) -> decimal.Decimal:
    """The value at exactly `scale` digits after the point: zeros are added or
    dropped; raises `decimal.Inexact` if a non-zero digit would be dropped."""
    return _EXACT.quantize(value, _quantum(scale))


def round_half_even(value: decimal.Decimal, scale: int) -> decimal.Decimal:
    """The value at `scale` digits after the point, rounded half to even: a value
    exactly halfway goes to the even last digit (`0.125` -> `0.12`, `0.135` ->
    `0.14`, `-0.125` -> `-0.12`), any other to the nearest. A smaller scale is padded
    with zeros (exact)."""
    return _HALF_EVEN.quantize(value, _quantum(scale))


def multiply(a: decimal.Decimal, b: decimal.Decimal) -> decimal.Decimal:
    """The exact product; its scale is the sum of the scales."""
    return _EXACT.multiply(a, b)


def integer_digits(value: decimal.Decimal) -> int:
    """The number of significant digits before the point (0 below 1 in magnitude)."""
    return 0 if value.is_zero() else max(0, value.adjusted() + 1)


def fits(value: decimal.Decimal, precision: int, scale: int) -> bool:
    """Whether the value fits `numeric(precision, scale)` without rounding: at most
    `scale` non-zero fraction digits and at most `precision - scale` integer digits."""
    try:
        rescaled = rescale_exact(value, scale)
    except decimal.Inexact:
        return False
    return integer_digits(rescaled) <= max(0, precision - scale)


def decimal_text(value: decimal.Decimal) -> str:
    """PostgreSQL's output form, keeping the scale: `-12.340`, `0.05`, `7`; zero has
    no sign. (Built from the digits: `str()` would switch to exponent form.)"""
    sign, digit_tuple, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise ValueError("not a finite decimal")
    scale = -exponent if exponent < 0 else 0
    coefficient = "".join(map(str, digit_tuple)) + ("0" * exponent if exponent > 0 else "")
    coefficient = coefficient.lstrip("0")
    if len(coefficient) > scale:
        int_part = coefficient[: len(coefficient) - scale]
        frac_part = coefficient[len(coefficient) - scale :]
    else:
        int_part = "0"
        frac_part = coefficient.rjust(scale, "0")
    text = "-" if sign and coefficient else ""
    text += int_part
    if scale:
        text += "." + frac_part
    return text


# ----------------------------------------------------------------------------------
# Errors, rejections and the typed column getters (the Rust SDK's `Input`/`Config`)
# ----------------------------------------------------------------------------------


class PluginError(Exception):
    """An error that fails the whole call: the WIT `error` variant, `kind` being one
    of `invalid-config`, `invalid-input` or `other`."""

    KINDS = ("invalid-config", "invalid-input", "other")

    def __init__(self, kind: str, message: str) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown error kind {kind!r}")
        super().__init__(message)
        self.kind = kind
        self.message = message

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, PluginError)
            and (self.kind, self.message) == (other.kind, other.message)
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.message))

    def __repr__(self) -> str:
        return f"PluginError({self.kind!r}, {self.message!r})"


class Reject(Exception):
    """One input row is refused, with a reason (a WIT `rejection`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def config_decimal(config: Sequence[Tuple[str, str]], key: str) -> decimal.Decimal:
    """The config value of `key` as an exact, finite decimal; `PluginError`
    (`invalid-config`) naming the key, never the value, otherwise."""
    text = next((v for k, v in sorted(config) if k == key), None)
    if text is None:
        raise PluginError("invalid-config", f"missing config key `{key}`")
    try:
        return parse_decimal(text)
    except NotFiniteDecimal:
        raise PluginError("invalid-config", f"config `{key}` is not a finite decimal") from None
    except TooManyDigits:
        raise PluginError("invalid-config", f"config `{key}` has too many digits") from None
    except InvalidDecimal:
        raise PluginError("invalid-config", f"config `{key}` is not valid decimal text") from None


@dataclass
class StagedRow:
    """One staged row: its `key` (kept as pushed, to name the row in a rejection), its
    `op` (`insert`, `update`, `delete` or `read`) and its columns as `(name, value)`
    pairs in source order."""

    key: Any
    op: str
    columns: Sequence[Tuple[str, Value]]


class Input:
    """Typed getters over one staged row's columns, with the Rust SDK's fixed
    rejection reasons: ``column `NAME` is missing``, ``column `NAME` is null``,
    ``column `NAME` is not KIND``, ``column `NAME` is not a finite decimal``, ...

    Every getter refuses a missing column and a value of another case (no coercion);
    the `_or_null` forms return `None` for null, the others refuse it."""

    def __init__(self, columns: Sequence[Tuple[str, Value]]) -> None:
        self._columns = columns

    def value(self, column: str) -> Value:
        """The value of a column (the first of that name); missing is a rejection."""
        for name, value in self._columns:
            if name == column:
                return value
        raise Reject(f"column `{column}` is missing")

    def _or_null(self, column: str, case: str, kind: str) -> Any:
        value_case, payload = self.value(column)
        if value_case == "null":
            return None
        if value_case != case:
            raise Reject(f"column `{column}` is not {kind}")
        return payload

    @staticmethod
    def _required(column: str, payload: Any) -> Any:
        if payload is None:
            raise Reject(f"column `{column}` is null")
        return payload

    def integer(self, column: str) -> int:
        """An `integer` column (the Rust SDK's `int`)."""
        return self._required(column, self._or_null(column, "integer", "an integer"))

    def text_or_null(self, column: str) -> Optional[str]:
        """A `text` column; `None` for null."""
        return self._or_null(column, "text", "text")

    def date_or_null(self, column: str) -> Optional[int]:
        """A `date` column (days since 1970-01-01); `None` for null."""
        return self._or_null(column, "date", "a date")

    def decimal_or_null(self, column: str) -> Optional[decimal.Decimal]:
        """A `decimal` column parsed exactly; `None` for null."""
        text = self._or_null(column, "decimal", "a decimal")
        if text is None:
            return None
        try:
            return parse_decimal(text)
        except NotFiniteDecimal:
            raise Reject(f"column `{column}` is not a finite decimal") from None
        except TooManyDigits:
            raise Reject(f"column `{column}` has too many digits") from None
        except InvalidDecimal:
            raise Reject(f"column `{column}` is not valid decimal text") from None

    def required_decimal(self, column: str) -> decimal.Decimal:
        """A `decimal` column parsed exactly; null is a rejection (the Rust SDK's
        `decimal`)."""
        return self._required(column, self.decimal_or_null(column))


# ----------------------------------------------------------------------------------
# The plugin
# ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """An output column: its name, its type as `(case, payload)` after the WIT
    `column-type` (`("bigint", None)`, `("numeric", (12, 2))`, ...), nullability."""

    name: str
    type: Tuple[str, Any]
    nullable: bool = True


@dataclass(frozen=True)
class Description:
    """The plugin's description (the WIT `description`)."""

    name: str
    version: str
    kind: str
    columns: Tuple[Column, ...]
    grain_key: Tuple[str, ...]
    partition_column: str


DESCRIPTION = Description(
    name=NAME,
    version=VERSION,
    kind="row",
    columns=(
        Column("id", ("bigint", None), nullable=False),
        Column("customer", ("text", None)),
        Column("order_date", ("date", None)),
        Column("amount", ("numeric", (12, 2))),
        Column("amount_eur", ("numeric", (14, 2))),
        Column("status", ("text", None)),
    ),
    grain_key=("id",),
    partition_column="order_date",
)


def describe() -> Description:
    """The plugin's description: a constant."""
    return DESCRIPTION


_ASCII_UPPER = {c: c - 32 for c in range(ord("a"), ord("z") + 1)}


def ascii_upper(text: str) -> str:
    """`a`-`z` to `A`-`Z`; every other character kept (`straße` -> `STRAßE`)."""
    return text.translate(_ASCII_UPPER)


class Orders:
    """The orders plugin for one partition job: holds the parsed `rate`."""

    def __init__(self, rate: decimal.Decimal) -> None:
        self.rate = rate

    @classmethod
    def open(cls, config: Sequence[Tuple[str, str]]) -> "Orders":
        """Parses the config; `PluginError` (`invalid-config`) if it is invalid."""
        rate = config_decimal(config, "rate")
        if is_negative(rate):
            raise PluginError("invalid-config", "config `rate` is negative")
        return cls(rate)

    def transform(self, row: Input) -> List[Value]:
        """One output row, its values in the declared column order; `Reject` with the
        first failed check's reason (see the module documentation for the order)."""
        id_ = row.integer("id")
        customer = row.text_or_null("customer")
        order_date = row.date_or_null("order_date")
        amount = row.required_decimal("amount")
        if is_negative(amount):
            raise Reject("amount is negative")
        try:
            amount = rescale_exact(amount, 2)
        except decimal.Inexact:
            raise Reject("amount has more than 2 decimal places") from None
        if not fits(amount, 12, 2):
            raise Reject("amount does not fit numeric(12,2)")
        amount_eur = round_half_even(multiply(amount, self.rate), 2)
        if not fits(amount_eur, 14, 2):
            raise Reject("amount_eur does not fit numeric(14,2)")
        status = row.text_or_null("status")
        return [
            ("integer", id_),
            NULL if customer is None else ("text", customer),
            NULL if order_date is None else ("date", order_date),
            ("decimal", decimal_text(amount)),
            ("decimal", decimal_text(amount_eur)),
            NULL if status is None else ("text", ascii_upper(status)),
        ]


@dataclass
class PushOutput:
    """The rows (lists of values in declared column order) and rejections (`(key,
    reason)` pairs, the key exactly as pushed) of one `push` or `finish`."""

    rows: List[List[Value]] = field(default_factory=list)
    rejections: List[Tuple[Any, str]] = field(default_factory=list)


class Session:
    """One partition job, as the Rust SDK's row session runs it: the config is parsed
    once, at construction; a config error is raised by every `push` and by `finish`.
    Rows whose op is `delete` have no output; every other row yields one output row
    or one rejection. `finish` returns nothing (a row plugin holds nothing back)."""

    def __init__(self, partition: Any, config: Sequence[Tuple[str, str]]) -> None:
        self._plugin: Optional[Orders] = None
        self._error: Optional[PluginError] = None
        try:
            self._plugin = Orders.open(config)
        except PluginError as error:
            self._error = error

    def _opened(self) -> Orders:
        if self._error is not None:
            raise PluginError(self._error.kind, self._error.message)
        assert self._plugin is not None
        return self._plugin

    def push(self, rows: Iterable[StagedRow]) -> PushOutput:
        """Transforms one chunk of staged rows."""
        plugin = self._opened()
        out = PushOutput()
        for staged in rows:
            if staged.op == "delete":
                continue
            try:
                out.rows.append(plugin.transform(Input(staged.columns)))
            except Reject as reject:
                out.rejections.append((staged.key, reject.reason))
        return out

    def finish(self) -> PushOutput:
        """Ends the job: nothing is held back."""
        self._opened()
        return PushOutput()
