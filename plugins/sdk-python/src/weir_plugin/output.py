"""Building output: rows by column name, converted to WIT values by the declared
output column types, and the rows and rejections of a partition plugin's call."""

from __future__ import annotations

import datetime as _dt
import sys
from decimal import Decimal
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import decimal as _decimal
from .input import Input
from .types import Column, ColumnType, Json, Other, Value

__all__ = ["Row", "Output"]

_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH = _dt.datetime(1970, 1, 1)
_INT_RANGES = {
    "smallint": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)
_FLOAT_EXACT_INT = 2**53


class Row:
    """An output row built by column name: `Row(id=1, amount=Decimal("1.50"))`, or
    `Row().set("id", 1)`, or `row["id"] = 1`. Values may be set in any order; setting
    a column twice keeps the last value.

    Values are natural Python values, converted by the column's declared type when
    the row is returned (see `weir_plugin` for the table): `None` is null; `int` for
    integer columns (and for `date`: days, `timestamp`: microseconds), `float`, `str`,
    `bool`, `bytes`, `Decimal` (rescaled to the declared scale by adding or dropping
    zeros only), `datetime.date`, `datetime.datetime`, `Json`, or a `Value` (passed as
    it is). A value that the column's type cannot take, a declared column that is not
    set, or a column that is not declared fails the call with `Other` naming the
    column: a plugin bug, never a silent conversion."""

    __slots__ = ("_cells",)

    def __init__(self, /, **cells: Any) -> None:
        self._cells: Dict[str, Any] = cells

    def set(self, column: str, value: Any) -> "Row":
        """Sets a column; returns the row (so calls chain)."""
        self._cells[column] = value
        return self

    def __setitem__(self, column: str, value: Any) -> None:
        self._cells[column] = value

    def __getitem__(self, column: str) -> Any:
        return self._cells[column]

    def get(self, column: str, default: Any = None) -> Any:
        """The value set for a column, or `default`."""
        return self._cells.get(column, default)

    def __contains__(self, column: object) -> bool:
        return column in self._cells

    def items(self) -> List[Tuple[str, Any]]:
        """The cells as `(column, value)`, in the order they were first set."""
        return list(self._cells.items())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Row) and other._cells == self._cells

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Row(" + ", ".join(f"{k}={v!r}" for k, v in self._cells.items()) + ")"


class Output:
    """The rows and rejections of one `push` or `finish` of a `PartitionPlugin`."""

    __slots__ = ("rows", "rejections")

    def __init__(self) -> None:
        self.rows: List[Row] = []
        self.rejections: List[Tuple[Any, str]] = []

    def row(self, row: Row) -> None:
        """Emits an output row."""
        if not isinstance(row, Row):
            raise Other(f"Output.row takes a Row, not a {type(row).__name__}")
        self.rows.append(row)

    def reject(self, input: Input, reason: str) -> None:
        """Rejects an input row (one pushed in this session) with a reason."""
        self.rejections.append((input._row.key, reason))


# ----------------------------------------------------------------------------------
# Conversion by declared type
# ----------------------------------------------------------------------------------


class _Bad(Exception):
    """A value a column cannot take: the message's tail after the column."""


def _kind(value: Any) -> str:
    return f"a value of type {type(value).__name__}"


def _int_checker(lo: int, hi: int) -> Callable[[Any], int]:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Bad(f"cannot take {_kind(v)}")
        if not lo <= v <= hi:
            raise _Bad("cannot take an int out of its range")
        return int(v)

    return check


def _float_of(v: Any) -> float:
    if isinstance(v, float):
        return float(v)
    if isinstance(v, int) and not isinstance(v, bool):
        if -_FLOAT_EXACT_INT <= v <= _FLOAT_EXACT_INT:
            return float(v)
        raise _Bad("cannot take an int that a float does not hold exactly")
    raise _Bad(f"cannot take {_kind(v)}")


def _text_of(v: Any) -> str:
    if isinstance(v, str):
        return str(v)
    raise _Bad(f"cannot take {_kind(v)}")


def _varchar_of(length: int) -> Callable[[Any], str]:
    def check(v: Any) -> str:
        text = _text_of(v)
        if len(text) > length:
            raise _Bad(f"cannot take text longer than {length} characters")
        return text

    return check


def _uuid_of(v: Any) -> str:
    # A `uuid.UUID` can only exist if its module was imported: not imported here.
    uuid_module = sys.modules.get("uuid")
    if uuid_module is not None and isinstance(v, uuid_module.UUID):
        return str(v)
    return _text_of(v)


