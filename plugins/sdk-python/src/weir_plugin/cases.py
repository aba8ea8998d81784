"""Data-driven test cases shared by the plugins of every language: the Rust SDK's
case runner (`weir_plugin::cases`), for a plugin class run natively with `python3`.

A case file is JSON lines; each line is one case:

    {"case": "a name",
     "partition": {"table": "public.orders", "name": "2026-03-01"},
     "config": {"rate": "1.0825"},
     "chunks": [[STAGED_ROW, ...], ...],
     "expect": {"rows": [{"COLUMN": VALUE, ...}, ...],
                "rejections": [{"key": [VALUE, ...], "reason": "..."}]}}

or `"expect": {"error": {"invalid-config": "..."}}` (also `invalid-input`, `other`)
when the session must fail. The session is run as the host runs it, once on each
contract (as the Rust SDK's runner does): constructed with the partition and config
(on 0.2 also the input schema: every column name of the case's rows in order of first
appearance, `weir_plugin.positional`), one `push` per chunk (on 0.2 each row's values
by position, absent columns `None`, and each call's parts drained with `next`), then
`finish`; the rows and rejections of every call are concatenated, in order, and both
runs must give the expected output. Expected rows are objects by declared column
name. The comparison is exact, value cases and JSON types included
(`{"integer": 1}` is not `{"integer": 1.0}`).

A `STAGED_ROW` is `{"key": [VALUE, ...], "op": "insert" | "update" | "delete" |
"read", "commit_position": N, "commit_time": N | null, "columns": {"NAME": VALUE,
...}}` (columns in source order). A `VALUE` is the WIT `value` as JSON: `null`,
`{"boolean": true}`, `{"integer": 1}` (or a decimal string), `{"float": 1.5}` (or
`"NaN"`, `"Infinity"`, `"-Infinity"`), `{"text": "..."}`, `{"bytes": "hex"}`,
`{"decimal": "1.50"}`, `{"date": DAYS}`, `{"timestamp": MICROS}`, `{"json": "..."}`,
`{"unsupported": {"type-name": "...", "text": "..."}}`.

In a test module:

    from weir_plugin.cases import case_tests, unittest_main
    SharedCases = case_tests(Orders, Path(...) / "orders-cases.jsonl")
    if __name__ == "__main__":
        sys.exit(unittest_main("orders-python"))
"""

from __future__ import annotations

import json
import math
import re
import sys
import unittest
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

from .session import CONTRACTS, describe, run_session
from .types import (
    ColumnValue,
    Description,
    Error,
    PartitionInfo,
    PushOutput,
    StagedRow,
    Unsupported,
    Value,
)

__all__ = [
    "value_from_json",
    "value_to_json",
    "staged_row_from_json",
    "output_to_json",
    "error_to_json",
    "run_case",
    "check_case",
    "load_cases",
    "run_cases",
    "case_tests",
    "unittest_main",
    "canonical",
]

_INT_TEXT = re.compile(r"[+-]?[0-9]+\Z")
_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*\Z")
_I64 = (-(2**63), 2**63 - 1)
_I32 = (-(2**31), 2**31 - 1)


def value_from_json(v: Any) -> Value:
    """A value from its JSON form; `ValueError` if it is not one."""
    if v is None:
        return Value.NULL
    if not isinstance(v, dict):
        raise ValueError(f"value {json.dumps(v)} is neither null nor an object")
    if len(v) != 1:
        raise ValueError(f"value {json.dumps(v)} does not have exactly one case")
    ((case, inner),) = v.items()

    def bad() -> ValueError:
        return ValueError(f"value {json.dumps(v)} is not a valid {case}")

    def integer(x: Any, lo: int, hi: int) -> int:
        if isinstance(x, int) and not isinstance(x, bool):
            n = x
        elif isinstance(x, str) and _INT_TEXT.match(x):
            n = int(x)
        else:
            raise bad()
        if not lo <= n <= hi:
            raise bad()
        return n

    def text(x: Any) -> str:
        if not isinstance(x, str):
            raise bad()
        return x

    if case == "boolean":
        if not isinstance(inner, bool):
            raise bad()
        return Value("boolean", inner)
    if case == "integer":
        return Value("integer", integer(inner, *_I64))
    if case == "timestamp":
        return Value("timestamp", integer(inner, *_I64))
    if case == "date":
        return Value("date", integer(inner, *_I32))
    if case == "float":
        specials = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
        if isinstance(inner, str) and inner in specials:
            return Value("float", specials[inner])
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return Value("float", float(inner))
        raise bad()
    if case in ("text", "decimal", "json"):
        return Value(case, text(inner))
    if case == "bytes":
        hex_text = text(inner)
        if not _HEX.match(hex_text):
            raise bad()
        return Value("bytes", bytes.fromhex(hex_text))
    if case == "unsupported":
        if not isinstance(inner, dict):
            raise bad()
        return Value("unsupported", Unsupported(text(inner.get("type-name")), text(inner.get("text"))))
    raise ValueError(f"value {json.dumps(v)} has an unknown case")


