"""The MCP server over Streamable HTTP, with bearer tokens: an ASGI app to serve or to mount.

Rules:
1. Every request carries `Authorization: Bearer <token>`; the token's grant (from the tokens
   map) is the grant of that request and of nothing else. A missing or unknown token is 401 with
   `WWW-Authenticate: Bearer` and the §7 envelope, before the MCP layer sees the request.
2. Tokens are compared in constant time, each against every known token.
3. The transport is stateless (no MCP session outlives its request), so a grant never rides on a
   session another token opened.
4. The app is path-agnostic (mount it at `/mcp`, or serve it alone) and owns a lifespan that runs
   the SDK's session manager; a parent app must run `app.router.lifespan_context(app)` inside
   its own lifespan.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import Receive, Scope, Send

from pdpp_store import AsyncStore, Grant

from ._server import create_server

__all__ = ["GRANT_SCOPE_KEY", "http_app"]

GRANT_SCOPE_KEY = "pdpp_store.grant"

_UNAUTHORIZED = json.dumps(
    {
        "error": {
            "type": "authentication_error",
            "code": "unauthorized",
            "message": "a valid bearer token is required (Authorization: Bearer <token>)",
        }
    }
).encode()


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return str(token.strip())
    return None


def _grant_of(tokens: Mapping[str, Grant], presented: str | None) -> Grant | None:
    if presented is None:
        return None
    found = None
    for token, grant in tokens.items():
        if hmac.compare_digest(token.encode(), presented.encode()):
            found = grant
    return found


async def _refuse(send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="pdpp-store"'),
                (b"cache-control", b"no-store"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _UNAUTHORIZED})


def _request_grant(request: Any) -> Grant:
    grant = None if request is None else request.scope.get(GRANT_SCOPE_KEY)
    if not isinstance(grant, Grant):  # only reachable if the app is wired around rule 1
        raise RuntimeError("no authenticated grant on this request")
    return grant


def http_app(store: AsyncStore, tokens: Mapping[str, Grant]) -> Starlette:
    """A Streamable HTTP MCP app over `store`: bearer token -> grant (see the module's rules)."""
    known = dict(tokens)
    manager = StreamableHTTPSessionManager(
        app=create_server(store, _request_grant), stateless=True, json_response=True
    )

    async def authenticated(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        grant = _grant_of(known, _bearer(scope))
        if grant is None:
            await _refuse(send)
            return
        await manager.handle_request({**scope, GRANT_SCOPE_KEY: grant}, receive, send)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Mount("/", app=authenticated)], lifespan=lifespan)
