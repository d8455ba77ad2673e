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
`search` and `fetch` answer in the ChatGPT shape too (docs/contract.md §14).
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
GRANT = {"grant_id": "g-ts", "streams": [{"name": "message_bodies"}]}
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
}
"""Each refusal this test makes, and the envelope code every agent must reach."""


def _load(url: str) -> str:
    """The mailbox: a note to page through and a spare record with a binary field. Returns a
    cursor of the note that the edit made here has made stale."""
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
    return stale


def _calls(stale: str) -> list[dict[str, Any]]:
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
    ]
    assert [name for name, _, _ in refusals] == list(REFUSALS)
    return [
        {"name": name, "tool": tool, "arguments": arguments}
        for name, tool, arguments in successes + refusals
    ]


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
def loaded(db_url: str) -> tuple[str, str]:
    return db_url, _load(db_url)


@pytest.fixture
def http_server(loaded: tuple[str, str], tmp_path: Path) -> Iterator[Server]:
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


def _check(report: dict[str, Any], reference: dict[str, Any], note_url: str) -> None:
    assert set(report) == set(CLIENTS)
    for client, run in report.items():
        assert "connect_error" not in run, (client, run)
        tools = {tool["name"]: tool["output_schema"] for tool in run["tools"]}
        assert {"search", "fetch", "read_record_field", "schema"} <= set(tools)
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
    stale = report["sdk1"]["calls"]["read_record_field stale cursor"]["structured_agent"]["error"]
    assert stale["size_chars"] == len(NOTE_EDITED)  # the agent learns the field's new size
    window = report["sdk1"]["calls"]["read_record_field offset"]["structured_agent"]["structured"]
    assert window["window"]["text"] == NOTE_EDITED[5:25]


async def test_ts_clients_over_stdio(loaded: tuple[str, str], tmp_path: Path) -> None:
    url, stale = loaded
    calls = _calls(stale)
    reference = await _reference(url, calls)
    note_uri = RecordRef(MAILBOX, "message_bodies", "note").uri  # no public URL over stdio
    _check(_drive(_stdio(url, tmp_path), calls, tmp_path), reference, note_uri)


async def test_ts_clients_over_streamable_http(
    loaded: tuple[str, str], http_server: Server, tmp_path: Path
) -> None:
    url, stale = loaded
    calls = _calls(stale)
    reference = await _reference(url, calls, PUBLIC_URL)
    note_url = f"{PUBLIC_URL}/v1/streams/message_bodies/records/note?connection_id={MAILBOX}"
    connect = {
        "kind": "http",
        "url": f"{http_server.base_url}/mcp",
        "headers": {"Authorization": f"Bearer {TOKEN}"},
    }
    _check(_drive(connect, calls, tmp_path), reference, note_url)