def value_to_json(value: Value) -> Any:
    """A value in its JSON form."""
    case, payload = value
    if case == "null":
        return None
    if case == "float" and isinstance(payload, float) and not math.isfinite(payload):
        return {"float": "NaN" if math.isnan(payload) else ("Infinity" if payload > 0 else "-Infinity")}
    if case == "bytes":
        return {"bytes": bytes(payload).hex()}
    if case == "unsupported":
        return {"unsupported": {"type-name": payload.type_name, "text": payload.text}}
    return {case: payload}


def staged_row_from_json(j: Any) -> StagedRow:
    """A staged row from its JSON form; `ValueError` if it is not one."""
    if not isinstance(j, dict):
        raise ValueError("a staged row is not an object")
    key = j.get("key")
    if not isinstance(key, list):
        raise ValueError("key is not an array")
    op = j.get("op")
    if op not in ("insert", "update", "delete", "read"):
        raise ValueError("op is not insert, update, delete or read")
    position = j.get("commit_position")
    if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < 2**64:
        raise ValueError("commit_position is not an unsigned integer")
    commit_time = j.get("commit_time")
    if commit_time is not None and (
        isinstance(commit_time, bool) or not isinstance(commit_time, int) or not _I64[0] <= commit_time <= _I64[1]
    ):
        raise ValueError("commit_time is not an integer")
    columns = j.get("columns")
    if not isinstance(columns, dict):
        raise ValueError("columns is not an object")
    return StagedRow(
        key=[value_from_json(v) for v in key],
        op=op,
        commit_position=position,
        commit_time=commit_time,
        columns=[ColumnValue(name, value_from_json(v)) for name, v in columns.items()],
    )


def output_to_json(out: PushOutput, description: Description) -> Dict[str, Any]:
    """A session's output in the `expect` form: rows as objects by declared column name."""
    names = [c.name for c in description.columns]
    rows = []
    for row in out.rows:
        rows.append(
            {(names[i] if i < len(names) else f"#{i}"): value_to_json(v) for i, v in enumerate(row)}
        )
    rejections = [
        {"key": [value_to_json(v) for v in r.key], "reason": r.reason} for r in out.rejections
    ]
    return {"rows": rows, "rejections": rejections}


def error_to_json(error: Error) -> Dict[str, str]:
    """An error in the `expect` form."""
    return {error.kind: error.message}


def canonical(j: Any) -> str:
    """JSON text that is equal only for equal values of equal JSON types."""
    return json.dumps(j, sort_keys=True, ensure_ascii=False)


def run_case(plugin: type, case: Dict[str, Any], contract: str = "0.2") -> Dict[str, Any]:
    """Runs one case's session as the host would, on `contract` (`0.2` or `0.1`); its
    output in the `expect` form. `ValueError` if the case itself is malformed."""
    partition = case.get("partition")
    if not isinstance(partition, dict):
        raise ValueError("partition is not an object")
    for field in ("table", "name"):
        if not isinstance(partition.get(field), str):
            raise ValueError(f"`{field}` is not a string")
    config = case.get("config")
    if config is None:
        config = {}
    if not isinstance(config, dict):
        raise ValueError("config is not an object")
    for key, value in config.items():
        if not isinstance(value, str):
            raise ValueError(f"config `{key}` is not a string")
    chunks = case.get("chunks")
    if not isinstance(chunks, list):
        raise ValueError("chunks is not an array")
    staged = []
    for chunk in chunks:
        if not isinstance(chunk, list):
            raise ValueError("a chunk is not an array")
        staged.append([staged_row_from_json(r) for r in chunk])
    try:
        out = run_session(plugin, PartitionInfo(partition["table"], partition["name"]), config, staged, contract)
    except Error as error:
        return {"error": error_to_json(error)}
    return output_to_json(out, describe(plugin))


