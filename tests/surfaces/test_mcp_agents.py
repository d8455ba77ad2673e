"""The acceptance test of the content ladder (docs/contract.md §10, "Surfaces"): four agent classes,
driven by the SDK's own client, each go from a search for a phrase near the end of a
3,000,000-character email to the match, page backward and forward, and rebuild the whole field
exactly, with nothing but what their class sees; in-process and over a real stdio subprocess
(`pdpp-store ... mcp --grant FILE`), on both databases, with both protocol eras (the 2026
per-request envelopes, and the `initialize` handshake most hosts speak today). See `_mcp` for the
agents.

Each class also meets two refusals (`REFUSALS`): a cursor made stale by an edit, and a field that
is not text, and must reach each refusal's facts (the new digest and size; the field's metadata)
from what its class sees: the text of content[], the `_meta` of an `isError` result (which carries
no structuredContent: docs/mcp.md), or the JSON-RPC error of `resources/read`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from _data import MAILBOX, body
from _mcp import (
    AGENTS,
    BACKENDS,
    BIG_ID,
    PHRASE,
    PHRASE_AT,
    big_email_text,
    call,
    full,
    header_and_body,
    json_lines,
    ladder_database,
    owner,
    stdio,
    structured_only,
    texts,
)
from mcp import Client, MCPError

from pdpp_store import AsyncStore, FieldWindowRef, RecordRef, Store
from pdpp_store.mcp import create_server


@pytest.fixture(scope="module", params=BACKENDS)
def ladder_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database holding the agents' mailbox, loaded once per module and backend."""
    yield from ladder_database(request, tmp_path_factory, "ladder")


@pytest.fixture(scope="module")
def expected() -> str:
    return big_email_text()


def _check(walk: Any, expected: str) -> None:
    assert walk.match == (PHRASE_AT, PHRASE_AT + len(PHRASE))
    assert walk.text == expected  # the whole field, exactly


MODES = ["auto", "legacy"]
"""How the client connects: "auto" negotiates the 2026 protocol (per-request envelopes), "legacy"
the `initialize` handshake that most hosts speak today (2025-11-25)."""


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("agent", list(AGENTS))
async def test_agent_in_process(ladder_url: str, expected: str, agent: str, mode: str) -> None:
    store = await AsyncStore.open(ladder_url)
    try:
        async with Client(create_server(store, owner()), mode=mode) as client:
            _check(await AGENTS[agent](client, PHRASE), expected)
    finally:
        await store.close()


@pytest.mark.parametrize("mode", MODES)
async def test_agents_over_stdio(ladder_url: str, expected: str, tmp_path: Path, mode: str) -> None:
    """One `pdpp-store mcp` subprocess (the SDK's client starts it and ends it by its handle),
    every agent class in turn."""
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(
        json.dumps({"grant_id": "g-stdio", "streams": [{"name": "message_bodies"}]})
    )
    failures = {}
    async with Client(stdio(ladder_url, grant_file), mode=mode) as client:
        for name, agent in AGENTS.items():
            try:
                _check(await agent(client, PHRASE), expected)
            except AssertionError as error:
                failures[name] = error
    assert not failures, failures


# ---------------------------------------------------------------- search and schema tools


async def test_search_shows_evidence_first_and_never_an_undeclared_field(ladder_url: str) -> None:
    store = await AsyncStore.open(ladder_url)
    try:
        async with Client(create_server(store, owner())) as client:
            result = await client.call_tool("search", {"q": f'"{PHRASE}"'})
            lines = json_lines(result)
            ids = [line["id"] for line in lines[1:]]
            # the decoy holds the phrase only in `body`, a field its manifest does not declare
            assert ids == [f"cin_mail/message_bodies:{BIG_ID}"]
            evidence = lines[1]
            assert next(iter(evidence)) == "evidence"
            assert PHRASE.upper() in evidence["evidence"]
            assert evidence["read"]["tool"] == "read_record_field"
            header, text = header_and_body(
                await client.call_tool("read_record_field", evidence["read"]["arguments"])
            )
            assert header["match"] == evidence["match"]
            start, _ = header["range"]
            assert text[header["match"][0] - start :].upper().startswith(PHRASE.upper())
            decoy = await client.call_tool("search", {"q": "nothing to see"})
            assert "the " + PHRASE not in texts(decoy)
            schema = await client.call_tool("schema", {})
            streams = {line["stream"]: line for line in json_lines(schema)[1:]}
            assert "body_text" in streams["message_bodies"]["searchable"]
            assert "body" not in streams["message_bodies"]["searchable"]
            assert schema.structured_content["object"] == "grant_schema"
    finally:
        await store.close()


