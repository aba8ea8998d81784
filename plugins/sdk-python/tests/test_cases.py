"""The case runner (`weir_plugin.cases`): JSON forms, and running a case file."""

import json
import math
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from weir_plugin import Column, ColumnType, Description, Reject, Row, RowPlugin, Unsupported, Value  # noqa: E402
from weir_plugin.cases import (  # noqa: E402
    case_tests,
    run_cases,
    staged_row_from_json,
    value_from_json,
    value_to_json,
)


class Echo(RowPlugin):
    """Copies `id` and `v` (text); rejects `v` = "no"; config `fail` fails the session."""

    @staticmethod
    def describe():
        return Description("echo", "1", columns=[Column("id", ColumnType.BIGINT), Column("v", ColumnType.TEXT)],
                           grain_key=["id"], partition_column="id")

    @classmethod
    def open(cls, partition, config):
        if config.get("fail") is not None:
            config.decimal("fail")
        return cls()

    def transform(self, row):
        v = row.text_or_null("v")
        if v == "no":
            raise Reject("v is no")
        return Row(id=row.int("id"), v=v)


def case(name, chunks, expect, config=None):
    return json.dumps({"case": name, "partition": {"table": "t", "name": "p"}, "config": config,
                       "chunks": chunks, "expect": expect}, ensure_ascii=False)


ROW1 = {"key": [{"integer": 1}], "op": "insert", "commit_position": 1, "commit_time": None,
        "columns": {"id": {"integer": 1}, "v": {"text": "\ufeffa"}}}
ROW2 = {"key": [{"integer": 2}], "op": "update", "commit_position": 2, "commit_time": 5,
        "columns": {"id": {"integer": 2}, "v": {"text": "no"}}}
OUT1 = {"id": {"integer": 1}, "v": {"text": "\ufeffa"}}


class JsonForms(unittest.TestCase):
    def test_values_round_trip(self):
        for j in [None, {"boolean": True}, {"integer": -5}, {"float": 1.5}, {"float": "NaN"}, {"float": "-Infinity"},
                  {"text": "\ufeffé"}, {"bytes": "00ff"}, {"decimal": "1.50"}, {"date": -1},
                  {"timestamp": 2**63 - 1}, {"json": "{}"}, {"unsupported": {"type-name": "interval", "text": "1 day"}}]:
            self.assertEqual(value_to_json(value_from_json(j)), j)
        self.assertEqual(value_from_json({"integer": "9007199254740993"}), Value.integer(9007199254740993))
        self.assertTrue(math.isinf(value_from_json({"float": "Infinity"}).payload))
        self.assertEqual(value_from_json({"unsupported": {"type-name": "x", "text": "y"}}).payload, Unsupported("x", "y"))

    def test_malformed_values_are_value_errors(self):
        for j in [1, [], {}, {"integer": 1, "text": "x"}, {"integer": 1.0}, {"integer": True}, {"integer": " 1"},
                  {"integer": "1_0"}, {"integer": 2**63}, {"date": 2**31}, {"bytes": "0"}, {"bytes": "zz"},
                  {"bytes": "0 0"}, {"text": 1}, {"boolean": 1}, {"float": "nan"}, {"nope": 1},
                  {"unsupported": "x"}, {"unsupported": {"text": "y"}}]:
            with self.assertRaises(ValueError, msg=repr(j)):
                value_from_json(j)

    def test_staged_rows(self):
        row = staged_row_from_json(ROW2)
        self.assertEqual((row.op, row.commit_position, row.commit_time), ("update", 2, 5))
        self.assertEqual([c.name for c in row.columns], ["id", "v"])
        for bad in [{**ROW1, "op": "upsert"}, {**ROW1, "key": {}}, {**ROW1, "commit_position": -1},
                    {**ROW1, "commit_time": "1"}, {**ROW1, "columns": []}, []]:
            with self.assertRaises(ValueError):
                staged_row_from_json(bad)


class Running(unittest.TestCase):
    def test_passing_and_failing_cases(self):
        jsonl = "\n".join([
            case("rows and rejections", [[ROW1], [ROW2]],
                 {"rows": [OUT1], "rejections": [{"key": [{"integer": 2}], "reason": "v is no"}]}),
            "",
            case("a config error", [[ROW1]], {"error": {"invalid-config": "config `fail` is not valid decimal text"}},
                 config={"fail": "x"}),
            case("no chunks", [], {"rows": [], "rejections": []}),
        ])
        self.assertEqual(run_cases(Echo, jsonl), [])
        wrong = case("wrong", [[ROW1]], {"rows": [{"id": {"integer": 1.0}, "v": {"text": "\ufeffa"}}], "rejections": []})
        (failure,) = run_cases(Echo, wrong)
        # Each case runs on both contracts; the first that fails is named.
        self.assertTrue(failure.startswith("line 1: case `wrong` on contract 0.2:\n  expected "), failure)
        self.assertEqual(run_cases(Echo, ""), ["no cases"])
        self.assertEqual(run_cases(Echo, "{"), ["line 1: not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"])
        bad_config = case("bad config", [], {"rows": [], "rejections": []}, config={"a": 1})
        self.assertEqual(run_cases(Echo, bad_config), ["line 1: case `bad config`: config `a` is not a string"])

    def test_a_column_some_rows_lack_is_missing_on_both_contracts(self):
        # On 0.2 the schema has every column of the case's rows; a row without one has
        # `None` there, which the getters read as a missing column, as on 0.1.
        row3 = {**ROW1, "key": [{"integer": 3}], "columns": {"id": {"integer": 3}}}
        row4 = {**ROW1, "key": [{"integer": 4}], "columns": {"v": {"text": "b"}, "id": {"integer": 4}}}
        expect = {"rows": [OUT1, {"id": {"integer": 4}, "v": {"text": "b"}}],
                  "rejections": [{"key": [{"integer": 3}], "reason": "column `v` is missing"}]}
        self.assertEqual(run_cases(Echo, case("missing", [[ROW1, row3], [row4]], expect)), [])

        class Contract(Echo):
            """Tells the contracts apart (no plugin should): rejects every row on 0.1."""

            def transform(self, row):
                if hasattr(row._row, "columns"):
                    raise Reject("0.1")
                return super().transform(row)

        (failure,) = run_cases(Contract, case("both", [[ROW1]], {"rows": [OUT1], "rejections": []}))
        self.assertTrue(failure.startswith("line 1: case `both` on contract 0.1:"), failure)

    def test_case_tests_make_one_test_per_case(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "cases.jsonl"
            path.write_text(case("one", [[ROW1]], {"rows": [OUT1], "rejections": []}) + "\n"
                            + case("two", [[ROW1]], {"rows": [], "rejections": []}) + "\n", encoding="utf-8")
            tests = case_tests(Echo, path)
            self.assertEqual(tests.test_line_001.__doc__, "line 1: one")
            result = unittest.TestResult()
            unittest.defaultTestLoader.loadTestsFromTestCase(tests).run(result)
            self.assertEqual((result.testsRun, len(result.failures)), (3, 1))


if __name__ == "__main__":
    unittest.main()
