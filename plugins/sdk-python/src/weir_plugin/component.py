"""The componentize-py glue: only imported inside a component (by `weir_plugin.export`),
where componentize-py provides the bindings (`wit_world`, `componentize_py_types`) of
the world it builds: `transformer` of `weir:transform@0.2.0` or `plugin` of
`weir:transform@0.1.0`.

Which one is read off the bindings at import: both put the exported interface in
`wit_world.exports.transform`, and only 0.2's has `InputSchema` (its session is
constructed with the schema, and has `next`). `CONTRACT` says which; the values,
columns and errors are 0.1's `types` interface in both.

componentize-py builds the component from an app module that has a class named after
the exported interface (`Transform`, with `describe`) and finds the implementation of
the interface's resource as class `Session` of a module named after the interface
(`transform`). `export(Plugin)` makes both: it returns the `Transform` class and
registers a module `transform` in `sys.modules` (componentize-py imports it after the
app module, at build time, and the pre-initialised interpreter keeps it).
"""

from __future__ import annotations

import gc
import sys
from types import ModuleType
from typing import Any, Callable, Dict, List, Tuple

import wit_world
from componentize_py_types import Err
from wit_world.exports import transform as wit
from wit_world.imports import types as wt

from .input import Schema, typed_positional_input
from .session import PluginClass, _plan, describe, session_class
from .types import Description, Error, PartitionInfo, Unsupported, Value

__all__ = ["export"]

_CASE_OF_TYPE: Dict[type, str] = {
    wt.Value_Null: "null",
    wt.Value_Boolean: "boolean",
    wt.Value_Integer: "integer",
    wt.Value_Float: "float",
    wt.Value_Text: "text",
    wt.Value_Bytes: "bytes",
    wt.Value_Decimal: "decimal",
    wt.Value_Date: "date",
    wt.Value_Timestamp: "timestamp",
    wt.Value_Json: "json",
    wt.Value_Unsupported: "unsupported",
}

CONTRACT = "0.2" if hasattr(wit, "InputSchema") else "0.1"
"""The contract of the bindings this component is built with."""

YOUNG_GC_THRESHOLD = 50_000
"""The component's cyclic garbage collector looks at the young objects after this many
more container objects were made than freed (CPython's default is 2,000).
componentize-py makes a few per input value and the SDK a few per row, nearly all freed
by reference counting or kept for the call, so a collection every 2,000 finds nothing
and rescans the chunk's rows: about 5% of the fuel per row. Set here, at build time,
so the snapshot keeps it."""

gc.set_threshold(YOUNG_GC_THRESHOLD, *gc.get_threshold()[1:])

_TYPE_OF_CASE: Dict[str, type] = {case: t for t, case in _CASE_OF_TYPE.items()}

_NULL = wt.Value_Null()

_CONSTRUCTORS: Dict[str, Callable[[Any], Any]] = {
    "null": lambda _: _NULL,
    "boolean": wt.Value_Boolean,
    "integer": wt.Value_Integer,
    "float": wt.Value_Float,
    "text": wt.Value_Text,
    "bytes": wt.Value_Bytes,
    "decimal": wt.Value_Decimal,
    "date": wt.Value_Date,
    "timestamp": wt.Value_Timestamp,
    "json": wt.Value_Json,
    "unsupported": lambda u: wt.Value_Unsupported(wt.UnsupportedValue(type_name=u.type_name, text=u.text)),
}

_OPS = {wit.Op.INSERT: "insert", wit.Op.UPDATE: "update", wit.Op.DELETE: "delete", wit.Op.READ: "read"}

_ERRORS: Dict[str, Callable[[str], Any]] = {
    "invalid-config": wt.Error_InvalidConfig,
    "invalid-input": wt.Error_InvalidInput,
    "other": wt.Error_Other,
}

_COLUMN_TYPES: Dict[str, Callable[[Any], Any]] = {
    "smallint": lambda _: wt.ColumnType_Smallint(),
    "integer": lambda _: wt.ColumnType_Integer(),
    "bigint": lambda _: wt.ColumnType_Bigint(),
    "real": lambda _: wt.ColumnType_Real(),
    "double-precision": lambda _: wt.ColumnType_DoublePrecision(),
    "numeric": lambda ps: wt.ColumnType_Numeric(
        None if ps is None else wt.NumericType(precision=ps[0], scale=ps[1])
    ),
    "text": lambda _: wt.ColumnType_Text(),
    "varchar": wt.ColumnType_Varchar,
    "boolean": lambda _: wt.ColumnType_Boolean(),
    "date": lambda _: wt.ColumnType_Date(),
    "timestamp": lambda _: wt.ColumnType_Timestamp(),
    "timestamptz": lambda _: wt.ColumnType_Timestamptz(),
    "uuid": lambda _: wt.ColumnType_Uuid(),
    "json": lambda _: wt.ColumnType_Json(),
    "jsonb": lambda _: wt.ColumnType_Jsonb(),
    "bytea": lambda _: wt.ColumnType_Bytea(),
}