def _bool_of(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise _Bad(f"cannot take {_kind(v)}")


def _bytes_of(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise _Bad(f"cannot take {_kind(v)}")


def _json_of(v: Any) -> str:
    if isinstance(v, Json):
        return v.text
    raise _Bad(f"cannot take {_kind(v)} (JSON text is given as Json(text))")


def _date_of(v: Any) -> int:
    if isinstance(v, _dt.date) and not isinstance(v, _dt.datetime):
        return v.toordinal() - _EPOCH_ORDINAL
    if isinstance(v, int) and not isinstance(v, bool):
        if not _I32[0] <= v <= _I32[1]:
            raise _Bad("cannot take an int out of its range (days since 1970-01-01)")
        return int(v)
    raise _Bad(f"cannot take {_kind(v)}")


def _timestamp_of(v: Any) -> int:
    if isinstance(v, _dt.datetime):
        delta = v.replace(tzinfo=None) - _EPOCH
        offset = v.utcoffset()
        if offset is not None:
            delta -= offset
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if isinstance(v, int) and not isinstance(v, bool):
        if not _I64[0] <= v <= _I64[1]:
            raise _Bad("cannot take an int out of its range (microseconds since 1970-01-01)")
        return int(v)
    raise _Bad(f"cannot take {_kind(v)}")


def _decimal_of(v: Any) -> Decimal:
    if isinstance(v, Decimal):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return Decimal(v)
    raise _Bad(f"cannot take {_kind(v)}")


def _numeric_of(typmod: Optional[Tuple[int, int]]) -> Callable[[Any], str]:
    if typmod is None:

        def unconstrained(v: Any) -> str:
            return _decimal.to_text(_decimal_of(v))

        return unconstrained
    precision, scale = typmod
    max_integer_digits = precision - scale
    too_long = f"cannot take a decimal with more than {max_integer_digits} integer digits"
    too_precise = f"cannot take a decimal with more than {scale} decimal places"

    def constrained(v: Any) -> str:
        d = _decimal_of(v)
        if not d.is_finite():
            raise _Bad("cannot take a non-finite decimal")
        if not d.is_zero() and d.adjusted() >= max_integer_digits:
            raise _Bad(too_long)
        try:
            d = _decimal.rescale_exact(d, scale)
        except _decimal.Inexact:
            raise _Bad(too_precise) from None
        except _decimal.DecimalError:
            raise _Bad(too_long) from None
        return _decimal.to_text(d)

    return constrained


# The payload converter and the WIT value case of each column type.
def _payload_converter(t: ColumnType) -> Tuple[str, Callable[[Any], Any]]:
    case = t.case
    if case in _INT_RANGES:
        return "integer", _int_checker(*_INT_RANGES[case])
    if case in ("real", "double-precision"):
        return "float", _float_of
    if case == "numeric":
        return "decimal", _numeric_of(t.arg)
    if case == "text":
        return "text", _text_of
    if case == "varchar":
        return "text", (_text_of if t.arg is None else _varchar_of(t.arg))
    if case == "uuid":
        return "text", _uuid_of
    if case == "boolean":
        return "boolean", _bool_of
    if case == "date":
        return "date", _date_of
    if case in ("timestamp", "timestamptz"):
        return "timestamp", _timestamp_of
    if case in ("json", "jsonb"):
        return "json", _json_of
    if case == "bytea":
        return "bytes", _bytes_of
    raise ValueError(f"unknown column type {t!r}")


_DIGITS = frozenset("0123456789")


def _fast_test(t: ColumnType, i: int, ns: Dict[str, Any]) -> Optional[List[str]]:
    """Source lines that set `x{i}` from `v` (a column's value, not `None`) when it is
    the common case of column type `t` (the value of the exact type the column takes,
    as `convert` would convert it: `int` in range for an integer column, `str` for
    text, a non-negative `Decimal` already at the column's scale for `numeric(p,s)`,
    ...), and leave `x{i}` unset (`None`) otherwise; `None` if the type has none."""
    case = t.case
    if case in _INT_RANGES or case in ("date", "timestamp", "timestamptz"):
        ns[f"lo{i}"], ns[f"hi{i}"] = _INT_RANGES.get(case, _I32 if case == "date" else _I64)
        return [f"if type(v) is int and lo{i} <= v <= hi{i}:", f"    x{i} = make{i}(v)"]
    if case in ("text", "uuid") or (case == "varchar" and t.arg is None):
        return ["if type(v) is str:", f"    x{i} = make{i}(v)"]
    if case == "varchar":
        ns[f"length{i}"] = t.arg
        return [f"if type(v) is str and len(v) <= length{i}:", f"    x{i} = make{i}(v)"]
    if case in ("real", "double-precision"):
        return ["if type(v) is float:", f"    x{i} = make{i}(v)"]
    if case == "boolean":
        return ["if type(v) is bool:", f"    x{i} = make{i}(v)"]
    if case == "numeric":
        # `str` of a `Decimal` without an exponent is PostgreSQL's text of it
        # (`_decimal.to_text`) unless it has a sign (a negative zero loses it there).
        lines = ["if type(v) is Decimal:", "    text = str(v)"]
        if t.arg is None:
            return lines + ['    if text[0] in DIGITS and "E" not in text:', f"        x{i} = make{i}(text)"]
        precision, scale = t.arg
        ns[f"integers{i}"] = precision - scale
        if scale == 0:
            # At scale 0 already (no `.`), at most p digits.
            test = f'"." not in text and len(text) <= integers{i}'
        else:
            # At the scale already (exactly `scale` digits after the `.`), at most
            # p - s integer digits (a lone leading `0` is none): rescaling would
            # change nothing.
            test = (
                f'len(text) > {scale + 1} and text[{-scale - 1}] == "." and '
                f'(len(text) <= {scale + 1} + integers{i} or (len(text) == {scale + 2} and text[0] == "0"))'
            )
        return lines + [f'    if text[0] in DIGITS and "E" not in text and {test}:', f"        x{i} = make{i}(text)"]
    return None


def _compile_values(columns: Sequence[Column], writer: Any, converters: Sequence[Any], checked: Any) -> Any:
    """`_Plan.values` for these columns as one generated function: the row's shape
    checked by its size and one lookup per column, each column's common case
    (`_fast_test`) converted inline, anything else by its converter, and a row of any
    other shape by `checked` (which raises the error). The same results and errors
    as converting column by column, in a fraction of the Python calls: every output
    row goes through it."""
    ns: Dict[str, Any] = {"Row": Row, "Decimal": Decimal, "DIGITS": _DIGITS, "checked": checked,
                          "NULL": writer.constructor("null")(None)}
    n = len(columns)
    lines = [
        "def values(row):",
        "    if type(row) is not Row:",
        "        return checked(row)",
        "    cells = row._cells",
        f"    if len(cells) != {n}:",
        "        return checked(row)",
        "    try:",
    ]
    for i, c in enumerate(columns):
        ns[f"name{i}"] = c.name
        lines.append(f"        v{i} = cells[name{i}]")
    lines += ["    except KeyError:", "        return checked(row)"]
    for i, c in enumerate(columns):
        case, _ = _payload_converter(c.type)
        ns[f"make{i}"] = writer.constructor(case)
        ns[f"convert{i}"] = converters[i]
        fast = _fast_test(c.type, i, ns)
        body = [f"v = v{i}", f"x{i} = None"]
        if c.nullable:
            body += ["if v is None:", f"    x{i} = NULL"]
            if fast:
                body += ["else:"] + ["    " + line for line in fast]
        elif fast:
            body += fast
        body += [f"if x{i} is None:", f"    x{i} = convert{i}(v)"]
        lines += ["    " + line for line in body]
    lines.append("    return [" + ", ".join(f"x{i}" for i in range(n)) + "]")
    exec(compile("\n".join(lines) + "\n", "<weir_plugin row conversion>", "exec"), ns)
    return ns["values"]


class _Plan:
    """The declared columns compiled once per plugin class and representation: one
    converter per column, from a Python value to the representation's value."""

    def __init__(self, columns: Sequence[Column], writer: Any, fast: bool = True) -> None:
        self.names = [c.name for c in columns]
        self.name_set = frozenset(self.names)
        self.converters: List[Tuple[str, Callable[[Any], Any]]] = [
            (c.name, self._converter(c, writer)) for c in columns
        ]
        # `fast=False`: column by column only (the tests compare the two).
        self.values: Callable[[Any], List[Any]] = (
            _compile_values(columns, writer, [f for _, f in self.converters], self.checked_values)
            if fast
            else self.checked_values
        )

    @staticmethod
    def _converter(column: Column, writer: Any) -> Callable[[Any], Any]:
        name, nullable = column.name, column.nullable
        case, payload_of = _payload_converter(column.type)
        make = writer.constructor(case)
        encode = writer.encode
        null = writer.constructor("null")(None)
        where = f"output column `{name}` ({column.type})"

        def convert(v: Any) -> Any:
            if v is None:
                if nullable:
                    return null
                raise Other(f"{where} is not nullable and cannot take None")
            if type(v) is Value:
                return encode(v)
            try:
                return make(payload_of(v))
            except _Bad as bad:
                raise Other(f"{where} {bad}") from None

        return convert

    def checked_values(self, row: Any) -> List[Any]:
        """The row's values in declared order, converted; `Other` if the row does not
        match the description (the Rust SDK's `Row::into_values` texts). (`values` is
        this, made fast.)"""
        if not isinstance(row, Row):
            raise Other(f"transform returned a {type(row).__name__}, not a Row or None")
        cells = row._cells
        if len(cells) != len(self.names) or not self.name_set.issuperset(cells):
            extra = next((c for c in cells if c not in self.name_set), None)
            if extra is not None:
                raise Other(f"output row sets column `{extra}`, which describe does not declare")
            missing = next(c for c in self.names if c not in cells)
            raise Other(f"output row does not set declared column `{missing}`")
        return [convert(cells[name]) for name, convert in self.converters]
