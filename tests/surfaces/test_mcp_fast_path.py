"""The MCP app's fast path for `tools/call` (`pdpp_store/mcp/_fast.py`) against the SDK's own
stateless transport, on both databases: every request below is sent to one app twice, once with
the fast path and once without (`_http.FAST_TOOL_CALLS`), straight through ASGI, and the two
answers must be the same status, the same headers in the same order and the same body bytes.

The requests: every tool with valid arguments, arguments of the wrong type, unknown, missing or
not an object, an unknown tool, every kind of JSON-RPC id (string, integer, null, float, bool,
absent), a wrong `jsonrpc`, extra members, `_meta` and progress tokens, other methods,
notifications, `Content-Type`, `Accept` and `MCP-Protocol-Version` variants, two grants, and
argument objects drawn by hypothesis. Each also records whether the fast path answered, so a fast
path that quietly hands everything to the SDK fails (`test_the_fast_path_answers_plain_calls`).
Calls under two tokens in flight together must each get their own token's answer, and one call
answered by each path must leave the same read audit.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

import pytest
from _data import MAILBOX, attachment, body, manifest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mcp.server import Server
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    PROTOCOL_VERSION_META_KEY,
    CallToolRequestParams,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.types import Message

import pdpp_store.mcp._http as mcp_http
import pdpp_store.mcp._server as mcp_server
from pdpp_store import AsyncStore, Grant, Store
from pdpp_store.mcp import http_app
from pdpp_store.mcp._inputs import TOOL_INPUTS

MB = "message_bodies"
SMALL = f"{MAILBOX}/{MB}:small"
LONG = f"{MAILBOX}/{MB}:long"
LONG_TEXT = "".join(f"line {n:05d} of the long letter 😀 kumquat\n" for n in range(2000))
OWNER = "tok-owner"
NARROW = "tok-narrow"
JSON_ACCEPT = "application/json, text/event-stream"


def _load(url: str) -> str:
    gmail = manifest("gmail")
    with Store.open(url) as store:
        store.register_manifest(gmail)
        store.add_connection(MAILBOX, gmail["connector_id"])
        blob = store.put_blob(b"%PDF-1.7 fast path " * 64, "application/pdf")
        store.upsert_records(
            MAILBOX,
            MB,
            [body("small", "Lunch at noon? kumquat"), body("long", LONG_TEXT)],
        )
        store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
    return blob.blob_id


def _tokens() -> dict[str, Grant]:
    fields = ["id", "body_text", "message_received_at"]
    return {
        OWNER: Grant.owner(MAILBOX, MB, "attachments"),
        NARROW: Grant.from_dict(
            {"grant_id": "g-narrow", "streams": [{"name": MB, "fields": fields}]}
        ),
    }


@dataclass(frozen=True)
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes
    fast: bool
    """Whether the fast path answered it (never part of the comparison)."""


def _recording(taken: list[bool]) -> Callable[..., Awaitable[bool]]:
    """`answer_tool_call`, noting in `taken` whether it answered each request it was given."""
    real: Callable[..., Awaitable[bool]] = getattr(mcp_http, "answer_tool_call")  # noqa: B009

    async def recorded(*args: Any) -> bool:
        done = await real(*args)
        taken.append(done)
        return done

    return recorded


async def _exchange(
    app: Starlette,
    raw: bytes,
    headers: list[tuple[bytes, bytes]],
    *,
    request_id: str = "req_fixed",
    waiting: bool = False,
) -> list[Message]:
    """One POST of `raw` to `app` straight through ASGI: the messages it sent. The client
    disconnects once the body is read, or, `waiting`, not while the answer is made."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/mcp",
        "raw_path": b"/mcp",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"host", b"127.0.0.1"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "state": {"request_id": request_id},
    }
    given = False

    async def receive() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": raw, "more_body": False}
        if waiting:
            await asyncio.sleep(60)
        return {"type": "http.disconnect"}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


Ask = Callable[..., Awaitable[tuple[Answer, Answer]]]
Post = Callable[[Any, str], Awaitable[bytes]]


