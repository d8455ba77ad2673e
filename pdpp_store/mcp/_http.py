"""The MCP server over Streamable HTTP, with bearer tokens: an ASGI app to serve or to mount.

Rules:
1. Every request carries `Authorization: Bearer <token>`; the token's grant (from the tokens
   map) is the grant of that request and of nothing else. A missing or unknown token is the
   same 401 as the REST API's (`pdpp_store.http.unauthenticated_response`: the error envelope
   (docs/contract.md §7) with `request_id`, `WWW-Authenticate` with the `resource_metadata` of
   `resource_path`), before the MCP layer sees the request. That metadata (RFC 9728) is served by
   the app itself, without a token, at `/.well-known/oauth-protected-resource` + `resource_path`, so
   a 401 of the app served alone names a URL that answers (the REST app it is mounted on serves it
   too).
2. Tokens are resolved by the app's `http.Resolver` (a fixed map is `http.Tokens`, which
   compares in constant time, each against every known token); a resolver that cannot tell
   (its authorization server unreachable) answers its own error (503), never a grant.
3. The transport is stateless (no MCP session outlives its request), so a grant never rides on a
   session another token opened.
4. A POST's body is read here before the SDK sees it, so these refusals are envelopes, not the
   SDK's plain text or validation dumps: a `Content-Type` other than `application/json` is
   `unsupported_media_type` (415); a body over `MAX_BODY_BYTES` is `request_too_large` (413),
   answered as soon as the declared length or the bytes received pass it, never read whole; a
   body that is not one JSON object (malformed, `null`, `[]`, a batch) is `invalid_request`
   (400, `param: "body"`). A client that disconnects mid-body is one log line, no traceback, and
   no answer.
5. Every other refusal of the transport is an envelope too, after the token: a method other
   than POST is 405 `method_not_allowed` (`Allow: POST`; the server is stateless, so it offers
   no GET stream and no session to DELETE); an `Mcp-Session-Id` is 404 `session_not_found` (no
   session was ever issued); an `MCP-Protocol-Version` the SDK does not speak is 400
   `invalid_request` naming `mcp-protocol-version`; an `Accept` without JSON is 406
   `not_acceptable` (after the body's checks). Whatever the SDK itself still refuses (a
   status of 400 or more) is turned into the envelope of that status, its message kept.
6. The app is path-agnostic (mount it at `/mcp`, or serve it alone) and owns a lifespan that runs
   the SDK's session manager; a parent app must run `app.router.lifespan_context(app)` inside
   its own lifespan.
7. A POST that is one plain JSON-RPC `tools/call` is answered by `_fast` without the SDK's
   per-request transport, through the same SDK runner and server, to the same bytes; whatever
   `_fast` is not sure of goes to the SDK as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import Message, Receive, Scope, Send

from pdpp_store import AsyncStore, BadRequest, Grant, StoreError, audit_context
from pdpp_store.http import (
    METADATA_PATH,
    PUBLIC_URL_KEY,
    Refused,
    Resolver,
    Unauthenticated,
    bearer_token,
    error_response,
    protected_resource_metadata,
    refused,
    request_id,
    resolver,
    unauthenticated_response,
)

from ._fast import answer_tool_call
from ._server import create_server

__all__ = [
    "GRANT_SCOPE_KEY",
    "MAX_BODY_BYTES",
    "PROTOCOL_VERSIONS",
    "http_app",
]

GRANT_SCOPE_KEY = "pdpp_store.grant"
MAX_BODY_BYTES = 4 * 1024 * 1024
"""The largest JSON-RPC message a POST may carry (rule 4): the SDK's own limit."""
PROTOCOL_VERSIONS = frozenset((*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS))
"""The `MCP-Protocol-Version` values the SDK speaks (rule 5)."""
FAST_TOOL_CALLS = True
"""Whether a plain `tools/call` is answered without the SDK's transport (rule 7); the tests
turn it off to compare both paths."""
_CODES = {
    400: ("invalid_request", "invalid_request_error"),
    403: ("origin_not_allowed", "permission_error"),
    404: ("session_not_found", "not_found_error"),
    405: ("method_not_allowed", "invalid_request_error"),
    406: ("not_acceptable", "invalid_request_error"),
    409: ("conflict", "conflict_error"),
    413: ("request_too_large", "invalid_request_error"),
    415: ("unsupported_media_type", "invalid_request_error"),
    421: ("host_not_allowed", "invalid_request_error"),
}
"""The envelope's code and type of a refusal the SDK answers itself, by status (rule 5)."""

