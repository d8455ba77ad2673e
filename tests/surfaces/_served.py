"""The server of the surface tests: `pdpp-store serve` started as a real subprocess on a free
loopback port, waited for (by polling its metadata route), and ended by its pid (SIGINT:
uvicorn's own graceful stop, then SIGKILL). Also the fixtures built on it: `tokens_file` (the
tokens of `_rest.TOKEN_GRANTS`) and `server` (a seeded store served), which a test module
imports and names in its `__all__`."""

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
from typing import IO, Any

import httpx
import httpx2
import pytest
from _data import MAILBOX
from _rest import TOKEN_GRANTS, seed
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from pdpp_store import AsyncStore

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
        if self.process.stderr is None:  # logged to a file of the caller's (`start(log=...)`)
            return ""
        return self.process.stderr.read().decode(errors="replace")


def start(url: str, tokens: Path, *options: str, log: IO[bytes] | None = None) -> Server:
    """`serve` on a free port; its stderr a pipe (read by `Server.stop`), or the file `log`."""
    port = free_port()
    process = subprocess.Popen(
        [str(CLI), "--db", url, "serve", "--tokens", str(tokens), "--port", str(port), *options],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE if log is None else log,
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
    logged = server.stop()
    raise AssertionError(f"serve did not start in {STARTUP_SECONDS}s: {logged}")


def seed_served(db_url: str) -> None:
    async def seeded() -> None:
        store = await AsyncStore.open(db_url)
        try:
            await seed(store)
        finally:
            await store.close()

    asyncio.run(seeded())


async def mcp_read(base_url: str, token: str | None) -> Any:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
    ):
        return await client.call_tool(
            "read_record_field",
            {"id": f"{MAILBOX}/message_bodies:b1", "field_path": "body_text", "limit_chars": 40},
        )


def serve_refused(
    url: str, tokens: Path, *options: str, env: dict[str, str] | None = None, alone: bool = True
) -> tuple[dict[str, Any], str]:
    """Run `serve` to its end, which must be a refusal: status 1 and the CLI's error envelope
    as the last line of stderr (its only line, when `alone`: refused before anything started).
    Returns the envelope's error and all of stderr."""
    done = subprocess.run(
        [str(CLI), "--db", url, "serve", "--tokens", str(tokens), *options],
        capture_output=True,
        timeout=120,
        check=False,
        env=env,
    )
    log = done.stderr.decode(errors="replace")
    assert done.returncode == 1, log
    assert done.stdout == b""
    lines = log.strip().splitlines()
    assert not alone or len(lines) == 1, log
    error: dict[str, Any] = json.loads(lines[-1])["error"]
    return error, log


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(TOKEN_GRANTS), encoding="utf-8")
    return path


@pytest.fixture
def server(db_url: str, tokens_file: Path) -> Iterator[Server]:
    seed_served(db_url)
    running = start(db_url, tokens_file)
    try:
        yield running
    finally:
        running.stop()