@asynccontextmanager
async def _served(url: str) -> AsyncIterator[tuple[Ask, str, Post]]:
    blob_id = _load(url)
    store = await AsyncStore.open(url)
    app: Starlette = http_app(store, _tokens())
    taken: list[bool] = []

    async def once(raw: bytes, headers: list[tuple[bytes, bytes]], fast: bool) -> Answer:
        taken.clear()
        if fast:
            return await _through(raw, headers)
        mcp_http.FAST_TOOL_CALLS = False
        try:
            return await _through(raw, headers)
        finally:
            mcp_http.FAST_TOOL_CALLS = True

    async def _through(raw: bytes, headers: list[tuple[bytes, bytes]]) -> Answer:
        sent = await _exchange(app, raw, headers)
        start = sent[0]
        assert start["type"] == "http.response.start"
        return Answer(
            status=start["status"],
            headers=list(start.get("headers", [])),
            body=b"".join(m.get("body", b"") for m in sent[1:]),
            fast=any(taken),
        )

    def _headers(
        data: bytes, token: str, content_type: str, accept: str
    ) -> list[tuple[bytes, bytes]]:
        return [
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", content_type.encode()),
            (b"accept", accept.encode()),
            (b"content-length", str(len(data)).encode()),
        ]

    async def post(message: Any, token: str) -> bytes:
        """One request on the fast path, with no bookkeeping: safe to run concurrently."""
        data = json.dumps(message).encode()
        return (await _through(data, _headers(data, token, "application/json", JSON_ACCEPT))).body

    async def ask(
        message: Any,
        *,
        token: str = OWNER,
        content_type: str = "application/json",
        accept: str = JSON_ACCEPT,
        version: str | None = None,
        raw: bytes | None = None,
        length: str | None = None,
    ) -> tuple[Answer, Answer]:
        data = raw if raw is not None else json.dumps(message).encode()
        headers = _headers(data, token, content_type, accept)
        if length is not None:
            headers = [(n, length.encode() if n == b"content-length" else v) for n, v in headers]
        if version is not None:
            headers.append((b"mcp-protocol-version", version.encode()))
        fast = await once(data, headers, fast=True)
        sdk = await once(data, headers, fast=False)
        assert not sdk.fast
        shown = f"{message!r} ({token}, {content_type}, {accept}, {version})"
        assert fast.status == sdk.status, shown
        assert fast.headers == sdk.headers, shown
        assert fast.body == sdk.body, (
            f"{shown}\n fast: {fast.body[:600]!r}\n sdk:  {sdk.body[:600]!r}"
        )
        return fast, sdk

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(mcp_http, "answer_tool_call", _recording(taken))
            async with app.router.lifespan_context(app):
                yield ask, blob_id, post
    finally:
        await store.close()


def call(name: Any, arguments: Any = None, *, request_id: Any = 1, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params, **extra}


def _valid_calls(blob_id: str) -> list[dict[str, Any]]:
    window = {"id": LONG, "field_path": "body_text"}
    return [
        call("read_record_field", window),
        call("read_record_field", {**window, "offset_chars": 5000, "limit_chars": 300}),
        call("read_record_field", {**window, "q": "line 01500", "before_chars": 10}),
        call(
            "read_record_field",
            {"connection_id": MAILBOX, "stream": MB, "record_id": "small", "field_path": "charset"},
        ),
        call("read_record_field", {"id": f"pdpp://field-window/{MAILBOX}/{MB}/long/body_text"}),
        call("fetch", {"id": SMALL}),
        call("fetch", {"id": LONG}),
        call("fetch", {"id": f"pdpp://blob/{blob_id}"}),
        call("search", {"q": "kumquat"}),
        call("search", {"q": "kumquat", "limit": 1}),
        call("schema", {}),
        call("schema"),
        call("query_records", {"stream": MB, "limit": 1}),
        call("query_records", {"stream": MB, "filter": {"id": "small"}}),
        call("aggregate", {"stream": MB}),
        call("aggregate", {"stream": MB, "group_by": "month"}),
    ]


