"""`create_app(store, tokens)`: the FastAPI application over one `AsyncStore` (§10).

Owns: authentication (bearer token -> grant, per request), the refusal of unknown query
parameters, the RFC 9728 protected-resource metadata, the OpenAPI document, and the assembly of
routes (`_routes`), error handlers (`_errors`) and the MCP mount.

Rules:
1. Every `/v1` route first resolves the request's grant from `Authorization: Bearer <token>`;
   a missing or unknown token is 401 before anything else is looked at. The grant is applied by
   the library on every read: a cursor, id or blob id in a request grants nothing.
2. A query parameter the route does not declare is `invalid_request` naming it, and so is a
   declared one given twice (which of the two did the client mean?): see `_params`.
3. The OpenAPI document lists every status a route can answer with; FastAPI's generic 422
   "validation error" is removed, since validation errors answer 400 here.
"""

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.routing import Route

from pdpp_store import AsyncStore, Grant

from ._auth import Tokens
from ._errors import (
    METADATA_PATH,
    RequestIdMiddleware,
    install_error_handlers,
    protected_resource_metadata,
)
from ._params import Params
from ._routes import add_routes

__all__ = ["create_app"]

_NO_PARAMS = Params()

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token of the server's tokens file; it carries one PDPP grant.",
)


def _grant_resolver(tokens: Mapping[str, Grant]) -> Callable[..., Any]:
    known = Tokens(tokens)

    async def current_grant(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Grant:
        return known.grant_of(None if credentials is None else credentials.credentials)

    return current_grant


def _not_null(schema: dict[str, Any]) -> dict[str, Any]:
    """An optional parameter is absent, never null: `anyOf [X, null]` is documented as X."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [option for option in options if option != {"type": "null"}]
        if len(kept) == 1:
            rest = {key: value for key, value in schema.items() if key != "anyOf"}
            return {**kept[0], **rest}
    return schema


def _openapi_without_422(app: FastAPI) -> Callable[[], dict[str, Any]]:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            for path in document.get("paths", {}).values():
                for operation in path.values():
                    generic = operation.get("responses", {}).get("422", {})
                    if "HTTPValidationError" in str(generic):
                        del operation["responses"]["422"]
                    for parameter in operation.get("parameters", ()):
                        parameter["schema"] = _not_null(parameter["schema"])
            schemas = document.get("components", {}).get("schemas", {})
            for name in ("HTTPValidationError", "ValidationError"):
                schemas.pop(name, None)
            app.openapi_schema = document
        return app.openapi_schema

    return openapi


def create_app(
    store: AsyncStore,
    tokens: Mapping[str, Grant],
    *,
    mcp_app: Any | None = None,
    owns_store: bool = False,
) -> FastAPI:
    """The REST resource server over `store`, with `tokens` (token -> grant) as its only keys.

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
    )
    app.add_middleware(RequestIdMiddleware)
    install_error_handlers(app)

    current_grant = _grant_resolver(tokens)
    api = APIRouter(prefix="/v1", dependencies=[Depends(current_grant)])
    add_routes(api, store, current_grant)
    app.include_router(api)

    @app.get(
        METADATA_PATH,
        tags=["discovery"],
        summary="OAuth 2.0 protected-resource metadata (RFC 9728)",
    )
    async def protected_resource(request: Request) -> dict[str, Any]:
        _NO_PARAMS.parse(request)
        return protected_resource_metadata(request, "")

    @app.get(
        METADATA_PATH + "/mcp",
        tags=["discovery"],
        summary="OAuth 2.0 protected-resource metadata of the MCP endpoint (RFC 9728)",
    )
    async def protected_mcp_resource(request: Request) -> dict[str, Any]:
        _NO_PARAMS.parse(request)
        return protected_resource_metadata(request, "/mcp")

    if mcp_app is not None:
        # `/mcp` itself (where MCP clients post) without a redirect, and any path below it.
        app.router.routes.append(Route("/mcp", endpoint=mcp_app))
        app.mount("/mcp", mcp_app)

    app.openapi = _openapi_without_422(app)  # type: ignore[method-assign]
    return app
