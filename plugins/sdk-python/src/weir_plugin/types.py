"""The SDK's plain forms of the contracts' types (`wit/transform-0.2.0/`, and
`wit/transform-0.1.0/` whose values, columns and errors 0.2 shares): values, column
types, the description, staged rows (by name on 0.1; by position in an input schema
on 0.2), and the `error` variant.

These are the forms a plugin sees and the native case runner uses; inside a
component the SDK's glue (`weir_plugin.component`) converts between them and
componentize-py's generated bindings, so that plugin code never imports those.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

__all__ = [
    "Value",
    "Unsupported",
    "Json",
    "ColumnType",
    "Column",
    "Description",
    "PartitionInfo",
    "ColumnValue",
    "StagedRow",
    "InputColumn",
    "InputSchema",
    "PositionalRow",
    "Rejection",
    "PushOutput",
    "Error",
    "InvalidConfig",
    "InvalidInput",
    "Other",
    "DATE_INFINITY",
    "DATE_NEG_INFINITY",
    "TIMESTAMP_INFINITY",
    "TIMESTAMP_NEG_INFINITY",
    "VALUE_CASES",
    "OPS",
]

DATE_INFINITY = 2**31 - 1
"""The WIT `date` of PostgreSQL's `infinity` (days)."""
DATE_NEG_INFINITY = -(2**31)
"""The WIT `date` of PostgreSQL's `-infinity` (days)."""
TIMESTAMP_INFINITY = 2**63 - 1
"""The WIT `timestamp` of PostgreSQL's `infinity` (microseconds)."""
TIMESTAMP_NEG_INFINITY = -(2**63)
"""The WIT `timestamp` of PostgreSQL's `-infinity` (microseconds)."""

VALUE_CASES = (
    "null",
    "boolean",
    "integer",
    "float",
    "text",
    "bytes",
    "decimal",
    "date",
    "timestamp",
    "json",
    "unsupported",
)
"""The cases of the WIT `value` variant."""

OPS = ("insert", "update", "delete", "read")
"""The WIT `op` cases, as the SDK names them."""


class Unsupported(NamedTuple):
    """The payload of an `unsupported` value: a PostgreSQL type name and the value's
    text form."""

    type_name: str
    text: str


class Value(NamedTuple):
    """One WIT `value`, as `(case, payload)`: `Value("integer", 5)`,
    `Value("decimal", "1.50")`, `Value("date", 20513)` (days since 1970-01-01),
    `Value("timestamp", micros)`, `Value("bytes", b"..")`, `Value("json", "{}")`,
    `Value("unsupported", Unsupported("interval", "1 day"))`, `Value.NULL`.

    `Input.value` returns one; a `Value` set into an output `Row` is passed to the
    host as it is (the host checks it against the column type)."""

    case: str
    payload: Any = None

    @staticmethod
    def boolean(v: bool) -> "Value":
        return Value("boolean", v)

    @staticmethod
    def integer(v: int) -> "Value":
        return Value("integer", v)

    @staticmethod
    def float(v: float) -> "Value":
        return Value("float", v)

    @staticmethod
    def text(v: str) -> "Value":
        return Value("text", v)

    @staticmethod
    def bytes(v: bytes) -> "Value":
        return Value("bytes", v)

    @staticmethod
    def decimal(text: str) -> "Value":
        """A `decimal` value from its text (not checked here)."""
        return Value("decimal", text)

    @staticmethod
    def date(days: int) -> "Value":
        """A `date`: days since 1970-01-01 (`DATE_INFINITY`, `DATE_NEG_INFINITY`)."""
        return Value("date", days)

    @staticmethod
    def timestamp(micros: int) -> "Value":
        """A `timestamp`: microseconds since 1970-01-01T00:00:00."""
        return Value("timestamp", micros)

    @staticmethod
    def json(text: str) -> "Value":
        return Value("json", text)

    @staticmethod
    def unsupported(type_name: str, text: str) -> "Value":
        return Value("unsupported", Unsupported(type_name, text))


Value.NULL = Value("null", None)