class _ComponentCodec:
    """The bindings' representation, for `Input` (reading) and the sessions
    (writing)."""

    DELETE = wit.Op.DELETE
    # Contract 0.2's rows, read with getters that test the bindings' value classes.
    positional_input = typed_positional_input(_TYPE_OF_CASE)

    @staticmethod
    def decode(raw: Any) -> Tuple[str, Any]:
        case = _CASE_OF_TYPE[type(raw)]
        if case == "null":
            return "null", None
        if case == "unsupported":
            return case, Unsupported(raw.value.type_name, raw.value.text)
        return case, raw.value

    @staticmethod
    def op(raw: Any) -> str:
        return _OPS[raw]

    @staticmethod
    def constructor(case: str) -> Callable[[Any], Any]:
        return _CONSTRUCTORS[case]

    @staticmethod
    def encode(value: Value) -> Any:
        return _CONSTRUCTORS[value.case](value.payload)

    @staticmethod
    def rejection(key: Any, reason: str) -> Any:
        return wit.Rejection(key=key, reason=reason)

    if CONTRACT == "0.2":

        @staticmethod
        def push_output(rows: List[Any], rejections: List[Any], more: bool = False) -> Any:
            return wit.PushOutput(rows=rows, rejections=rejections, more=more)

    else:

        @staticmethod
        def push_output(rows: List[Any], rejections: List[Any], more: bool = False) -> Any:
            return wit.PushOutput(rows=rows, rejections=rejections)

    @staticmethod
    def error(error: Error) -> Exception:
        return Err(_ERRORS[error.kind](error.message))

    @staticmethod
    def partition(raw: Any) -> PartitionInfo:
        return PartitionInfo(raw.table, raw.name)

    @staticmethod
    def schema(raw: Any) -> Schema:
        return Schema([c.name for c in raw.columns], raw.key, CODEC)


CODEC = _ComponentCodec()


def description_to_wit(d: Description) -> Any:
    """The WIT `description`."""
    return wit.Description(
        name=d.name,
        version=d.version,
        kind=wit.Kind.ROW if d.kind == "row" else wit.Kind.PARTITION,
        columns=[
            wt.Column(name=c.name, type=_COLUMN_TYPES[c.type.case](c.type.arg), nullable=c.nullable)
            for c in d.columns
        ],
        grain_key=list(d.grain_key),
        partition_column=d.partition_column,
    )


def export(plugin: PluginClass) -> type:
    """The app module's `Transform` class for `plugin`; registers module `transform`
    with class `Session` (see the module documentation)."""
    description = description_to_wit(describe(plugin))
    session = session_class(plugin)
    # The output conversion is generated code: made here, at build time, it is part of
    # the snapshot componentize-py takes, not compiled again by each instance.
    _plan(plugin, CODEC)

    class Transform(wit_world.exports.Transform):
        """The exported `transform` interface's functions."""

        def describe(self) -> Any:
            return description

    if CONTRACT == "0.2":

        class Session(wit.Session):
            """One partition job (contract 0.2)."""

            def __init__(self, partition: Any, schema: Any, config: List[Tuple[str, str]]) -> None:
                self._session = session(plugin, partition, config, CODEC, schema)

            def push(self, rows: List[Any]) -> Any:
                return self._session.push(rows)

            def next(self) -> Any:
                return self._session.next()

            def finish(self) -> Any:
                return self._session.finish()

    else:

        class Session(wit.Session):  # type: ignore[no-redef]
            """One partition job (contract 0.1)."""

            def __init__(self, partition: Any, config: List[Tuple[str, str]]) -> None:
                self._session = session(plugin, partition, config, CODEC)

            def push(self, rows: List[Any]) -> Any:
                return self._session.push(rows)

            def finish(self) -> Any:
                return self._session.finish()

    Transform.__qualname__ = Transform.__name__ = "Transform"
    Session.__qualname__ = Session.__name__ = "Session"
    module = ModuleType("transform", f"The `session` resource of plugin {plugin.__name__} (weir_plugin).")
    module.Session = Session  # type: ignore[attr-defined]
    module.Transform = Transform  # type: ignore[attr-defined]
    sys.modules["transform"] = module
    return Transform
