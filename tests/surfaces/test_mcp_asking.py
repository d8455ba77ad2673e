"""The MCP tools that ask (docs/contract.md §10, §11): `query_records` and `schema` with a
stream. The four agent classes go from a question to the evidence through the SDK's own client,
in process, over a real stdio subprocess (`pdpp-store mcp`) and over HTTP on a real socket
(`pdpp-store serve`, `/mcp`), on both databases; the tools are published within their budget,
the server's instructions say how to ask, and bad input is a typed error naming the argument.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from _data import MAILBOX
from _mcp import BACKENDS, big_email_text, call, json_lines, ladder_database, owner, stdio, texts
from _mcp_asking import AGENTS, BIG, check_windows
from _served import start
from mcp import Client

from pdpp_store import AsyncStore, Grant
from pdpp_store.mcp import create_server

TOKEN = "tok_ladder_00000000000000"
TOOLS_BUDGET = 12_288
"""docs/contract.md §10: `tools/list` within 12 KiB for all tools together."""


@pytest.fixture(scope="module", params=BACKENDS)
def ladder_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    yield from ladder_database(request, tmp_path_factory, "asking")


@pytest.fixture(scope="module")
def field() -> str:
    return big_email_text()


async def _in_process(url: str, grant: Grant | None = None) -> tuple[AsyncStore, Any]:
    store = await AsyncStore.open(url)
    return store, create_server(store, grant or owner())


@pytest.mark.parametrize("agent", list(AGENTS))
async def test_agent_from_a_question_in_process(ladder_url: str, field: str, agent: str) -> None:
    store, server = await _in_process(ladder_url)
    try:
        async with Client(server) as client:
            check_windows(await AGENTS[agent](client), field)
    finally:
        await store.close()


async def test_agents_from_a_question_over_stdio(
    ladder_url: str, field: str, tmp_path: Path
) -> None:
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(
        json.dumps({"grant_id": "g-ask", "streams": [{"name": "message_bodies"}]})
    )
    async with Client(stdio(ladder_url, grant_file)) as client:
        for agent in AGENTS.values():
            check_windows(await agent(client), field)


async def test_agents_from_a_question_over_http(
    ladder_url: str, field: str, tmp_path: Path
) -> None:
    from mcp.client.streamable_http import streamable_http_client

    tokens = tmp_path / "tokens.json"
    grant = {"grant_id": "g-ask", "streams": [{"name": "message_bodies"}]}
    tokens.write_text(json.dumps({TOKEN: grant}))
    server = start(ladder_url, tokens)
    try:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
        endpoint = f"{server.base_url}/mcp/"
        async with http, Client(streamable_http_client(endpoint, http_client=http)) as client:
            for agent in AGENTS.values():
                check_windows(await agent(client), field)
    finally:
        server.stop()


async def test_tools_and_instructions_say_how_to_ask(ladder_url: str) -> None:
    store, server = await _in_process(ladder_url)
    try:
        async with Client(server) as client:
            listed = await client.list_tools()
            instructions = client.instructions
    finally:
        await store.close()
    wire = json.dumps(listed.model_dump(by_alias=True, exclude_none=True, mode="json"))
    assert len(wire.encode()) <= TOOLS_BUDGET
    tools = {tool.name: tool for tool in listed.tools}
    asked = tools["query_records"].input_schema
    assert asked["required"] == ["stream"]
    assert asked["additionalProperties"] is False
    assert set(asked["properties"]) == {
        "stream",
        "connection_id",
        "filter",
        "order",
        "fields",
        "limit",
        "cursor",
        "count",
        "changes_since",
    }
    assert asked["properties"]["filter"]["type"] == "object"
    assert asked["properties"]["limit"]["maximum"] == 100
    assert set(tools["schema"].input_schema["properties"]) == {"stream", "limit", "after"}
    from pdpp_store.mcp._server import INSTRUCTIONS

    head = INSTRUCTIONS[:512]
    words = ("schema", "query_records", "aggregate", "search", "fetch", "read_record_field")
    for word in (*words, "filter"):
        assert word in head, word
    assert instructions == INSTRUCTIONS


async def test_schema_with_a_stream_shows_what_may_be_asked(ladder_url: str) -> None:
    two = Grant.from_dict(
        {"grant_id": "g", "streams": [{"name": "message_bodies"}, {"name": "attachments"}]}
    )
    store, server = await _in_process(ladder_url, two)
    try:
        async with Client(server) as client:
            one = await call(client, "schema", {"stream": "message_bodies"})
            refused = await client.call_tool("schema", {"stream": "messages"})
            every = await call(client, "schema", {})
            first = await call(client, "schema", {"limit": 1})
            rest = await call(client, "schema", first.structured_content["next"]["arguments"])
            bad = await client.call_tool("schema", {"limit": 0})
    finally:
        await store.close()
    data = one.structured_content
    assert [s["name"] for s in data["streams"]] == ["message_bodies"]
    stream = data["streams"][0]
    assert stream["record_count"] == 3
    assert stream["order"]["field"] == "message_received_at"
    assert stream["list"] == {"tool": "query_records", "arguments": {"stream": "message_bodies"}}
    line = json_lines(one)[1]
    assert line["records"] == 3
    assert line["list"] == stream["list"]
    assert line["filters"]["message_received_at"][-1] == "lte"
    assert refused.is_error
    assert json.loads(texts(refused))["error"]["code"] == "grant_stream_not_allowed"
    assert [s["name"] for s in every.structured_content["streams"]] == [
        "attachments",
        "message_bodies",
    ]
    assert every.structured_content["next"] is None
    # a page at a time, `next` the ready call (in the header line too)
    paged = first.structured_content
    assert [s["name"] for s in paged["streams"]] == ["attachments"]
    ready = {"tool": "schema", "arguments": {"after": "attachments", "limit": 1}}
    assert (paged["has_more"], paged["next"]) == (True, ready)
    assert json_lines(first)[0]["next"] == ready
    assert [s["name"] for s in rest.structured_content["streams"]] == ["message_bodies"]
    assert rest.structured_content["has_more"] is False
    assert bad.is_error
    assert json.loads(texts(bad))["error"]["param"] == "limit"


async def test_pages_continue_with_their_call(ladder_url: str) -> None:
    store, server = await _in_process(ladder_url)
    try:
        async with Client(server) as client:
            first = await call(client, "query_records", {"stream": "message_bodies", "limit": 2})
            header = json_lines(first)[0]
            assert header["has_more"] is True
            following = header["next"]
            assert following == first.structured_content["next"]
            assert following["tool"] == "query_records"
            second = await call(client, following["tool"], following["arguments"])
            seen = [row["id"] for row in first.structured_content["data"]]
            seen += [row["id"] for row in second.structured_content["data"]]
            assert sorted(seen) == sorted(
                f"{MAILBOX}/message_bodies:{name}" for name in ("big", "small", "decoy")
            )
            assert json_lines(second)[0]["has_more"] is False
            counted = await call(
                client, "query_records", {"stream": "message_bodies", "count": "exact"}
            )
            assert json_lines(counted)[0]["count"] == 3
            assert BIG in texts(counted)
    finally:
        await store.close()


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({}, "invalid_request", "stream"),
    ({"stream": "message_bodies", "bogus": 1}, "invalid_request", "bogus"),
    ({"stream": "message_bodies", "filter": {"nope": 1}}, "invalid_filter", "filter"),
    ({"stream": "message_bodies", "filter": "{not json"}, "invalid_filter", "filter"),
    (
        {"stream": "message_bodies", "filter": {"id": {"in": list(range(101))}}},
        "invalid_filter",
        "filter",
    ),
    ({"stream": "message_bodies", "limit": 0}, "invalid_request", "limit"),
    ({"stream": "message_bodies", "limit": "ten"}, "invalid_request", "limit"),
    ({"stream": "message_bodies", "order": "up"}, "invalid_request", "order"),
    ({"stream": "message_bodies", "count": "some"}, "invalid_request", "count"),
    ({"stream": "message_bodies", "cursor": "zz"}, "invalid_cursor", "cursor"),
    ({"stream": "messages"}, "grant_stream_not_allowed", "stream"),
    ({"stream": "a/b"}, "invalid_request", "stream"),
]


async def test_bad_input_is_a_typed_error_naming_the_argument(ladder_url: str) -> None:
    store, server = await _in_process(ladder_url)
    try:
        async with Client(server) as client:
            for arguments, code, param in BAD:
                result = await client.call_tool("query_records", arguments)
                assert result.is_error, arguments
                error = json.loads(texts(result))["error"]
                assert (error["code"], error.get("param")) == (code, param), (arguments, error)
    finally:
        await store.close()


async def test_ungranted_fields_are_refused_by_name(ladder_url: str) -> None:
    narrow = Grant.from_dict(
        {"grant_id": "g-n", "streams": [{"name": "message_bodies", "fields": ["id"]}]}
    )
    store, server = await _in_process(ladder_url, narrow)
    try:
        async with Client(server) as client:
            for arguments, param in (
                ({"fields": ["body_text"]}, "fields"),
                ({"filter": {"body_text": "x"}}, "filter"),
                ({"filter": {"charset": {"in": ["utf-8"]}}}, "filter"),
            ):
                result = await client.call_tool(
                    "query_records", {"stream": "message_bodies", **arguments}
                )
                assert result.is_error, arguments
                error = json.loads(texts(result))["error"]
                assert (error["code"], error.get("param")) == ("field_not_granted", param)
            shown = await call(client, "query_records", {"stream": "message_bodies"})
            assert "body_text" not in json.dumps(shown.structured_content["data"])
            assert "Lunch" not in texts(shown)
    finally:
        await store.close()