class Json:
    """JSON text for a `json` or `jsonb` output column: `Json('{"a": 1}')`, or
    `Json.of({"a": 1})` to serialise a Python value (compact separators, key order as
    given, non-ASCII kept, no NaN). A plain `str` is refused by those columns: it is
    ambiguous (JSON text, or a JSON string?)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError("Json takes JSON text (a str); use Json.of(value) to serialise")
        self.text = text

    @classmethod
    def of(cls, value: Any) -> "Json":
        """`value` serialised with `json.dumps`."""
        return cls(json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Json) and other.text == self.text

    def __hash__(self) -> int:
        return hash(("Json", self.text))

    def __repr__(self) -> str:
        return f"Json({self.text!r})"


class ColumnType(NamedTuple):
    """The declared type of an output column (the WIT `column-type`): the constants
    `ColumnType.SMALLINT`, `INTEGER`, `BIGINT`, `REAL`, `DOUBLE_PRECISION`, `TEXT`,
    `BOOLEAN`, `DATE`, `TIMESTAMP`, `TIMESTAMPTZ`, `UUID`, `JSON`, `JSONB`, `BYTEA`,
    and `ColumnType.numeric(p, s)` / `numeric()`, `ColumnType.varchar(n)` /
    `varchar()`. `case` is the WIT case name; `arg` is `(precision, scale)` for
    `numeric`, the length for `varchar`, else `None`."""

    case: str
    arg: Any = None


    @staticmethod
    def numeric(precision: Optional[int] = None, scale: int = 0) -> "ColumnType":
        """`numeric(precision, scale)` (precision 1 to 1000, scale 0 to precision), or
        `numeric` without a typmod when called without arguments."""
        if precision is None:
            return ColumnType("numeric", None)
        for n in (precision, scale):
            if type(n) is not int:
                raise TypeError("numeric precision and scale are ints")
        if not 1 <= precision <= 1000 or not 0 <= scale <= precision:
            raise ValueError(f"numeric({precision},{scale}): precision is 1 to 1000, scale 0 to precision")
        return ColumnType("numeric", (precision, scale))

    @staticmethod
    def varchar(length: Optional[int] = None) -> "ColumnType":
        """`varchar(length)`, or `varchar` without a limit."""
        if length is not None and (type(length) is not int or not 1 <= length < 2**32):
            raise ValueError("varchar length is an int from 1")
        return ColumnType("varchar", length)

    def __str__(self) -> str:
        """The type as PostgreSQL spells it: `bigint`, `numeric(12,2)`, ..."""
        if self.case == "numeric" and self.arg is not None:
            return f"numeric({self.arg[0]},{self.arg[1]})"
        if self.case == "varchar" and self.arg is not None:
            return f"varchar({self.arg})"
        return self.case.replace("-", " ")


for _name, _case in [
    ("SMALLINT", "smallint"),
    ("INTEGER", "integer"),
    ("BIGINT", "bigint"),
    ("REAL", "real"),
    ("DOUBLE_PRECISION", "double-precision"),
    ("TEXT", "text"),
    ("BOOLEAN", "boolean"),
    ("DATE", "date"),
    ("TIMESTAMP", "timestamp"),
    ("TIMESTAMPTZ", "timestamptz"),
    ("UUID", "uuid"),
    ("JSON", "json"),
    ("JSONB", "jsonb"),
    ("BYTEA", "bytea"),
]:
    setattr(ColumnType, _name, ColumnType(_case))
del _name, _case


class Column(NamedTuple):
    """An output column: name, declared type, and whether it takes null."""

    name: str
    type: ColumnType
    nullable: bool = True


@dataclass
class Description:
    """A plugin's description of itself and its output (the WIT `description`):

        Description("orders", "0.1.0",
                    columns=[Column("id", ColumnType.BIGINT, nullable=False), ...],
                    grain_key=["id"], partition_column="order_date")

    `kind` is set by the SDK from the base class (`RowPlugin`: `row`,
    `PartitionPlugin`: `partition`). Checked when a session or the component starts:
    column names unique, grain key and partition column declared."""

    name: str
    version: str
    columns: Sequence[Column] = ()
    grain_key: Sequence[str] = ()
    partition_column: str = ""
    kind: str = "row"

    def check(self) -> None:
        """Raises `ValueError` if the description is inconsistent."""
        names = [c.name for c in self.columns]
        if not names:
            raise ValueError(f"plugin `{self.name}` declares no output columns")
        for c in self.columns:
            if not isinstance(c, Column) or not isinstance(c.type, ColumnType):
                raise ValueError(f"plugin `{self.name}`: columns are Column(name, ColumnType...)")
        duplicate = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if duplicate is not None:
            raise ValueError(f"plugin `{self.name}` declares column `{duplicate}` twice")
        for key in self.grain_key:
            if key not in names:
                raise ValueError(f"plugin `{self.name}`: grain key column `{key}` is not declared")
        if self.partition_column not in names:
            raise ValueError(
                f"plugin `{self.name}`: partition column `{self.partition_column}` is not declared"
            )
        if self.kind not in ("row", "partition"):
            raise ValueError(f"plugin `{self.name}`: kind is `row` or `partition`")


class PartitionInfo(NamedTuple):
    """The partition a session writes: the target table name and the partition name
    as the host prints it (`2026-03-01`, `__null__`, ...)."""

    table: str
    name: str


class ColumnValue(NamedTuple):
    """An input column: its source name and its `Value`."""

    name: str
    value: Value


@dataclass
class StagedRow:
    """One staged row as the native runner pushes it (the WIT `staged-row`): `key`
    (values of the table's key columns), `op` (`insert`, `update`, `delete` or `read`),
    `commit_position`, `commit_time` (microseconds since the epoch, UTC, or None) and
    the columns in source order. Plugins read it through `Input`."""

    key: List[Value] = field(default_factory=list)
    op: str = "insert"
    commit_position: int = 0
    commit_time: Optional[int] = None
    columns: List[ColumnValue] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        columns: Union[Mapping[str, Value], Iterable[Tuple[str, Value]]],
        key: Optional[Sequence[Value]] = None,
        op: str = "insert",
        commit_position: int = 0,
        commit_time: Optional[int] = None,
    ) -> "StagedRow":
        """A staged row for tests: `StagedRow.of({"id": Value.integer(1)},
        key=[Value.integer(1)])` (columns as a mapping or `(name, Value)` pairs)."""
        items = columns.items() if isinstance(columns, Mapping) else columns
        return cls(
            key=list(key or []),
            op=op,
            commit_position=commit_position,
            commit_time=commit_time,
            columns=[ColumnValue(name, value) for name, value in items],
        )


class InputColumn(NamedTuple):
    """One column of a contract-0.2 session's input: its source name and its declared
    PostgreSQL type (`bigint`, `numeric(12,2)`, ...; empty when the host does not
    know it)."""

    name: str
    type_name: str = ""


@dataclass
class InputSchema:
    """The input of a contract-0.2 session (the WIT `input-schema`), given once: its
    columns, in the order of every row's `values`, and the positions of the table's
    key columns among them."""

    columns: List[InputColumn] = field(default_factory=list)
    key: List[int] = field(default_factory=list)

    @classmethod
    def of(cls, names: Iterable[str], key: Iterable[int] = ()) -> "InputSchema":
        """A schema of these column names (types unknown): `InputSchema.of(["id",
        "amount"], key=[0])`."""
        return cls([InputColumn(n) for n in names], list(key))


@dataclass
class PositionalRow:
    """One staged row of a contract-0.2 session as the native runner pushes it (the
    WIT 0.2 `staged-row`): `key`, `values` (one per column of the session's
    `InputSchema`, in its order; `None`: the row has no such column, which is not a
    SQL null, `Value.NULL`), `op`, `commit_position`, `commit_time`. Plugins read it
    through `Input`, as they read a `StagedRow`."""

    key: List[Value] = field(default_factory=list)
    values: List[Optional[Value]] = field(default_factory=list)
    op: str = "insert"
    commit_position: int = 0
    commit_time: Optional[int] = None


def positional(chunks: Iterable[Iterable[StagedRow]]) -> Tuple[InputSchema, List[List[PositionalRow]]]:
    """Named staged rows (contract 0.1's form) as a contract-0.2 session gets them:
    the schema (every column name in order of first appearance; the key positions
    where the first row's key values sit among its columns) and each row's values by
    position (`None` where a row has no such column). The Rust SDK's case runner
    converts the same way."""
    chunks = [list(chunk) for chunk in chunks]
    names: List[str] = []
    seen = set()
    for chunk in chunks:
        for row in chunk:
            for c in row.columns:
                if c.name not in seen:
                    seen.add(c.name)
                    names.append(c.name)
    key: List[int] = []
    first = next((row for chunk in chunks for row in chunk), None)
    if first is not None:
        for k in first.key:
            name = next((c.name for c in first.columns if c.value == k), None)
            if name is not None:
                key.append(names.index(name))
    rows = []
    for chunk in chunks:
        part = []
        for row in chunk:
            by_name: dict = {}
            for c in row.columns:
                by_name.setdefault(c.name, c.value)
            part.append(
                PositionalRow(
                    key=list(row.key),
                    values=[by_name.get(n) for n in names],
                    op=row.op,
                    commit_position=row.commit_position,
                    commit_time=row.commit_time,
                )
            )
        rows.append(part)
    return InputSchema.of(names, key), rows


class Rejection(NamedTuple):
    """A refused input row: its key exactly as pushed, and the reason."""

    key: Any
    reason: str


@dataclass
class PushOutput:
    """The result of a native `push` or `finish` (and on contract 0.2 `next`): output
    rows (lists of `Value` in the declared column order), rejections, and `more`
    (contract 0.2 only: this is a part, call `next` for the rest; always `False` on
    0.1)."""

    rows: List[List[Value]] = field(default_factory=list)
    rejections: List[Rejection] = field(default_factory=list)
    more: bool = False


class Error(Exception):
    """An error that fails the whole call, and so the partition job (the WIT `error`
    variant). Raise one of its kinds: `InvalidConfig`, `InvalidInput` or `Other`."""

    kind = "other"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Error) and (self.kind, self.message) == (other.kind, other.message)

    def __hash__(self) -> int:
        return hash((self.kind, self.message))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class InvalidConfig(Error):
    """The WIT `error.invalid-config`: the config lacks a key or a value does not parse.
    The text names the key, never the value."""

    kind = "invalid-config"


class InvalidInput(Error):
    """The WIT `error.invalid-input`: the input cannot be handled at all. The text names
    the column."""

    kind = "invalid-input"


class Other(Error):
    """The WIT `error.other`: anything else (a plugin bug, such as an output row that
    does not match the description)."""

    kind = "other"


ERROR_KINDS = {cls.kind: cls for cls in (InvalidConfig, InvalidInput, Other)}
