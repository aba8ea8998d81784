"""Exact decimals for `numeric` values, on the standard library's `decimal.Decimal`.

The rules are the Rust SDK's (`weir_plugin::decimal`), so that plugins in every
language parse, print and round alike:

* Text is PostgreSQL's `numeric` output form: an optional sign, ASCII digits, and
  optionally `.` and ASCII digits (`12.50`, `-0.5`, `.5`, `7.`, `+3` are accepted; at
  least one digit; no exponent, no white space, no `_`). `NaN`, `Infinity`,
  `+Infinity` and `-Infinity` are refused with `NotFinite`: a plugin decides what a
  non-finite value means. At most `MAX_DIGITS` digits (PostgreSQL's own limit).
* A parsed value keeps the text's scale (`1.50` has scale 2) and is never a negative
  zero.
* Printing (`to_text`) is PostgreSQL's form: the scale is kept (`1.50 x 2` prints
  `3.00`), there is never an exponent, and zero has no sign.
* Every helper computes in an explicit local context whose precision holds every
  exact result (`EXACT`, with `decimal.Inexact` trapped), so that nothing is ever
  rounded except by the one explicit rounding, `round_half_even`.

`decimal.Decimal` compares by value (`Decimal("1.5") == Decimal("1.50")`), as
PostgreSQL does; comparisons need no context.
"""

from __future__ import annotations

import decimal
from decimal import Decimal

__all__ = [
    "MAX_DIGITS",
    "EXACT",
    "DecimalError",
    "InvalidDecimal",
    "NotFinite",
    "TooManyDigits",
    "Inexact",
    "parse",
    "to_text",
    "rescale_exact",
    "round_half_even",
    "fits",
    "integer_digits",
    "scale",
    "is_negative",
    "add",
    "sub",
    "mul",
]

MAX_DIGITS = 131_072 + 16_383
"""The most digits a parsed decimal text may have (PostgreSQL's `numeric` limit:
131072 digits before the point plus 16383 after it)."""

EXACT = decimal.Context(
    prec=2 * MAX_DIGITS + 2,
    rounding=decimal.ROUND_HALF_EVEN,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    capitals=1,
    clamp=0,
    flags=[],
    traps=[decimal.InvalidOperation, decimal.DivisionByZero, decimal.Overflow, decimal.Inexact],
)
"""A context in which a sum or product of parsed decimals is always exact (its
precision holds the product of two values of `MAX_DIGITS` digits), and in which any
operation that would round a non-zero digit away raises `decimal.Inexact` instead.
The SDK runs a plugin's `open`, `transform`, `push` and `finish` in (a copy of) it, so
that `amount * rate` is exact there too; outside a session, use `mul` and `add` or
`decimal.localcontext(EXACT)`."""

# The one rounding step: as EXACT, but rounding (half to even) is allowed.
_ROUNDING = EXACT.copy()
_ROUNDING.traps[decimal.Inexact] = False

_NOT_FINITE_TEXTS = frozenset(("NaN", "Infinity", "+Infinity", "-Infinity"))


class DecimalError(ValueError):
    """Why a text is not a finite decimal, or why an operation would not be exact
    (the Rust SDK's `DecimalError`)."""


class InvalidDecimal(DecimalError):
    """The text is not decimal text (see the module documentation for the form)."""


class NotFinite(DecimalError):
    """`NaN`, `Infinity`, `+Infinity` or `-Infinity` (or such a `Decimal`)."""


class TooManyDigits(DecimalError):
    """More than `MAX_DIGITS` digits (or a result too long for `EXACT`)."""


class Inexact(DecimalError):
    """Rescaling would drop a non-zero digit (`rescale_exact`)."""


def _ascii_digits(text: str) -> bool:
    """Whether `text` is empty or only `0`-`9` (`str.isdigit` alone takes `١`)."""
    return text == "" or (text.isascii() and text.isdigit())


def parse(text: str) -> Decimal:
    """Parses PostgreSQL `numeric` text exactly; the result keeps the text's scale and
    is never a negative zero.

    Raises `NotFinite`, `InvalidDecimal` or `TooManyDigits`, checked in the Rust SDK's
    order: the special values first, then the form, then the length. Never raises
    anything else for a `str` (and `InvalidDecimal` for any other type).
    """
    # The common form, unsigned ASCII digits with at most one `.` (`1234.50`, `7`,
    # `.5`, `7.`), in one test: `Decimal` reads it exactly as the steps below would.
    if type(text) is str and text.isascii() and len(text) <= MAX_DIGITS and text.replace(".", "", 1).isdigit():
        return Decimal(text)
    if not isinstance(text, str):
        raise InvalidDecimal("not a str")
    if text in _NOT_FINITE_TEXTS:
        raise NotFinite(text)
    negative = text[:1] == "-"
    rest = text[1:] if text[:1] in ("-", "+") else text
    int_part, _, frac_part = rest.partition(".")
    if not int_part and not frac_part:
        raise InvalidDecimal("no digits")
    if not (_ascii_digits(int_part) and _ascii_digits(frac_part)):
        raise InvalidDecimal("not decimal text")
    if len(int_part) + len(frac_part) > MAX_DIGITS:
        raise TooManyDigits(f"more than {MAX_DIGITS} digits")
    # Only ASCII digits, one `.` and a sign remain: the constructor is exact for any
    # length (it does not use a context).
    value = Decimal(("-" if negative else "") + (int_part or "0") + "." + frac_part)
    return value.copy_abs() if negative and value.is_zero() else value