log = logging.getLogger("pdpp_store.mcp")


class _Disconnected(Exception):
    """The client went away before its body was read."""


def _too_large() -> StoreError:
    return refused(
        413,
        "request_too_large",
        f"the request body is larger than {MAX_BODY_BYTES:,} bytes",
        param="body",
    )


async def _read_body(request: Request, receive: Receive) -> bytes:
    """The whole body of a POST, refused once it passes `MAX_BODY_BYTES` (rule 4)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and len(declared) < 20 and int(declared) > MAX_BODY_BYTES:
        raise _too_large()
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise _too_large()
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)


def _check_message(body: bytes) -> None:
    """One JSON object, or `invalid_request` naming the body (rule 4)."""
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):  # malformed, not UTF-8, a number too long
        raise BadRequest("invalid_request", "the body is not valid JSON", param="body") from None
    if not isinstance(message, dict):
        raise BadRequest(
            "invalid_request",
            "the body must be one JSON-RPC message (a JSON object); batches are not supported",
            param="body",
        )


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` first, then whatever the connection says (a disconnect)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _header_refusal(request: Request) -> Refused | None:
    """What rule 5 refuses of a request's method and headers, before its body is read."""
    if request.method != "POST":
        return refused(
            405,
            "method_not_allowed",
            f"{request.method} is not served at the MCP endpoint: it takes POST only (the server"
            " is stateless: no GET stream, no session to DELETE)",
            param="method",
        )
    if "mcp-session-id" in request.headers:
        return refused(
            404,
            "session_not_found",
            "this server is stateless and issued no session: send requests without Mcp-Session-Id",
            param="mcp-session-id",
            error_type="not_found_error",
        )
    version = request.headers.get("mcp-protocol-version")
    if version is not None and version not in PROTOCOL_VERSIONS:
        return refused(
            400,
            "invalid_request",
            f"MCP-Protocol-Version must be one of {', '.join(sorted(PROTOCOL_VERSIONS))}",
            param="mcp-protocol-version",
        )
    media_type = request.headers.get("content-type", "").split(";")[0].strip()
    if media_type.lower() != "application/json":
        return refused(
            415,
            "unsupported_media_type",
            "the body must be Content-Type: application/json",
            param="content-type",
        )
    return None


def _accept_refusal(request: Request) -> Refused | None:
    """An `Accept` without JSON (rule 5), checked once the body is read."""
    accepted = {
        part.split(";")[0].strip().lower() for part in request.headers.get("accept", "").split(",")
    }
    if not accepted & {"application/json", "application/*", "*/*"}:
        return refused(
            406,
            "not_acceptable",
            "the request must accept application/json (Accept: application/json,"
            " text/event-stream)",
            param="accept",
        )
    return None


