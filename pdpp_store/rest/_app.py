"""`create_app(store, tokens)`: the FastAPI application over one `AsyncStore` (docs/contract.md
§10).

Owns: the application's state (the store, and bearer token -> grant through
`pdpp_store.http.Tokens`), the RFC 9728 protected-resource metadata routes, the OpenAPI
document, and the assembly of the module-level `/v1` router (`_routes`, whose dependencies are
`_deps`'s), the error handlers (`_errors`) and the mount of an MCP app given to it.

Rules:
1. Every `/v1` route first resolves the request's grant from `Authorization: Bearer <token>`;
   a missing or unknown token is 401 before anything else is looked at. The grant is applied by
   the library on every read: a cursor, id or blob id in a request grants nothing.
2. A query parameter the route does not declare is `invalid_request` naming it, and so is a
   declared one given twice (which of the two did the client mean?): see `_params`.
3. The OpenAPI document lists every status a route can answer with; FastAPI's generic 422
   "validation error" is removed, since validation errors answer 400 here. Its schemas are
   named components referenced by `$ref` (`_schemas`), it names its `servers`, and every
   response documents the `X-Request-Id` header it carries.
4. Every `GET` route answers `HEAD` too (RFC 9110 §9.3.2): the same handler, the same status and
   headers, no body (the server sends none for `HEAD`); the `/v1` routes declare theirs
   (`_routes`), the discovery routes here. The twins stay out of the OpenAPI document.
5. FastAPI's own OpenTelemetry is off (`NO_TELEMETRY`): its spans would record each request's
   query string (search terms, filters, record ids) wherever a tracer provider is configured,
   and asking whether one is cost every request 7 us. The access log times requests.
"""

import contextlib
import copy
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.telemetry import TelemetryConfig
from starlette.routing import Route

from pdpp_store import AsyncStore, Grant, note_client
from pdpp_store.http import (
    METADATA_PATH,
    RequestIdMiddleware,
    Resolver,
    protected_resource_metadata,
    resolver,
)

from ._asking import DISCOVERY_PARAMS  # noqa: F401 (importing it registers the asking routes on `/v1`)
from ._deps import GrantOf
from ._errors import install_error_handlers
from ._params import Params
from ._routes import router as v1
from ._schemas import COMPONENTS, HEADERS, error_responses, finish_document

__all__ = ["create_app"]

_NO_PARAMS = Params()


def _grant_resolver(tokens: Mapping[str, Grant] | Resolver, store: AsyncStore) -> GrantOf:
    """The grant of a request's bearer token under `tokens` (`app.state.grant_of`)."""
    known = resolver(tokens)

    async def grant_of(presented: str | None) -> Grant:
        access = await known.resolve(presented, store)
        note_client(access.client)  # the read audit's client (`audit_context`)
        return access.grant

    return grant_of


def _issuers(request: Request) -> Sequence[str]:
    known: Resolver = request.app.state.resolver
    return known.authorization_servers


async def protected_resource(request: Request) -> dict[str, Any]:
    _NO_PARAMS.parse(request)
    return protected_resource_metadata(request, "", _issuers(request))


async def protected_mcp_resource(request: Request) -> dict[str, Any]:
    _NO_PARAMS.parse(request)
    return protected_resource_metadata(request, "/mcp", _issuers(request))


_DISCOVERY = (
    (METADATA_PATH, protected_resource, "OAuth 2.0 protected-resource metadata (RFC 9728)"),
    (
        METADATA_PATH + "/mcp",
        protected_mcp_resource,
        "OAuth 2.0 protected-resource metadata of the MCP endpoint (RFC 9728)",
    ),
)
"""What a client reads before it holds a token: the RFC 9728 metadata its 401 names."""


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional parameter is absent, never null: `anyOf [X, null]` is documented as X."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [option for option in options if option != {"type": "null"}]
        if len(kept) == 1:
            rest = {key: value for key, value in schema.items() if key != "anyOf"}
            return {**kept[0], **rest}
    return schema


NO_TELEMETRY: TelemetryConfig = {
    "tracing": False,
    "metrics": False,
    "logs": False,
    "operation_spans": False,
    "auto_configure": False,
}
"""FastAPI's own OpenTelemetry, all of it off (rule 5)."""

LICENSE = {"name": "Apache-2.0", "identifier": "Apache-2.0"}
"""The project's license, as the document's `info.license` says it."""

SERVERS = [{"url": "/", "description": "The server this document was read from."}]
"""The document's `servers`: relative, so it holds behind any address or proxy prefix."""


def _openapi_without_422(app: FastAPI) -> Callable[[], dict[str, Any]]:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
                servers=SERVERS,
                license_info=LICENSE,
            )
            for path in document.get("paths", {}).values():
                for operation in path.values():
                    generic = operation.get("responses", {}).get("422", {})
                    if "HTTPValidationError" in str(generic):
                        del operation["responses"]["422"]
                    for parameter in operation.get("parameters", ()):
                        parameter["schema"] = _not_null(parameter["schema"])
                    for response in operation.get("responses", {}).values():
                        sent = response.setdefault("headers", {})
                        sent["X-Request-Id"] = HEADERS["X-Request-Id"]
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            schemas.update(copy.deepcopy(COMPONENTS))
            app.openapi_schema = finish_document(document)
        return app.openapi_schema

    return openapi


def create_app(
    store: AsyncStore,
    tokens: Mapping[str, Grant] | Resolver,
    *,
    mcp_app: Any | None = None,
    owns_store: bool = False,
) -> FastAPI:
    """The REST resource server over `store`, with `tokens` (token -> grant, or a
    `pdpp_store.http.Resolver`) as its only keys.

    `mcp_app` (an ASGI app, e.g. the MCP server's Streamable HTTP app) is mounted at `/mcp`;
    its lifespan runs with the application's. With `owns_store`, the store is closed when the
    application shuts down (still on the serving loop, before the server returns)."""

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        try:
            router_lifespan = getattr(getattr(mcp_app, "router", None), "lifespan_context", None)
            if router_lifespan is None:
                yield
            else:
                async with router_lifespan(mcp_app):
                    yield
        finally:
            if owns_store:
                await store.close()

    app = FastAPI(
        title="pdpp-store",
        version="1",
        description="Grant-enforced, bounded reads of personal-data records (PDPP).",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        telemetry=NO_TELEMETRY,  # rule 5
    )
    app.state.store = store
    app.state.resolver = resolver(tokens)
    app.state.grant_of = _grant_resolver(tokens, store)
    app.add_middleware(RequestIdMiddleware, surface="rest")
    install_error_handlers(app)
    app.include_router(v1)
    for path, endpoint, summary in _DISCOVERY:
        app.add_api_route(
            path,
            endpoint,
            methods=["GET"],
            tags=["discovery"],
            summary=summary,
            responses=error_responses(400),  # a query parameter it does not take
        )
        app.add_api_route(path, endpoint, methods=["HEAD"], include_in_schema=False)  # rule 4

    if mcp_app is not None:
        # `/mcp` itself (where MCP clients post) without a redirect, and any path below it.
        app.router.routes.append(Route("/mcp", endpoint=mcp_app))
        app.mount("/mcp", mcp_app)

    app.openapi = _openapi_without_422(app)  # type: ignore[method-assign]
    return app
