"""`pdpp-store serve`: the real command as a subprocess on 127.0.0.1, spoken to over a socket:
REST with httpx, and MCP at `/mcp` with the SDK's Streamable HTTP client.

The server is started on a free port, waited for (by polling its metadata route), used, and
ended by its pid (SIGINT: uvicorn's own graceful stop), on every database.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from _data import MAILBOX, attachment
from _rest import NARROW, OWNER, TEXT, TOKEN_GRANTS, seed, window_path
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pdpp_store import AsyncStore, Store

CLI = Path(sys.executable).with_name("pdpp-store")
STARTUP_SECONDS = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Server:
    def __init__(self, process: subprocess.Popen[bytes], base_url: str) -> None:
        self.process = process
        self.base_url = base_url

    def stop(self) -> str:
        """End the server by its pid and return what it logged."""
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait()
        assert self.process.stderr is not None
        return self.process.stderr.read().decode(errors="replace")


def start(url: str, tokens: Path) -> Server:
    port = free_port()
    process = subprocess.Popen(
        [str(CLI), "--db", url, "serve", "--tokens", str(tokens), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server = Server(process, f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"serve exited early: {server.stop()}")
        try:
            httpx.get(f"{server.base_url}/.well-known/oauth-protected-resource", timeout=1)
            return server
        except httpx.TransportError:
            time.sleep(0.1)
    log = server.stop()
    raise AssertionError(f"serve did not start in {STARTUP_SECONDS}s: {log}")


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(TOKEN_GRANTS), encoding="utf-8")
    return path


@pytest.fixture
def server(db_url: str, tokens_file: Path) -> Iterator[Server]:
    async def seeded() -> None:
        store = await AsyncStore.open(db_url)
        try:
            await seed(store)
        finally:
            await store.close()

    asyncio.run(seeded())
    running = start(db_url, tokens_file)
    try:
        yield running
    finally:
        running.stop()


def test_serve_answers_rest_over_a_real_socket(server: Server) -> None:
    headers = {"Authorization": f"Bearer {OWNER}"}
    with httpx.Client(base_url=server.base_url, headers=headers) as client:
        response = client.get(window_path(), params={"field": "body_text", "limit_chars": 50})
        assert response.status_code == 200, response.text
        assert response.json()["window"]["text"] == TEXT[:50]
        follow = client.get(response.json()["links"]["next"])
        assert follow.json()["window"]["text"] == TEXT[50:100]
        refused = client.get(
            window_path(), params={"field": "body_text"}, headers={"Authorization": ""}
        )
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        document = client.get("/openapi.json").json()
        assert "/v1/streams/{stream}/records/{record_id}/field-window" in document["paths"]
    log = server.stop()
    assert server.process.returncode == 0, log
    assert "Uvicorn running on http://127.0.0.1:" in log


async def _mcp_read(base_url: str, token: str | None) -> Any:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
    ):
        return await client.call_tool(
            "read_record_field",
            {"id": f"{MAILBOX}/message_bodies:b1", "field_path": "body_text", "limit_chars": 40},
        )


def test_serve_answers_mcp_at_slash_mcp_with_the_same_tokens(server: Server) -> None:
    result = asyncio.run(_mcp_read(server.base_url, OWNER))
    assert not result.is_error
    assert result.structured_content["window"]["text"] == TEXT[:40]
    header, _, text = result.content[0].text.partition("\n")
    assert text == TEXT[:40]
    assert json.loads(header)["range"] == [0, 40]
    refused = httpx.post(f"{server.base_url}/mcp", json={})
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    narrow = asyncio.run(_mcp_read(server.base_url, NARROW))
    assert not narrow.is_error  # body_text is granted to the narrow token
    log = server.stop()
    assert server.process.returncode == 0, log


def _refusal(response: httpx.Response) -> tuple[dict[str, Any], str]:
    """A 401's envelope without its request id (checked against the header), and its
    challenge's `resource_metadata` URL."""
    assert response.status_code == 401, response.text
    assert response.headers["Cache-Control"] == "no-store"
    error = response.json()["error"]
    assert error.pop("request_id") == response.headers["X-Request-Id"]
    challenge = response.headers["WWW-Authenticate"]
    assert challenge.startswith('Bearer realm="pdpp-store", resource_metadata="')
    assert ('error="invalid_token"' in challenge) == (error["code"] == "invalid_token")
    return error, challenge.split('resource_metadata="')[1].split('"')[0]


def test_rest_and_mcp_refuse_with_one_401(server: Server) -> None:
    """Both surfaces answer a missing or unknown token with the same envelope (request id
    included) and a challenge naming their own resource's RFC 9728 metadata, which is served."""
    base = server.base_url
    metadata = f"{base}/.well-known/oauth-protected-resource"
    for authorization, code in (
        ("", "missing_token"),
        ("Bearer tok_unknown_0000", "invalid_token"),
    ):
        headers = {"Authorization": authorization} if authorization else {}
        rest, rest_metadata = _refusal(
            httpx.get(f"{base}{window_path()}", params={"field": "body_text"}, headers=headers)
        )
        mcp, mcp_metadata = _refusal(httpx.post(f"{base}/mcp", json={}, headers=headers))
        assert rest == mcp
        assert rest["code"] == code
        assert rest["type"] == "authentication_error"
        assert (rest_metadata, mcp_metadata) == (metadata, f"{metadata}/mcp")
    assert httpx.get(f"{metadata}/mcp").json()["resource"] == f"{base}/mcp"
    assert httpx.get(metadata).json()["resource"] == base
    server.stop()


BIG_BLOB_BYTES = 24 << 20
"""More than the loopback socket buffers hold, so the server is still reading when the record
goes."""


def test_a_download_whose_record_is_deleted_is_aborted_not_cut(server: Server, db_url: str) -> None:
    """Each step of a download is read through the grant: once the record naming the blob is
    deleted, the server closes the connection before the declared length (the client sees an
    incomplete body, never a shorter one taken for the whole), and says so in its log."""
    data = bytes(range(256)) * (BIG_BLOB_BYTES // 256)
    with Store.open(db_url) as store:
        blob = store.put_blob(data, "application/octet-stream")
        store.upsert_records(MAILBOX, "attachments", [attachment("a-big", blob.as_ref())])
        received = bytearray()
        headers = {"Authorization": f"Bearer {OWNER}"}
        url = f"{server.base_url}/v1/blobs/{blob.blob_id}"

        def download() -> None:
            with httpx.stream("GET", url, headers=headers, timeout=30) as response:
                assert response.status_code == 200
                assert response.headers["Content-Length"] == str(len(data))
                for part in response.iter_raw(1 << 16):
                    if not received:
                        store.delete_record(MAILBOX, "attachments", "a-big")
                    received.extend(part)

        with pytest.raises(httpx.RemoteProtocolError):
            download()
        assert 0 < len(received) < len(data)
        assert bytes(received) == data[: len(received)]
        assert httpx.get(url, headers=headers).status_code == 404
    log = server.stop()
    assert "blob download aborted after" in log
    assert "the grant no longer reaches it (blob_not_found)" in log


def test_serve_refuses_a_bad_tokens_file_before_starting(db_url: str, tmp_path: Path) -> None:
    bad = tmp_path / "tokens.json"
    bad.write_text('{"short": {}}', encoding="utf-8")
    done = subprocess.run(
        [str(CLI), "--db", db_url, "serve", "--tokens", str(bad), "--port", str(free_port())],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == b""
    error = json.loads(done.stderr)["error"]
    assert (error["code"], error["param"]) == ("invalid_tokens", "tokens[0]")
    assert b"short" not in done.stderr
