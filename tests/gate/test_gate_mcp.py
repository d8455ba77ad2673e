"""P0 gate, proof 1 through the MCP server: no answer of any tool or resource, under any grant,
holds a byte the grant does not authorize (docs/contract.md §2 "Grants", §5 "Projection,
previews and binary data", §10 "Surfaces").

The canary dataset and its oracle are `test_gate_canaries`'s. Each hypothesis example draws a
grant and a few MCP requests (every tool: `search`, `fetch` of records, field-window and blob
URIs, `read_record_field` with every selector and identity form, `schema` with and without a
stream, `query_records` with filters, projections, counts and changes; every resource template),
runs them through the SDK's client against the server in-process, and asserts:

1. no canary outside the grant (the oracle's `forbidden`, blobs as metadata only) is in anything
   the client received: `content[]` text and links, `structuredContent`, resource text and
   `_meta`, JSON-RPC error data; apart from canaries the request itself carried (a field name,
   a needle);
2. none crossed the database boundary while the requests ran (`BoundaryAudit`);
3. the check is not vacuous: over the run, authorized canaries did reach the client.

Each example reaches the server one of the ways it is served, drawn with the grant: in process
under a fixed grant (as `pdpp-store mcp` over stdio), or over Streamable HTTP (`http_app`, in
process) with a bearer token resolved by a map, the tokens file (hashed, naming a stored grant)
or a JWT from a real authorization server (see `test_gate_rest`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from audit import BoundaryAudit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from test_gate_canaries import (
    DATASET,
    STREAMS,
    GrantDict,
    Key,
    authorized,
    forbidden,
    grants,
    load,
    selectors,
    targets,
)
from test_gate_rest import BASE_URL, RESOLVERS, _tokens, issuer

from pdpp_store import AsyncStore, FieldWindowRef, Grant, RecordRef, Store
from pdpp_store.mcp import create_server, http_app

__all__ = ["issuer"]  # the authorization server fixture, shared with the REST gate

MCP_EXAMPLES = int(os.environ.get("PDPP_GATE_MCP_EXAMPLES", "150"))


class Served:
    """The dataset in a database, an `AsyncStore` over it, and the event loop that drives it."""

    def __init__(self, url: str) -> None:
        with Store.open(url) as store:
            load(store)
        self.loop = asyncio.new_event_loop()
        self.store = self.loop.run_until_complete(AsyncStore.open(url))

    def close(self) -> None:
        self.loop.run_until_complete(self.store.close())
        self.loop.close()


@pytest.fixture
def served(db_url: str) -> Iterator[Served]:
    serving = Served(db_url)
    try:
        yield serving
    finally:
        serving.close()


def _id(key: Key, form: str) -> dict[str, Any]:
    connection_id, stream, record_id = key
    if form == "triple":
        return {"connection_id": connection_id, "stream": stream, "record_id": record_id}
    if form == "uri":
        return {"id": RecordRef(*key).uri}
    return {"id": f"{connection_id}/{stream}:{record_id}"}


@st.composite
def requests(draw: st.DrawFn, grant: GrantDict) -> tuple[str, Any, str]:
    """One MCP request: ("tool", (name, arguments)) or ("resource", uri), and what it names in
    plain text (handles encode their record and field)."""
    kinds = ["search", "fetch", "read", "read", "schema", "resource", "blob", "query", "query"]
    kind = draw(st.sampled_from(kinds))
    key, path = draw(targets(grant))
    return (*draw(_request(kind, key, path, grant)), f"{key}\x00{path}")


@st.composite
def _request(draw: st.DrawFn, kind: str, key: Key, path: str, grant: GrantDict) -> tuple[str, Any]:
    if kind == "search":
        canaries = [secret.canary for secret in DATASET.secrets]
        q = draw(st.sampled_from(["the", "é", "😀", "zzzz-none"]) | st.sampled_from(canaries))
        arguments: dict[str, Any] = {"q": q}
        if draw(st.booleans()):
            arguments["streams"] = draw(st.lists(st.sampled_from(STREAMS), min_size=1, unique=True))
        return "tool", ("search", arguments)
    if kind == "schema":
        return "tool", ("schema", {"stream": key[1]} if draw(st.booleans()) else {})
    if kind == "query":
        asked: dict[str, Any] = {"stream": key[1], "limit": draw(st.integers(1, 5))}
        if draw(st.booleans()):
            asked["fields"] = [path]
        if draw(st.booleans()):
            canaries = [secret.canary for secret in DATASET.secrets]
            asked["filter"] = {path: draw(st.sampled_from(canaries) | st.sampled_from(["x", 1]))}
        if draw(st.booleans()):
            asked["count"] = "exact"
        if draw(st.integers(0, 3)) == 0:
            asked["changes_since"] = "beginning"
        return "tool", ("query_records", asked)
    if kind == "fetch":
        form = draw(st.sampled_from(["id", "uri", "window"]))
        if form == "window":
            ref = FieldWindowRef(RecordRef(*key), path, offset_chars=draw(st.integers(0, 3000)))
            return "tool", ("fetch", {"id": ref.uri})
        return "tool", ("fetch", _id(key, form))
    if kind == "read":
        selector, _ = draw(selectors(key, path))
        form = draw(st.sampled_from(["id", "triple", "uri"]))
        return "tool", ("read_record_field", {**_id(key, form), "field_path": path, **selector})
    if kind == "blob":
        blob = draw(st.sampled_from(sorted(DATASET.blobs.values(), key=lambda b: b.key)))
        if draw(st.booleans()):
            return "tool", ("fetch", {"id": f"pdpp://blob/{blob.blob_id}"})
        return "resource", f"pdpp://blob/{blob.blob_id}"
    if draw(st.booleans()):
        return "resource", RecordRef(*key).uri
    offset = draw(st.integers(0, 3000))
    limit = draw(st.integers(1, 5000))
    return "resource", FieldWindowRef(RecordRef(*key), path, offset, limit).uri


def _said(result: Any) -> str:
    parts = []
    for block in result.content:
        parts.append(block.model_dump_json(by_alias=True))
    parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    parts.append(json.dumps(result.meta, ensure_ascii=False))  # an error's envelope
    return "\n".join(parts)


@contextlib.asynccontextmanager
async def _client(
    served: Served, grant: Grant, resolver: str, issuer: str | None
) -> AsyncIterator[Client]:
    """An SDK client of the server under `grant`: in process (`fixed`), or over Streamable HTTP
    with a token `resolver` resolves."""
    if resolver == "fixed":
        async with Client(create_server(served.store, grant)) as client:
            yield client
        return
    tokens, token = await _tokens(served, grant, resolver, issuer)  # type: ignore[arg-type]
    app = http_app(served.store, tokens)
    async with app.router.lifespan_context(app):
        http = httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app),
            base_url=BASE_URL,
            headers={"Authorization": f"Bearer {token}"},
        )
        async with (
            http,
            Client(streamable_http_client(f"{BASE_URL}/mcp", http_client=http)) as client,
        ):
            yield client


async def _ask(
    served: Served,
    grant: Grant,
    asks: list[tuple[str, Any, str]],
    resolver: str = "fixed",
    issuer: str | None = None,
) -> list[str]:
    answers = []
    async with _client(served, grant, resolver, issuer) as client:
        for kind, request, _ in asks:
            if kind == "tool":
                name, arguments = request
                answers.append(_said(await client.call_tool(name, arguments)))
                continue
            try:
                found = await client.read_resource(request)
                answers.append(found.model_dump_json(by_alias=True))
            except MCPError as error:
                answers.append(json.dumps(error.error.model_dump(mode="json")))
    return answers


@given(data=st.data())
@settings(
    max_examples=MCP_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_property_no_mcp_answer_shows_what_the_grant_excludes(
    served: Served, issuer: str, data: st.DataObject
) -> None:
    grant_dict = data.draw(grants("g-mcp"), label="grant")
    resolver = data.draw(st.sampled_from(("fixed", *RESOLVERS)), label="resolver")
    asks = [
        data.draw(requests(grant_dict), label="request")
        for _ in range(data.draw(st.integers(1, 6), label="requests"))
    ]
    check_mcp(served, grant_dict, asks, resolver, issuer)


def check_mcp(
    served: Served,
    grant_dict: GrantDict,
    asks: list[tuple[str, Any, str]],
    resolver: str = "fixed",
    issuer: str | None = None,
) -> None:
    """Rules 1 and 2 of the module for `asks` under `grant_dict`, reached as `resolver` says."""
    sent = json.dumps(asks, ensure_ascii=False).lower() + json.dumps(grant_dict).lower()
    secret = [c for c in forbidden(grant_dict) if c.lower() not in sent]
    with BoundaryAudit(served.store.engine) as audit:
        answers = served.loop.run_until_complete(
            _ask(served, Grant.from_dict(grant_dict), asks, resolver, issuer)
        )
    said = "\n".join(answers).lower()
    # Answers are JSON: a canary is ASCII letters and digits, never escaped, so it shows as is.
    shown = [c for c in secret if c.lower() in said]
    assert not shown, f"unauthorized canary in an MCP answer: {shown}; {asks} under {grant_dict}"
    cells = "".join(v if isinstance(v, str) else "" for v in audit.values).lower()
    crossed = [c for c in secret if c.lower() in cells]
    assert not crossed, f"unauthorized canary crossed into Python: {crossed}; {asks}"


def test_the_mcp_check_bites(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proof 3: a server that answers under another grant than the request's (here the owner's)
    fails `check_mcp`, for the right reason."""
    from pdpp_store.mcp import _server

    narrow = {"grant_id": "g-n", "streams": [{"name": "message_bodies", "fields": ["id"]}]}
    key = next(k for k in DATASET.records if k[1] == "message_bodies" and k[2] == "b04")
    asks: list[tuple[str, Any, str]] = [
        ("tool", ("fetch", {"id": f"{key[0]}/{key[1]}:{key[2]}"}), "")
    ]
    check_mcp(served, narrow, asks)  # the real server passes
    everything = Grant.from_dict({"grant_id": "g-all", "streams": [{"name": s} for s in STREAMS]})
    monkeypatch.setattr(_server, "_grant_of", lambda source, ctx: everything)
    with pytest.raises(AssertionError, match="unauthorized canary in an MCP answer"):
        check_mcp(served, narrow, asks)


