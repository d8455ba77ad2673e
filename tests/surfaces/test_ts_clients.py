"""The MCP server as the TypeScript SDK's clients see it: the official SDK 1.x client (what most
desktop hosts ship) and its v2 client (`@modelcontextprotocol/client`, in the `initialize`
handshake and in its `auto` mode), installed from npm at pinned versions (tests/clients/ts), over
stdio (`pdpp-store mcp`, started by each client) and Streamable HTTP (`pdpp-store serve`), on both
databases.

One node process per transport and database makes every call with each client
(`mcp_agents.mjs`). Every tool's success and every refusal must reach both a content-only agent
(the text of content[]) and a structured agent (structuredContent, or an error's `_meta.error`),
with nothing thrown by the SDK: its validation of structuredContent against a tool's
outputSchema is what lost every refusal before errors stopped carrying structuredContent. What
each agent sees must equal what the Python SDK's client sees of the same call in-process, and
`search` and `fetch` answer in the ChatGPT shape too (docs/contract.md §14). The calls cover all six
tools: `query_records` (a filter, a second page by its cursor, an exact count, a projection),
`aggregate` (a count, and one by day, the bodies' declared time bucket), `schema` of one stream,
`search` with `order`, `count` and `filter`, and the refusals each may make (`invalid_filter`,
`field_not_granted`, `invalid_cursor`, `invalid_aggregate`, `grant_stream_not_allowed`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _data import MAILBOX, body, manifest
from _node import run_json
from _served import Server, start
from mcp import Client

from pdpp_store import AsyncStore, Grant, RecordRef, Store
from pdpp_store.mcp import create_server

TOKEN = "tok_tsclients_0000000000"
GRANT = {
    "grant_id": "g-ts",
    "streams": [{"name": "message_bodies"}, {"name": "threads", "fields": ["id", "subject"]}],
}
"""Every field of the bodies; of the (empty) threads only two, so a read naming another field
is refused with `field_not_granted`."""
CLIENTS = ["sdk1", "sdk2-legacy", "sdk2-auto"]
PUBLIC_URL = "https://pdpp.example"
"""What the HTTP server is told its public base URL is (`serve --public-url`)."""
NOTE = "Dear Zoë, the kumquat ledger is overdue 😀. " * 40
NOTE_EDITED = NOTE + "Edited."
NOT_TEXT = base64.b64encode(bytes(range(256)) * 2).decode("ascii")
NOTE_ID = f"{MAILBOX}/message_bodies:note"
SPARE_ID = f"{MAILBOX}/message_bodies:spare"

REFUSALS = {
    "read_record_field stale cursor": "stale_cursor",
    "read_record_field not text": "field_not_text",
    "read_record_field unknown field": "field_not_found",
    "read_record_field unknown record": "not_found",
    "read_record_field bad cursor": "invalid_cursor",
    "read_record_field limit zero": "invalid_window",
    "read_record_field unknown argument": "invalid_request",
    "read_record_field two positions": "invalid_window",
    "read_record_field ungranted stream": "grant_stream_not_allowed",
    "search empty q": "invalid_request",
    "search bad cursor": "invalid_cursor",
    "fetch unknown record": "not_found",
    "fetch not an id": "invalid_request",
    "schema unknown argument": "invalid_request",
    "unknown tool": "invalid_request",
    "schema ungranted stream": "grant_stream_not_allowed",
    "search bad order": "invalid_request",
    "search filter ungranted field": "field_not_granted",
    "query_records bad filter": "invalid_filter",
    "query_records filter ungranted field": "field_not_granted",
    "query_records fields ungranted": "field_not_granted",
    "query_records bad cursor": "invalid_cursor",
    "query_records ungranted stream": "grant_stream_not_allowed",
    "aggregate undeclared group_by": "invalid_aggregate",
    "aggregate undeclared sum": "invalid_aggregate",
    "aggregate ungranted field": "field_not_granted",
    "aggregate ungranted stream": "grant_stream_not_allowed",
}
"""Each refusal this test makes, and the envelope code every agent must reach."""


QUERY: dict[str, Any] = {
    "stream": "message_bodies",
    "filter": {"charset": "utf-8"},
    "limit": 1,
    "count": "exact",
}
"""The first page of `query_records` (one of the two bodies); its cursor reaches the second."""


def _load(url: str) -> tuple[str, str]:
    """The mailbox: a note to page through and a spare record with a binary field. Returns a
    cursor of the note that the edit made here has made stale, and the `query_records` cursor
    of `QUERY`'s second page."""
    with Store.open(url) as store:
        gmail = manifest("gmail")
        store.register_manifest(gmail)
        store.add_connection(MAILBOX, gmail["connector_id"])
        store.upsert_records(
            MAILBOX,
            "message_bodies",
            [body("note", NOTE), {**body("spare", "spare text"), "attachment_data": NOT_TEXT}],
        )
        grant = Grant.from_dict(GRANT)
        stale = store.read_field_window(grant, NOTE_ID, "body_text", limit_chars=10).next_cursor
        assert stale is not None
        store.upsert_records(MAILBOX, "message_bodies", [body("note", NOTE_EDITED)])
        query = {key: value for key, value in QUERY.items() if key != "stream"}
        page = store.query_records(grant, "message_bodies", **query)
        assert page.next_cursor is not None
    return stale, page.next_cursor


