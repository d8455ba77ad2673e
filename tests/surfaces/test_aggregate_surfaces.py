"""`aggregate` on every surface, with clients we did not write: REST over a real socket
(`pdpp-store serve` in a subprocess, httpx), MCP over a real stdio subprocess (the SDK's client),
and the command line. Each gives the library's numbers; bad input is a typed 4xx naming the
parameter, never a 500."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _aggregates import AGG_MANIFEST, CONNECTOR, STREAM
from _served import Server, start
from click.testing import CliRunner
from mcp import Client, StdioServerParameters

from pdpp_store import Grant, Store
from pdpp_store.cli import cli

TOKEN = "tok_aggregates_0000000000"
GRANT = {"grant_id": "g-agg", "streams": [{"name": STREAM, "instance_ids": ["c1"]}]}
ROWS = [
    {"id": "r1", "when": "2024-03-10T06:30:00Z", "n": 3, "label": "Work", "flag": True},
    {"id": "r2", "when": "2024-03-10T07:30:00Z", "n": 4, "label": "work", "flag": False},
    {"id": "r3", "when": "2024-04-01T03:00:00Z", "n": 5, "label": "home"},
]
QUESTION: dict[str, Any] = {
    "group_by_time": "when",
    "granularity": "day",
    "time_zone": "America/New_York",
}
BAD: list[tuple[dict[str, Any], int, str, str]] = [
    ({"metric": "avg"}, 400, "invalid_aggregate", "metric"),
    ({"metric": "sum"}, 400, "invalid_aggregate", "field"),
    ({"group_by": "when"}, 400, "invalid_aggregate", "group_by"),
    (
        {"group_by_time": "when", "granularity": "fortnight"},
        400,
        "invalid_aggregate",
        "granularity",
    ),
    ({"group_by_time": "when", "time_zone": "Nowhere/Land"}, 400, "invalid_aggregate", "time_zone"),
    ({"limit": 0}, 400, "invalid_request", "limit"),
    ({"filter": "{not json"}, 400, "invalid_filter", "filter"),
    ({"group_by": "unknown"}, 400, "invalid_aggregate", "group_by"),
    ({"connection_id": "elsewhere"}, 404, "connection_not_found", "connection_id"),
]


def _load(url: str) -> dict[str, Any]:
    with Store.open(url) as store:
        store.register_manifest(AGG_MANIFEST)
        store.add_connection("c1", CONNECTOR)
        store.upsert_records("c1", STREAM, ROWS)
        answer: dict[str, Any] = store.aggregate(
            Grant.from_dict(GRANT), STREAM, **QUESTION
        ).to_dict()
    return answer


@pytest.fixture
def expected(db_url: str) -> dict[str, Any]:
    return _load(db_url)


@pytest.fixture
def server(db_url: str, expected: dict[str, Any], tmp_path: Path) -> Iterator[Server]:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: GRANT}), encoding="utf-8")
    running = start(db_url, tokens)
    try:
        yield running
    finally:
        running.stop()


def test_rest_answers_the_library_s_numbers_and_types_bad_input(
    server: Server, expected: dict[str, Any]
) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.base_url, headers=headers) as client:
        path = f"/v1/streams/{STREAM}/aggregate"
        answer = client.get(path, params=QUESTION)
        assert answer.status_code == 200
        assert answer.json() == expected
        assert [g["key"] for g in expected["groups"]] == ["2024-03-10", "2024-03-31"]
        filtered = client.get(path, params={"filter": json.dumps({"flag": True})})
        assert filtered.json()["value"] == 1
        for params, status, code, param in BAD:
            sent = {k: str(v) for k, v in params.items()}
            refused = client.get(path, params=sent)
            assert refused.status_code == status, params
            error = refused.json()["error"]
            assert (error["code"], error.get("param")) == (code, param), params
        unknown = client.get(path, params={"bogus": "1"})
        assert unknown.status_code == 400
        assert unknown.json()["error"]["param"] == "bogus"
        assert client.get(path, params={"limit": "ten"}).json()["error"]["param"] == "limit"


def _stdio(url: str, grant_file: Path) -> StdioServerParameters:
    command = shutil.which("pdpp-store", path=os.path.dirname(sys.executable))
    assert command is not None
    return StdioServerParameters(
        command=command,
        args=["--db", url, "mcp", "--grant", str(grant_file)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def test_mcp_over_stdio_shows_a_table_and_the_same_numbers(
    db_url: str, expected: dict[str, Any], tmp_path: Path
) -> None:
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(GRANT), encoding="utf-8")
    async with Client(_stdio(db_url, grant_file)) as client:
        result = await client.call_tool("aggregate", {"stream": STREAM, **QUESTION})
        assert not result.is_error
        structured = result.structured_content
        assert structured is not None
        groups = [{k: v for k, v in g.items() if k != "call"} for g in structured["groups"]]
        assert {**structured, "groups": groups} == expected
        text = result.content[0].text  # type: ignore[union-attr]
        lines = text.splitlines()
        assert json.loads(lines[0])["groups"] == len(expected["groups"])
        assert lines[1].startswith("key | value | records")
        for line, group in zip(lines[2:], expected["groups"], strict=False):
            assert line.startswith(f'"{group["key"]}" | {group["value"]} | {group["records"]}')
        for params, _, code, param in BAD:
            refused = await client.call_tool("aggregate", {"stream": STREAM, **params})
            assert refused.is_error, params
            envelope = json.loads(refused.content[0].text)  # type: ignore[union-attr]
            assert (envelope["error"]["code"], envelope["error"]["param"]) == (code, param)
        unknown = await client.call_tool("aggregate", {"stream": STREAM, "bogus": 1})
        assert unknown.is_error


def test_the_cli_prints_the_card_and_typed_errors(
    db_url: str, expected: dict[str, Any], tmp_path: Path
) -> None:
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(GRANT), encoding="utf-8")
    base = ["--db", db_url, "aggregate", STREAM, "--grant", str(grant_file)]
    options = [
        "--group-by-time",
        "when",
        "--granularity",
        "day",
        "--time-zone",
        "America/New_York",
    ]
    result = CliRunner().invoke(cli, [*base, *options], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expected
    text = CliRunner().invoke(cli, [*base, *options, "--format", "text"], catch_exceptions=False)
    assert text.exit_code == 0
    assert "key | value | records" in text.stdout
    bad = CliRunner().invoke(cli, [*base, "--metric", "avg"], catch_exceptions=False)
    assert bad.exit_code == 1
    envelope = json.loads(bad.stderr.strip().splitlines()[-1])
    assert (envelope["error"]["code"], envelope["error"]["param"]) == (
        "invalid_aggregate",
        "metric",
    )
