"""The HTTP door under hostile clients (issue 26): `pdpp-store serve` as a subprocess on
127.0.0.1, spoken to over a socket, on every database.

    storage_unavailable     retry_after_s in the envelope and Retry-After, on REST and MCP
    --public-url            what the metadata and the 401 name; never the request's Host
    bad tokens paths        the invalid_tokens envelope and exit 1, whatever the path is
    a refused 4 MiB body    no fresh memory faulted in for it (pdpp_store.door._heap)
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _attacks
import httpx
import pytest
from _data import MAILBOX
from _postgres import PostgresServer
from _rest import OWNER, window_path
from _served import Server, free_port, seed_served, serve_refused, server, start, tokens_file

from pdpp_store.mcp._http import MAX_BODY_BYTES

__all__ = ["server", "tokens_file"]  # fixtures of _served, used here too

METADATA = "/.well-known/oauth-protected-resource"


def _mcp_call(base_url: str, name: str, arguments: dict[str, Any]) -> httpx.Response:
    """One JSON-RPC `tools/call` to the stateless MCP endpoint, as raw HTTP."""
    return httpx.post(
        f"{base_url}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        },
        headers={
            "Authorization": f"Bearer {OWNER}",
            "Accept": "application/json, text/event-stream",
        },
        timeout=30,
    )


# ---------------------------------------------------------------- storage_unavailable


@pytest.fixture(
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def breakable(
    request: pytest.FixtureRequest, tmp_path: Path, tokens_file: Path
) -> Iterator[tuple[Server, Any]]:
    """A served database of this test's own, and a way to take it away under the server."""
    if request.param == "sqlite":
        path = tmp_path / "store.db"
        url = f"sqlite:///{path}"

        def lose() -> None:  # the files are no longer a database (open connections see it too)
            for suffix in ("", "-wal", "-shm"):
                part = path.with_name(path.name + suffix)
                if part.exists():
                    with part.open("r+b") as handle:
                        handle.write(b"\xff" * min(part.stat().st_size, 1 << 16))

        seed_served(url)
        server = start(url, tokens_file)
        try:
            yield server, lose
        finally:
            server.stop()
        return
    pg_server: PostgresServer = request.getfixturevalue("pg_server")
    template: str = request.getfixturevalue("pg_template")
    name = f"pdpp_door_{uuid.uuid4().hex}"
    url = pg_server.create_database(name, template=template)
    try:
        seed_served(url)
        server = start(url, tokens_file)
        try:
            yield server, lambda: pg_server.drop_database(name)
        finally:
            server.stop()
    finally:
        pg_server.drop_database(name)


def test_storage_unavailable_carries_a_retry_hint_on_rest_and_mcp(
    breakable: tuple[Server, Any],
) -> None:
    server, lose = breakable
    headers = {"Authorization": f"Bearer {OWNER}"}
    url = f"{server.base_url}{window_path()}"
    params: dict[str, str | int] = {"field": "body_text", "limit_chars": 40}
    assert httpx.get(url, params=params, headers=headers).status_code == 200
    lose()
    for _ in range(3):  # each pooled connection finds the loss: every answer carries the hint
        response = httpx.get(url, params=params, headers=headers)
        assert response.status_code == 503, response.text
        error = response.json()["error"]
        assert error["code"] == "storage_unavailable"
        assert (error["retryable"], error["retry_after_s"]) == (True, 1)
        assert response.headers["Retry-After"] == "1"
    called = _mcp_call(
        server.base_url,
        "read_record_field",
        {"id": f"{MAILBOX}/message_bodies:b1", "field_path": "body_text", "limit_chars": 40},
    )
    assert called.status_code == 200, called.text
    result = called.json()["result"]
    assert result["isError"] is True
    assert "structuredContent" not in result  # an error's envelope is in content[] and _meta
    envelope = result["_meta"]["error"]
    assert json.loads(result["content"][0]["text"]) == {"error": envelope}
    assert envelope["code"] == "storage_unavailable", envelope
    assert envelope["retry_after_s"] == 1


# ---------------------------------------------------------------- the URL the server names