def _calls(stale: str, next_page: str) -> list[dict[str, Any]]:
    read = "read_record_field"

    def window(**arguments: Any) -> dict[str, Any]:
        return {"id": NOTE_ID, "field_path": "body_text", **arguments}

    successes = [
        ("schema", "schema", {}),
        ("search", "search", {"q": "kumquat ledger"}),
        ("search paged", "search", {"q": "kumquat", "limit": 1}),
        ("fetch", "fetch", {"id": NOTE_ID}),
        ("fetch spare", "fetch", {"id": SPARE_ID}),
        ("read_record_field offset", read, window(offset_chars=5, limit_chars=20)),
        ("read_record_field q", read, window(q="ledger", limit_chars=64)),
        ("read_record_field parts", read, {**_parts(), "limit_chars": 30}),
        ("schema stream", "schema", {"stream": "message_bodies"}),
        ("search order count", "search", {"q": "kumquat", "order": "asc", "count": "exact"}),
        ("search filter", "search", _bodies_search(q="text", filter={"charset": "utf-8"})),
        ("query_records", "query_records", QUERY),
        ("query_records second page", "query_records", {**QUERY, "cursor": next_page}),
        ("query_records asc fields", "query_records", _asc_fields()),
        ("aggregate by day", "aggregate", _by_day()),
        ("aggregate count", "aggregate", {"stream": "message_bodies"}),
    ]
    refusals = [
        ("read_record_field stale cursor", read, window(cursor=stale)),
        ("read_record_field not text", read, {"id": SPARE_ID, "field_path": "attachment_data"}),
        ("read_record_field unknown field", read, window(field_path="nope")),
        ("read_record_field unknown record", read, window(id=f"{MAILBOX}/message_bodies:nope")),
        ("read_record_field bad cursor", read, window(cursor="not-a-cursor")),
        ("read_record_field limit zero", read, window(limit_chars=0)),
        ("read_record_field unknown argument", read, window(colour="red")),
        ("read_record_field two positions", read, window(offset_chars=1, q="ledger")),
        ("read_record_field ungranted stream", read, window(id=f"{MAILBOX}/messages:note")),
        ("search empty q", "search", {"q": ""}),
        ("search bad cursor", "search", {"q": "kumquat", "cursor": "nope"}),
        ("fetch unknown record", "fetch", {"id": f"{MAILBOX}/message_bodies:nope"}),
        ("fetch not an id", "fetch", {"id": "not an id"}),
        ("schema unknown argument", "schema", {"colour": "red"}),
        ("unknown tool", "delete_everything", {}),
        ("schema ungranted stream", "schema", {"stream": "messages"}),
        ("search bad order", "search", {"q": "kumquat", "order": "sideways"}),
        ("search filter ungranted field", "search", _ungranted_search()),
        ("query_records bad filter", "query_records", _records(filter={"charset": {"gte": "a"}})),
        ("query_records filter ungranted field", "query_records", _threads(filter=_COUNTED)),
        ("query_records fields ungranted", "query_records", _threads(fields=["labels"])),
        ("query_records bad cursor", "query_records", {**QUERY, "cursor": "not-a-cursor"}),
        ("query_records ungranted stream", "query_records", {"stream": "messages"}),
        ("aggregate undeclared group_by", "aggregate", _records(group_by="charset")),
        ("aggregate undeclared sum", "aggregate", _records(metric="sum", field="body_text_bytes")),
        ("aggregate ungranted field", "aggregate", _threads(group_by_time="last_message_date")),
        ("aggregate ungranted stream", "aggregate", {"stream": "messages"}),
    ]
    assert [name for name, _, _ in refusals] == list(REFUSALS)
    return [
        {"name": name, "tool": tool, "arguments": arguments}
        for name, tool, arguments in successes + refusals
    ]


