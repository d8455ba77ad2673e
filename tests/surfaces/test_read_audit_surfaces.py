"""The read audit seen from every surface (docs/contract.md §14): a real `pdpp-store serve` is
read through every REST route and every MCP tool (and an MCP resource), the command line and
the library read the same store, and the audit is compared with what each answer served: one
entry per store call, under the request's id (REST: its `X-Request-Id`), the surface, the
grant, the operations the route or tool performs, the record ids and fields served, the
outcome of a refusal; and no value of the store (canaries, body text, blob bytes) anywhere in
the audit table.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import httpx
import httpx2
from _data import MAILBOX
from _rest import CANARY, DATA, NARROW, OWNER, SECRET_DATA, TEXT, TOKEN_GRANTS, window_path
from _served import CLI, seed_served, start, tokens_file
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import create_engine, select

from pdpp_store import AuditEntry, Grant, RecordRef, Store
from pdpp_store._sql.tables import read_audit
from pdpp_store.mcp._inputs import TOOL_OPERATIONS
from pdpp_store.rest._routes import ROUTE_OPERATIONS

__all__ = ["tokens_file"]

STREAM = "message_bodies"
B1 = f"{MAILBOX}/{STREAM}:b1"
B2 = f"{MAILBOX}/{STREAM}:b2"
A1 = f"{MAILBOX}/attachments:a1"
QUERY = "short"
VALUES = [CANARY, TEXT[100:140], TEXT[4000:4040], SECRET_DATA.decode()]
"""Stored values some answers below serve, which the audit must never hold."""


def _rest_session(base_url: str, blob_id: str) -> dict[str, httpx.Response]:
    """One request per REST route (by its operation id), and one refused."""
    asked: dict[str, tuple[str, str, dict[str, Any] | None]] = {
        "read_field_window": (
            OWNER,
            window_path("b1"),
            {"field": "body_text", "offset_chars": 100, "limit_chars": 40},
        ),
        "read_record": (OWNER, f"/v1/streams/{STREAM}/records/b1", None),
        "search": (NARROW, "/v1/search", {"q": QUERY}),
        "aggregate": (OWNER, f"/v1/streams/{STREAM}/aggregate", None),
        "read_blob": (OWNER, f"/v1/blobs/{blob_id}", None),
        "describe_grant": (OWNER, "/v1/schema", None),
        "list_streams": (NARROW, "/v1/streams", None),
        "describe_stream": (OWNER, f"/v1/streams/{STREAM}", None),
        "query_records": (OWNER, f"/v1/streams/{STREAM}/records", {"limit": 2}),
        "refused": (NARROW, f"/v1/streams/{STREAM}/records/b3", None),
    }
    answers = {}
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for name, (token, path, params) in asked.items():
            headers = {"Authorization": f"Bearer {token}"}
            answers[name] = client.get(path, params=params, headers=headers)
    return answers


async def _mcp_session(base_url: str) -> list[tuple[str, Any]]:
    """One call per MCP tool, and a resource read, in order."""
    calls: list[tuple[str, dict[str, Any]]] = [
        ("search", {"q": QUERY}),
        ("fetch", {"id": B1}),
        ("read_record_field", {"id": B1, "field_path": "body_text", "offset_chars": 4000}),
        ("schema", {}),
        ("query_records", {"stream": STREAM, "limit": 2}),
        ("aggregate", {"stream": STREAM}),
    ]
    done: list[tuple[str, Any]] = []
    headers = {"Authorization": f"Bearer {OWNER}"}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client,
    ):
        for tool, arguments in calls:
            result = await client.call_tool(tool, arguments)
            assert not result.is_error, result
            done.append((tool, result.structured_content))
        done.append(("resource", await client.read_resource(RecordRef(MAILBOX, STREAM, "b2").uri)))
    return done


def _by_request(entries: list[AuditEntry]) -> dict[str | None, list[AuditEntry]]:
    grouped: dict[str | None, list[AuditEntry]] = {}
    for entry in entries:
        grouped.setdefault(entry.request_id, []).append(entry)
    return grouped


def _ids(listed: list[dict[str, Any]]) -> tuple[str, ...]:
    return tuple(item["id"] for item in listed)


def _check_rest(answers: dict[str, httpx.Response], entries: list[AuditEntry]) -> None:
    assert set(answers) - {"refused"} == set(ROUTE_OPERATIONS)  # every route was read
    grouped = _by_request([e for e in entries if e.surface == "rest"])
    assert len(grouped) == len(answers)  # one request id per request, no entry without one
    for name, answer in answers.items():
        given = answer.headers["x-request-id"]
        mine = grouped[given]
        token = OWNER if name not in ("search", "list_streams", "refused") else NARROW
        assert {e.grant_id for e in mine} == {TOKEN_GRANTS[token]["grant_id"]}
        if name == "refused":
            error = answer.json()["error"]
            assert [(e.operation, e.outcome) for e in mine] == [("read_record", error["code"])]
            assert mine[0].record_ids == ()
            assert mine[0].record_count == 0
            continue
        assert answer.status_code == 200, answer.text
        assert {e.outcome for e in mine} == {"ok"}
        if name == "read_blob":  # one entry for the download, naming the record it came through
            assert [(e.operation, e.record_ids, e.fields) for e in mine] == [
                ("read_blob_range", (A1,), ("blob_ref",))
            ]
            assert (mine[0].stream, mine[0].connection_id) == ("attachments", MAILBOX)
            assert mine[0].terms["served_bytes"] == len(answer.content) == len(DATA)
            assert (mine[0].terms["offset_bytes"], mine[0].terms["length_bytes"]) == (0, len(DATA))
            assert set(ROUTE_OPERATIONS[name]) >= {mine[0].operation}
            continue
        assert {e.operation for e in mine} == set(ROUTE_OPERATIONS[name])
        body = answer.json()
        served = [e.record_ids for e in mine]
        if name == "read_field_window":
            assert served == [(B1,)]
            assert mine[0].fields == (body["field"]["path"],)
        elif name == "read_record":
            assert served == [(body["id"],)]
            assert set(body["data"]) <= set(mine[0].fields)
        elif name in ("search", "query_records"):
            assert served == [_ids(body["data"])]
            assert mine[0].record_count == len(body["data"])
            assert mine[0].terms.get("q", QUERY) == QUERY
        else:  # an aggregate, a discovery: no record served
            assert served == [()] * len(mine)


def _check_mcp(calls: list[tuple[str, Any]], entries: list[AuditEntry]) -> None:
    assert {tool for tool, _ in calls} - {"resource"} == set(TOOL_OPERATIONS)  # every tool
    mcp = [e for e in entries if e.surface == "mcp"]
    assert {e.grant_id for e in mcp} == {"g-owner"}
    assert all(e.request_id and e.request_id.startswith("req_") for e in mcp)
    grouped = list(_by_request(mcp).values())  # one HTTP request per call, in call order
    assert len(grouped) == len(calls)
    for (tool, structured), mine in zip(calls, grouped, strict=True):
        assert {e.outcome for e in mine} == {"ok"}
        if tool == "resource":
            assert [(e.operation, e.record_ids) for e in mine] == [("read_resource", (B2,))]
            continue
        performed = {e.operation for e in mine}
        assert performed & set(TOOL_OPERATIONS[tool]), (tool, performed)
        first = mine[0]
        if tool == "search":  # one entry: the hits' cards come with the search, no read each
            assert [e.operation for e in mine] == ["search"]
            assert first.terms["q"] == QUERY
            assert first.record_ids == _ids(structured["data"])
        elif tool == "fetch":
            assert [(e.operation, e.record_ids) for e in mine] == [("read_record", (B1,))]
        elif tool == "read_record_field":
            assert [(e.record_ids, e.fields) for e in mine] == [((B1,), ("body_text",))]
            assert first.terms["offset_chars"] == 4000
        elif tool == "query_records":
            assert first.record_ids == _ids(structured["data"])
        else:
            assert first.record_ids == ()


def _read_by_cli(db_url: str, tmp_path: Path) -> None:
    grant = tmp_path / "narrow.json"
    grant.write_text(json.dumps(TOKEN_GRANTS[NARROW]), encoding="utf-8")
    done = subprocess.run(
        [str(CLI), "--db", db_url, "read", "record", B2, "--grant", str(grant)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")


def test_every_route_tool_command_and_call_is_audited_as_served(
    db_url: str, tokens_file: Path, tmp_path: Path
) -> None:
    seed_served(db_url)
    blob_id = "blob_sha256_" + hashlib.sha256(DATA).hexdigest()  # the seed's a1 (by content)
    server = start(db_url, tokens_file)
    try:
        answers = _rest_session(server.base_url, blob_id)
        calls = asyncio.run(_mcp_session(server.base_url))
    finally:
        server.stop()  # a graceful stop closes the store, which writes what waits
    _read_by_cli(db_url, tmp_path)
    with Store.open(db_url) as library:
        library.read_record(Grant.from_dict(TOKEN_GRANTS[NARROW]), B2)
    with Store.open(db_url) as owner:
        entries = owner.list_audit(limit=1000)

    _check_rest(answers, entries)
    _check_mcp(calls, entries)
    cli = [e for e in entries if e.surface == "cli"]
    assert [(e.operation, e.grant_id, e.record_ids) for e in cli] == [
        ("read_record", "g-narrow", (B2,))
    ]
    library_entries = [e for e in entries if e.surface == "library"]
    assert [(e.operation, e.request_id, e.record_ids) for e in library_entries] == [
        ("read_record", None, (B2,))
    ]

    engine = create_engine(db_url.replace("+aiosqlite", ""))
    try:
        with engine.connect() as conn:
            table = json.dumps([list(row) for row in conn.execute(select(read_audit))])
    finally:
        engine.dispose()
    assert all(value not in table for value in VALUES)  # never a value