def _named(base_url: str, headers: dict[str, str]) -> tuple[str, str, str, str]:
    """What the server names itself by, asked with `headers`: the REST and MCP 401s'
    `resource_metadata`, and the two metadata documents' `resource`. A `Host` that does not
    name the server is refused on `/mcp` before the token is asked for (421, naming nothing),
    so the MCP 401 is asked for with the server's own `Host`."""
    named = []
    mcp_headers = {k: v for k, v in headers.items() if k != "Host"}
    for method, path, sent in (("GET", window_path(), headers), ("POST", "/mcp", mcp_headers)):
        refused = httpx.request(method, f"{base_url}{path}", json={}, headers=sent)
        assert refused.status_code == 401, refused.text
        named.append(refused.headers["WWW-Authenticate"].split('resource_metadata="')[1][:-1])
    for path in (METADATA, f"{METADATA}/mcp"):
        named.append(httpx.get(f"{base_url}{path}", headers=headers).json()["resource"])
    if "Host" in headers:
        misdirected = httpx.post(f"{base_url}/mcp", json={}, headers=headers)
        assert misdirected.status_code == 421, misdirected.text
        assert misdirected.json()["error"]["code"] == "host_not_allowed"
        assert headers["Host"] not in misdirected.text
        assert "WWW-Authenticate" not in misdirected.headers
    return named[0], named[1], named[2], named[3]


def test_the_server_names_its_listening_address_never_the_host_header(
    db_url: str, tokens_file: Path
) -> None:
    server = start(db_url, tokens_file)
    try:
        base = server.base_url
        expected = (f"{base}{METADATA}", f"{base}{METADATA}/mcp", base, f"{base}/mcp")
        assert _named(base, {}) == expected
        forged = {"Host": "attacker.example", "X-Forwarded-Host": "attacker.example"}
        assert _named(base, forged) == expected
    finally:
        server.stop()


def test_a_public_url_is_what_the_server_names(db_url: str, tokens_file: Path) -> None:
    public = "https://pdpp.example.org:8443"
    server = start(db_url, tokens_file, "--public-url", public + "/")
    try:
        expected = (f"{public}{METADATA}", f"{public}{METADATA}/mcp", public, f"{public}/mcp")
        for headers in ({}, {"Host": "attacker.example"}):
            assert _named(server.base_url, headers) == expected
    finally:
        server.stop()


@pytest.mark.parametrize("public_url", ["pdpp.example.org", "https://pdpp.example.org/prefix"])
def test_serve_refuses_a_bad_public_url(
    sqlite_db_url: str, tokens_file: Path, public_url: str
) -> None:
    error, _ = serve_refused(
        sqlite_db_url, tokens_file, "--public-url", public_url, "--port", str(free_port())
    )
    assert (error["code"], error["param"]) == ("invalid_request", "public_url"), error


# ---------------------------------------------------------------- bad tokens paths


def _not_json(path: Path) -> Path:
    path.write_text("{not json", encoding="utf-8")
    return path


def _wrong_shape(path: Path) -> Path:
    path.write_text('["tok_owner_000000000000000"]', encoding="utf-8")
    return path


def _overlong_number(path: Path) -> Path:
    path.write_text('{"tok_owner_000000000000000": ' + "9" * 5000 + "}", encoding="utf-8")
    return path


def _deep(path: Path) -> Path:
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda path: path.parent, id="a-directory"),
        pytest.param(lambda path: path.parent / "missing.json", id="missing"),
        pytest.param(_not_json, id="not-json"),
        pytest.param(_wrong_shape, id="wrong-shape"),
        pytest.param(_overlong_number, id="overlong-number"),
        pytest.param(_deep, id="nested-too-deeply"),
    ],
)
def test_serve_refuses_every_bad_tokens_path_with_the_envelope(
    sqlite_db_url: str, tmp_path: Path, make: Any
) -> None:
    tokens = make(tmp_path / "tokens.json")
    error, _ = serve_refused(sqlite_db_url, tokens, "--port", str(free_port()))
    assert (error["code"], error["param"]) == ("invalid_tokens", "tokens"), error


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_serve_refuses_an_unreadable_tokens_file_with_the_envelope(
    sqlite_db_url: str, tokens_file: Path
) -> None:
    tokens_file.chmod(0)
    try:
        error, _ = serve_refused(sqlite_db_url, tokens_file, "--port", str(free_port()))
    finally:
        tokens_file.chmod(stat.S_IRUSR | stat.S_IWUSR)
    assert (error["code"], error["param"]) == ("invalid_tokens", "tokens")
    assert "Permission denied" in error["message"]


# ---------------------------------------------------------------- the MCP transport's refusals