_COUNTED = {"message_count": {"gte": 1}}


def _records(**arguments: Any) -> dict[str, Any]:
    return {"stream": "message_bodies", **arguments}


def _threads(**arguments: Any) -> dict[str, Any]:
    return {"stream": "threads", **arguments}


def _asc_fields() -> dict[str, Any]:
    return _records(order="asc", fields=["id", "charset"], count="exact")


def _by_day() -> dict[str, Any]:
    """Count by a time bucket the bodies declare (`group_by_time`: message_received_at); they
    declare no `group_by` field."""
    return _records(group_by_time="message_received_at", granularity="day")


def _bodies_search(**arguments: Any) -> dict[str, Any]:
    """A search of the bodies alone: a filter applies to every stream searched, and the threads
    grant none of the bodies' fields."""
    return {"streams": ["message_bodies"], **arguments}


def _ungranted_search() -> dict[str, Any]:
    return {"q": "kumquat", "streams": ["threads"], "filter": _COUNTED}


def _parts() -> dict[str, Any]:
    return {
        "connection_id": MAILBOX,
        "stream": "message_bodies",
        "record_id": "note",
        "field_path": "body_text",
    }


# ---------------------------------------------------------------- the reference


def _seen_in_python(result: Any) -> dict[str, Any]:
    """What `mcp_agents.mjs` reports of a call, from the Python SDK's result of the same call."""
    text = "\n".join(block.text for block in result.content if block.type == "text")
    first = text.partition("\n")[0]
    try:
        header = json.loads(first)
    except ValueError:
        header = None
    content = {
        "header": header,
        "text": text,
        "links": sum(block.type == "resource_link" for block in result.content),
    }
    structured: dict[str, Any] = {"structured": result.structured_content}
    if result.is_error:
        content["code"] = json.loads(text)["error"]["code"]
        error: dict[str, Any] = (result.meta or {})["error"]
        structured = {
            "structured": result.structured_content,
            "code": error["code"],
            "error": error,
        }
    return {
        "thrown": None,
        "is_error": result.is_error,
        "content_agent": content,
        "structured_agent": structured,
    }


async def _reference(
    url: str, calls: list[dict[str, Any]], public_url: str | None = None
) -> dict[str, Any]:
    store = await AsyncStore.open(url)
    try:
        server = create_server(store, Grant.from_dict(GRANT), public_url=public_url)
        async with Client(server) as client:
            return {
                call["name"]: _seen_in_python(
                    await client.call_tool(call["tool"], call["arguments"])
                )
                for call in calls
            }
    finally:
        await store.close()


# ---------------------------------------------------------------- the runs


@pytest.fixture
def loaded(db_url: str) -> tuple[str, str, str]:
    return db_url, *_load(db_url)


@pytest.fixture
def http_server(loaded: tuple[str, str, str], tmp_path: Path) -> Iterator[Server]:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: GRANT}), encoding="utf-8")
    running = start(loaded[0], tokens, "--public-url", PUBLIC_URL)
    try:
        yield running
    finally:
        running.stop()


def _stdio(url: str, where: Path) -> dict[str, Any]:
    grant_file = where / "grant.json"
    grant_file.write_text(json.dumps(GRANT), encoding="utf-8")
    command = shutil.which("pdpp-store", path=os.path.dirname(sys.executable))
    assert command is not None
    return {
        "kind": "stdio",
        "command": command,
        "args": ["--db", url, "mcp", "--grant", str(grant_file)],
        "env": {**os.environ, "PYTHONUNBUFFERED": "1"},
    }


def _drive(connect: dict[str, Any], calls: list[dict[str, Any]], where: Path) -> Any:
    plan = where / "plan.json"
    plan.write_text(json.dumps({"connect": connect, "clients": CLIENTS, "calls": calls}))
    return run_json("mcp_agents.mjs", str(plan))


def _check_chatgpt_shape(run: dict[str, Any], note_url: str) -> None:
    """What a ChatGPT-style host reads (docs/contract.md §14): search `results` and fetch's
    `{id, title, text, url, metadata}`, the title from the declared role (`body_text` is the
    gmail bodies' primary title), bounded."""
    title = NOTE_EDITED[:200]
    found = run["calls"]["search"]["structured_agent"]["structured"]["results"]
    assert found == [{"id": NOTE_ID, "title": title, "url": note_url}]
    fetched = run["calls"]["fetch"]["structured_agent"]["structured"]
    assert (fetched["id"], fetched["title"], fetched["url"]) == (NOTE_ID, title, note_url)
    assert fetched["text"] == run["calls"]["fetch"]["content_agent"]["text"]
    assert NOTE_EDITED[:1024] in fetched["text"]  # the first window of the long field
    assert fetched["metadata"]["title"]["complete"] is False
    spare = run["calls"]["fetch spare"]["structured_agent"]["structured"]
    assert spare["title"] == "spare text"
    assert NOT_TEXT[:40] not in json.dumps(spare)  # the binary field: metadata only