async def test_search_pages_continue_with_their_call(ladder_url: str) -> None:
    store = await AsyncStore.open(ladder_url)
    try:
        async with Client(create_server(store, owner())) as client:
            seen = []
            arguments: dict[str, Any] | None = {"q": "the", "limit": 1}
            while arguments is not None:
                result = await client.call_tool("search", arguments)
                assert not result.is_error, texts(result)
                lines = json_lines(result)
                seen += [line["id"] for line in lines[1:]]
                following = lines[0]["next"]
                assert following == result.structured_content["next"]
                arguments = None if following is None else following["arguments"]
            assert len(seen) == len(set(seen)) >= 2
    finally:
        await store.close()


async def test_structured_results_validate_on_every_page(ladder_url: str, expected: str) -> None:
    """The structured-only and full agents again, this time validating every result against the
    published output schema themselves."""
    store = await AsyncStore.open(ladder_url)
    try:
        async with Client(create_server(store, owner())) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            schema = tools["read_record_field"].output_schema
            assert schema is not None
            _check(await structured_only(client, PHRASE, schema), expected)
            _check(await full(client, PHRASE, schema), expected)
    finally:
        await store.close()


# ---------------------------------------------------------------- refusals, by agent class

REFUSAL_TEXT = "A short note for the refusals, long enough to page through in small windows."
REFUSAL_EDITED = REFUSAL_TEXT + " Edited."
NOT_TEXT_BYTES = bytes(range(256)) * 2
NOT_TEXT = base64.b64encode(NOT_TEXT_BYTES).decode("ascii")
"""Unmistakable base64 in a field the manifest does not declare: metadata only by its content."""


@dataclass
class Refusals:
    """The error objects (the envelope's `error`) an agent reached."""

    stale: dict[str, Any]
    not_text: dict[str, Any]


Edit = Callable[[], None]
"""Changes the refusal record's `body_text` to `REFUSAL_EDITED`, outside the server."""


def _first_read(record_id: str) -> dict[str, Any]:
    ref = f"{MAILBOX}/message_bodies:{record_id}"
    return {"id": ref, "field_path": "body_text", "limit_chars": 10}


def _not_text(record_id: str) -> dict[str, Any]:
    return {"id": f"{MAILBOX}/message_bodies:{record_id}", "field_path": "attachment_data"}


async def _refused(client: Any, tool: str, arguments: dict[str, Any]) -> Any:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool}({arguments}) was not refused"
    return result


async def content_only_refusals(client: Any, record_id: str, edit: Edit) -> Refusals:
    header, _ = header_and_body(await call(client, "read_record_field", _first_read(record_id)))
    edit()
    following = header["next"]
    stale = await _refused(client, following["tool"], following["arguments"])
    not_text = await _refused(client, "read_record_field", _not_text(record_id))
    return Refusals(json.loads(texts(stale))["error"], json.loads(texts(not_text))["error"])


async def structured_only_refusals(client: Any, record_id: str, edit: Edit) -> Refusals:
    first = (await call(client, "read_record_field", _first_read(record_id))).structured_content
    edit()
    arguments = {
        "id": first["record"]["id"],
        "field_path": first["field"]["path"],
        "cursor": first["window"]["next_cursor"],
    }
    stale = await _refused(client, "read_record_field", arguments)
    not_text = await _refused(client, "read_record_field", _not_text(record_id))
    return Refusals(stale.meta["error"], not_text.meta["error"])


async def _resource_error(client: Any, uri: str) -> dict[str, Any]:
    try:
        await client.read_resource(uri)
    except MCPError as raised:
        error: dict[str, Any] = raised.error.data["error"]
        return error
    raise AssertionError(f"{uri} was not refused")


