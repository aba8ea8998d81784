"""Runs `cases.jsonl` against the plugin natively, with plain `python3` (no component):
one test per case, by the SDK's case runner. `python3 -B test_cases.py`."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "sdk"))

from weir_plugin.cases import case_tests, unittest_main  # noqa: E402

from app import Plugin  # noqa: E402

Cases = case_tests(Plugin, HERE / "cases.jsonl")

if __name__ == "__main__":
    sys.exit(unittest_main("{{name}}"))
