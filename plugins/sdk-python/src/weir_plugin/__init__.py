"""`weir_plugin`: the Python guest SDK for Weir transform plugins (standard library
only).

A plugin is a WebAssembly component of the `weir:transform@0.2.0` contract
(`wit/transform-0.2.0/`, world `transformer`: rows by position in an input schema
given once per session), or of the first contract, `weir:transform@0.1.0`
(`wit/transform-0.1.0/`, world `plugin`: each value with its column's name), built
from Python by componentize-py. The plugin code is the same for both: the build
picks the contract (componentize-py's `-d`/`-w`), and `export` serves whichever
world's bindings it finds. With this SDK a plugin is one class, and one line exports
it:

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
  `weir_plugin.cases` (each case on both contracts); `run_session` runs a plugin
  natively (`contract="0.2"` too; `run_session_0_2` takes an `InputSchema` and
  `PositionalRow`s).
"""

from . import decimal, log
from .input import Config, Input, Reject, Schema
from .output import Output, Row
from .session import (
    CONTRACTS,
    PART_ROWS,
    PartitionPlugin,
    PartitionSession,
    RowPlugin,
    RowSession,
    describe,
    export,
    in_component,
    run_session,
    run_session_0_2,
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
    InputColumn,
    InputSchema,
    InvalidConfig,
    InvalidInput,
    Json,
    Other,
    PartitionInfo,
    PositionalRow,
    PushOutput,
    Rejection,
    StagedRow,
    Unsupported,
    Value,
    positional,
)

__version__ = "0.1.0"

__all__ = [
    "CONTRACTS",
    "Column",
    "ColumnType",
    "ColumnValue",
    "Config",
    "DATE_INFINITY",
    "DATE_NEG_INFINITY",
    "Description",
    "Error",
    "Input",
    "InputColumn",
    "InputSchema",
    "InvalidConfig",
    "InvalidInput",
    "Json",
    "Other",
    "Output",
    "PART_ROWS",
    "PartitionInfo",
    "PartitionPlugin",
    "PartitionSession",
    "PositionalRow",
    "PushOutput",
    "Reject",
    "Rejection",
    "Row",
    "RowPlugin",
    "RowSession",
    "Schema",
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
    "positional",
    "run_session",
    "run_session_0_2",
]