async def test_the_fast_path_answers_plain_calls(db_url: str) -> None:
    """Every tool, valid or refused by the store, answered by the fast path to the same bytes."""
    async with _served(db_url) as (ask, blob_id, _):
        for message in _valid_calls(blob_id):
            for token in (OWNER, NARROW):
                fast, _ = await ask(message, token=token)
                assert fast.fast, message
                assert fast.status == 200
        refused = [
            call("read_record_field", {"id": LONG}),  # no field_path
            call("read_record_field", {"id": LONG, "field_path": "body_text", "nope": 1}),
            call("read_record_field", {"id": LONG, "field_path": "body_text", "offset_chars": "9"}),
            call("read_record_field", {"id": LONG, "field_path": "body_text", "limit_chars": -1}),
            call("read_record_field", {"id": 5, "field_path": "body_text"}),
            call("read_record_field", {"id": f"{MAILBOX}/{MB}:absent", "field_path": "body_text"}),
            call("fetch", {}),
            call("fetch", {"id": "pdpp://blob/nope"}),
            call("search", {"q": ""}),
            call("search", {"q": "kumquat", "limit": "ten"}),
            call("query_records", {"stream": "nope"}),
            call("aggregate", {"stream": MB, "group_by": 7}),
            call("no_such_tool", {}),
        ]
        for message in refused:
            fast, _ = await ask(message)
            assert fast.fast, message


@pytest.mark.parametrize(
    "request_id", ["abc", "", 0, 7, -3, 2**70, None, 1.5, 2.0, True, [], {}, "missing"]
)
async def test_every_id_answers_alike(sqlite_db_url: str, request_id: Any) -> None:
    async with _served(sqlite_db_url) as (ask, _, _):
        message = call("search", {"q": "kumquat"}, request_id=request_id)
        if request_id == "missing":
            del message["id"]
        fast, _ = await ask(message)
        if isinstance(request_id, str | int) and not isinstance(request_id, bool):
            assert fast.fast == (request_id != "missing")


async def test_envelopes_and_params_answer_alike(db_url: str) -> None:
    window = {"id": LONG, "field_path": "body_text", "limit_chars": 100}
    async with _served(db_url) as (ask, _, _):
        odd: list[Any] = [
            {**call("read_record_field", window), "jsonrpc": "1.0"},
            {k: v for k, v in call("read_record_field", window).items() if k != "jsonrpc"},
            {**call("read_record_field", window), "jsonrpc": 2.0},
            {**call("read_record_field", window), "extra": {"x": 1}},
            {**call("read_record_field", window), "result": {}},
            {**call("read_record_field", window), "error": {"code": 1, "message": "m"}},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call"},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": None},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}},
            call(7, {}),
            call("schema", ["not", "an", "object"]),
            call("schema", "text"),
            call(None, {}),
            {"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "schema"}},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": 1, "method": "resources/read", "params": {"uri": LONG}},
            {"jsonrpc": "2.0", "id": 1, "method": "nope/nope"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 1, "result": {}},
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            },
        ]
        for meta in (
            {"progressToken": 5},
            {"progressToken": "p-1"},
            {"progressToken": True},
            {"progressToken": 1.5},
            {"other": [1, 2]},
            {"io.modelcontextprotocol/related-task": {"taskId": "t"}},
            "not an object",
            None,
        ):
            message = call("read_record_field", window)
            message["params"]["_meta"] = meta
            odd.append(message)
        task = call("read_record_field", window)
        task["params"]["task"] = {"ttl": 1000}
        odd.append(task)
        for message in odd:
            await ask(message)
        for raw in (b"{}", b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "id": 2}'):
            await ask(raw.decode(), raw=raw)
        dup = (
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"schema","name":"x"}}'
        )
        await ask(dup.decode(), raw=dup)


