"""The Node clients of the tests (tests/clients/ts, installed by `./dev setup` with `npm ci` at the
versions its package-lock.json pins): where they are, and running one of their driver scripts.

Without node or the installed packages a test skips, except under ``CI=true``, where it fails:
CI never skips the clients (the same rule as Postgres's, `_postgres`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parents[1] / "clients" / "ts"
MODULES = PROJECT / "node_modules"
STAMP = MODULES / ".installed"
RUN_SECONDS = 300


def _under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def node() -> str:
    """The node executable, once the project's packages are installed; else skip (fail on CI)."""
    found = shutil.which("node")
    reason = None
    if found is None:
        reason = "node is not on PATH"
    elif not STAMP.is_file():
        reason = "the Node clients are not installed (./dev setup runs npm ci in tests/clients/ts)"
    if reason is not None:
        if _under_ci():
            pytest.fail(f"CI=true and the Node clients are required: {reason}", pytrace=False)
        pytest.skip(reason)
    assert found is not None
    return found


def run_json(script: str, *args: str, timeout: float = RUN_SECONDS) -> Any:
    """Run `node tests/clients/ts/SCRIPT ARGS...` and parse the JSON it prints."""
    done = subprocess.run(
        [node(), str(PROJECT / script), *args],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"{script} failed ({done.returncode}): {done.stderr[-4000:]}"
    return json.loads(done.stdout)


INSPECTOR = MODULES / "@modelcontextprotocol" / "inspector-cli" / "build"


def inspector(*args: str, timeout: float = RUN_SECONDS) -> Any:
    """Run the MCP Inspector's CLI (`inspector-cli TARGET... --method ...`) and parse the JSON
    result it prints. It runs in its own `build` directory: 1.0.3 looks for its package.json
    relative to the working directory."""
    done = subprocess.run(
        [node(), str(INSPECTOR / "index.js"), *args],
        cwd=INSPECTOR,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"inspector-cli failed ({done.returncode}): {done.stderr[-4000:]}"
    return json.loads(done.stdout)
