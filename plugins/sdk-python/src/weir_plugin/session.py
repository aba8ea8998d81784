"""The plugin base classes, and the sessions that run them as the contracts' `session`
resource does (natively here, in a component through `weir_plugin.component`).

A session serves either contract: constructed without a schema it is a 0.1 session
(rows with their columns' names; `push`/`finish` return one output each); with one
(`schema=`) it is a 0.2 session (rows by position; each result says `more`, and
`next` hands the rest of a partition plugin's output, at most `PART_ROWS` rows per
part)."""

from __future__ import annotations

import decimal as _stdlib_decimal
import importlib.util
from dataclasses import replace
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, Union

from .decimal import EXACT
from .input import Config, Input, Reject, Schema, _NativeReader, _PositionalInput
from .output import Output, Row, _Plan
from .types import (
    Description,
    Error,
    InputSchema,
    Other,
    PartitionInfo,
    PositionalRow,
    PushOutput,
    Rejection,
    StagedRow,
    Value,
    positional,
)

__all__ = [
    "RowPlugin",
    "PartitionPlugin",
    "RowSession",
    "PartitionSession",
    "run_session",
    "run_session_0_2",
    "describe",
    "export",
    "PART_ROWS",
    "CONTRACTS",
]

PART_ROWS = 4096
"""Output rows per part of a contract-0.2 result (`more`): a partition plugin's
output is handed in parts of at most this many rows (as the Rust SDK does)."""

CONTRACTS = ("0.2", "0.1")
"""The contracts the SDK serves; the first is the default."""

_NO_PENDING = "`next` called with no output pending"


class RowPlugin:
    """A row-wise plugin: the output of a row depends only on that row (and the
    config). Subclass it and define:

    * `describe()` (a static or class method): the `Description`, a constant;
    * `open(partition, config)` (a class method, optional): starts a partition job and
      returns the plugin instance; parse the config here, once (raise
      `InvalidConfig`). The default returns `cls()`;
    * `transform(self, row)`: one input row (`Input`) to a `Row`, or `None` to drop
      it, or `raise Reject(reason)` to reject it.

    Rows whose op is `delete` are skipped (a deleted row has no output). Export it with
    `Transform = weir_plugin.export(MyPlugin)`."""

    KIND = "row"

    @classmethod
    def describe(cls) -> Description:
        raise NotImplementedError(f"{cls.__name__}.describe")

    @classmethod
    def open(cls, partition: PartitionInfo, config: Config) -> "RowPlugin":
        return cls()

    def transform(self, row: Input) -> Optional[Row]:
        raise NotImplementedError(f"{type(self).__name__}.transform")


class PartitionPlugin:
    """A partition-wide plugin (aggregates): sees every row of the partition (deletes
    included), then emits in `finish`. Subclass it and define `describe()`,
    `open(partition, config)` (as for `RowPlugin`), and:

    * `push(self, rows, out)`: a chunk of the partition's rows (a list of `Input`);
      may emit rows (`out.row(Row(...))`) and rejections (`out.reject(row, reason)`)
      now, or hold state until `finish`;
    * `finish(self, out)`: ends the job: emit what is held.

    Raising an `Error` fails the call, and every later call of the session."""

    KIND = "partition"

    @classmethod
    def describe(cls) -> Description:
        raise NotImplementedError(f"{cls.__name__}.describe")

    @classmethod
    def open(cls, partition: PartitionInfo, config: Config) -> "PartitionPlugin":
        return cls()

    def push(self, rows: List[Input], out: Output) -> None:
        raise NotImplementedError(f"{type(self).__name__}.push")

    def finish(self, out: Output) -> None:
        raise NotImplementedError(f"{type(self).__name__}.finish")


PluginClass = Union[Type[RowPlugin], Type[PartitionPlugin]]


