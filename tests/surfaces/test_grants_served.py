"""Grants kept in the store, served: `pdpp-store serve` as a subprocess on 127.0.0.1, whose
tokens file names stored grants by id (and holds a token hashed). A grant revoked by the owner
(another process) is refused by REST and by MCP over HTTP on the very next request, and an edit
of the tokens file applies while serving, with no restart; on every database.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from _rest import TEXT, seed, window_path
from _served import Server, mcp_read, start

from pdpp_store import AsyncStore, Store
from pdpp_store.auth import hash_token

BY_ID = "tok_by_id_0000000000000000"
HASHED = "tok_hashed_000000000000000"
LATER = "tok_later_0000000000000000"
UNKNOWN_GRANT = "tok_unknown_grant_00000000"
STORED = {
    "grant_id": "g-served",
    "streams": [{"name": "message_bodies", "instance_ids": ["cin_mail"]}],
}


def _seed(db_url: str) -> None:
    async def seeded() -> None:
        store = await AsyncStore.open(db_url)
        try:
            await seed(store)
            await store.add_grant(STORED)
        finally:
            await store.close()

    asyncio.run(seeded())


def _write(path: Path, tokens: dict[str, Any]) -> None:
    """Replace the file whole (as an editor saving it would), with a new modification time."""
    staged = path.with_suffix(".tmp")
    staged.write_text(json.dumps(tokens), encoding="utf-8")
    os.replace(staged, path)


@pytest.fixture
def served(db_url: str, tmp_path: Path) -> Iterator[tuple[Server, Path, str]]:
    _seed(db_url)
    tokens = tmp_path / "tokens.json"
    _write(tokens, {BY_ID: "g-served", hash_token(HASHED): {"grant_id": "g-served"}})
    running = start(db_url, tokens)
    try:
        yield running, tokens, db_url
    finally:
        running.stop()


def _window(server: Server, token: str) -> httpx.Response:
    return httpx.get(
        server.base_url + window_path(),
        params={"field": "body_text", "limit_chars": 30},
        headers={"Authorization": f"Bearer {token}"},
    )


def test_a_revoked_stored_grant_is_refused_by_rest_and_mcp_on_the_next_request(
    served: tuple[Server, Path, str],
) -> None:
    server, _, db_url = served
    for token in (BY_ID, HASHED):
        answer = _window(server, token)
        assert answer.status_code == 200, answer.text
        assert answer.json()["window"]["text"] == TEXT[:30]
    assert not asyncio.run(mcp_read(server.base_url, BY_ID)).is_error

    with Store.open(db_url) as owner:
        owner.revoke_grant("g-served")

    refused = _window(server, BY_ID)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "grant_revoked"
    assert _window(server, HASHED).json()["error"]["code"] == "grant_revoked"
    result = asyncio.run(mcp_read(server.base_url, BY_ID))
    assert result.is_error
    assert "grant_revoked" in result.content[0].text
    assert server.stop() is not None


def test_the_tokens_file_edited_while_serving_applies_without_restart(
    served: tuple[Server, Path, str],
) -> None:
    server, tokens, _ = served
    assert _window(server, LATER).status_code == 401
    _write(tokens, {BY_ID: "g-served", LATER: STORED, UNKNOWN_GRANT: "g-nobody"})
    assert _window(server, LATER).status_code == 200
    assert _window(server, HASHED).status_code == 401  # no longer in the file
    named_nothing = _window(server, UNKNOWN_GRANT)
    assert named_nothing.status_code == 401
    assert named_nothing.json()["error"]["code"] == "invalid_token"

    tokens.write_text("{not json", encoding="utf-8")  # a bad edit fails closed
    broken = _window(server, BY_ID)
    assert broken.status_code == 503, broken.text
    assert broken.json()["error"]["code"] == "tokens_unavailable"
    _write(tokens, {BY_ID: "g-served"})
    assert _window(server, BY_ID).status_code == 200
    log = server.stop()
    assert BY_ID not in log
    assert LATER not in log
    assert server.process.returncode == 0, log
