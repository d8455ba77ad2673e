"""The dependencies of the `/v1` routes: the application's store and the request's grant, and
the route class that hands them to the handlers.

    async def handler(request: Request, store: StoreDep, grant: GrantDep, stream: Stream) -> ...

`create_app` keeps both sources on `app.state`: the `AsyncStore` (`store`) and the function from
the request's bearer token to its grant (`grant_of`), so the routes can live at module level
(`_routes.router`) and one router serve any number of applications.

Rules:
1. The grant comes only from the request's `Authorization: Bearer <token>`, through
   the application's `pdpp_store.http.Resolver` (a tokens map, a tokens file, OAuth): a missing
   or unknown token is 401 before anything else is looked at.
2. The routes are `DirectRoute`s: what each handler takes is worked out once, when the route is
   registered, from its signature (the request, `StoreDep`, `GrantDep`, and path parameters
   typed `str` with no constraint; anything else is a `TypeError` then), and given to it
   directly on each request, the grant first. Nothing FastAPI would have run is skipped
   silently: a dependency other than the grant's and the store's is a `TypeError` when the
   route is registered (on the route or its router) or first handled (one its inclusion
   adds), and so is a handler not declared to return a `Response`. FastAPI's dependency
   solving, which cost about 0.1 ms of every request (more than a SQLite field window's read),
   runs for none of them.
3. The dependencies stay declared (`current_grant` on the router, `StoreDep` and `GrantDep` in
   the handlers' signatures) for FastAPI's OpenAPI document alone: its security scheme
   (`bearer`) and path parameters are what they were.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, get_args, get_origin

from fastapi import Depends, Request, Response, params
from fastapi.routing import APIRoute, _effective_route_context_var
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pdpp_store import AsyncStore, Grant
from pdpp_store.http import bearer_token

__all__ = [
    "DirectRoute",
    "GrantDep",
    "GrantOf",
    "StoreDep",
    "bearer",
    "current_grant",
    "current_store",
]

GrantOf = Callable[[str | None], Awaitable[Grant]]
"""What `app.state.grant_of` holds: the grant of the request's bearer token (or 401)."""

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token of the server's tokens file; it carries one PDPP grant.",
)


async def current_grant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Grant:
    """The grant of this request's bearer token (rule 1), as a FastAPI dependency (rule 3)."""
    grant_of: GrantOf = request.app.state.grant_of
    return await grant_of(None if credentials is None else credentials.credentials)


async def current_store(request: Request) -> AsyncStore:
    """The store the application serves."""
    store: AsyncStore = request.app.state.store
    return store


GrantDep = Annotated[Grant, Depends(current_grant)]
StoreDep = Annotated[AsyncStore, Depends(current_store)]

Handler = Callable[..., Coroutine[Any, Any, Response]]


class DirectRoute(APIRoute):
    """A `/v1` route whose handler is given its arguments directly (rule 2)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint: Handler = self.endpoint
        # The route as included (with its inclusion's dependencies), as `APIRoute` reads it.
        included = _effective_route_context_var.get()
        route = included if included is not None and included.original_route is self else self
        _only_ours(endpoint, route.dependant.dependencies)
        given = _arguments(endpoint, set(self.param_convertors))
        named = [(name, kind) for name, kind in given.items() if kind != "path"]
        path = [name for name, kind in given.items() if kind == "path"]

        async def handle(request: Request) -> Response:
            state = request.app.state
            grant_of: GrantOf = state.grant_of
            grant = await grant_of(bearer_token(request.headers.get("authorization")))  # first
            values = {"request": request, "store": state.store, "grant": grant}
            arguments = {name: values[kind] for name, kind in named}
            found = request.path_params
            for name in path:
                arguments[name] = found[name]
            return await endpoint(**arguments)

        return handle


def _only_ours(endpoint: Handler, dependencies: Any) -> None:
    """Refuse a dependency `DirectRoute` would not run (rule 2)."""
    for dependency in dependencies:
        if dependency.call not in (current_grant, current_store):
            named = getattr(dependency.call, "__name__", repr(dependency.call))
            raise TypeError(
                f"{endpoint.__name__}: a /v1 route runs no dependency but the grant's and the"
                f" store's, not {named}"
            )


def _arguments(endpoint: Handler, path: set[str]) -> dict[str, str]:
    """Each parameter of `endpoint` by what it is given: `request`, `store`, `grant` or `path`
    (a `str` path parameter of `path`); anything else is a `TypeError` (rule 2)."""
    if not inspect.iscoroutinefunction(endpoint):
        raise TypeError(f"{endpoint.__name__}: a /v1 handler is a coroutine function")
    signature = inspect.signature(endpoint, eval_str=True)
    returned = signature.return_annotation
    if not (isinstance(returned, type) and issubclass(returned, Response)):
        raise TypeError(f"{endpoint.__name__}: a /v1 handler is declared to return a Response")
    given: dict[str, str] = {}
    for name, parameter in signature.parameters.items():
        annotation = parameter.annotation
        if annotation is Request:
            given[name] = "request"
        elif annotation is StoreDep:
            given[name] = "store"
        elif annotation is GrantDep:
            given[name] = "grant"
        elif name in path and _is_str(annotation):
            given[name] = "path"
        else:
            raise TypeError(
                f"{endpoint.__name__}: parameter {name!r} is not the request, StoreDep, "
                "GrantDep or a str path parameter"
            )
    return given


def _is_str(annotation: object) -> bool:
    """`str`, or `Annotated[str, Path(description=...)]`: a path parameter FastAPI would not
    have checked either (a `Path` with a constraint, a pattern or a length, is not one)."""
    if get_origin(annotation) is not Annotated:
        return annotation is str
    kind, *extras = get_args(annotation)
    return kind is str and all(
        isinstance(extra, params.Path) and not extra.metadata for extra in extras
    )
