"""The read audit of the server processes (docs/contract.md §14): `pdpp-store mcp` over stdio,
driven by the official MCP SDK's client, records its tool calls (surface `mcp`, the client it
declared) and writes them when the process ends normally; `pdpp-store serve --workers 2` over a
real socket records every read of both workers, none lost and none twice, once it is stopped
gracefully.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import _served
import httpx
import pytest
from _data import MAILBOX
from _rest import OWNER, TOKEN_GRANTS, window_path
from _served import seed_served, start, tokens_file
from mcp import Client, StdioServerParameters
from mcp_types import Implementation

from pdpp_store import AuditEntry, Store

__all__ = ["tokens_file"]

B1 = f"{MAILBOX}/message_bodies:b1"


def _all_entries(url: str) -> list[AuditEntry]:
    entries: list[AuditEntry] = []
    with Store.open(url) as owner:
        while True:
            page = owner.list_audit(limit=1000, after_id=entries[-1].audit_id if entries else 0)
            if not page:
                return entries
            entries += page


# ---------------------------------------------------------------- stdio


def test_stdio_mcp_tool_calls_are_audited_and_written_at_exit(db_url: str, tmp_path: Path) -> None:
    seed_served(db_url)
    grant_file = tmp_path / "grant.json"
    grant_file.write_text(json.dumps(TOKEN_GRANTS[OWNER]), encoding="utf-8")
    command = shutil.which("pdpp-store", path=os.path.dirname(sys.executable))
    assert command is not None
    server = StdioServerParameters(
        command=command,
        args=["--db", db_url, "mcp", "--grant", str(grant_file)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search", {"q": "short"}),
        ("fetch", {"id": B1}),
        ("read_record_field", {"id": B1, "field_path": "body_text", "limit_chars": 30}),
    ]
    declared = Implementation(name="audit-probe", version="1.2")

    async def session() -> None:
        async with Client(server, client_info=declared) as client:
            for tool, arguments in calls:
                result = await client.call_tool(tool, arguments)
                assert not result.is_error, result
            # the calls' entries wait in the process (written each second and at exit): the
            # client closes its stdin now, and the server ends as it does when its host goes

    asyncio.run(session())
    entries = [e for e in _all_entries(db_url) if e.grant_id == "g-owner"]

    assert [e.operation for e in entries] == ["search", "read_record", "read_field_window"]
    assert {(e.surface, e.client, e.outcome) for e in entries} == {("mcp", "audit-probe/1.2", "ok")}
    # over stdio the request id is the JSON-RPC request's, one per call
    ids = [e.request_id for e in entries]
    assert all(i and i.startswith("jsonrpc_") for i in ids)
    assert len(set(ids)) == len(calls)
    assert entries[1].record_ids == (B1,)
    assert entries[2].fields == ("body_text",)


# ---------------------------------------------------------------- serve --workers 2


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listing:
        return [int(child) for child in listing.read().split()]


def _socket_owner(pids: list[int], port: int, client_port: int) -> int | None:
    """Which of `pids` holds the server end of the loopback connection from `client_port`."""
    inodes = set()
    with open("/proc/net/tcp", encoding="ascii") as table:
        for line in table.read().splitlines()[1:]:
            parts = line.split()
            local, remote = (int(end.rpartition(":")[2], 16) for end in parts[1:3])
            if (local, remote) == (port, client_port):
                inodes.add(f"socket:[{parts[9]}]")
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                        return pid
    return None


def test_serve_with_two_workers_records_every_read_once(
    db_url: str, tokens_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seed_served(db_url)
    # two workers importing the package at once start slowly on a loaded 2-core machine
    monkeypatch.setattr(_served, "STARTUP_SECONDS", 120.0)
    server = start(db_url, tokens_file, "--workers", "2")
    served: dict[int | None, int] = {}
    request_ids: list[str] = []
    try:
        port = int(server.base_url.rpartition(":")[2])
        children = _children(server.process.pid)
        headers = {"Authorization": f"Bearer {OWNER}"}
        params: dict[str, str | int] = {"field": "body_text", "limit_chars": 20}
        deadline = time.monotonic() + 120.0  # the second worker may still be starting
        while time.monotonic() < deadline:
            # a new connection each time (the kernel hands each to a worker), and a few reads
            # on it while it is open, so each worker answers several on one connection too
            with httpx.Client(base_url=server.base_url, headers=headers) as client:
                for _ in range(3):
                    answer = client.get(window_path(), params=params)
                    assert answer.status_code == 200, answer.text
                    request_ids.append(answer.headers["x-request-id"])
                client_port = answer.extensions["network_stream"].get_extra_info("client_addr")[1]
                worker = _socket_owner(children, port, client_port)
                served[worker] = served.get(worker, 0) + 3
            if len([pid for pid in served if pid is not None]) == 2 and len(request_ids) >= 200:
                break
    finally:
        log = server.stop()  # SIGINT: each worker closes its store, which writes what waits
    assert server.process.returncode == 0, log
    workers = [pid for pid in served if pid is not None]
    assert len(workers) == 2, served  # both workers answered
    entries = [e for e in _all_entries(db_url) if e.surface == "rest"]

    assert len({e.audit_id for e in entries}) == len(entries)
    # none lost, none twice
    assert sorted(e.request_id or "" for e in entries) == sorted(request_ids)
    assert len(set(request_ids)) == len(request_ids)
    assert {(e.operation, e.outcome, e.grant_id) for e in entries} == {
        ("read_field_window", "ok", "g-owner")
    }