class _NativeCodec(_NativeReader):
    """The native runner's representation: the SDK's own `StagedRow`, `Value`,
    `PushOutput`; errors are raised as the SDK's `Error`."""

    DELETE = "delete"
    positional_input = _PositionalInput

    @staticmethod
    def constructor(case: str) -> Callable[[Any], Value]:
        if case == "null":
            return lambda _: Value.NULL
        return lambda payload: Value(case, payload)

    @staticmethod
    def encode(value: Value) -> Value:
        return value

    @staticmethod
    def rejection(key: Any, reason: str) -> Rejection:
        return Rejection(key, reason)

    @staticmethod
    def push_output(rows: List[Any], rejections: List[Any], more: bool = False) -> PushOutput:
        return PushOutput(rows, rejections, more)

    @staticmethod
    def error(error: Error) -> Exception:
        return error

    @staticmethod
    def partition(raw: Any) -> PartitionInfo:
        return raw if isinstance(raw, PartitionInfo) else PartitionInfo(*raw)

    @staticmethod
    def schema(raw: Any) -> Schema:
        if isinstance(raw, Schema):
            return raw
        return Schema([c.name for c in raw.columns], list(raw.key), NATIVE)


NATIVE = _NativeCodec()

_DESCRIPTIONS: Dict[type, Description] = {}
# By plugin class and codec (the codec is kept, so that its id is never reused).
_PLANS: Dict[Tuple[type, int], Tuple[Any, _Plan]] = {}


def describe(plugin: PluginClass) -> Description:
    """The plugin class's description with `kind` set from its base class, checked
    (`Description.check`); computed once per class."""
    found = _DESCRIPTIONS.get(plugin)
    if found is None:
        if issubclass(plugin, RowPlugin):
            kind = "row"
        elif issubclass(plugin, PartitionPlugin):
            kind = "partition"
        else:
            raise TypeError(f"{plugin!r} is neither a RowPlugin nor a PartitionPlugin")
        described = plugin.describe()
        if not isinstance(described, Description):
            raise TypeError(f"{plugin.__name__}.describe() returned {type(described).__name__}, not a Description")
        found = replace(
            described,
            kind=kind,
            columns=tuple(described.columns),
            grain_key=tuple(described.grain_key),
        )
        found.check()
        _DESCRIPTIONS[plugin] = found
    return found


def _plan(plugin: PluginClass, codec: Any) -> _Plan:
    key = (plugin, id(codec))
    found = _PLANS.get(key)
    if found is None:
        found = _PLANS[key] = (codec, _Plan(describe(plugin).columns, codec))
    return found[1]


def _unexpected(where: str, error: BaseException) -> Other:
    """An exception that is neither a `Reject` nor an `Error`: a plugin bug, reported
    as `other` (never a trap) with the exception's type and text."""
    name = type(error).__name__
    if isinstance(error, _stdlib_decimal.DecimalException):
        return Other(
            f"{where} raised decimal.{name}: a decimal operation would round or fail "
            "(the SDK runs plugins in weir_plugin.decimal.EXACT; round explicitly)"
        )
    text = str(error)
    return Other(f"{where} raised {name}: {text}" if text else f"{where} raised {name}")


def _open(plugin: PluginClass, codec: Any, partition: Any, config: Any) -> Tuple[Any, Optional[Error]]:
    try:
        with _stdlib_decimal.localcontext(EXACT):
            opened = plugin.open(codec.partition(partition), Config(config))
    except Error as error:
        return None, error
    except Exception as error:  # a plugin bug: fail every call with `other`
        return None, _unexpected("open", error)
    if not isinstance(opened, plugin):
        return None, Other(f"{plugin.__name__}.open returned a {type(opened).__name__}, not a {plugin.__name__}")
    return opened, None


