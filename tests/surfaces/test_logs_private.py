"""Logs carry no personal data (docs/contract.md §14): everything `pdpp-store serve` writes to
stdout and stderr, captured whole while it serves a scripted session full of canary values,
query terms, filter values, record ids and tokens (good, bad, refused), holds none of them, and
does hold one access line per request: method, route template, status, time, request id.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import httpx2
from _rest import CANARY, NARROW, OWNER, TEXT, TOKEN_GRANTS, seed, window_path
from _served import CLI, STARTUP_SECONDS, free_port
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pdpp_store import AsyncStore

QUERY_TERM = "quokkaterm4471"
SEARCH_TERM = "wombatsearch9902"
FILTER_VALUE = "platypusfilter5513"
RECORD_ID = "echidnarecord3310"
BAD_TOKEN = "tok_never_issued_numbat_8812"
PATH_VALUE = "bilbypath6604"
MCP_QUERY = "dingoquery2207"
SECRETS = [
    CANARY,
    TEXT[:24],
    QUERY_TERM,
    SEARCH_TERM,
    FILTER_VALUE,
    RECORD_ID,
    BAD_TOKEN,
    PATH_VALUE,
    MCP_QUERY,
    OWNER,
    NARROW,
    "short",  # b2's whole body
]


def _seeded(db_url: str) -> None:
    async def run() -> None:
        store = await AsyncStore.open(db_url)
        try:
            await seed(store)
        finally:
            await store.close()

    asyncio.run(run())


async def _mcp_session(base_url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
    ):
        await client.call_tool("search", {"q": MCP_QUERY})
        await client.call_tool("search", {"q": "short"})
        await client.call_tool(
            "read_record_field",
            {"id": "cin_mail/message_bodies:b1", "field_path": "body_text", "q": TEXT[5:15]},
        )
        await client.call_tool("fetch", {"id": f"cin_mail/message_bodies:{RECORD_ID}"})
        await client.call_tool(
            "read_record_field",
            {"id": "cin_mail/message_bodies:b1", "field_path": "body_html", "q": CANARY},
        )


def _rest_session(base_url: str) -> None:
    owner = {"Authorization": f"Bearer {OWNER}"}
    narrow = {"Authorization": f"Bearer {NARROW}"}
    with httpx.Client(base_url=base_url) as client:
        asks: list[tuple[dict[str, str], str, dict[str, Any]]] = [
            (owner, window_path(), {"field": "body_text", "q": QUERY_TERM}),
            (owner, window_path(), {"field": "body_text", "q": TEXT[100:110]}),
            (owner, window_path(), {"field": "body_html", "limit_chars": 100}),
            (narrow, window_path("b3"), {"field": "body_text"}),
            (narrow, window_path(), {"field": "body_html"}),
            (owner, "/v1/search", {"q": SEARCH_TERM}),
            (owner, "/v1/search", {"q": CANARY}),
            (owner, "/v1/search", {"q": "short", "streams": "message_bodies"}),
            (owner, "/v1/search", {"q": "x", "filter": json.dumps({"id": FILTER_VALUE})}),
            (owner, f"/v1/streams/message_bodies/records/{RECORD_ID}", {}),
            (owner, "/v1/streams/message_bodies/records/b1", {"fields": "body_html"}),
            (owner, f"/v1/{PATH_VALUE}", {"q": QUERY_TERM}),
            (owner, window_path(), {"field": "body_text", PATH_VALUE: FILTER_VALUE}),
            ({"Authorization": f"Bearer {BAD_TOKEN}"}, "/v1/search", {"q": SEARCH_TERM}),
            ({"Authorization": f"Basic {BAD_TOKEN}"}, "/v1/search", {"q": SEARCH_TERM}),
            ({}, "/v1/search", {"q": SEARCH_TERM}),
        ]
        for headers, path, params in asks:
            client.get(path, params=params, headers=headers)
        client.post(
            "/mcp",
            content=f'{{"q": "{MCP_QUERY}"',
            headers={**owner, "Content-Type": "application/json"},
        )
        client.post(
            "/mcp", json={"jsonrpc": "2.0"}, headers={"Authorization": f"Bearer {BAD_TOKEN}"}
        )


def test_nothing_the_server_writes_holds_personal_data_or_tokens(
    db_url: str, tmp_path: Path
) -> None:
    _seeded(db_url)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKEN_GRANTS), encoding="utf-8")
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [str(CLI), "--db", db_url, "serve", "--tokens", str(tokens), "--port", str(port)],
            stdout=stdout,
            stderr=stderr,
        )
        try:
            deadline = time.monotonic() + STARTUP_SECONDS
            while True:
                assert process.poll() is None, err.read_text()
                try:
                    httpx.get(f"{base_url}/.well-known/oauth-protected-resource", timeout=1)
                    break
                except httpx.TransportError:
                    assert time.monotonic() < deadline, err.read_text()
                    time.sleep(0.1)
            _rest_session(base_url)
            asyncio.run(_mcp_session(base_url, OWNER))
        finally:
            os.kill(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
    written = out.read_text(errors="replace") + err.read_text(errors="replace")
    leaked = [secret for secret in SECRETS if secret in written]
    assert leaked == [], written
    assert "?" not in "".join(line for line in written.splitlines() if " /v1/" in line)

    access = re.findall(r"(GET|POST) (\S+) (\d{3}) [0-9.]+ms (req_[0-9a-f]{24})", written)
    routes = {(method, route, status) for method, route, status, _ in access}
    assert ("GET", "/v1/streams/{stream}/records/{record_id}/field-window", "200") in routes
    assert ("GET", "/v1/search", "200") in routes
    assert ("GET", "/v1/search", "401") in routes
    assert ("GET", "(unmatched)", "404") in routes
    assert ("POST", "/mcp", "200") in routes, written
    assert len(access) >= 18
    assert process.returncode == 0, written
