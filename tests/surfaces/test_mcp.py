"""The MCP server's contract (docs/contract.md §10, "Surfaces": `read_record_field`'s published
schemas) and the hostile-client checks of the content-ladder design, on both databases, through
the SDK's own client in-process (and its HTTP transport over the ASGI app).

Every tool result is checked in both channels: `content[]` (the header line and what follows)
and `structuredContent` (against the published output schema for `read_record_field`).
"""

from __future__ import annotations

import base64
import inspect
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import jsonschema
import pytest
from _data import MAILBOX, attachment, body, manifest
from _mcp import header_and_body, json_lines, resource_text, texts
from mcp import Client, MCPError

from pdpp_store import AsyncStore, Grant, Store
from pdpp_store.evidence.text import page_record, record_page_continuation, search_text
from pdpp_store.mcp import as_tool_call, create_server, http_app

MB = "message_bodies"
SMALL = f"{MAILBOX}/{MB}:small"
LONG = f"{MAILBOX}/{MB}:long"
SECRET = "zebra-charset-SECRET-9931"
BLOB_BYTES = b"%PDF-1.7 BLOBSECRETBYTES " + bytes(range(256)) * 8
LONG_TEXT = "".join(f"line {n:05d} of the long letter 😀\n" for n in range(3000))

# Seed 000's output schema, written out again: the oracle the published one must equal.
SEED_OUTPUT: dict[str, Any] = {
    "type": "object",
    "required": ["record", "field", "window"],
    "properties": {
        "record": {
            "type": "object",
            "required": ["id", "connection_id", "stream", "record_id"],
            "properties": {
                k: {"type": "string"} for k in ("id", "connection_id", "stream", "record_id")
            },
            "additionalProperties": False,
        },
        "field": {
            "type": "object",
            "required": ["path", "text_like"],
            "properties": {
                "path": {"type": "string"},
                "mime_type": {"type": "string"},
                "text_like": {"type": "boolean"},
                "size_chars": {"type": "integer"},
                "digest": {"type": "string"},
            },
            "additionalProperties": False,
        },
        "window": {
            "type": "object",
            "required": ["text", "start_chars", "end_chars", "limit_chars", "complete"],
            "properties": {
                "text": {"type": "string"},
                "start_chars": {"type": "integer"},
                "end_chars": {"type": "integer"},
                "limit_chars": {"type": "integer"},
                "complete": {"type": "boolean"},
                "next_cursor": {"type": ["string", "null"]},
                "previous_cursor": {"type": ["string", "null"]},
                "match": {
                    "type": ["object", "null"],
                    "properties": {
                        "q": {"type": "string"},
                        "start_chars": {"type": "integer"},
                        "end_chars": {"type": "integer"},
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
        "resource": {
            "type": "object",
            "properties": {
                "uri": {"type": "string"},
                "next_uri": {"type": ["string", "null"]},
                "previous_uri": {"type": ["string", "null"]},
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}
SEED_INPUT_PROPERTIES: dict[str, Any] = {
    "id": {"type": "string"},
    "connection_id": {"type": "string"},
    "stream": {"type": "string"},
    "record_id": {"type": "string"},
    "field_path": {"type": "string"},
    "cursor": {"type": "string"},
    "offset_chars": {"type": "integer", "minimum": 0},
    "limit_chars": {"type": "integer", "minimum": 1, "maximum": 16384},
    "q": {"type": "string"},
    "before_chars": {"type": "integer", "minimum": 0, "maximum": 8192},
    "after_chars": {"type": "integer", "minimum": 0, "maximum": 8192},
}


def load(url: str) -> dict[str, Any]:
    gmail = manifest("gmail")
    with Store.open(url) as store:
        store.register_manifest(gmail)
        store.add_connection(MAILBOX, gmail["connector_id"])
        blob = store.put_blob(BLOB_BYTES, "application/pdf")
        store.upsert_records(
            MAILBOX,
            MB,
            [
                {**body("small", "Lunch at noon?"), "charset": SECRET},
                {**body("long", LONG_TEXT), "charset": SECRET},
            ],
        )
        store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
    return {"blob_id": blob.blob_id}


@pytest.fixture
def loaded(db_url: str) -> tuple[str, dict[str, Any]]:
    return db_url, load(db_url)


@asynccontextmanager
async def connected(url: str, grant: Grant) -> AsyncIterator[Client]:
    store = await AsyncStore.open(url)
    try:
        async with Client(create_server(store, grant)) as client:
            yield client
    finally:
        await store.close()


def owner() -> Grant:
    return Grant.owner(MAILBOX, MB, "attachments")


def narrow() -> Grant:
    fields = ["id", "body_text", "body_html", "message_received_at"]
    return Grant.from_dict({"grant_id": "g-narrow", "streams": [{"name": MB, "fields": fields}]})


def envelope_of(result: Any) -> dict[str, Any]:
    """An isError result's envelope: the text of content[] and `_meta.error` carry it alike, and
    there is no structuredContent (a tool's outputSchema is its success shape, which clients
    validate even on errors)."""
    assert result.is_error
    assert result.structured_content is None
    said: dict[str, Any] = json.loads(texts(result))
    assert said == {"error": result.meta["error"]}  # beside what the SDK itself puts in _meta
    assert set(said) == {"error"}
    error: dict[str, Any] = said["error"]
    assert {"type", "code", "message"} <= set(error)
    return error


async def output_schema(client: Client) -> dict[str, Any]:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    schema: dict[str, Any] | None = tools["read_record_field"].output_schema
    assert schema is not None
    return schema


# ---------------------------------------------------------------- what is published


async def test_tools_list_is_the_contract_and_fits_the_budget(sqlite_db_url: str) -> None:
    load(sqlite_db_url)
    async with connected(sqlite_db_url, owner()) as client:
        listed = await client.list_tools()
        templates = await client.list_resource_templates()
    wire = json.dumps(listed.model_dump(by_alias=True, exclude_none=True, mode="json"))
    assert len(wire.encode()) <= 24_576
    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {
        "search",
        "fetch",
        "read_record_field",
        "schema",
        "query_records",
        "aggregate",
    }
    for tool in tools.values():
        assert tool.annotations is not None
        assert tool.annotations.read_only_hint is True
        assert tool.annotations.idempotent_hint is True
        assert tool.input_schema["type"] == "object"
        assert not {"oneOf", "anyOf", "allOf"} & set(tool.input_schema)
    read = tools["read_record_field"]
    published = {
        name: {k: v for k, v in spec.items() if k != "description"}
        for name, spec in read.input_schema["properties"].items()
    }
    assert published == SEED_INPUT_PROPERTIES
    assert read.input_schema["additionalProperties"] is False
    assert read.output_schema == SEED_OUTPUT
    uris = {template.uri_template for template in templates.resource_templates}
    assert uris == {
        "pdpp://record/{handle}",
        "pdpp://field-window/{handle}",
        "pdpp://blob/{handle}",
    }


# ---------------------------------------------------------------- read_record_field


BAD_CALLS: list[tuple[dict[str, Any], str, str]] = [
    ({}, "invalid_request", "connection_id"),
    ({"field_path": "body_text"}, "invalid_request", "connection_id"),
    (
        {"connection_id": MAILBOX, "stream": MB, "field_path": "body_text"},
        "invalid_request",
        "record_id",
    ),
    ({"id": SMALL}, "invalid_request", "field_path"),
    ({"id": SMALL, "stream": MB, "field_path": "body_text"}, "invalid_request", "stream"),
    ({"id": SMALL, "record_id": "x", "field_path": "body_text"}, "invalid_request", "record_id"),
    ({"id": SMALL, "field_path": "body_text", "bogus": 1}, "invalid_request", "bogus"),
    ({"id": SMALL, "field_path": "body_text", "cursor": "c", "q": "x"}, "invalid_window", "q"),
    (
        {"id": SMALL, "field_path": "body_text", "cursor": "c", "offset_chars": 1},
        "invalid_window",
        "offset_chars",
    ),
    (
        {"id": SMALL, "field_path": "body_text", "q": "x", "offset_chars": 3},
        "invalid_window",
        "offset_chars",
    ),
    ({"id": SMALL, "field_path": "body_text", "before_chars": 3}, "invalid_window", "before_chars"),
    (
        {"id": SMALL, "field_path": "body_text", "q": "x", "after_chars": 8193},
        "invalid_window",
        "after_chars",
    ),
    (
        {"id": SMALL, "field_path": "body_text", "offset_chars": "3"},
        "invalid_window",
        "offset_chars",
    ),
    ({"id": SMALL, "field_path": "body_text", "limit_chars": 0}, "invalid_window", "limit_chars"),
    ({"id": SMALL, "field_path": "body_text", "cursor": "garbage"}, "invalid_cursor", "cursor"),
    ({"id": SMALL, "field_path": ""}, "invalid_field_path", "field"),
    ({"id": "no-colon", "field_path": "body_text"}, "invalid_request", "record"),
    ({"id": f"{MAILBOX}/{MB}:nope", "field_path": "body_text"}, "not_found", "record"),
    ({"id": SMALL, "field_path": "nope"}, "field_not_found", "field"),
    ({"id": SMALL, "field_path": "body_text", "q": "absent-needle"}, "query_not_found", "q"),
    (
        {"id": SMALL, "field_path": "body_text", "connection_id": "cin_x"},
        "conflicting_connection_id",
        "connection_id",
    ),
    ({"id": "pdpp://field-window/AAAA", "field_path": "body_text"}, "invalid_request", "id"),
]


async def test_identity_and_selector_rules_are_typed_errors(
    loaded: tuple[str, dict[str, Any]],
) -> None:
    url, _ = loaded
    async with connected(url, owner()) as client:
        for arguments, code, param in BAD_CALLS:
            error = envelope_of(await client.call_tool("read_record_field", arguments))
            assert (error["code"], error.get("param")) == (code, param), arguments


async def test_every_identity_form_reads_the_same_window(
    loaded: tuple[str, dict[str, Any]],
) -> None:
    url, _ = loaded
    async with connected(url, owner()) as client:
        schema = await output_schema(client)
        base = await client.call_tool(
            "read_record_field",
            {"id": LONG, "field_path": "body_text", "offset_chars": 100, "limit_chars": 50},
        )
        jsonschema.validate(base.structured_content, schema)
        window = base.structured_content["window"]
        assert window["text"] == LONG_TEXT[100:150]
        forms = [
            {"connection_id": MAILBOX, "stream": MB, "record_id": "long"},
            {"id": f"pdpp://record/{_record_handle('long')}"},
            {"id": f"{MB}:long", "connection_id": MAILBOX},
        ]
        for form in forms:
            again = await client.call_tool(
                "read_record_field",
                {**form, "field_path": "body_text", "offset_chars": 100, "limit_chars": 50},
            )
            assert again.structured_content == base.structured_content, form
        by_uri = await client.call_tool(
            "read_record_field",
            {"id": base.structured_content["resource"]["uri"], "field_path": "body_text"},
        )
        assert by_uri.structured_content["window"] == window
        narrower = await client.call_tool(  # a limit beside the URI keeps the URI's position
            "read_record_field",
            {"id": base.structured_content["resource"]["uri"], "limit_chars": 10},
        )
        assert narrower.structured_content["window"]["text"] == LONG_TEXT[100:110]
        moved = await client.call_tool(  # a position beside the URI replaces the URI's
            "read_record_field",
            {"id": base.structured_content["resource"]["uri"], "offset_chars": 7},
        )
        assert moved.structured_content["window"]["text"] == LONG_TEXT[7:57]
        other = await client.call_tool(
            "read_record_field",
            {"id": base.structured_content["resource"]["uri"], "field_path": "charset"},
        )
        assert envelope_of(other)["param"] == "field_path"


def _record_handle(record_id: str) -> str:
    from pdpp_store import RecordRef

    return RecordRef(MAILBOX, MB, record_id).handle


async def test_windows_page_both_ways_and_validate(loaded: tuple[str, dict[str, Any]]) -> None:
    """From a match in the middle, the header's calls and the structured cursors reach both ends,
    and every page validates against the published output schema."""
    url, _ = loaded
    async with connected(url, owner()) as client:
        schema = await output_schema(client)
        first = await client.call_tool(
            "read_record_field",
            {"id": LONG, "field_path": "body_text", "q": "LINE 01500", "limit_chars": 16384},
        )
        header, text = header_and_body(first)
        assert header["match"] == [LONG_TEXT.find("line 01500"), LONG_TEXT.find("line 01500") + 10]
        assert first.structured_content["window"]["match"]["q"] == "LINE 01500"
        pieces = {header["range"][0]: text}
        for direction in ("previous", "next"):
            step = header
            while step[direction] is not None:
                result = await client.call_tool(
                    step[direction]["tool"], step[direction]["arguments"]
                )
                jsonschema.validate(result.structured_content, schema)
                step, text = header_and_body(result)
                assert text == LONG_TEXT[step["range"][0] : step["range"][1]]
                pieces[step["range"][0]] = text
        assert min(pieces) == 0
        assert max(start + len(text) for start, text in pieces.items()) == len(LONG_TEXT)


async def test_stale_cursor_says_stale_cursor(loaded: tuple[str, dict[str, Any]]) -> None:
    url, _ = loaded
    async with connected(url, owner()) as client:
        first = await client.call_tool(
            "read_record_field", {"id": LONG, "field_path": "body_text", "limit_chars": 100}
        )
        cursor = first.structured_content["window"]["next_cursor"]
        next_uri = first.structured_content["resource"]["next_uri"]
        with Store.open(url) as store:
            store.upsert_records(
                MAILBOX, MB, [{**body("long", LONG_TEXT + "!"), "charset": SECRET}]
            )
        stale = await client.call_tool(
            "read_record_field", {"id": LONG, "field_path": "body_text", "cursor": cursor}
        )
        assert envelope_of(stale)["code"] == "stale_cursor"
        with pytest.raises(MCPError) as raised:
            await client.read_resource(next_uri)
        assert raised.value.error.data["error"]["code"] == "stale_cursor"


# ---------------------------------------------------------------- the hostile-client checks


async def test_small_text_is_inline_and_complete(loaded: tuple[str, dict[str, Any]]) -> None:
    url, _ = loaded
    async with connected(url, owner()) as client:
        read = await client.call_tool("read_record_field", {"id": SMALL, "field_path": "body_text"})
        header, text = header_and_body(read)
        assert (text, header["complete"], header["next"], header["previous"]) == (
            "Lunch at noon?",
            True,
            None,
            None,
        )
        assert read.structured_content["window"]["complete"] is True
        fetched = json_lines(await client.call_tool("fetch", {"id": SMALL}))
        line = next(line for line in fetched[1:] if line["field"] == "body_text")
        assert (line["text"], line["complete"]) == ("Lunch at noon?", True)


async def test_json_null_is_never_the_text_null(loaded: tuple[str, dict[str, Any]]) -> None:
    url, _ = loaded
    async with connected(url, owner()) as client:
        fetched = await client.call_tool("fetch", {"id": SMALL})
        line = next(line for line in json_lines(fetched)[1:] if line["field"] == "body_html")
        assert line["type"] == "null"
        assert not {"text", "value"} & set(line)
        read = await client.call_tool("read_record_field", {"id": SMALL, "field_path": "body_html"})
        header, text = header_and_body(read)
        assert (header["type"], text) == ("null", "")
        assert read.structured_content["window"]["text"] == ""  # structured-only agents too
        assert read.structured_content["field"]["mime_type"] == "application/json"
        uri = read.structured_content["resource"]["uri"]
        assert resource_text(await client.read_resource(uri)) == ""


async def test_binary_stays_metadata_only(loaded: tuple[str, dict[str, Any]]) -> None:
    url, facts = loaded
    blob_id = facts["blob_id"]
    said: list[str] = []
    async with connected(url, owner()) as client:
        fetched = await client.call_tool("fetch", {"id": f"{MAILBOX}/attachments:a1"})
        line = next(line for line in json_lines(fetched)[1:] if line["field"] == "blob_ref")
        assert line["metadata_only"] == "blob_ref"
        assert (line["mime_type"], line["size_bytes"], line["blob_id"]) == (
            "application/pdf",
            len(BLOB_BYTES),
            blob_id,
        )
        assert line["blob"] == {"tool": "fetch", "arguments": {"id": f"pdpp://blob/{blob_id}"}}
        refused = await client.call_tool(
            "read_record_field", {"id": f"{MAILBOX}/attachments:a1", "field_path": "blob_ref"}
        )
        assert envelope_of(refused)["code"] == "field_not_text"
        meta = await client.call_tool("fetch", line["blob"]["arguments"])
        assert meta.structured_content["size_bytes"] == len(BLOB_BYTES)
        resource = await client.read_resource(f"pdpp://blob/{blob_id}")
        for result in (fetched, refused, meta):
            said += [texts(result), json.dumps(result.structured_content), json.dumps(result.meta)]
        said.append(resource_text(resource))
    everything = "\n".join(said)
    assert "BLOBSECRETBYTES" not in everything
    assert base64.b64encode(BLOB_BYTES[:30]).decode()[:20] not in everything


async def test_an_ungranted_field_is_an_error_and_never_shown(
    loaded: tuple[str, dict[str, Any]],
) -> None:
    url, _ = loaded
    said: list[str] = []
    async with connected(url, narrow()) as client:
        refused = await client.call_tool(
            "read_record_field", {"id": SMALL, "field_path": "charset"}
        )
        assert envelope_of(refused)["code"] == "field_not_granted"
        results = [refused]
        results.append(await client.call_tool("fetch", {"id": SMALL}))
        results.append(await client.call_tool("fetch", {"id": LONG}))
        results.append(
            await client.call_tool("read_record_field", {"id": SMALL, "field_path": "body_text"})
        )
        for result in results:
            said += [texts(result), json.dumps(result.structured_content), json.dumps(result.meta)]
        record_uri = f"pdpp://record/{_record_handle('small')}"
        said.append(resource_text(await client.read_resource(record_uri)))
        fetched = json_lines(results[1])
        assert "charset" not in {line.get("field") for line in fetched[1:]}
    assert SECRET.lower() not in "\n".join(said).lower()


async def test_a_failing_resource_read_leaves_the_tool_path(
    loaded: tuple[str, dict[str, Any]],
) -> None:
    url, _ = loaded
    async with connected(url, owner()) as client:
        for uri in (
            "pdpp://field-window/AAAA",
            "pdpp://record/%%%",
            "https://example.com/x",
            "pdpp://blob/nope",
        ):
            with pytest.raises(MCPError) as raised:
                await client.read_resource(uri)
            assert set(raised.value.error.data) == {"error"}
        works = await client.call_tool(
            "read_record_field", {"id": SMALL, "field_path": "body_text"}
        )
        assert header_and_body(works)[1] == "Lunch at noon?"


async def test_unexpected_failures_are_the_fixed_envelope(
    loaded: tuple[str, dict[str, Any]],
) -> None:
    """An exception that is not a StoreError never reaches the client as its own text."""
    url, _ = loaded

    def broken(_: Any) -> Grant:
        raise RuntimeError("SECRET-EXCEPTION-TEXT")

    store = await AsyncStore.open(url)
    try:
        async with Client(create_server(store, broken)) as client:
            result = await client.call_tool(
                "read_record_field", {"id": SMALL, "field_path": "body_text"}
            )
            assert envelope_of(result)["code"] == "internal_error"
            assert "SECRET-EXCEPTION-TEXT" not in texts(result)
            with pytest.raises(MCPError) as raised:
                await client.read_resource(f"pdpp://record/{_record_handle('small')}")
            assert "SECRET-EXCEPTION-TEXT" not in str(raised.value.error)
    finally:
        await store.close()


# ---------------------------------------------------------------- bounds


async def test_results_are_bounded_whatever_the_data(db_url: str) -> None:
    """A 3 MB field and a record of 3,000 fields of 1,000 characters: every result stays
    bounded, and the wide record's pages cover each field exactly once."""
    gmail = manifest("gmail")
    wide = {**body("wide", "x"), **{f"f{n:04d}": f"{n:04d}" * 250 for n in range(3000)}}
    with Store.open(db_url) as store:
        store.register_manifest(gmail)
        store.add_connection(MAILBOX, gmail["connector_id"])
        store.upsert_records(MAILBOX, MB, [body("huge", "ab😀" * 1_000_000), wide])
    async with connected(db_url, owner()) as client:
        huge = f"{MAILBOX}/{MB}:huge"
        for arguments in (
            {"id": huge, "field_path": "body_text", "limit_chars": 16384},
            {
                "id": huge,
                "field_path": "body_text",
                "q": "b😀a",
                "before_chars": 8192,
                "after_chars": 8192,
            },
        ):
            result = await client.call_tool("read_record_field", arguments)
            assert len(texts(result)) <= 16384 + 2048
            assert len(result.structured_content["window"]["text"]) <= 16384
        fetched = await client.call_tool("fetch", {"id": huge})
        assert len(texts(fetched)) <= 8192
        seen: list[str] = []
        paging: dict[str, Any] | None = {"id": f"{MAILBOX}/{MB}:wide"}
        while paging is not None:
            page = await client.call_tool("fetch", paging)
            assert len(texts(page)) <= 48_000 + 4096
            assert len(json.dumps(page.structured_content)) <= 2 * 48_000 + 8192
            lines = json_lines(page)
            seen += [line["field"] for line in lines[1:]]
            following = lines[0]["next"]
            paging = None if following is None else following["arguments"]
        assert sorted(seen) == sorted(wide)
        assert len(seen) == len(set(seen))


async def test_a_page_split_for_its_text_continues_with_library_arguments(db_url: str) -> None:
    """Values of control characters escape six-fold in the text, so one library page of a record
    splits into several text pages. Every continuation (text header, `structuredContent`, the
    CLI's) names only `read_record`'s own arguments, and following them shows every field once,
    bounded, each value as written."""
    gmail = manifest("gmail")
    control = {f"c{n:02d}": chr(1 + n % 8) * 1000 for n in range(60)}
    record = {**body("ctl", "x"), **control}
    with Store.open(db_url) as store:
        store.register_manifest(gmail)
        store.add_connection(MAILBOX, gmail["connector_id"])
        store.upsert_records(MAILBOX, MB, [record])
        library = set(inspect.signature(Store.read_record).parameters) - {"self", "grant"}
        card = store.read_record(owner(), f"{MAILBOX}/{MB}:ctl").to_dict()
        split = page_record(card)
        assert split.next_offset is not None, "the data no longer splits a library page"
        continuation = record_page_continuation(split)
        assert continuation is not None
        assert continuation["operation"] == "read_record"
        assert set(continuation["arguments"]) <= library
        assert store.read_record(owner(), **continuation["arguments"]).to_dict()["data"]
    async with connected(db_url, owner()) as client:
        seen: dict[str, Any] = {}
        paging: dict[str, Any] | None = {"id": f"{MAILBOX}/{MB}:ctl"}
        pages = 0
        while paging is not None:
            assert set(paging) <= {"id", "connection_id", "after_field"}
            page = await client.call_tool("fetch", paging)
            pages += 1
            assert len(texts(page)) <= 48_000 + 4096
            for line in json_lines(page)[1:]:
                assert line["field"] not in seen
                seen[line["field"]] = line
            following = json_lines(page)[0]["next"]
            assert following == page.structured_content["fields"]["next"]
            paging = None if following is None else following["arguments"]
        assert pages > 2
        assert sorted(seen) == sorted(record)
        shown = {path: line["text"] for path, line in seen.items() if "text" in line}
        assert shown
        assert all(record[path] == text for path, text in shown.items())


# ---------------------------------------------------------------- renderers without a server


def test_a_hit_without_proven_evidence_shows_metadata_only() -> None:
    page = {
        "object": "list",
        "has_more": False,
        "next_cursor": None,
        "data": [
            {
                "object": "search_result",
                "id": SMALL,
                "stream": MB,
                "record_key": "small",
                "connection_id": MAILBOX,
                "matched_fields": [],
                "snippet": "",
                "evidence_excerpts": [],
            }
        ],
    }
    lines = [json.loads(line) for line in search_text(page, as_tool_call).split("\n")]
    assert lines[1]["metadata_only"] is True
    assert "evidence" not in lines[1]
    assert lines[1]["fetch"] == {"tool": "fetch", "arguments": {"id": SMALL}}


def test_record_pages_start_at_their_offset() -> None:
    record = {
        "connection_id": MAILBOX,
        "stream": MB,
        "record_id": "r",
        "revision": "sha256:0",
        "data": {f"k{n}": "v" * 100 for n in range(10)},
        "content_ladder": {},
    }
    page = page_record(record, 3, budget=3 * 173)
    assert (page.offset, page.shown, page.next_offset) == (3, 3, 6)
    assert list(page.record["data"]) == ["k3", "k4", "k5"]


# ---------------------------------------------------------------- Streamable HTTP


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_needs_a_bearer_token_and_applies_its_grant(
    loaded: tuple[str, dict[str, Any]], mode: str
) -> None:
    url, _ = loaded
    store = await AsyncStore.open(url)
    app = http_app(store, {"tok-owner": owner(), "tok-narrow": narrow()})
    try:
        async with app.router.lifespan_context(app):
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as raw:
                for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
                    answer = await raw.post("/mcp", json={}, headers=headers)
                    assert answer.status_code == 401
                    assert answer.headers["www-authenticate"].startswith("Bearer")
                    assert answer.json()["error"]["type"] == "authentication_error"
            for token, shows in (("tok-owner", True), ("tok-narrow", False)):
                http = httpx2.AsyncClient(
                    transport=httpx2.ASGITransport(app=app),
                    base_url="http://127.0.0.1",
                    headers={"Authorization": f"Bearer {token}"},
                )
                from mcp.client.streamable_http import streamable_http_client

                async with (
                    http,
                    Client(
                        streamable_http_client("http://127.0.0.1/mcp", http_client=http),
                        mode=mode,
                    ) as client,
                ):
                    result = await client.call_tool(
                        "read_record_field", {"id": SMALL, "field_path": "charset"}
                    )
                    if shows:
                        assert header_and_body(result)[1] == SECRET
                    else:
                        assert envelope_of(result)["code"] == "field_not_granted"
    finally:
        await store.close()


async def test_the_metadata_a_401_names_is_served_by_the_app_alone(
    loaded: tuple[str, dict[str, Any]],
) -> None:
    """Served on its own (not mounted by the REST server), the app answers the RFC 9728
    metadata URL its 401 names, without a token, naming itself as the resource."""
    url, _ = loaded
    store = await AsyncStore.open(url)
    app = http_app(store, {"tok-owner": owner()})
    try:
        async with app.router.lifespan_context(app):
            transport = httpx2.ASGITransport(app=app)
            async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1") as raw:
                refused = await raw.post("/mcp", json={})
                assert refused.status_code == 401
                challenge = refused.headers["www-authenticate"]
                named = challenge.split('resource_metadata="')[1].split('"')[0]
                assert named == "http://127.0.0.1/.well-known/oauth-protected-resource/mcp"
                metadata = await raw.get(named)
                assert metadata.status_code == 200
                assert metadata.json()["resource"] == "http://127.0.0.1/mcp"
                assert metadata.json()["bearer_methods_supported"] == ["header"]
                other = await raw.get("/.well-known/oauth-protected-resource/elsewhere")
                assert other.status_code == 401  # only the app's own metadata is open
    finally:
        await store.close()


def test_the_core_and_the_cli_import_no_sdk() -> None:
    """The `[server]` extra is optional: the package, its CLI and the MCP calls load without it."""
    import subprocess
    import sys

    probe = (
        "import sys; import pdpp_store, pdpp_store.cli, pdpp_store.evidence.text; "
        "from pdpp_store.mcp import as_tool_call; "
        "sdk = ('mcp', 'mcp_types', 'starlette'); "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in sdk); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_mcp_command_needs_a_grant(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from pdpp_store.cli import cli

    url = f"sqlite:///{tmp_path / 'store.db'}"
    outcome = CliRunner().invoke(cli, ["--db", url, "mcp"])
    assert outcome.exit_code == 2, outcome.output
    bad = tmp_path / "grant.json"
    bad.write_text(json.dumps({"streams": []}))
    outcome = CliRunner().invoke(cli, ["--db", url, "mcp", "--grant", str(bad)])
    assert outcome.exit_code == 1
    assert json.loads(outcome.output.strip().splitlines()[-1])["error"]["code"] == "invalid_grant"


async def test_the_rest_server_serves_mcp_at_slash_mcp(loaded: tuple[str, dict[str, Any]]) -> None:
    """`pdpp-store serve` mounts this server at /mcp with the same tokens."""
    from mcp.client.streamable_http import streamable_http_client

    from pdpp_store.rest import create_app

    url, _ = loaded
    store = await AsyncStore.open(url)
    tokens = {"tok-narrow-0123456789": narrow()}
    app = create_app(store, tokens, mcp_app=http_app(store, tokens))
    try:
        async with app.router.lifespan_context(app):
            base = "http://127.0.0.1"
            async with httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app), base_url=base
            ) as raw:
                answer = await raw.post("/mcp/", json={})
                assert answer.status_code == 401
                assert answer.headers["www-authenticate"].startswith("Bearer")
            http = httpx2.AsyncClient(
                transport=httpx2.ASGITransport(app=app),
                base_url=base,
                headers={"Authorization": "Bearer tok-narrow-0123456789"},
            )
            async with http, Client(streamable_http_client(f"{base}/mcp/", http_client=http)) as c:
                refused = await c.call_tool(
                    "read_record_field", {"id": SMALL, "field_path": "charset"}
                )
                assert envelope_of(refused)["code"] == "field_not_granted"
                read = await c.call_tool(
                    "read_record_field", {"id": SMALL, "field_path": "body_text"}
                )
                assert header_and_body(read)[1] == "Lunch at noon?"
    finally:
        await store.close()


def test_the_mcp_surface_imports_only_public_names() -> None:
    import ast
    from pathlib import Path

    import pdpp_store

    folder = Path(pdpp_store.__file__).parent / "mcp"
    modules = sorted(folder.glob("*.py"))
    own = {path.stem for path in modules}
    wrong = []
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                names = ["." * node.level + (node.module or "")]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                if name == ".":
                    ok = True  # `from . import _render`: the package's own modules
                elif name.startswith("."):
                    ok = not name.startswith("..") and name.lstrip(".").split(".")[0] in own
                else:
                    # The public names of the library and of the shared HTTP door (the 401 and
                    # the token check are `pdpp_store.http`'s), as tests/unit/test_layers.py says.
                    ok = not name.startswith("pdpp_store") or name in {
                        "pdpp_store",
                        "pdpp_store.evidence",
                        "pdpp_store.http",
                    }
                if not ok:
                    wrong.append(f"{module.name}: {name}")
    assert len(modules) >= 5
    assert wrong == []


async def test_mcp_reads_what_the_library_reads(loaded: tuple[str, dict[str, Any]]) -> None:
    """Parity: a window through MCP is the library's window (text, offsets, the same cursors),
    in both channels, and its continuations are the library's continuations as tool calls."""
    url, _ = loaded
    reads: list[dict[str, Any]] = [
        {"offset_chars": 0, "limit_chars": 300},
        {"offset_chars": 4900, "limit_chars": 300},
        {"q": LONG_TEXT[2500:2508], "before_chars": 30, "after_chars": 40},
        {"offset_chars": 10**7},
    ]
    store = await AsyncStore.open(url)
    try:
        async with Client(create_server(store, owner())) as client:
            for selector in reads:
                window = await store.read_field_window(owner(), LONG, "body_text", **selector)
                result = await client.call_tool(
                    "read_record_field", {"id": LONG, "field_path": "body_text", **selector}
                )
                got = result.structured_content["window"]
                assert got["text"] == window.text
                assert (got["start_chars"], got["end_chars"]) == (
                    window.start_chars,
                    window.end_chars,
                )
                assert (got["next_cursor"], got["previous_cursor"]) == (
                    window.next_cursor,
                    window.previous_cursor,
                )
                header, text = header_and_body(result)
                assert (header["range"], text) == (
                    [window.start_chars, window.end_chars],
                    window.text,
                )
                for key, cursor in (
                    ("next", window.next_cursor),
                    ("previous", window.previous_cursor),
                ):
                    expected = None
                    if cursor is not None:
                        arguments = {"id": LONG, "field_path": "body_text", "cursor": cursor}
                        expected = {"tool": "read_record_field", "arguments": arguments}
                    assert header[key] == expected
    finally:
        await store.close()