class RowSession:
    """The `session` resource of a `RowPlugin`: `open` at construction (an error is
    returned by every `push` and by `finish`, as the contract's constructor cannot
    fail), then `transform` per pushed row that is not a `delete`.

    `schema` (an `InputSchema`, or the bindings' `input-schema` in a component) makes
    it a contract-0.2 session: rows come by position (`PositionalRow` natively),
    each result is whole (`more` false) and `next` is an error."""

    def __init__(
        self, plugin: Type[RowPlugin], partition: Any, config: Any, codec: Any = NATIVE, schema: Any = None
    ) -> None:
        self._codec = codec
        self._plan = _plan(plugin, codec)
        if schema is None:
            self._input: Callable[[Any, Any], Input] = Input
            self._reader: Any = codec
        else:
            # Names to positions once per session: a getter is one dictionary lookup.
            self._input = codec.positional_input
            self._reader = codec.schema(schema)
        self._plugin, self._error = _open(plugin, codec, partition, config)

    def push(self, rows: Iterable[Any]) -> Any:
        """Transforms a chunk of staged rows."""
        codec = self._codec
        if self._error is not None:
            raise codec.error(self._error)
        transform = self._plugin.transform
        values = self._plan.values
        delete = codec.DELETE
        make, reader = self._input, self._reader
        out: List[Any] = []
        rejections: List[Any] = []
        with _stdlib_decimal.localcontext(EXACT):
            for staged in rows:
                if staged.op == delete:
                    continue
                try:
                    row = transform(make(staged, reader))
                    if row is not None:
                        out.append(values(row))
                except Reject as reject:
                    reason = reject.reason if isinstance(reject.reason, str) else str(reject.reason)
                    rejections.append(codec.rejection(staged.key, reason))
                except Error as error:
                    raise codec.error(error) from None
                except Exception as error:
                    raise codec.error(_unexpected("transform", error)) from error
        return codec.push_output(out, rejections, False)

    def next(self) -> Any:
        """Contract 0.2: a row session's results are never in parts, so there is never
        a next part (an `other` error)."""
        raise self._codec.error(Other(_NO_PENDING))

    def finish(self) -> Any:
        """Ends the job: a row plugin holds nothing back."""
        if self._error is not None:
            raise self._codec.error(self._error)
        return self._codec.push_output([], [], False)


class PartitionSession:
    """The `session` resource of a `PartitionPlugin`: the first error (from `open`,
    `push` or `finish`) is returned by every later call; a call after `finish` is an
    error.

    With `schema` it is a contract-0.2 session (see `RowSession`): a call's output of
    more than `PART_ROWS` rows is handed in parts, the first by the call (`more`
    true), the rest by `next`; each part's rows are converted when it is handed, so
    the work is spread over the calls (each of which the host budgets)."""

    def __init__(
        self, plugin: Type[PartitionPlugin], partition: Any, config: Any, codec: Any = NATIVE, schema: Any = None
    ) -> None:
        self._codec = codec
        self._plan = _plan(plugin, codec)
        if schema is None:
            self._input: Callable[[Any, Any], Input] = Input
            self._reader: Any = codec
            self._parts = False
        else:
            self._input = codec.positional_input
            self._reader = codec.schema(schema)
            self._parts = True
        self._plugin, self._error = _open(plugin, codec, partition, config)
        self._finished = False
        # Contract 0.2: the output rows (`Row`s) not yet handed, and where the next
        # part starts.
        self._pending: List[Row] = []
        self._next_row = 0

    def _convert(self, rows: Sequence[Row], where: str) -> List[Any]:
        try:
            return [self._plan.values(row) for row in rows]
        except Error as error:
            self._error = error
            raise self._codec.error(error) from None
        except Exception as error:
            self._error = _unexpected(where, error)
            raise self._codec.error(self._error) from error

    def _call(self, call: Callable[[Any, Output], None], where: str, finishing: bool) -> Any:
        codec = self._codec
        self._pending = []
        self._next_row = 0
        if self._error is not None:
            raise codec.error(self._error)
        if self._finished:
            raise codec.error(Other("session called after finish"))
        out = Output()
        try:
            with _stdlib_decimal.localcontext(EXACT):
                call(self._plugin, out)
            rejections = [codec.rejection(key, str(reason)) for key, reason in out.rejections]
        except Error as error:
            self._error = error
            raise codec.error(error) from None
        except Exception as error:
            self._error = _unexpected(where, error)
            raise codec.error(self._error) from error
        if finishing:
            self._finished = True
        if not self._parts:
            return codec.push_output(self._convert(out.rows, where), rejections, False)
        rows = out.rows
        if len(rows) <= PART_ROWS:
            return codec.push_output(self._convert(rows, where), rejections, False)
        self._pending = rows
        self._next_row = PART_ROWS
        return codec.push_output(self._convert(rows[:PART_ROWS], where), rejections, True)

    def push(self, rows: Iterable[Any]) -> Any:
        """Takes a chunk of the partition's rows."""
        make, reader = self._input, self._reader
        inputs = [make(staged, reader) for staged in rows]
        return self._call(lambda plugin, out: plugin.push(inputs, out), "push", False)

    def next(self) -> Any:
        """Contract 0.2: the next part of the last call's output (an `other` error if
        there is none)."""
        codec = self._codec
        start = self._next_row
        if start >= len(self._pending):
            raise codec.error(Other(_NO_PENDING))
        end = start + PART_ROWS
        part = self._convert(self._pending[start:end], "next")
        more = end < len(self._pending)
        if more:
            self._next_row = end
        else:
            self._pending = []
            self._next_row = 0
        return codec.push_output(part, [], more)

    def finish(self) -> Any:
        """Ends the job."""
        return self._call(lambda plugin, out: plugin.finish(out), "finish", True)