def _enveloping(scope: Scope, send: Send) -> Send:
    """A `send` that turns an answer of status 400 or more into the envelope (rule 5)."""
    held: dict[str, Any] = {}

    async def enveloped(message: Message) -> None:
        if message["type"] == "http.response.start" and message.get("status", 200) >= 400:
            held["start"] = message
            held["body"] = b""
            return
        if "start" not in held:
            await send(message)
            return
        if message["type"] != "http.response.body":
            return
        held["body"] += message.get("body", b"")
        if message.get("more_body", False) and len(held["body"]) < 65536:
            return
        start, said = held.pop("start"), _said(held.pop("body"))
        status = int(start["status"])
        code, kind = _CODES.get(status, ("internal_error", "api_error"))
        allow = [(n, v) for n, v in start.get("headers", []) if n.lower() == b"allow"]
        error = refused(status, code, said or f"refused ({status})", error_type=kind)
        answer = error_response(Request(scope), error, {n.decode(): v.decode() for n, v in allow})
        await answer(scope, _no_receive, send)

    return enveloped


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}


def _said(body: bytes) -> str:
    """The message of a refusal body of the SDK's: a JSON-RPC error's, or its text."""
    try:
        parsed = json.loads(body)
        message = parsed["error"]["message"]
        if isinstance(message, str):
            return message[:300]
    except (ValueError, TypeError, KeyError, RecursionError):
        pass
    return body[:300].decode("utf-8", errors="replace").strip()


def _request_grant(request: Any) -> Grant:
    grant = None if request is None else request.scope.get(GRANT_SCOPE_KEY)
    if not isinstance(grant, Grant):  # only reachable if the app is wired around rule 1
        raise RuntimeError("no authenticated grant on this request")
    return grant


def _request_public_url(request: Any) -> str | None:
    """The public base URL `serve` names itself by (`PUBLIC_URL_KEY`), if it set one."""
    named = None if request is None else request.scope.get(PUBLIC_URL_KEY)
    return named if isinstance(named, str) else None


def http_app(
    store: AsyncStore,
    tokens: Mapping[str, Grant] | Resolver,
    *,
    resource_path: str = "/mcp",
) -> Starlette:
    """A Streamable HTTP MCP app over `store`: bearer token -> grant (see the module's rules),
    by a map of tokens or a `pdpp_store.http.Resolver`. `resource_path` is where it is served,
    whose RFC 9728 metadata a 401 names."""
    known = resolver(tokens)
    server = create_server(store, _request_grant, public_url=_request_public_url)
    manager = StreamableHTTPSessionManager(
        app=server,
        stateless=True,
        json_response=True,
    )

    async def authenticated(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        presented = bearer_token(request.headers.get("authorization"))
        try:
            access = await known.resolve(presented, store)
        except Unauthenticated as refusal:
            await unauthenticated_response(request, refusal, resource_path)(scope, receive, send)
            return
        except StoreError as error:  # the authorization server could not answer: fail closed
            await error_response(request, error)(scope, receive, send)
            return
        with audit_context("mcp", request_id=request_id(scope), client=access.client):
            await answer(scope, request, receive, send, access.grant)

    async def answer(
        scope: Scope, request: Request, receive: Receive, send: Send, grant: Grant
    ) -> None:
        try:
            refusal = _header_refusal(request)
            if refusal is not None:
                raise refusal
            body = await _read_body(request, receive)
            _check_message(body)
            refusal = _accept_refusal(request)
            if refusal is not None:
                raise refusal
        except _Disconnected:
            log.warning(
                "client disconnected before its request body was read (%s %s, %s)",
                request.method,
                scope.get("root_path", "") + scope.get("path", ""),
                request_id(scope),
            )
            return
        except StoreError as error:
            headers = {"Allow": "POST"} if error.http_status == 405 else None
            await error_response(request, error, headers)(scope, receive, send)
            return
        granted = {**scope, GRANT_SCOPE_KEY: grant}
        replayed = _replaying(body, receive)
        if FAST_TOOL_CALLS and await answer_tool_call(
            server, manager, Request(granted, replayed), send, body
        ):
            return
        await manager.handle_request(granted, replayed, _enveloping(scope, send))

    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(
            protected_resource_metadata(request, resource_path, known.authorization_servers)
        )

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    routes = [
        Route(METADATA_PATH + resource_path, metadata, methods=["GET"]),
        Mount("/", app=authenticated),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