def test_the_mcp_check_sees_authorized_canaries(served: Served) -> None:
    """Proof 3 for this proof: under the owner's grant, canaries do reach the client, so a
    missing canary above means an exclusion held, not a check that could not see."""
    owner = {"grant_id": "g-owner", "streams": [{"name": s} for s in STREAMS]}
    key = next(
        k for k in DATASET.records if k[1] == "message_bodies" and not DATASET.records[k].deleted
    )
    record = f"{key[0]}/{key[1]}:{key[2]}"
    asks: list[tuple[str, Any, str]] = [
        ("tool", ("fetch", {"id": record}), ""),
        ("tool", ("read_record_field", {"id": record, "field_path": "charset"}), ""),
        ("tool", ("query_records", {"stream": "message_bodies", "fields": ["charset"]}), ""),
        ("tool", ("schema", {"stream": "message_bodies"}), ""),
    ]
    said = "\n".join(
        served.loop.run_until_complete(_ask(served, Grant.from_dict(owner), asks))
    ).lower()
    assert any(c.lower() in said for c in authorized(owner))
    narrow = {"grant_id": "g-n", "streams": [{"name": "message_bodies", "fields": ["id"]}]}
    said = "\n".join(
        served.loop.run_until_complete(_ask(served, Grant.from_dict(narrow), asks))
    ).lower()
    assert not any(c.lower() in said for c in forbidden(narrow))