def check_case(plugin: type, case: Dict[str, Any]) -> Optional[str]:
    """`None` if the case passes on both contracts, else why (the contract, expected
    and actual output)."""
    name = case.get("case") if isinstance(case.get("case"), str) else "(unnamed)"
    expected = case.get("expect")
    for contract in CONTRACTS:
        try:
            actual = run_case(plugin, case, contract)
        except ValueError as error:
            return f"case `{name}`: {error}"
        if canonical(actual) != canonical(expected):
            return (
                f"case `{name}` on contract {contract}:\n  expected {canonical(expected)}\n"
                f"  actual   {canonical(actual)}"
            )
    return None


def load_cases(source: Union[str, Path]) -> List[Tuple[int, Any]]:
    """The cases of a JSON-lines file (a `Path`) or text (a `str`), as `(line number,
    case)`; a line that is not JSON is kept as its `ValueError`."""
    text = source.read_text(encoding="utf-8") if isinstance(source, Path) else source
    cases: List[Tuple[int, Any]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            cases.append((n, json.loads(line)))
        except ValueError as error:
            cases.append((n, ValueError(f"not JSON: {error}")))
    return cases


def run_cases(plugin: type, jsonl: Union[str, Path]) -> List[str]:
    """Runs every case of a JSON-lines file or text against `plugin`; one message per
    failed case (empty: all passed; `no cases` if there were none)."""
    failures = []
    cases = load_cases(jsonl)
    for n, case in cases:
        failure = str(case) if isinstance(case, ValueError) else (
            check_case(plugin, case) if isinstance(case, dict) else "a case is not an object"
        )
        if failure is not None:
            failures.append(f"line {n}: {failure}")
    if not cases:
        failures.append("no cases")
    return failures


def case_tests(plugin: type, path: Path) -> type:
    """A `unittest.TestCase` class with one test per case of the file (named
    `test_line_NNN`, its docstring the case's name), plus one that the file has
    cases. Assign it to a module-level name for unittest to find it."""

    class CaseTests(unittest.TestCase):
        def test_the_case_file_has_cases(self) -> None:
            self.assertGreater(len(load_cases(path)), 0, f"no cases in {path}")

    def make(n: int, case: Any) -> Any:
        def test(self: unittest.TestCase) -> None:
            if isinstance(case, ValueError):
                self.fail(f"line {n}: {case}")
            if not isinstance(case, dict):
                self.fail(f"line {n}: a case is not an object")
            failure = check_case(plugin, case)
            if failure is not None:
                self.fail(f"line {n}: {failure}")

        name = case.get("case") if isinstance(case, dict) else None
        test.__doc__ = f"line {n}: {name}"
        return test

    for n, case in load_cases(path):
        setattr(CaseTests, f"test_line_{n:03d}", make(n, case))
    CaseTests.__name__ = CaseTests.__qualname__ = f"{plugin.__name__}Cases"
    return CaseTests


def unittest_main(name: str, tests: Any = "__main__") -> int:
    """Runs tests (a module, a module name, or a `unittest.TestSuite`; default
    `__main__`) and prints `NAME: N passed, M failed` last (the line `scripts/test`
    sums; skipped tests are not counted as passed); returns the exit status (0: none
    failed, and some ran)."""
    if isinstance(tests, str):
        tests = sys.modules[tests]
    if not isinstance(tests, unittest.TestSuite):
        tests = unittest.defaultTestLoader.loadTestsFromModule(tests)
    result = unittest.TextTestRunner(verbosity=1, stream=sys.stderr).run(tests)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    print(f"{name}: {result.testsRun - failed - skipped} passed, {failed} failed")
    if skipped:
        print(f"{name}: {skipped} skipped", file=sys.stderr)
    return 0 if failed == 0 and result.testsRun > 0 else 1
