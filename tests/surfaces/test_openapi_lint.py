"""The served OpenAPI document passes a standard linter: Redocly's (`@redocly/openapi-core`, the
engine of `redocly lint`, pinned in tests/clients/ts) under its `recommended` rules, with no
error and no warning. The document is the one a running `pdpp-store serve` answers at
`/openapi.json`, read over a real socket.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _node import run_json
from _served import Server, seed_served, start, tokens_file

__all__ = ["tokens_file"]  # a fixture of _served, used here too


@pytest.fixture
def server(sqlite_db_url: str, tokens_file: Path) -> Iterator[Server]:
    """The document does not depend on the database: one backend serves it."""
    seed_served(sqlite_db_url)
    running = start(sqlite_db_url, tokens_file)
    try:
        yield running
    finally:
        running.stop()


def _lint(document: dict[str, Any], where: Path) -> list[dict[str, Any]]:
    path = where / "openapi.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    problems: list[dict[str, Any]] = run_json("lint_openapi.mjs", str(path))
    return problems


def test_the_served_document_is_lint_clean(server: Server, tmp_path: Path) -> None:
    document = httpx.get(f"{server.base_url}/openapi.json").json()
    assert _lint(document, tmp_path) == []
    for path, operations in document["paths"].items():
        for operation in operations.values():
            if path.startswith("/v1/"):  # every read needs the bearer token
                assert operation["security"], path
            else:  # discovery: read before a client holds a token
                assert operation["security"] == [], path


def test_the_linter_bites(server: Server, tmp_path: Path) -> None:
    """The same document with a public route's `security: []` dropped and a required property
    left undefined is refused (an error and a warning): the clean run above is not vacuous."""
    document = httpx.get(f"{server.base_url}/openapi.json").json()
    public = next(path for path in document["paths"] if not path.startswith("/v1/"))
    del document["paths"][public]["get"]["security"]
    document["components"]["schemas"]["Error"]["required"].append("no_such_property")
    found = {(problem["rule"], problem["severity"]) for problem in _lint(document, tmp_path)}
    assert ("security-defined", "error") in found
    assert ("no-required-schema-properties-undefined", "warn") in found