def _raw_post(port: int, head: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST `body` after `head` over a raw socket; the status and envelope of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        raw.sendall(head.encode() + b"\r\n")
        with contextlib.suppress(OSError):  # the server may answer (and close) before the end
            raw.sendall(body)
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer.partition(b"\r\n\r\n")[2]) < int(
            answer.lower().partition(b"content-length: ")[2].partition(b"\r\n")[0] or 0
        ):
            got = raw.recv(65536)
            if not got:
                break
            answer += got
    status = int(answer.split(b" ", 2)[1])
    return status, json.loads(answer.partition(b"\r\n\r\n")[2])["error"]


def test_the_mcp_transport_refuses_with_envelopes(server: Server) -> None:
    auth = {"Authorization": f"Bearer {OWNER}", "Accept": "application/json, text/event-stream"}
    url = f"{server.base_url}/mcp"
    cases: list[tuple[dict[str, str], bytes, int, str, str]] = [
        ({"Content-Type": "text/plain"}, b"{}", 415, "unsupported_media_type", "content-type"),
        ({}, b"{not json", 400, "invalid_request", "body"),
        ({}, b"\xff\xfe", 400, "invalid_request", "body"),
        ({}, b"[" + b"9" * 5000 + b"]", 400, "invalid_request", "body"),
        ({}, b"null", 400, "invalid_request", "body"),
        ({}, b"[]", 400, "invalid_request", "body"),
        ({}, b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', 400, "invalid_request", "body"),
    ]
    for extra, body, status, code, param in cases:
        headers = {"Content-Type": "application/json", **auth, **extra}
        response = httpx.post(url, content=body, headers=headers)
        assert response.status_code == status, (body[:40], response.text)
        assert response.headers["content-type"] == "application/json"
        error = response.json()["error"]
        assert (error["code"], error.get("param")) == (code, param), error
        assert error["request_id"] == response.headers["X-Request-Id"]
    port = int(server.base_url.rsplit(":", 1)[1])
    head = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {OWNER}\r\n"
    )
    # Declared too large: refused on the head, the body never sent.
    status, error = _raw_post(port, head + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n", b"")
    assert (status, error["code"]) == (413, "request_too_large")
    # Chunked: refused once the bytes received pass the limit, before the client is done.
    chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
    status, error = _raw_post(port, head + "Transfer-Encoding: chunked\r\n", chunk * 64)
    assert (status, error["code"]) == (413, "request_too_large")


def test_a_client_that_disconnects_mid_body_is_one_log_line(server: Server) -> None:
    port = int(server.base_url.rsplit(":", 1)[1])
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            raw.sendall(
                (
                    "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    f"Authorization: Bearer {OWNER}\r\nContent-Length: 100000\r\n\r\n"
                ).encode()
                + b'{"jsonrpc": "2.0", '
            )
            time.sleep(0.2)
    served = httpx.get(f"{server.base_url}{METADATA}")  # the server still answers
    assert served.status_code == 200
    log = server.stop()
    lines = [line for line in log.splitlines() if "disconnected" in line]
    assert len(lines) == 3, log
    assert all("client disconnected before its request body was read" in x for x in lines)
    assert "Traceback" not in log
    assert "ClientDisconnect" not in log


def _page_faults(pid: int) -> int:
    """The process's minor page faults so far (`/proc/PID/stat`, field 10)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat_file:
        return int(stat_file.read().rpartition(")")[2].split()[7])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts faults in /proc")
def test_a_refused_body_costs_the_server_no_fresh_memory(server: Server) -> None:
    """A chunked 1 GB body is read to the 4 MiB bound and refused; its buffers reuse the heap the
    last body freed, instead of faulting about 1,000 fresh pages in for each body (glibc's
    default policy gives the heap's top back at every free: half the server's CPU for such a
    body, which the clients beside it wait for)."""
    port = int(server.base_url.rsplit(":", 1)[1])
    head = (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {OWNER}\r\n".encode()
        + b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))

    def refused() -> None:
        answer, sent, _ = _attacks._flood(port, head, chunk, 1 << 30)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        assert sent > MAX_BODY_BYTES

    for _ in range(3):  # the heap grows to what a body needs once
        refused()
    bodies = 20
    before = _page_faults(server.process.pid)
    for _ in range(bodies):
        refused()
    faulted = _page_faults(server.process.pid) - before
    assert faulted < bodies * 64, f"{faulted / bodies:.0f} pages faulted in per 4 MiB body"
