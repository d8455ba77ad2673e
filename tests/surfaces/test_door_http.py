"""`Origin` and `Host` on `/mcp`, CORS for configured origins, gzip where it pays and the door's
options, over a real socket to `pdpp-store serve` in a subprocess, on every database."""

from __future__ import annotations

import asyncio
import gzip
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from _rest import DATA, OWNER, window_path
from _served import Server, free_port, seed_served, serve_refused, start, tokens_file

from pdpp_store import AsyncStore

__all__ = ["tokens_file"]  # a fixture of _served, used here too

APP = "https://app.example"
EVIL = "https://evil.example"
TOOLS_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
MCP_HEADERS = {
    "Authorization": f"Bearer {OWNER}",
    "Accept": "application/json, text/event-stream",
}
BIG = "The quick brown fox jumps over the lazy dog. " * 400  # 18,000 characters


def _add_big_record(url: str) -> None:
    async def added() -> None:
        store = await AsyncStore.open(url)
        try:
            from _data import MAILBOX, body

            await store.upsert_records(MAILBOX, "message_bodies", [body("big", BIG)])
        finally:
            await store.close()

    asyncio.run(added())


@pytest.fixture
def door(db_url: str, tokens_file: Path) -> Iterator[Server]:
    seed_served(db_url)
    _add_big_record(db_url)
    running = start(db_url, tokens_file, "--allow-origin", APP)
    try:
        yield running
    finally:
        running.stop()