def session_class(plugin: PluginClass) -> type:
    """`RowSession` or `PartitionSession`, by the plugin's base class."""
    return RowSession if describe(plugin).kind == "row" else PartitionSession


def run_session(
    plugin: PluginClass,
    partition: Union[PartitionInfo, Tuple[str, str]],
    config: Union[Mapping[str, str], Sequence[Tuple[str, str]]],
    chunks: Iterable[Iterable[StagedRow]],
    contract: str = "0.1",
) -> PushOutput:
    """Runs a whole session natively, as the host would: construct, push each chunk,
    finish, and concatenate the outputs (rows as lists of `Value` in the declared
    order). The first error is raised (an `Error`: `InvalidConfig`, `InvalidInput` or
    `Other`). For tests of a plugin's logic.

    The chunks are named rows (`StagedRow`). `contract="0.2"` runs them on contract
    0.2 instead, as `positional` converts them (the schema: every column name in
    order of first appearance), through `run_session_0_2`."""
    if contract == "0.2":
        schema, positional_chunks = positional(chunks)
        return run_session_0_2(plugin, partition, schema, config, positional_chunks)
    if contract != "0.1":
        raise ValueError(f"contract is one of {', '.join(CONTRACTS)}, not {contract!r}")
    items = config.items() if isinstance(config, Mapping) else config
    session = session_class(plugin)(plugin, partition, sorted(items))
    total = PushOutput()
    for chunk in chunks:
        out = session.push(chunk)
        total.rows.extend(out.rows)
        total.rejections.extend(out.rejections)
    out = session.finish()
    total.rows.extend(out.rows)
    total.rejections.extend(out.rejections)
    return total


def run_session_0_2(
    plugin: PluginClass,
    partition: Union[PartitionInfo, Tuple[str, str]],
    schema: InputSchema,
    config: Union[Mapping[str, str], Sequence[Tuple[str, str]]],
    chunks: Iterable[Iterable[PositionalRow]],
) -> PushOutput:
    """Runs a whole contract-0.2 session natively, as the host would: construct with
    the schema, push each chunk and finish, draining every call's parts with `next`,
    and concatenate the outputs (`more` false). The first error is raised."""
    items = config.items() if isinstance(config, Mapping) else config
    session = session_class(plugin)(plugin, partition, sorted(items), schema=schema)
    total = PushOutput()

    def take(out: PushOutput) -> None:
        while True:
            total.rows.extend(out.rows)
            total.rejections.extend(out.rejections)
            if not out.more:
                return
            out = session.next()

    for chunk in chunks:
        take(session.push(chunk))
    take(session.finish())
    return total


def in_component() -> bool:
    """Whether this runs inside a component built by componentize-py (its runtime
    module exists only there)."""
    return importlib.util.find_spec("componentize_py_runtime") is not None


def export(plugin: PluginClass) -> Optional[type]:
    """Exports a plugin class as the component's `transform` interface:

        Transform = weir_plugin.export(MyPlugin)

    at the end of the module componentize-py is given as the app. Inside a component
    (at build time, when componentize-py imports the module) it returns the class
    componentize-py looks for, `Transform`, and provides the `session` resource (as
    module `transform`, class `Session`). Natively it only checks the description and
    returns `None`, so the module stays importable by plain `python3` (the Rust SDK's
    `export_row_plugin!` likewise expands to nothing natively)."""
    describe(plugin)
    if not in_component():
        return None
    from .component import export as export_component

    return export_component(plugin)
