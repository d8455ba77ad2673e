"""`search` and `fetch` in the shape ChatGPT-style hosts read (docs/contract.md §14), driven by the
Python SDK's client on both databases: `results: [{id, title, url}]` and
`{id, title, text, url, metadata}`, the title from the declared role under the grant (else the
id), `text` bounded (a long field's first window and the call that continues it), `url` the REST
URL when the server knows its public base URL, else the `pdpp://` URI; every result valid against
the tool's published output schema. (The TypeScript clients read the same: test_ts_clients.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import jsonschema
import pytest
from _data import MAILBOX, body, grant, manifest, owner
from mcp import Client

from pdpp_store import AsyncStore, Grant, RecordRef, Store
from pdpp_store.mcp import create_server

LONG = "Quarterly kumquat report. " * 4_000  # 104,000 code points
MESSAGE = {
    "id": "m1",
    "thread_id": "t1",
    "subject": "SUBJECT-kumquat-Ω",
    "from_name": "Zoë Example",
    "received_at": "2026-03-01T10:00:00Z",
    "snippet": "a kumquat snippet",
    "labels": [],
}
BASE = "https://pdpp.example:8443"


def _load(url: str) -> None:
    with Store.open(url) as store:
        gmail = manifest("gmail")
        store.register_manifest(gmail)
        store.add_connection(MAILBOX, gmail["connector_id"])
        store.upsert_records(MAILBOX, "message_bodies", [body("long", LONG)])
        store.upsert_records(MAILBOX, "messages", [MESSAGE])


@asynccontextmanager
async def _client(
    url: str, under: Grant, public_url: str | Callable[[Any], str | None] | None = None
) -> AsyncIterator[Any]:
    store = await AsyncStore.open(url)
    try:
        async with Client(create_server(store, under, public_url=public_url)) as client:
            yield client
    finally:
        await store.close()


async def _schemas(client: Any) -> dict[str, Any]:
    return {tool.name: tool.output_schema for tool in (await client.list_tools()).tools}


async def _call(client: Any, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    schema = (await _schemas(client))[tool]
    jsonschema.Draft202012Validator(schema).validate(result.structured_content)
    structured: dict[str, Any] = result.structured_content
    return structured


async def test_search_results_carry_the_declared_title_and_a_url(db_url: str) -> None:
    _load(db_url)
    message = RecordRef(MAILBOX, "messages", "m1")
    both = grant({"name": "messages"}, {"name": "message_bodies"})
    async with _client(db_url, both) as client:
        found = await _call(client, "search", {"q": "kumquat"})
        by_id = {result["id"]: result for result in found["results"]}
        assert by_id[message.id] == {
            "id": message.id,
            "title": MESSAGE["subject"],
            "url": message.uri,
        }
        long = RecordRef(MAILBOX, "message_bodies", "long")
        assert by_id[long.id]["title"] == LONG[:200]  # the title slot's bound
        assert [hit["id"] for hit in found["data"]] == [result["id"] for result in found["results"]]
    async with _client(db_url, both, public_url=BASE) as client:
        found = await _call(client, "search", {"q": "snippet"})
        (only,) = found["results"]
        rest = f"{BASE}/v1/streams/messages/records/m1?connection_id={MAILBOX}"
        assert only == {"id": message.id, "title": MESSAGE["subject"], "url": rest}


async def test_hits_show_their_card_and_score_without_a_read_per_hit(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The search page carries each hit's card: the tool renders it (the hit's first line in
    `content[]`, `card` in `structuredContent`, the title in `results`) and reads no record."""
    _load(db_url)

    async def no_read(*_: Any, **__: Any) -> Any:
        raise AssertionError("search read a record for a hit")

    monkeypatch.setattr(AsyncStore, "read_record", no_read)
    message = RecordRef(MAILBOX, "messages", "m1")
    both = grant({"name": "messages"}, {"name": "message_bodies"})
    async with _client(db_url, both) as client:
        result = await client.call_tool("search", {"q": "kumquat"})
        assert not result.is_error, result.content
        lines = [json.loads(line) for line in result.content[0].text.split("\n")]
        (first,) = [line for line in lines[1:] if line["id"] == message.id][:1]
        assert list(first)[:2] == ["evidence", "id"]  # evidence first, as ever
        assert isinstance(first["score"], float)
        assert (first["title"], first["actor"]) == (MESSAGE["subject"], MESSAGE["from_name"])
        assert (first["time"], first["secondary"]) == (MESSAGE["received_at"], MESSAGE["snippet"])
        structured = result.structured_content
        assert structured is not None
        (hit,) = [hit for hit in structured["data"] if hit["id"] == message.id]
        assert hit["card"]["title"] == {
            "field": "subject",
            "value": MESSAGE["subject"],
            "complete": True,
        }
        by_id = {found["id"]: found["title"] for found in structured["results"]}
        assert by_id[message.id] == MESSAGE["subject"]


