"""Runs the SDK's unit tests (every `test_*.py` here) with plain `python3`; prints
`sdk-python: N passed, M failed` last and exits non-zero if a test failed.

    python3 -B tests/run.py            # from plugins/sdk-python (or anywhere)
    python3 -B -m unittest discover -s tests -v   # the same, unittest's own output

`test_component.py` tests the glue on both contracts when the pinned componentize-py
is installed (or `WEIR_PY_BINDINGS` names a folder of bindings; see that file), and is
skipped otherwise.
"""

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from weir_plugin.cases import unittest_main  # noqa: E402

if __name__ == "__main__":
    suite = unittest.defaultTestLoader.discover(str(HERE), top_level_dir=str(HERE))
    sys.exit(unittest_main("sdk-python", suite))