def to_text(value: Decimal) -> str:
    """PostgreSQL's output form, keeping the scale: `-12.340`, `0.05`, `7`, `0.00`;
    never an exponent, and zero has no sign. A value with a positive exponent prints
    its digits and zeros (`1E+3` is `1000`). `NaN`, `Infinity` and `-Infinity` print
    as such (the WIT `decimal` text of the special values)."""
    if not value.is_finite():
        if value.is_nan():
            return "NaN"
        return "-Infinity" if value.is_signed() else "Infinity"
    if value.is_zero() and value.is_signed():
        value = value.copy_abs()
    # `f` without a precision prints every digit exactly, whatever the context.
    return format(value, "f")


def scale(value: Decimal) -> int:
    """The number of digits after the decimal point (0 for a positive exponent)."""
    exponent = value.as_tuple().exponent
    if not isinstance(exponent, int):
        raise NotFinite("not a finite decimal")
    return -exponent if exponent < 0 else 0


def integer_digits(value: Decimal) -> int:
    """The number of significant digits before the point (0 below 1 in magnitude). A
    value fits `numeric(p, s)` when its scale can be made `s` exactly and this is at
    most `p - s`."""
    if not value.is_finite():
        raise NotFinite("not a finite decimal")
    return 0 if value.is_zero() else max(0, value.adjusted() + 1)


def is_negative(value: Decimal) -> bool:
    """Whether the value is below zero (zero never is, whatever its sign bit; `NaN`
    never is)."""
    return value.is_signed() and not value.is_zero() and not value.is_nan()


_QUANTA = {places: Decimal((0, (1,), -places)) for places in range(0, 39)}


def _quantum(places: int) -> Decimal:
    """`1E-places` (the usual ones made once)."""
    found = _QUANTA.get(places)
    return found if found is not None else Decimal((0, (1,), -places))


def _unsigned_zero(value: Decimal) -> Decimal:
    return value.copy_abs() if value.is_zero() and value.is_signed() else value


def rescale_exact(value: Decimal, places: int) -> Decimal:
    """The value at exactly `places` digits after the point: zeros are added (`7` ->
    `7.00`) or dropped (`1.500` -> `1.50`). Raises `Inexact` if a non-zero digit would
    be dropped (`1.005` at 2), `NotFinite` for a special value, and `TooManyDigits` if
    the result would be longer than `EXACT` holds."""
    if not value.is_finite():
        raise NotFinite("not a finite decimal")
    quantum = _QUANTA.get(places)
    try:
        result = EXACT.quantize(value, _quantum(places) if quantum is None else quantum)
    except decimal.Inexact:
        raise Inexact(f"a non-zero digit after {places} places") from None
    except decimal.InvalidOperation:
        raise TooManyDigits("the result is too long") from None
    return result.copy_abs() if result.is_signed() and result.is_zero() else result


def round_half_even(value: Decimal, places: int) -> Decimal:
    """The value at `places` digits after the point, rounded half to even ("banker's
    rounding"): a value exactly halfway between the two nearest values of that scale
    goes to the one whose last digit is even (`0.125` -> `0.12`, `0.135` -> `0.14`,
    `-0.125` -> `-0.12`), any other value to the nearest. Symmetric in the sign; a
    result of zero has no sign (`-0.004` -> `0.00`). A smaller scale is padded with
    zeros (exact)."""
    if not value.is_finite():
        raise NotFinite("not a finite decimal")
    quantum = _QUANTA.get(places)
    try:
        result = _ROUNDING.quantize(value, _quantum(places) if quantum is None else quantum)
    except decimal.InvalidOperation:
        raise TooManyDigits("the result is too long") from None
    return result.copy_abs() if result.is_signed() and result.is_zero() else result


def fits(value: Decimal, precision: int, places: int) -> bool:
    """Whether the value fits `numeric(precision, places)` without rounding: at most
    `places` non-zero fraction digits and at most `precision - places` integer
    digits. A special value never fits."""
    if not value.is_finite():
        return False
    if not value.is_zero() and value.adjusted() + 1 > max(0, precision - places):
        return False
    quantum = _QUANTA.get(places)
    try:
        EXACT.quantize(value, _quantum(places) if quantum is None else quantum)
    except (decimal.Inexact, decimal.InvalidOperation):
        return False
    return True


def add(a: Decimal, b: Decimal) -> Decimal:
    """The exact sum (in `EXACT`); its scale is the larger of the scales."""
    return _unsigned_zero(EXACT.add(a, b))


def sub(a: Decimal, b: Decimal) -> Decimal:
    """The exact difference (in `EXACT`); its scale is the larger of the scales."""
    return _unsigned_zero(EXACT.subtract(a, b))


def mul(a: Decimal, b: Decimal) -> Decimal:
    """The exact product (in `EXACT`); its scale is the sum of the scales."""
    product = EXACT.multiply(a, b)
    return product.copy_abs() if product.is_signed() and product.is_zero() else product