def _check_asking(run: dict[str, Any]) -> None:
    """The asking tools' answers as a structured agent reads them: the two pages of
    `query_records` hold both bodies once, counted exactly; the count by day is both bodies in one
    bucket; `schema` with a stream describes that stream alone; `search` counts exactly."""

    def structured(name: str) -> dict[str, Any]:
        answer: dict[str, Any] = run["calls"][name]["structured_agent"]["structured"]
        return answer

    first, second = structured("query_records"), structured("query_records second page")
    ids = [card["record_id"] for page in (first, second) for card in page["data"]]
    assert sorted(ids) == ["note", "spare"]
    assert first["has_more"]
    assert first["next_cursor"]
    assert not second["has_more"]
    assert first["count"] == second["count"] == {"kind": "exact", "value": 2}
    projected = structured("query_records asc fields")["data"]
    assert [card["data"] for card in projected] == [
        {"charset": "utf-8", "id": "note"},
        {"charset": "utf-8", "id": "spare"},
    ]
    by_day = structured("aggregate by day")["groups"]
    assert [(group["key"], group["value"]) for group in by_day] == [("2026-03-01", 2)]
    assert structured("aggregate count")["value"] == 2
    assert [stream["name"] for stream in structured("schema stream")["streams"]] == [
        "message_bodies"
    ]
    assert structured("search order count")["count"] == {"kind": "exact", "value": 1}
    assert [hit["record_key"] for hit in structured("search filter")["data"]] == ["spare"]


def _check(report: dict[str, Any], reference: dict[str, Any], note_url: str) -> None:
    assert set(report) == set(CLIENTS)
    for client, run in report.items():
        assert "connect_error" not in run, (client, run)
        tools = {tool["name"]: tool["output_schema"] for tool in run["tools"]}
        assert set(tools) == {
            "search",
            "fetch",
            "read_record_field",
            "schema",
            "query_records",
            "aggregate",
        }
        assert tools["read_record_field"], "the structured agent's outputSchema"
        for name, expected in reference.items():
            seen = run["calls"][name]
            assert seen["thrown"] is None, (client, name, seen["thrown"])
            assert seen == expected, (client, name)
            if name in REFUSALS:
                assert seen["is_error"], (client, name)
                assert seen["content_agent"]["code"] == REFUSALS[name], (client, name)
                assert seen["structured_agent"]["code"] == REFUSALS[name], (client, name)
                assert seen["structured_agent"]["structured"] is None
            else:
                assert not seen["is_error"], (client, name, seen)
                assert seen["structured_agent"]["structured"] is not None
                assert seen["content_agent"]["header"] is not None
        _check_chatgpt_shape(run, note_url)
        _check_asking(run)
    stale = report["sdk1"]["calls"]["read_record_field stale cursor"]["structured_agent"]["error"]
    assert stale["size_chars"] == len(NOTE_EDITED)  # the agent learns the field's new size
    window = report["sdk1"]["calls"]["read_record_field offset"]["structured_agent"]["structured"]
    assert window["window"]["text"] == NOTE_EDITED[5:25]


async def test_ts_clients_over_stdio(loaded: tuple[str, str, str], tmp_path: Path) -> None:
    url, stale, next_page = loaded
    calls = _calls(stale, next_page)
    reference = await _reference(url, calls)
    note_uri = RecordRef(MAILBOX, "message_bodies", "note").uri  # no public URL over stdio
    _check(_drive(_stdio(url, tmp_path), calls, tmp_path), reference, note_uri)


async def test_ts_clients_over_streamable_http(
    loaded: tuple[str, str, str], http_server: Server, tmp_path: Path
) -> None:
    url, stale, next_page = loaded
    calls = _calls(stale, next_page)
    reference = await _reference(url, calls, PUBLIC_URL)
    note_url = f"{PUBLIC_URL}/v1/streams/message_bodies/records/note?connection_id={MAILBOX}"
    connect = {
        "kind": "http",
        "url": f"{http_server.base_url}/mcp",
        "headers": {"Authorization": f"Bearer {TOKEN}"},
    }
    _check(_drive(connect, calls, tmp_path), reference, note_url)
