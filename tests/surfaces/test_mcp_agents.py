"""The acceptance test of the content ladder (docs/contract.md §10, "Surfaces"): four agent classes,
driven by the SDK's own client, each go from a search for a phrase near the end of a
3,000,000-character email to the match, page backward and forward, and rebuild the whole field
exactly, with nothing but what their class sees; in-process and over a real stdio subprocess
(`pdpp-store ... mcp --grant FILE`), on both databases, with both protocol eras (the 2026
per-request envelopes, and the `initialize` handshake most hosts speak today). See `_mcp` for the
agents.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _mcp import (
    AGENTS,
    BIG_ID,
    PHRASE,
    PHRASE_AT,
    big_email_text,
    full,
    header_and_body,
    json_lines,
    load_ladder,
    owner,
    structured_only,
    texts,
)
from mcp import Client, StdioServerParameters

from pdpp_store import AsyncStore
from pdpp_store.mcp import create_server


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ],
)
def ladder_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A database holding the agents' mailbox, loaded once per module and backend."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('ladder') / 'store.db'}"
        load_ladder(url)
        yield url
        return
    pool = request.getfixturevalue("pg_pool")
    server = request.getfixturevalue("pg_server")
    name = pool.take()
    try:
        url = server.database_url(name)
        load_ladder(url)
        yield url
    finally:
        pool.give_back(name)


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


def _stdio(url: str, grant_file: Path) -> StdioServerParameters:
    command = shutil.which("pdpp-store", path=os.path.dirname(sys.executable))
    assert command is not None
    return StdioServerParameters(
        command=command,
        args=["--db", url, "mcp", "--grant", str(grant_file)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.parametrize("mode", MODES)
async def test_agents_over_stdio(ladder_url: str, expected: str, tmp_path: Path, mode: str) -> None:
    """One `pdpp-store mcp` subprocess (the SDK's client starts it and ends it by its handle),
    every agent class in turn."""
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(
        json.dumps({"grant_id": "g-stdio", "streams": [{"name": "message_bodies"}]})
    )
    failures = {}
    async with Client(_stdio(ladder_url, grant_file), mode=mode) as client:
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