async def resource_aware_refusals(client: Any, record_id: str, edit: Edit) -> Refusals:
    ref = RecordRef(MAILBOX, "message_bodies", record_id)
    first = (await client.read_resource(FieldWindowRef(ref, "body_text", 0, 10).uri)).contents[0]
    edit()
    stale = await _resource_error(client, first.meta["next_uri"])
    not_text = await _resource_error(client, FieldWindowRef(ref, "attachment_data", 0, 10).uri)
    return Refusals(stale, not_text)


async def full_refusals(client: Any, record_id: str, edit: Edit) -> Refusals:
    """Both channels of each refusal, which must agree."""
    first = await call(client, "read_record_field", _first_read(record_id))
    header, _ = header_and_body(first)
    cursor = first.structured_content["window"]["next_cursor"]
    assert header["next"]["arguments"]["cursor"] == cursor
    edit()
    errors = []
    for tool, arguments in (
        (header["next"]["tool"], header["next"]["arguments"]),
        ("read_record_field", _not_text(record_id)),
    ):
        result = await _refused(client, tool, arguments)
        assert result.structured_content is None
        assert json.loads(texts(result)) == {"error": result.meta["error"]}
        errors.append(result.meta["error"])
    return Refusals(*errors)


REFUSALS: dict[str, Callable[[Any, str, Edit], Awaitable[Refusals]]] = {
    "content-only": content_only_refusals,
    "structured-only": structured_only_refusals,
    "resource-aware": resource_aware_refusals,
    "full": full_refusals,
}


def _refusal_record(url: str) -> tuple[str, Edit]:
    """A fresh record for one agent's refusals, and the edit that makes its cursors stale."""
    record_id = f"refusals-{uuid.uuid4().hex[:12]}"
    with Store.open(url) as store:
        store.upsert_records(
            MAILBOX,
            "message_bodies",
            [{**body(record_id, REFUSAL_TEXT), "attachment_data": NOT_TEXT}],
        )

    def edit() -> None:
        with Store.open(url) as store:
            changed = {**body(record_id, REFUSAL_EDITED), "attachment_data": NOT_TEXT}
            store.upsert_records(MAILBOX, "message_bodies", [changed])

    return record_id, edit


def _check_refusals(refusals: Refusals) -> None:
    digest = "sha256:" + hashlib.sha256(REFUSAL_EDITED.encode()).hexdigest()
    stale = refusals.stale
    assert (stale["code"], stale["digest"], stale["size_chars"]) == (
        "stale_cursor",
        digest,
        len(REFUSAL_EDITED),
    )
    not_text = refusals.not_text
    assert not_text["code"] == "field_not_text"
    field = not_text["field"]
    assert (field["path"], field["text_like"], field["size_bytes"]) == (
        "attachment_data",
        False,
        len(NOT_TEXT_BYTES),  # the bytes the base64 holds
    )
    assert NOT_TEXT[:40] not in json.dumps(refusals.__dict__)  # metadata, never the value


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("agent", list(REFUSALS))
async def test_agent_reaches_every_refusal_in_process(
    ladder_url: str, agent: str, mode: str
) -> None:
    record_id, edit = _refusal_record(ladder_url)
    store = await AsyncStore.open(ladder_url)
    try:
        async with Client(create_server(store, owner()), mode=mode) as client:
            _check_refusals(await REFUSALS[agent](client, record_id, edit))
    finally:
        await store.close()


@pytest.mark.parametrize("mode", MODES)
async def test_agents_reach_every_refusal_over_stdio(
    ladder_url: str, tmp_path: Path, mode: str
) -> None:
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(
        json.dumps({"grant_id": "g-stdio", "streams": [{"name": "message_bodies"}]})
    )
    async with Client(stdio(ladder_url, grant_file), mode=mode) as client:
        for name, agent in REFUSALS.items():
            record_id, edit = _refusal_record(ladder_url)
            try:
                _check_refusals(await agent(client, record_id, edit))
            except AssertionError as error:
                raise AssertionError(f"{name}: {error}") from error
