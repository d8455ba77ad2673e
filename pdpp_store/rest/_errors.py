"""Every failure on the wire: the error envelope (docs/contract.md §7) plus a `request_id`, from one
set of handlers.

    {"error": {"type", "code", "message", "param"?, ...details, "request_id"}}

Rules:
1. A `StoreError` answers with its own `http_status` and `to_dict()`; the REST layer adds only
   `request_id` (also sent as the `X-Request-Id` header of every response): both are
   `pdpp_store.http`'s, shared with the MCP server, and so is the 401.
2. `type` is the reference's for 400 (`invalid_request_error`), 401 (`authentication_error`),
   403 (`permission_error`) and 404 (`not_found_error`), the library's own elsewhere.
3. FastAPI validates no parameter of a `/v1` route (query parameters are `_params`'s, path
   parameters are strings handed over as they are: `_deps.DirectRoute`); a validation error
   of any other route becomes `invalid_request` (400) naming the parameter, and Starlette's
   own 404/405 become envelopes too. Nothing answers 422 but `field_not_text`.
4. Any other exception is logged with its traceback and answered with a generic 500 whose body
   holds no text of the exception.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from pdpp_store import BadRequest, NotFound, StoreError
from pdpp_store.http import Unauthenticated, error_response, unauthenticated_response

__all__ = [
    "PreconditionFailed",
    "RangeNotSatisfiable",
    "install_error_handlers",
]

log = logging.getLogger("pdpp_store.rest")


class PreconditionFailed(StoreError):
    """`If-Match` named another digest than the field's current one (412)."""

    http_status = 412
    error_type = "precondition_error"


class RangeNotSatisfiable(StoreError):
    """A `Range` that starts at or past the end of the blob (416)."""

    http_status = 416
    error_type = "invalid_request_error"


def _allowed(allow: str) -> str:
    """The `Allow` of a 405: the route's methods, with `HEAD` wherever `GET` is (the routes'
    rule 8; the router names only the method a route was first registered with)."""
    methods = [method.strip() for method in allow.split(",") if method.strip()]
    if "GET" in methods and "HEAD" not in methods:
        methods.append("HEAD")
    return ", ".join(methods)


class _MethodNotAllowed(StoreError):
    http_status = 405
    error_type = "invalid_request_error"


class _Internal(StoreError):
    http_status = 500
    error_type = "api_error"


def _validation_error(error: RequestValidationError) -> StoreError:
    """The first problem FastAPI found, as the library would have named it."""
    for problem in error.errors():
        location = problem.get("loc", ())
        param = str(location[-1]) if location else "request"
        message = str(problem.get("msg", "is not valid")).replace("Input should be", "should be")
        if problem.get("type") == "missing":
            message = "is required"
        return BadRequest("invalid_request", f"{param} {message}", param=param)
    return BadRequest("invalid_request", "the request is not valid")


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers of the module's rules on `app`."""

    async def on_store_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StoreError)
        if isinstance(error, Unauthenticated):
            return unauthenticated_response(request, error)
        headers: dict[str, str] = {}
        if isinstance(error, RangeNotSatisfiable):
            headers["Content-Range"] = f"bytes */{error.details.get('size_bytes', '*')}"
        return error_response(request, error, headers)

    async def on_validation_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, RequestValidationError)
        return error_response(request, _validation_error(error))

    async def on_http_error(request: Request, error: Exception) -> JSONResponse:
        assert isinstance(error, StarletteHTTPException)
        store_error: StoreError
        headers = dict(error.headers or {})
        if error.status_code == 405:
            store_error = _MethodNotAllowed(
                "method_not_allowed", f"{request.method} is not allowed on this route"
            )
            headers["Allow"] = _allowed(headers.get("Allow", ""))
        elif error.status_code == 404:
            store_error = NotFound("route_not_found", "no route matches this path")
        else:  # Starlette raises nothing else on its own; our code raises StoreErrors
            store_error = BadRequest("invalid_request", "the request is not valid")
        return error_response(request, store_error, headers)

    async def on_anything_else(request: Request, error: Exception) -> JSONResponse:
        # The route's template, not the path: a path holds record ids (no personal data in logs).
        route = getattr(request.scope.get("route"), "path", "(unmatched)")
        log.exception("unexpected error answering %s %s", request.method, route)
        return error_response(request, _Internal("internal_error", "an internal error occurred"))

    app.add_exception_handler(StoreError, on_store_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_anything_else)