async def test_a_title_the_grant_does_not_cover_is_the_id_and_never_shown(db_url: str) -> None:
    _load(db_url)
    message = RecordRef(MAILBOX, "messages", "m1")
    narrow = grant({"name": "messages", "fields": ["id", "snippet", "received_at"]})
    async with _client(db_url, narrow) as client:
        found = await client.call_tool("search", {"q": "kumquat"})
        fetched = await client.call_tool("fetch", {"id": message.id})
        assert found.structured_content["results"][0]["title"] == message.id
        assert fetched.structured_content["title"] == message.id
        for result in (found, fetched):
            seen = json.dumps(result.structured_content) + str(result.content)
            assert "SUBJECT-kumquat" not in seen
            assert "Zoë Example" not in seen


async def test_fetch_is_bounded_and_continues_exactly(db_url: str) -> None:
    _load(db_url)
    long = RecordRef(MAILBOX, "message_bodies", "long")
    async with _client(db_url, owner()) as client:
        fetched = await _call(client, "fetch", {"id": long.id})
        assert (fetched["id"], fetched["title"], fetched["url"]) == (long.id, LONG[:200], long.uri)
        text = fetched["text"]
        assert len(text) < 20_000 < len(LONG)  # bounded: the first window, not the field
        assert LONG[:1024] in text
        assert LONG[:1100] not in text
        metadata = fetched["metadata"]
        assert (metadata["stream"], metadata["record_id"]) == ("message_bodies", "long")
        assert metadata["title"] == {"field": "body_text", "value": LONG[:200], "complete": False}
        following = fetched["calls"]["body_text"]  # the continuation the text names too
        lines = [json.loads(line) for line in text.split("\n")[1:]]
        (field,) = [line for line in lines if line["field"] == "body_text"]
        assert field["next"] == following
        onward = await client.call_tool(following["tool"], following["arguments"])
        window = onward.structured_content["window"]
        assert window["start_chars"] == 1024
        assert window["text"] == LONG[1024 : window["end_chars"]]


async def test_fetch_of_a_window_and_of_a_record_over_a_public_url(db_url: str) -> None:
    _load(db_url)
    long = RecordRef(MAILBOX, "message_bodies", "long")
    async with _client(db_url, owner(), public_url=lambda _request: BASE) as client:
        record = await _call(client, "fetch", {"id": long.id})
        rest = f"{BASE}/v1/streams/message_bodies/records/long?connection_id={MAILBOX}"
        assert record["url"] == rest
        first = await client.call_tool(
            "read_record_field", {"id": long.id, "field_path": "body_text", "limit_chars": 30}
        )
        uri = first.structured_content["resource"]["uri"]
        window = await _call(client, "fetch", {"id": uri})
        assert (window["id"], window["text"]) == (long.id, LONG[:30])
        assert window["url"] == (
            f"{BASE}/v1/streams/message_bodies/records/long/field-window"
            f"?connection_id={MAILBOX}&field=body_text&offset_chars=0&limit_chars=30"
        )
        following = window["metadata"]["next"]
        onward = await client.call_tool(following["tool"], following["arguments"])
        assert onward.structured_content["window"]["text"] == LONG[30:60]


async def test_the_instructions_and_schemas_name_the_shape(db_url: str) -> None:
    _load(db_url)
    async with _client(db_url, owner()) as client:
        schemas = await _schemas(client)
        assert schemas["search"]["properties"]["results"]["items"]["required"] == [
            "id",
            "title",
            "url",
        ]
        assert schemas["fetch"]["required"] == ["id", "title", "text", "url", "metadata"]
        instructions = client.instructions
        assert instructions is not None
        assert "{id, title, url}" in instructions
        assert "{id, title, text, url, metadata}" in instructions