def _mcp(server: Server, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{server.base_url}/mcp", json=TOOLS_LIST, headers={**MCP_HEADERS, **headers})


def _refusal(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == code, error
    assert error["request_id"] == response.headers["X-Request-Id"]


def test_mcp_checks_origin_and_host_and_cors_is_for_named_origins(door: Server) -> None:
    port = door.base_url.rsplit(":", 1)[1]
    # Allowed: no Origin (not a browser), the server's own origin by any of its loopback names,
    # and a configured one (which also gets CORS).
    for origin in (None, door.base_url, f"http://localhost:{port}", APP):
        answer = _mcp(door, {} if origin is None else {"Origin": origin})
        assert answer.status_code == 200, (origin, answer.text)
        assert "tools" in answer.json()["result"]
        cors = answer.headers.get("access-control-allow-origin")
        assert cors == (APP if origin == APP else None), origin
    assert "X-Request-Id" in _mcp(door, {"Origin": APP}).headers["access-control-expose-headers"]
    # A foreign origin is 403 before the token is asked for; a foreign Host is 421.
    for headers in ({"Origin": EVIL}, {"Origin": EVIL, "Authorization": ""}, {"Origin": "null"}):
        refused = _mcp(door, headers)
        _refusal(refused, 403, "origin_not_allowed")
        assert "access-control-allow-origin" not in refused.headers
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.2"):
        _refusal(_mcp(door, {"Host": host}), 421, "host_not_allowed")
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", "localhost"):
        assert _mcp(door, {"Host": host}).status_code == 200, host
    # A preflight from a named origin is answered before any token; from another, it is not.
    for path in ("/mcp", window_path()):
        preflight = httpx.options(
            f"{door.base_url}{path}",
            headers={
                "Origin": APP,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 204, preflight.text
        assert preflight.headers["access-control-allow-origin"] == APP
        assert "Authorization" in preflight.headers["access-control-allow-headers"]
        foreign = httpx.options(
            f"{door.base_url}{path}",
            headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in foreign.headers
        assert foreign.status_code in (403, 405), foreign.text
        assert "error" in foreign.json()
    # REST: CORS for the named origin only (the Origin check itself is /mcp's).
    auth = {"Authorization": f"Bearer {OWNER}"}
    params: dict[str, str | int] = {"field": "body_text", "limit_chars": 40}
    url = f"{door.base_url}{window_path()}"
    named = httpx.get(url, params=params, headers={**auth, "Origin": APP})
    assert named.status_code == 200
    assert named.headers["access-control-allow-origin"] == APP
    assert "ETag" in named.headers["access-control-expose-headers"]
    other = httpx.get(url, params=params, headers={**auth, "Origin": EVIL})
    assert other.status_code == 200
    assert "access-control-allow-origin" not in other.headers


def test_no_cors_unless_configured(db_url: str, tokens_file: Path) -> None:
    seed_served(db_url)
    server = start(db_url, tokens_file)
    try:
        _refusal(_mcp(server, {"Origin": APP}), 403, "origin_not_allowed")
        answer = httpx.get(
            f"{server.base_url}{window_path()}",
            params={"field": "body_text", "limit_chars": 40},
            headers={"Authorization": f"Bearer {OWNER}", "Origin": APP},
        )
        assert answer.status_code == 200
        assert not [name for name in answer.headers if name.startswith("access-control-")]
    finally:
        server.stop()


def test_large_json_is_compressed_and_blobs_and_ranges_never(door: Server) -> None:
    auth = {"Authorization": f"Bearer {OWNER}", "Accept-Encoding": "gzip"}
    big = f"{door.base_url}{window_path('big')}"
    params: dict[str, str | int] = {"field": "body_text", "limit_chars": 16384}
    with httpx.Client(headers=auth) as client:
        page = client.get(big, params=params)
        assert page.status_code == 200, page.text
        assert page.headers["content-encoding"] == "gzip"
        assert "Accept-Encoding" in page.headers["vary"]
        assert page.json()["window"]["text"] == BIG[:16384]
        assert int(page.headers["content-length"]) < len(page.content) // 4  # it paid
        # The raw bytes are gzip of the JSON; HEAD says the same headers; ETag still works.
        with client.stream("GET", big, params=params) as raw:
            assert gzip.decompress(b"".join(raw.iter_raw())) == page.content
        head = client.head(big, params=params)
        for name in ("content-encoding", "content-length", "etag"):
            assert head.headers[name] == page.headers[name], name
        again = client.get(big, params=params, headers={"If-None-Match": page.headers["etag"]})
        assert again.status_code == 304
        # Small answers, identity-only clients, blobs and ranges are never compressed.
        small = client.get(
            f"{door.base_url}{window_path()}", params={"field": "body_text", "limit_chars": 40}
        )
        assert "content-encoding" not in small.headers
        plain = client.get(big, params=params, headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers
        import hashlib

        blob = f"{door.base_url}/v1/blobs/blob_sha256_{hashlib.sha256(DATA).hexdigest()}"
        whole = client.get(blob)
        assert (whole.status_code, whole.content) == (200, DATA)
        assert "content-encoding" not in whole.headers
        ranged = client.get(blob, headers={"Range": "bytes=0-99999"})
        assert ranged.status_code == 206
        assert "content-encoding" not in ranged.headers
        assert ranged.content == DATA[:100000]


@pytest.mark.parametrize(
    ("option", "value", "param"),
    [
        ("--max-head-bytes", "0", "max_head_bytes"),
        ("--max-headers", "-1", "max_headers"),
        ("--head-timeout", "0", "head_timeout_s"),
        ("--max-request-line", "99999", "max_request_line"),  # above the head's bound
        ("--max-mcp-streams", "0", "max_mcp_streams_per_token"),
        ("--allow-origin", "app.example", "allow_origin"),
        ("--allow-origin", "https://app.example/path", "allow_origin"),
        ("--allow-host", "bad host", "allow_host"),
    ],
)
def test_serve_refuses_a_bad_door_option_with_the_envelope(
    sqlite_db_url: str, tokens_file: Path, option: str, value: str, param: str
) -> None:
    error, _ = serve_refused(sqlite_db_url, tokens_file, option, value, "--port", str(free_port()))
    assert (error["code"], error["param"]) == ("invalid_request", param), error


def test_a_bound_set_on_serve_is_the_bound_applied(sqlite_db_url: str, tokens_file: Path) -> None:
    seed_served(sqlite_db_url)
    server = start(
        sqlite_db_url,
        tokens_file,
        "--max-headers",
        "10",
        "--max-head-bytes",
        "2048",
        "--max-request-line",
        "1024",
    )
    try:
        few = {f"X-{number}": "v" for number in range(3)}  # and httpx's own five
        fine = httpx.get(f"{server.base_url}/openapi.json", headers=few)
        assert fine.status_code == 200, fine.text
        many = {f"X-{number}": "v" for number in range(6)}
        _refusal(
            httpx.get(f"{server.base_url}/openapi.json", headers=many), 431, "too_many_headers"
        )
        long = {"X-Long": "a" * 3000}
        _refusal(
            httpx.get(f"{server.base_url}/openapi.json", headers=long),
            431,
            "request_head_too_large",
        )
    finally:
        server.stop()


def test_past_the_connection_cap_a_request_is_told_to_retry(
    sqlite_db_url: str, tokens_file: Path
) -> None:
    import socket

    seed_served(sqlite_db_url)
    server = start(sqlite_db_url, tokens_file, "--max-connections", "4")
    port = int(server.base_url.rsplit(":", 1)[1])
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
    try:
        time.sleep(0.5)  # the server has accepted them
        over = httpx.get(f"{server.base_url}/openapi.json")
        _refusal(over, 503, "too_many_connections")
        assert over.headers["Retry-After"] == "1"
        assert over.json()["error"]["retryable"] is True
    finally:
        for raw in held:
            raw.close()
    try:
        deadline = time.monotonic() + 10
        while httpx.get(f"{server.base_url}/openapi.json").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        server.stop()
