"""A bounded, seeded fuzz of the MCP HTTP transport over a real socket to `pdpp-store serve`, on
every database: methods, content types, `Accept`, MCP headers, `Origin`/`Host`, tokens and
bodies (valid JSON-RPC, broken JSON, wrong shapes, batches, odd bytes) drawn at random and
combined. Every answer of status 400 or more must be the §7 envelope (JSON, with the request id
of its `X-Request-Id`), and no answer may be a 5xx.
"""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
from _rest import NARROW, OWNER
from _served import Server, server, tokens_file

__all__ = ["server", "tokens_file"]  # fixtures of _served, used here too

REQUESTS = 400
SEED = 26

_CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "read_record_field", "arguments": {"id": "x", "field_path": "body_text"}},
}
_BODIES: list[Any] = [
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "fuzz", "version": "0"},
        },
    },
    _CALL,
    {**_CALL, "params": {"name": "no_such_tool", "arguments": {}}},
    {**_CALL, "params": {"name": "search", "arguments": {"query": None}}},
    {"jsonrpc": "1.0", "id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": {"not": "scalar"}, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 1},
    {"jsonrpc": "2.0", "id": 1, "result": {}},
    {"jsonrpc": "2.0", "id": 1, "method": 5},
    [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],
    [],
    None,
    "text",
    12,
    {},
]
_RAW = [b"", b"{", b"\xff\xfe\x00", b"[" * 5000, b"9" * 6000, b'{"a": NaN}', b"\x00" * 64]
_CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "APPLICATION/JSON",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "",
    "application/json, text/plain",
    "*/*",
]
_ACCEPTS = [
    "application/json, text/event-stream",
    "application/json",
    "text/event-stream",
    "*/*",
    "text/html",
    "",
    "application/*;q=0.5",
]
_METHODS = ["POST"] * 6 + ["GET", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"]
_VERSIONS = [None, None, "2025-06-18", "2025-03-26", "2026-07-28", "1999-01-01", "", "x" * 300]


def _request(draw: random.Random, port: int) -> dict[str, Any]:
    if draw.random() < 0.35:  # a well-formed request, so the SDK's own paths are fuzzed too
        return {
            "method": "POST",
            "headers": {
                "Authorization": f"Bearer {draw.choice([OWNER, NARROW])}",
                "Content-Type": "application/json",
                "Accept": draw.choice(_ACCEPTS[:4]),
            },
            "content": json.dumps(draw.choice(_BODIES)).encode(),
        }
    headers: dict[str, str] = {}
    token = draw.choice([OWNER, OWNER, OWNER, NARROW, "tok_unknown_000000000000", None])
    if token is not None:
        headers["Authorization"] = draw.choice([f"Bearer {token}", f"bearer {token}", token])
    if (kind := draw.choice([*_CONTENT_TYPES, None])) is not None:
        headers["Content-Type"] = kind
    if (accept := draw.choice([*_ACCEPTS, None])) is not None:
        headers["Accept"] = accept
    if (version := draw.choice(_VERSIONS)) is not None:
        headers["MCP-Protocol-Version"] = version
    if draw.random() < 0.1:
        headers["Mcp-Session-Id"] = draw.choice(["abc", "", "0" * 100])
    if draw.random() < 0.1:
        headers["Origin"] = draw.choice(
            [f"http://127.0.0.1:{port}", "https://evil.example", "null", "garbage"]
        )
    if draw.random() < 0.05:
        headers["Host"] = draw.choice(["evil.example", f"localhost:{port}"])
    if draw.random() < 0.15:
        content = draw.choice(_RAW)
    else:
        content = json.dumps(draw.choice(_BODIES)).encode()
        if draw.random() < 0.1:
            content = content[: draw.randrange(len(content) + 1)]
    return {"method": draw.choice(_METHODS), "headers": headers, "content": content}


def test_every_refusal_of_the_mcp_transport_is_the_envelope(server: Server) -> None:
    draw = random.Random(SEED)
    port = int(server.base_url.rsplit(":", 1)[1])
    statuses: dict[int, int] = {}
    not_envelopes: list[str] = []
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for _ in range(REQUESTS):
            sent = _request(draw, port)
            answer = client.request(url="/mcp", **sent)
            statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
            assert answer.status_code < 500, (sent, answer.text)
            if answer.status_code < 400:
                continue
            if sent["method"] == "HEAD":  # no body by definition; the headers still say JSON
                assert answer.headers["content-type"] == "application/json", sent
                continue
            try:
                error = answer.json()["error"]
                assert {"type", "code", "message", "request_id"} <= set(error)
                assert error["request_id"] == answer.headers["X-Request-Id"]
                assert answer.headers["content-type"] == "application/json"
            except (ValueError, KeyError, TypeError, AssertionError):
                not_envelopes.append(f"{sent!r:.300} -> {answer.status_code} {answer.text[:200]}")
    assert not_envelopes == [], not_envelopes[:5]
    # The fuzz reached both the SDK (answers) and most refusals.
    assert statuses.get(200, 0) > 10, statuses
    assert len([status for status in statuses if status >= 400]) >= 6, statuses
    print(f"\nstatuses of {REQUESTS} fuzzed requests: {dict(sorted(statuses.items()))}")