async def test_headers_answer_alike(db_url: str) -> None:
    message = call("read_record_field", {"id": SMALL, "field_path": "body_text"})
    async with _served(db_url) as (ask, _, _):
        for version in (
            None,
            *sorted(HANDSHAKE_PROTOCOL_VERSIONS),
            *sorted(MODERN_PROTOCOL_VERSIONS),
        ):
            fast, _ = await ask(message, version=version)
            assert fast.fast == (version is None or version in HANDSHAKE_PROTOCOL_VERSIONS)
        for version in sorted(MODERN_PROTOCOL_VERSIONS):  # the modern entry, enveloped
            enveloped = call("read_record_field", {"id": SMALL, "field_path": "body_text"})
            enveloped["params"]["_meta"] = {
                PROTOCOL_VERSION_META_KEY: version,
                CLIENT_INFO_META_KEY: {"name": "t", "version": "1"},
                CLIENT_CAPABILITIES_META_KEY: {},
            }
            fast, _ = await ask(enveloped, version=version)
            assert not fast.fast
            await ask(enveloped)  # the envelope under no header: the legacy path, as the SDK routes
        for accept in (
            "application/json",
            "*/*",
            "application/*",
            "APPLICATION/JSON",
            "text/event-stream",
            "text/*, application/json;q=0.5",
            "",
        ):
            await ask(message, accept=accept)
        for length in (
            "+5000000",
            "4194305 ",
            "0x10",
            "-1",
            "99",
        ):  # what each side reads as a length
            await ask(message, length=length)
        for content_type in (
            "application/json; charset=utf-8",
            "Application/JSON",
            "application/json, text/plain",
            "application/json-seq",
            "text/plain",
        ):
            await ask(message, content_type=content_type)


_NAMES = st.sampled_from(
    [*sorted({name for schema in TOOL_INPUTS.values() for name in schema["properties"]}), "zzz"]
)
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-3, max_value=20_000)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from([LONG, SMALL, MB, MAILBOX, "body_text", "kumquat", "month", "small"])
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)
_ARGUMENTS = st.tuples(
    st.sampled_from(sorted(TOOL_INPUTS)),
    st.dictionaries(_NAMES, _VALUES, max_size=4),
)


def _drawn(count: int) -> list[tuple[str, dict[str, Any]]]:
    """`count` (tool, arguments) pairs drawn by hypothesis, before any request is sent."""
    drawn: list[tuple[str, dict[str, Any]]] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(_ARGUMENTS)
    def collect(pair: tuple[str, dict[str, Any]]) -> None:
        drawn.append(pair)

    collect()
    return drawn


async def test_drawn_arguments_answer_alike(db_url: str) -> None:
    async with _served(db_url) as (ask, _, _):
        for n, (tool, arguments) in enumerate(_drawn(60)):
            fast, _ = await ask(call(tool, arguments, request_id=n))
            assert fast.fast


async def test_the_read_audit_is_the_same_on_both_paths(db_url: str) -> None:
    """The fast path keeps the audit context: the same entries (surface, request id, client,
    grant, operation, records) for one call answered by each path."""
    async with _served(db_url) as (ask, _, _):
        await ask(call("read_record_field", {"id": LONG, "field_path": "body_text"}))
        await ask(call("fetch", {"id": SMALL}), token=NARROW)
    with Store.open(db_url) as opened:
        entries = [
            {k: v for k, v in asdict(e).items() if k not in {"audit_id", "at"}}
            for e in opened.list_audit()
        ]
    assert len(entries) == 4
    assert entries[0] == entries[1]
    assert entries[2] == entries[3]
    assert (entries[0]["surface"], entries[0]["request_id"]) == ("mcp", "req_fixed")


async def test_concurrent_calls_keep_their_own_grants(db_url: str) -> None:
    """Calls under two tokens in flight together on the fast path: each answer is its own
    token's (no grant, runner or context shared between requests)."""
    messages = [
        call("read_record_field", {"id": SMALL, "field_path": "charset"}),
        call("fetch", {"id": SMALL}),
        call("schema"),
    ]
    async with _served(db_url) as (ask, _, post):
        expected = {}
        for n, message in enumerate(messages):
            for token in (OWNER, NARROW):
                fast, _ = await ask(message, token=token)
                expected[n, token] = fast.body
        assert [expected[n, OWNER] != expected[n, NARROW] for n in range(len(messages))] == [
            True
        ] * len(messages)
        asked = [
            (n, token) for _ in range(6) for n in range(len(messages)) for token in (OWNER, NARROW)
        ]
        answers = await asyncio.gather(*(post(messages[n], token) for n, token in asked))
        for (n, token), answer in zip(asked, answers, strict=True):
            assert answer == expected[n, token], (messages[n], token)


