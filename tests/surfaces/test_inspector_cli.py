"""The MCP Inspector's CLI (`@modelcontextprotocol/inspector-cli`, pinned in tests/clients/ts), as a
developer checking the server would run it: one process per call, over stdio and Streamable HTTP
(SQLite: the Inspector is a front on the SDK 1.x client that test_ts_clients drives on both
databases). Successes come back whole; a refusal comes back as the `isError` result with the
envelope, its `code` readable, not as the schema-mismatch error the Inspector showed while error
results carried `structuredContent`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _node import inspector
from _served import Server, start
from test_ts_clients import GRANT, NOTE_EDITED, NOTE_ID, SPARE_ID, TOKEN, _load, _stdio


@pytest.fixture
def loaded(sqlite_db_url: str) -> tuple[str, str]:
    return sqlite_db_url, _load(sqlite_db_url)[0]


@pytest.fixture
def http_server(loaded: tuple[str, str], tmp_path: Path) -> Iterator[Server]:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: GRANT}), encoding="utf-8")
    running = start(loaded[0], tokens)
    try:
        yield running
    finally:
        running.stop()


def _code(result: dict[str, Any]) -> str:
    assert result["isError"] is True
    assert "structuredContent" not in result
    from_text = json.loads(result["content"][0]["text"])["error"]["code"]
    assert result["_meta"]["error"]["code"] == from_text
    code: str = from_text
    return code


def _call(target: list[str], tool: str, *arguments: str) -> Any:
    return inspector(
        *target, "--method", "tools/call", "--tool-name", tool, "--tool-arg", *arguments
    )


def test_inspector_over_stdio(loaded: tuple[str, str], tmp_path: Path) -> None:
    url, stale = loaded
    stdio = _stdio(url, tmp_path)
    target = [stdio["command"], *stdio["args"]]
    window = _call(target, "read_record_field", f"id={NOTE_ID}", "field_path=body_text")
    assert window["structuredContent"]["window"]["text"] == NOTE_EDITED[:4096]
    refused = _call(
        target, "read_record_field", f"id={NOTE_ID}", "field_path=body_text", f"cursor={stale}"
    )
    assert _code(refused) == "stale_cursor"


def test_inspector_over_streamable_http(loaded: tuple[str, str], http_server: Server) -> None:
    _, stale = loaded
    target = [
        f"{http_server.base_url}/mcp",
        "--transport",
        "http",
        "--header",
        f"Authorization: Bearer {TOKEN}",
    ]
    listed = inspector(*target, "--method", "tools/list")
    assert {"search", "fetch", "read_record_field", "schema"} <= {
        t["name"] for t in listed["tools"]
    }
    found = _call(target, "search", "q=kumquat")
    assert found["structuredContent"]["results"][0]["id"] == NOTE_ID
    fetched = _call(target, "fetch", f"id={NOTE_ID}")
    assert fetched["structuredContent"]["title"] == NOTE_EDITED[:200]
    refusals = {
        "stale_cursor": (
            "read_record_field",
            f"id={NOTE_ID}",
            "field_path=body_text",
            f"cursor={stale}",
        ),
        "field_not_text": ("read_record_field", f"id={SPARE_ID}", "field_path=attachment_data"),
        "not_found": ("fetch", f"id={NOTE_ID}-gone"),
    }
    for code, (tool, *arguments) in refusals.items():
        assert _code(_call(target, tool, *arguments)) == code
