"""Reading input: staged rows with typed column getters, the plugin config, and
per-row rejections (the Rust SDK's `Input`, `Config` and `Reject`, with the same
fixed texts). A row comes with its columns' names (contract 0.1) or by position in
the session's input schema (0.2); the getters read both alike."""

from __future__ import annotations

import datetime as _dt
from decimal import Decimal
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import decimal as _decimal
from .types import (
    DATE_INFINITY,
    DATE_NEG_INFINITY,
    TIMESTAMP_INFINITY,
    TIMESTAMP_NEG_INFINITY,
    ColumnValue,
    InvalidConfig,
    StagedRow,
    Value,
)

__all__ = ["Reject", "Input", "Config", "Schema"]

_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH = _dt.datetime(1970, 1, 1)


class Reject(Exception):
    """Why one input row is refused: `raise Reject("amount is negative")` in
    `transform`. It becomes a WIT `rejection` (the row goes to the dead-letter table
    with this reason, or fails the job, per the table's `on_reject`).

    The reason is part of the plugin's deterministic output: it must depend only on
    the row and the config, and must not contain secrets."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reject) and other.reason == self.reason

    def __hash__(self) -> int:
        return hash(("Reject", self.reason))

    def __repr__(self) -> str:
        return f"Reject({self.reason!r})"


def _decimal_reason(subject: str, error: _decimal.DecimalError) -> str:
    if isinstance(error, _decimal.NotFinite):
        return f"{subject} is not a finite decimal"
    if isinstance(error, _decimal.TooManyDigits):
        return f"{subject} has too many digits"
    return f"{subject} is not valid decimal text"


class _NativeReader:
    """How `Input` reads the SDK's own `StagedRow` (the native runner's form); the
    component glue has its own reader for the generated bindings."""

    @staticmethod
    def decode(raw: Value) -> Tuple[str, Any]:
        return raw

    @staticmethod
    def op(raw: str) -> str:
        return raw


class Input:
    """One staged row as pushed by the host: key, metadata and columns by name.

    On contract 0.2 a row carries its values by position in the session's input
    schema (`Schema`), and the getters find a name's position in a dictionary made
    once per session; on 0.1 each value carries its column's name. Both read alike:
    a column the row has no value for (0.2: `none`) is a missing column.

    Typed getters come in two forms: `int("id")` refuses null, `int_or_null("id")`
    returns `None` for it. Both refuse a missing column and a value of another case
    (no coercion, not even integer to decimal). Their rejection reasons are the Rust
    SDK's fixed texts, so that plugins in every language give the same ones:

    * ``column `NAME` is missing``
    * ``column `NAME` is null``
    * ``column `NAME` is not KIND`` (KIND: `a boolean`, `an integer`, `a float`,
      `text`, `bytes`, `a decimal`, `a date`, `a timestamp`, `json`)
    * ``column `NAME` is not a finite decimal`` (`NaN`, `Infinity`, `-Infinity`)
    * ``column `NAME` is not valid decimal text`` / ``... has too many digits``

    and, for the getters that return `datetime` values (which have no infinity and
    a smaller range than PostgreSQL's; the Rust SDK has no such getters):

    * ``column `NAME` is not a finite date`` / ``... is not a finite timestamp``
    * ``column `NAME` is out of Python's date range`` / ``... datetime range``

    `date_days` and `timestamp_micros` return the contract's integers as they are
    (the Rust SDK's `date` and `timestamp`), infinities included (`DATE_INFINITY`,
    ...)."""

    __slots__ = ("_row", "_reader")

    def __init__(self, row: Any, _reader: Any = _NativeReader) -> None:
        self._row = row
        self._reader = _reader

    @classmethod
    def of(
        cls,
        columns: Union[Mapping[str, Value], Iterable[Tuple[str, Value]]],
        key: Optional[List[Value]] = None,
        op: str = "insert",
        commit_position: int = 0,
        commit_time: Optional[int] = None,
    ) -> "Input":
        """An input row for tests: `Input.of({"id": Value.integer(1), "amount":
        Value.decimal("1.50")})` (arguments as `StagedRow.of`)."""
        return cls(StagedRow.of(columns, key, op, commit_position, commit_time))

    # -- metadata ------------------------------------------------------------------

    def key(self) -> List[Value]:
        """The values of the table's key columns, in key order."""
        decode = self._reader.decode
        return [Value(*decode(v)) for v in self._row.key]

    def op(self) -> str:
        """What happened to the row last: `insert`, `update`, `delete` or `read`."""
        return self._reader.op(self._row.op)

    def commit_position(self) -> int:
        """The source position of the transaction that wrote this image."""
        return self._row.commit_position

    def commit_time(self) -> Optional[int]:
        """The commit time of that transaction (microseconds since the epoch, UTC), if
        the source gave one."""
        return self._row.commit_time

    def columns(self) -> List[ColumnValue]:
        """Every column as `(name, Value)`, in source order."""
        decode = self._reader.decode
        return [ColumnValue(c.name, Value(*decode(c.value))) for c in self._row.columns]

    # -- values --------------------------------------------------------------------

    def get(self, column: str) -> Optional[Value]:
        """The value of a column (the first of that name), `None` if the row has no
        such column."""
        for c in self._row.columns:
            if c.name == column:
                return Value(*self._reader.decode(c.value))
        return None

    def value(self, column: str) -> Value:
        """The value of a column; a missing column is a rejection."""
        found = self.get(column)
        if found is None:
            raise Reject(f"column `{column}` is missing")
        return found

    def _payload(self, column: str, case: str, kind: str) -> Any:
        """The payload of `column` if it is of `case`, `None` if it is null."""
        for c in self._row.columns:
            if c.name == column:
                got, payload = self._reader.decode(c.value)
                if got == case:
                    return payload
                if got == "null":
                    return None
                raise Reject(f"column `{column}` is not {kind}")
        raise Reject(f"column `{column}` is missing")

    @staticmethod
    def _required(column: str, payload: Any) -> Any:
        if payload is None:
            raise Reject(f"column `{column}` is null")
        return payload

    def boolean(self, column: str) -> bool:
        """A `boolean` column."""
        return self._required(column, self._payload(column, "boolean", "a boolean"))

    def boolean_or_null(self, column: str) -> Optional[bool]:
        """A `boolean` column; `None` for null."""
        return self._payload(column, "boolean", "a boolean")

    def int(self, column: str) -> int:
        """An `integer` column."""
        return self._required(column, self._payload(column, "integer", "an integer"))

    def int_or_null(self, column: str) -> Optional[int]:
        """An `integer` column; `None` for null."""
        return self._payload(column, "integer", "an integer")

    def float(self, column: str) -> float:
        """A `float` column."""
        return self._required(column, self._payload(column, "float", "a float"))

    def float_or_null(self, column: str) -> Optional[float]:
        """A `float` column; `None` for null."""
        return self._payload(column, "float", "a float")

    def text(self, column: str) -> str:
        """A `text` column."""
        return self._required(column, self._payload(column, "text", "text"))

    def text_or_null(self, column: str) -> Optional[str]:
        """A `text` column; `None` for null."""
        return self._payload(column, "text", "text")

    def bytes(self, column: str) -> bytes:
        """A `bytes` column."""
        return self._required(column, self._payload(column, "bytes", "bytes"))

    def bytes_or_null(self, column: str) -> Optional[bytes]:
        """A `bytes` column; `None` for null."""
        return self._payload(column, "bytes", "bytes")

    def json(self, column: str) -> str:
        """A `json` column as JSON text."""
        return self._required(column, self._payload(column, "json", "json"))

    def json_or_null(self, column: str) -> Optional[str]:
        """A `json` column as JSON text; `None` for null."""
        return self._payload(column, "json", "json")

    def decimal_text(self, column: str) -> str:
        """A `decimal` column as its exact text (special values included)."""
        return self._required(column, self._payload(column, "decimal", "a decimal"))

    def decimal_text_or_null(self, column: str) -> Optional[str]:
        """A `decimal` column as its exact text; `None` for null."""
        return self._payload(column, "decimal", "a decimal")

    def decimal(self, column: str) -> Decimal:
        """A `decimal` column parsed exactly (`weir_plugin.decimal.parse`): finite, at
        most `MAX_DIGITS` digits, its scale kept."""
        return self._required(column, self.decimal_or_null(column))

    def decimal_or_null(self, column: str) -> Optional[Decimal]:
        """A `decimal` column parsed exactly; `None` for null."""
        text = self._payload(column, "decimal", "a decimal")
        if text is None:
            return None
        try:
            return _decimal.parse(text)
        except _decimal.DecimalError as error:
            raise Reject(_decimal_reason(f"column `{column}`", error)) from None

    def date_days(self, column: str) -> int:
        """A `date` column as days since 1970-01-01 (`DATE_INFINITY` and
        `DATE_NEG_INFINITY` for PostgreSQL's infinities): the Rust SDK's `date`."""
        return self._required(column, self._payload(column, "date", "a date"))

    def date_days_or_null(self, column: str) -> Optional[int]:
        """A `date` column as days since 1970-01-01; `None` for null."""
        return self._payload(column, "date", "a date")

    def date(self, column: str) -> _dt.date:
        """A `date` column as a `datetime.date`; an infinity or a date outside years 1
        to 9999 is a rejection."""
        return self._required(column, self.date_or_null(column))

    def date_or_null(self, column: str) -> Optional[_dt.date]:
        """A `date` column as a `datetime.date`; `None` for null."""
        days = self._payload(column, "date", "a date")
        if days is None:
            return None
        if days in (DATE_INFINITY, DATE_NEG_INFINITY):
            raise Reject(f"column `{column}` is not a finite date")
        try:
            return _dt.date.fromordinal(days + _EPOCH_ORDINAL)
        except (ValueError, OverflowError):
            raise Reject(f"column `{column}` is out of Python's date range") from None

    def timestamp_micros(self, column: str) -> int:
        """A `timestamp` column as microseconds since 1970-01-01T00:00:00
        (`TIMESTAMP_INFINITY`, `TIMESTAMP_NEG_INFINITY`): the Rust SDK's
        `timestamp`."""
        return self._required(column, self._payload(column, "timestamp", "a timestamp"))

    def timestamp_micros_or_null(self, column: str) -> Optional[int]:
        """A `timestamp` column as microseconds; `None` for null."""
        return self._payload(column, "timestamp", "a timestamp")

    def timestamp(self, column: str) -> _dt.datetime:
        """A `timestamp` column as a naive `datetime.datetime`: the UTC instant for a
        `timestamptz`, the wall-clock reading for a `timestamp`, to the microsecond.
        An infinity or an instant outside years 1 to 9999 is a rejection."""
        return self._required(column, self.timestamp_or_null(column))

    def timestamp_or_null(self, column: str) -> Optional[_dt.datetime]:
        """A `timestamp` column as a naive `datetime.datetime`; `None` for null."""
        micros = self._payload(column, "timestamp", "a timestamp")
        if micros is None:
            return None
        if micros in (TIMESTAMP_INFINITY, TIMESTAMP_NEG_INFINITY):
            raise Reject(f"column `{column}` is not a finite timestamp")
        try:
            return _EPOCH + _dt.timedelta(microseconds=micros)
        except (ValueError, OverflowError):
            raise Reject(f"column `{column}` is out of Python's datetime range") from None

    def __repr__(self) -> str:
        cols = ", ".join(f"{c.name}={tuple(c.value)!r}" for c in self.columns())
        return f"Input(op={self.op()!r}, key={[tuple(v) for v in self.key()]!r}, {cols})"


class Schema:
    """The input schema of a contract-0.2 session as `Input` reads it: the column
    names in row order, the key positions, and each name's position (the first column
    of that name), made once per session. It also carries the reader of the row
    representation (`decode`, `op`), so that a row holds one reference for both."""

    __slots__ = ("names", "key", "index", "decode", "op")

    def __init__(self, names: Sequence[str], key: Sequence[int] = (), _reader: Any = _NativeReader) -> None:
        self.names: Tuple[str, ...] = tuple(names)
        self.key: Tuple[int, ...] = tuple(key)
        index: Dict[str, int] = {}
        for i, name in enumerate(self.names):
            index.setdefault(name, i)
        self.index = index
        self.decode = _reader.decode
        self.op = _reader.op

    def position(self, column: str) -> Optional[int]:
        """The position of a column (the first of that name), `None` if there is none."""
        return self.index.get(column)

    def __repr__(self) -> str:
        return f"Schema(names={list(self.names)!r}, key={list(self.key)!r})"


class _PositionalInput(Input):
    """An `Input` of a contract-0.2 session: `_row` has `values` by position in the
    schema, and `_reader` is the session's `Schema` (which decodes like a reader)."""

    __slots__ = ()

    def columns(self) -> List[ColumnValue]:
        schema = self._reader
        decode = schema.decode
        return [
            ColumnValue(name, Value(*decode(raw)))
            for name, raw in zip(schema.names, self._row.values)
            if raw is not None
        ]

    def get(self, column: str) -> Optional[Value]:
        schema = self._reader
        i = schema.index.get(column)
        if i is not None:
            try:
                raw = self._row.values[i]
            except IndexError:
                return None
            if raw is not None:
                return Value(*schema.decode(raw))
        return None

    def _payload(self, column: str, case: str, kind: str) -> Any:
        schema = self._reader
        i = schema.index.get(column)
        if i is not None:
            try:
                raw = self._row.values[i]
            except IndexError:
                raw = None
            if raw is not None:
                got, payload = schema.decode(raw)
                if got == case:
                    return payload
                if got == "null":
                    return None
                raise Reject(f"column `{column}` is not {kind}")
        raise Reject(f"column `{column}` is missing")


_SIMPLE_GETTERS = (
    # (getter, value case, KIND of ``column `NAME` is not KIND``)
    ("boolean", "boolean", "a boolean"),
    ("int", "integer", "an integer"),
    ("float", "float", "a float"),
    ("text", "text", "text"),
    ("bytes", "bytes", "bytes"),
    ("json", "json", "json"),
    ("decimal_text", "decimal", "a decimal"),
    ("date_days", "date", "a date"),
    ("timestamp_micros", "timestamp", "a timestamp"),
)


def typed_positional_input(type_of_case: Mapping[str, type]) -> type:
    """An `Input` class for contract-0.2 rows whose values are of a representation in
    which each value case is a class of its own, its payload in `.value` (the
    bindings componentize-py generates: `Value_Integer(5)`, `Value_Null()`, ...).

    Its getters are `Input`'s, with the same texts, each written out in one function
    (position, value, case, payload): a row plugin calls a few per row, and in a
    component every Python call counts."""
    null_type = type_of_case["null"]

    def simple(case: str, kind: str) -> Tuple[Any, Any]:
        value_type = type_of_case[case]

        def required(self: Input, column: str) -> Any:
            i = self._reader.index.get(column)
            if i is not None:
                try:
                    raw = self._row.values[i]
                except IndexError:
                    raw = None
                if raw is not None:
                    t = type(raw)
                    if t is value_type:
                        return raw.value
                    if t is null_type:
                        raise Reject(f"column `{column}` is null")
                    raise Reject(f"column `{column}` is not {kind}")
            raise Reject(f"column `{column}` is missing")

        def or_null(self: Input, column: str) -> Any:
            i = self._reader.index.get(column)
            if i is not None:
                try:
                    raw = self._row.values[i]
                except IndexError:
                    raw = None
                if raw is not None:
                    t = type(raw)
                    if t is value_type:
                        return raw.value
                    if t is null_type:
                        return None
                    raise Reject(f"column `{column}` is not {kind}")
            raise Reject(f"column `{column}` is missing")

        return required, or_null

    methods: Dict[str, Any] = {"__slots__": ()}
    for name, case, kind in _SIMPLE_GETTERS:
        required, or_null = simple(case, kind)
        required.__name__, or_null.__name__ = name, f"{name}_or_null"
        required.__doc__ = getattr(Input, name).__doc__
        or_null.__doc__ = getattr(Input, f"{name}_or_null").__doc__
        methods[name], methods[f"{name}_or_null"] = required, or_null

    decimal_text_or_null = methods["decimal_text_or_null"]
    parse = _decimal.parse
    decimal_error = _decimal.DecimalError

    def decimal_or_null(self: Input, column: str) -> Optional[Decimal]:
        text = decimal_text_or_null(self, column)
        if text is None:
            return None
        try:
            return parse(text)
        except decimal_error as error:
            raise Reject(_decimal_reason(f"column `{column}`", error)) from None

    def decimal(self: Input, column: str) -> Decimal:
        text = decimal_text_or_null(self, column)
        if text is None:
            raise Reject(f"column `{column}` is null")
        try:
            return parse(text)
        except decimal_error as error:
            raise Reject(_decimal_reason(f"column `{column}`", error)) from None

    decimal_or_null.__doc__ = Input.decimal_or_null.__doc__
    decimal.__doc__ = Input.decimal.__doc__
    methods["decimal_or_null"], methods["decimal"] = decimal_or_null, decimal

    def _payload(self: Input, column: str, case: str, kind: str) -> Any:
        i = self._reader.index.get(column)
        if i is not None:
            try:
                raw = self._row.values[i]
            except IndexError:
                raw = None
            if raw is not None:
                t = type(raw)
                if t is type_of_case[case]:
                    return raw.value
                if t is null_type:
                    return None
                raise Reject(f"column `{column}` is not {kind}")
        raise Reject(f"column `{column}` is missing")

    methods["_payload"] = _payload
    return type("Input", (_PositionalInput,), methods)


class Config:
    """The plugin config: the table's plugin settings as key/value text, sorted by key,
    keys unique (as the host gives them).

    Lookup errors are `InvalidConfig` (the WIT `error.invalid-config`) with the Rust
    SDK's fixed texts, naming the key, never the value (a value may be a secret):

    * ``missing config key `KEY` ``
    * ``config `KEY` is not valid decimal text`` / ``... is not a finite decimal`` /
      ``... has too many digits``
    """

    __slots__ = ("_entries", "_values")

    def __init__(self, entries: Union[Mapping[str, str], Iterable[Tuple[str, str]]] = ()) -> None:
        items = entries.items() if isinstance(entries, Mapping) else entries
        self._entries: List[Tuple[str, str]] = sorted((k, v) for k, v in items)
        self._values = {}
        for k, v in self._entries:
            self._values.setdefault(k, v)

    def entries(self) -> List[Tuple[str, str]]:
        """All entries, sorted by key."""
        return list(self._entries)

    def get(self, key: str) -> Optional[str]:
        """The value of `key`, if set."""
        return self._values.get(key)

    def require(self, key: str) -> str:
        """The value of `key`; a missing key is an error."""
        value = self._values.get(key)
        if value is None:
            raise InvalidConfig(f"missing config key `{key}`")
        return value

    def decimal(self, key: str) -> Decimal:
        """The value of `key` as an exact, finite decimal (`weir_plugin.decimal.parse`)."""
        text = self.require(key)
        try:
            return _decimal.parse(text)
        except _decimal.DecimalError as error:
            raise InvalidConfig(_decimal_reason(f"config `{key}`", error)) from None

    def __repr__(self) -> str:
        # Values may be secrets.
        return f"Config(keys={[k for k, _ in self._entries]!r})"