class _FailingAfter:
    """A server middleware that lets the handler run, then raises `error` (what a middleware or
    the SDK's serialization may do once the tool has run)."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def __call__(self, ctx: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        await call_next(ctx)
        raise self.error


@pytest.mark.parametrize("code", [INVALID_PARAMS, METHOD_NOT_FOUND, INTERNAL_ERROR, "validation"])
async def test_a_failure_after_the_tool_is_answered_without_running_it_again(
    db_url: str, code: int | str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once the runner is called the fast path answers whatever it raises, as the dispatcher
    would: it never hands the request back to the SDK, which would run the tool a second time
    (two read-audit entries for one call on the fast path)."""
    if code == "validation":
        try:
            CallToolRequestParams.model_validate({})
        except ValidationError as invalid:
            error: Exception = invalid
    else:
        error = MCPError(code=int(code), message="refused after the tool")
    made = Server  # what `create_server` builds its server with

    def with_middleware(*args: Any, **kwargs: Any) -> Any:
        server = made(*args, **kwargs)
        server.middleware.append(_FailingAfter(error))
        return server

    monkeypatch.setattr(mcp_server, "Server", with_middleware)
    async with _served(db_url) as (ask, _, _):
        fast, _ = await ask(call("fetch", {"id": SMALL}))
        assert fast.fast
        assert json.loads(fast.body)["error"]["code"] == (
            INVALID_PARAMS if code == "validation" else code
        )
    with Store.open(db_url) as opened:
        assert len(opened.list_audit()) == 2  # one call on each path


async def test_params_the_runner_refuses_go_to_the_sdk_untouched(sqlite_db_url: str) -> None:
    """Params that fail the runner's own checks are handed to the SDK before the runner is
    called (one attempt, one span), and answered alike."""
    async with _served(sqlite_db_url) as (ask, _, _):
        for message in (
            call("schema", "text"),
            call(7, {}),
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call"},
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {}}},
        ):
            fast, _ = await ask(message)
            assert not fast.fast, message


async def test_concurrent_calls_keep_their_own_audit_context(db_url: str) -> None:
    """Forty calls in flight together on the fast path, each with its own request id and one of
    two tokens: every call is answered by the fast path under its own JSON-RPC id, and every
    read-audit entry names its own request's id with its own token's grant."""
    _load(db_url)
    store = await AsyncStore.open(db_url)
    app: Starlette = http_app(store, _tokens())
    taken: list[bool] = []

    async def one(n: int) -> Any:
        token = OWNER if n % 2 else NARROW
        raw = json.dumps(call("fetch", {"id": SMALL}, request_id=n)).encode()
        headers = [
            (b"authorization", f"Bearer {token}".encode()),
            (b"content-type", b"application/json"),
            (b"accept", b"application/json"),
        ]
        sent = await _exchange(app, raw, headers, request_id=f"req_{n}", waiting=True)
        return json.loads(b"".join(m.get("body", b"") for m in sent[1:]))

    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(mcp_http, "answer_tool_call", _recording(taken))
            async with app.router.lifespan_context(app):
                answers = await asyncio.gather(*(one(n) for n in range(40)))
    finally:
        await store.close()
    assert taken == [True] * 40
    assert [answer["id"] for answer in answers] == list(range(40))
    grants = {True: _tokens()[OWNER].grant_id, False: _tokens()[NARROW].grant_id}
    with Store.open(db_url) as opened:
        entries = opened.list_audit()
    assert sorted(e.request_id or "" for e in entries) == sorted(f"req_{n}" for n in range(40))
    for entry in entries:
        n = int((entry.request_id or "").removeprefix("req_"))
        assert entry.grant_id == grants[n % 2 == 1], entry
