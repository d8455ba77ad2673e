"""The benchmarks: `benchmarks/run` regenerates docs/benchmarks.md (see that script).

A package, so that its conftest and the tests' conftest do not collide. The benchmarks share
two helpers with the tests, the boundary audit (`tests/audit.py`) and the Postgres finder
(`tests/_postgres.py`); tests/ is not a package, so its directory goes on the import path here,
as pytest puts it there for the tests themselves.
"""

import sys
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
