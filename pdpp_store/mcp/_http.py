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
2. Tokens are compared in constant time, each against every known token (`http.Tokens`).
3. The transport is stateless (no MCP session outlives its request), so a grant never rides on a
   session another token opened.
4. The app is path-agnostic (mount it at `/mcp`, or serve it alone) and owns a lifespan that runs
   the SDK's session manager; a parent app must run `app.router.lifespan_context(app)` inside
   its own lifespan.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

from pdpp_store import AsyncStore, Grant
from pdpp_store.http import (
    METADATA_PATH,
    Tokens,
    Unauthenticated,
    bearer_token,
    protected_resource_metadata,
    unauthenticated_response,
)

from ._server import create_server

__all__ = ["GRANT_SCOPE_KEY", "http_app"]

GRANT_SCOPE_KEY = "pdpp_store.grant"


def _request_grant(request: Any) -> Grant:
    grant = None if request is None else request.scope.get(GRANT_SCOPE_KEY)
    if not isinstance(grant, Grant):  # only reachable if the app is wired around rule 1
        raise RuntimeError("no authenticated grant on this request")
    return grant


def http_app(
    store: AsyncStore, tokens: Mapping[str, Grant], *, resource_path: str = "/mcp"
) -> Starlette:
    """A Streamable HTTP MCP app over `store`: bearer token -> grant (see the module's rules).
    `resource_path` is where it is served, whose RFC 9728 metadata a 401 names."""
    known = Tokens(tokens)
    manager = StreamableHTTPSessionManager(
        app=create_server(store, _request_grant), stateless=True, json_response=True
    )

    async def authenticated(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        try:
            grant = known.grant_of(bearer_token(request.headers.get("authorization")))
        except Unauthenticated as refused:
            await unauthenticated_response(request, refused, resource_path)(scope, receive, send)
            return
        await manager.handle_request({**scope, GRANT_SCOPE_KEY: grant}, receive, send)

    async def metadata(request: Request) -> JSONResponse:
        return JSONResponse(protected_resource_metadata(request, resource_path))

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    routes = [
        Route(METADATA_PATH + resource_path, metadata, methods=["GET"]),
        Mount("/", app=authenticated),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
