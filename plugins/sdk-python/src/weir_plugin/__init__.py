"""`weir_plugin`: the Python guest SDK for Weir transform plugins (standard library
only).

A plugin is a WebAssembly component of the `weir:transform@0.1.0` contract
(`wit/transform-0.1.0/`), built from Python by componentize-py. With this SDK a plugin
is one class, and one line exports it:

    from weir_plugin import Column, ColumnType, Description, Reject, Row, RowPlugin, export

    class Upper(RowPlugin):
        @staticmethod
        def describe():
            return Description("upper", "1.0.0",
                columns=[Column("id", ColumnType.BIGINT, nullable=False),
                         Column("day", ColumnType.DATE),
                         Column("name", ColumnType.TEXT)],
                grain_key=["id"], partition_column="day")

        def transform(self, row):
            name = row.text_or_null("name")
            return Row(id=row.int("id"), day=row.value("day"),
                       name=None if name is None else name.upper())

    Transform = export(Upper)   # the component's entry point; None natively

The shape is the Rust SDK's (`plugins/sdk/`), and so are the texts a plugin's output
depends on: `Input`'s rejection reasons, `Config`'s errors, and the decimal rules
(`weir_plugin.decimal`). See `plugins/sdk-python/README.md`.

* `RowPlugin` (`describe`, `open`, `transform`) and `PartitionPlugin` (`describe`,
  `open`, `push`, `finish`); `export(Plugin)` in the app module.
* `Input`: typed getters (`int`, `text`, `decimal`, `date`, `timestamp`, ... each with
  an `_or_null` form), `value`/`get`, `key`, `op`, `commit_position`, `commit_time`.
* `Row(column=value, ...)`: natural Python values, converted by the declared column
  types; `Json(text)` for `json` columns.
* `Config.get` / `require` / `decimal`; `InvalidConfig`, `InvalidInput`, `Other`.
* `Reject(reason)`; `weir_plugin.log`; `weir_plugin.decimal`; the case runner
  `weir_plugin.cases`; `run_session` runs a plugin natively.
"""

from . import decimal, log
from .input import Config, Input, Reject
from .output import Output, Row
from .session import (
    PartitionPlugin,
    PartitionSession,
    RowPlugin,
    RowSession,
    describe,
    export,
    in_component,
    run_session,
)
from .types import (
    DATE_INFINITY,
    DATE_NEG_INFINITY,
    TIMESTAMP_INFINITY,
    TIMESTAMP_NEG_INFINITY,
    Column,
    ColumnType,
    ColumnValue,
    Description,
    Error,
    InvalidConfig,
    InvalidInput,
    Json,
    Other,
    PartitionInfo,
    PushOutput,
    Rejection,
    StagedRow,
    Unsupported,
    Value,
)

__version__ = "0.1.0"

__all__ = [
    "Column",
    "ColumnType",
    "ColumnValue",
    "Config",
    "DATE_INFINITY",
    "DATE_NEG_INFINITY",
    "Description",
    "Error",
    "Input",
    "InvalidConfig",
    "InvalidInput",
    "Json",
    "Other",
    "Output",
    "PartitionInfo",
    "PartitionPlugin",
    "PartitionSession",
    "PushOutput",
    "Reject",
    "Rejection",
    "Row",
    "RowPlugin",
    "RowSession",
    "StagedRow",
    "TIMESTAMP_INFINITY",
    "TIMESTAMP_NEG_INFINITY",
    "Unsupported",
    "Value",
    "decimal",
    "describe",
    "export",
    "in_component",
    "log",
    "run_session",
]
