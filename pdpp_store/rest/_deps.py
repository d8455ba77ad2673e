"""The dependencies of the `/v1` routes: the application's store and the request's grant.

    async def handler(store: StoreDep, grant: GrantDep, ...) -> Response: ...

`create_app` keeps both sources on `app.state`: the `AsyncStore` (`store`) and the function from
the request's bearer credentials to its grant (`grant_of`), so the routes can live at module
level (`_routes.router`) and one router serve any number of applications.

Rules:
1. The grant comes only from the request's `Authorization: Bearer <token>`, through
   the application's `pdpp_store.http.Resolver` (a tokens map, a tokens file, OAuth): a missing
   or unknown token is 401 before anything else is looked at.
2. `current_grant` is the router's own dependency as well as the handlers', so FastAPI resolves
   it once per request, first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from pdpp_store import AsyncStore, Grant

__all__ = ["GrantDep", "GrantOf", "StoreDep", "bearer", "current_grant", "current_store"]

GrantOf = Callable[[HTTPAuthorizationCredentials | None], Awaitable[Grant]]
"""What `app.state.grant_of` holds: the grant of the request's bearer credentials (or 401)."""

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="bearer",
    description="A token of the server's tokens file; it carries one PDPP grant.",
)


async def current_grant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Grant:
    """The grant of this request's bearer token (rule 1)."""
    grant_of: GrantOf = request.app.state.grant_of
    return await grant_of(credentials)


async def current_store(request: Request) -> AsyncStore:
    """The store the application serves."""
    store: AsyncStore = request.app.state.store
    return store


GrantDep = Annotated[Grant, Depends(current_grant)]
StoreDep = Annotated[AsyncStore, Depends(current_store)]
