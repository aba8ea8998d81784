"""Conversions between the componentize-py bindings of `weir:transform@0.1.0` (package
`wit_world`, generated at build time) and the plain values of `orders.py`.

Used only inside the component (`app.py`, `transform.py`): `orders.py` itself never
imports the bindings, so its logic runs and is tested with plain `python3`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Tuple

from componentize_py_types import Err
from wit_world.exports import transform as wit
from wit_world.imports import types

import orders

_CASE_OF_VALUE: Dict[type, str] = {
    types.Value_Null: "null",
    types.Value_Boolean: "boolean",
    types.Value_Integer: "integer",
    types.Value_Float: "float",
    types.Value_Text: "text",
    types.Value_Bytes: "bytes",
    types.Value_Decimal: "decimal",
    types.Value_Date: "date",
    types.Value_Timestamp: "timestamp",
    types.Value_Json: "json",
    types.Value_Unsupported: "unsupported",
}

_VALUE_OF_CASE: Dict[str, Callable[[Any], types.Value]] = {
    "null": lambda _: types.Value_Null(),
    "boolean": types.Value_Boolean,
    "integer": types.Value_Integer,
    "float": types.Value_Float,
    "text": types.Value_Text,
    "bytes": types.Value_Bytes,
    "decimal": types.Value_Decimal,
    "date": types.Value_Date,
    "timestamp": types.Value_Timestamp,
    "json": types.Value_Json,
    "unsupported": types.Value_Unsupported,
}

_COLUMN_TYPE_OF_CASE: Dict[str, Callable[[Any], types.ColumnType]] = {
    "smallint": lambda _: types.ColumnType_Smallint(),
    "integer": lambda _: types.ColumnType_Integer(),
    "bigint": lambda _: types.ColumnType_Bigint(),
    "real": lambda _: types.ColumnType_Real(),
    "double-precision": lambda _: types.ColumnType_DoublePrecision(),
    "numeric": lambda ps: types.ColumnType_Numeric(
        None if ps is None else types.NumericType(precision=ps[0], scale=ps[1])
    ),
    "text": lambda _: types.ColumnType_Text(),
    "varchar": types.ColumnType_Varchar,
    "boolean": lambda _: types.ColumnType_Boolean(),
    "date": lambda _: types.ColumnType_Date(),
    "timestamp": lambda _: types.ColumnType_Timestamp(),
    "timestamptz": lambda _: types.ColumnType_Timestamptz(),
    "uuid": lambda _: types.ColumnType_Uuid(),
    "json": lambda _: types.ColumnType_Json(),
    "jsonb": lambda _: types.ColumnType_Jsonb(),
    "bytea": lambda _: types.ColumnType_Bytea(),
}

_KIND = {"row": wit.Kind.ROW, "partition": wit.Kind.PARTITION}

_OP = {
    wit.Op.INSERT: "insert",
    wit.Op.UPDATE: "update",
    wit.Op.DELETE: "delete",
    wit.Op.READ: "read",
}

_ERROR_OF_KIND: Dict[str, Callable[[str], types.Error]] = {
    "invalid-config": types.Error_InvalidConfig,
    "invalid-input": types.Error_InvalidInput,
    "other": types.Error_Other,
}


def value_from_wit(value: types.Value) -> orders.Value:
    """A WIT `value` as `(case, payload)`."""
    case = _CASE_OF_VALUE[type(value)]
    return (case, None if case == "null" else value.value)


def value_to_wit(value: orders.Value) -> types.Value:
    """A `(case, payload)` value as a WIT `value`."""
    case, payload = value
    return _VALUE_OF_CASE[case](payload)


def staged_row_from_wit(row: wit.StagedRow) -> orders.StagedRow:
    """A WIT `staged-row`; its key is kept as it is, to be returned in a rejection."""
    return orders.StagedRow(
        key=row.key,
        op=_OP[row.op],
        columns=[(c.name, value_from_wit(c.value)) for c in row.columns],
    )


def push_output_to_wit(out: orders.PushOutput) -> wit.PushOutput:
    """A WIT `push-output`."""
    return wit.PushOutput(
        rows=[[value_to_wit(v) for v in row] for row in out.rows],
        rejections=[wit.Rejection(key=key, reason=reason) for key, reason in out.rejections],
    )


def description_to_wit(d: orders.Description) -> wit.Description:
    """A WIT `description`."""
    return wit.Description(
        name=d.name,
        version=d.version,
        kind=_KIND[d.kind],
        columns=[
            types.Column(
                name=c.name,
                type=_COLUMN_TYPE_OF_CASE[c.type[0]](c.type[1]),
                nullable=c.nullable,
            )
            for c in d.columns
        ],
        grain_key=list(d.grain_key),
        partition_column=d.partition_column,
    )


def error_to_wit(error: orders.PluginError) -> Err:
    """The exception that makes a call return the WIT `error` (`result::err`)."""
    return Err(_ERROR_OF_KIND[error.kind](error.message))


def config_from_wit(config: List[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """The config's key/value pairs."""
    return [(key, value) for key, value in config]
