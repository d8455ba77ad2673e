"""Every failure on the wire: the §7 envelope plus a `request_id`, from one set of handlers.

    {"error": {"type", "code", "message", "param"?, ...details, "request_id"}}

Rules:
1. A `StoreError` answers with its own `http_status` and `to_dict()`; the REST layer adds only
   `request_id` (also sent as the `X-Request-Id` header of every response).
2. `type` is the reference's for 400 (`invalid_request_error`), 401 (`authentication_error`),
   403 (`permission_error`) and 404 (`not_found_error`), the library's own elsewhere.
3. FastAPI validates only path parameters (query parameters are `_params`'s); its errors
   become `invalid_request` (400) naming the parameter, and Starlette's own 404/405 become
   envelopes too. Nothing answers 422 but `field_not_text`.
4. Any other exception is logged with its traceback and answered with a generic 500 whose body
   holds no text of the exception.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException

from pdpp_store import BadRequest, NotFound, StoreError

__all__ = [
    "METADATA_PATH",
    "REQUEST_ID_HEADER",
    "PreconditionFailed",
    "RangeNotSatisfiable",
    "RequestIdMiddleware",
    "Unauthenticated",
    "error_response",
    "install_error_handlers",
    "metadata_url",
    "protected_resource_metadata",
    "unauthenticated_response",
    "www_authenticate",
]

log = logging.getLogger("pdpp_store.rest")

REQUEST_ID_HEADER = "X-Request-Id"
METADATA_PATH = "/.well-known/oauth-protected-resource"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Unauthenticated(StoreError):
    """No bearer token, or one the tokens file does not hold (401)."""

    http_status = 401
    error_type = "authentication_error"


class PreconditionFailed(StoreError):
    """`If-Match` named another digest than the field's current one (412)."""

    http_status = 412
    error_type = "precondition_error"


class RangeNotSatisfiable(StoreError):
    """A `Range` that starts at or past the end of the blob (416)."""

    http_status = 416
    error_type = "invalid_request_error"


class _MethodNotAllowed(StoreError):
    http_status = 405
    error_type = "invalid_request_error"


class _Internal(StoreError):
    http_status = 500
    error_type = "api_error"


class RequestIdMiddleware:
    """Gives each HTTP request an id (in `scope["state"]`) and sends it as `X-Request-Id`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if REQUEST_ID_HEADER not in headers:
                    headers.append(REQUEST_ID_HEADER, request_id)
            await send(message)

        await self.app(scope, receive, send_with_id)


def _request_id(scope: Scope) -> str:
    state = scope.setdefault("state", {})
    request_id = state.get("request_id")
    if not isinstance(request_id, str):
        request_id = "req_" + secrets.token_hex(12)
        state["request_id"] = request_id
    return request_id


def metadata_url(request: Request, resource_path: str = "") -> str:
    """The URL of the RFC 9728 protected-resource metadata (of the resource at `resource_path`)."""
    return f"{str(request.base_url).rstrip('/')}{METADATA_PATH}{resource_path}"


def protected_resource_metadata(request: Request, resource_path: str = "") -> dict[str, Any]:
    """RFC 9728 metadata of the resource at `resource_path`: its URL and how to present its
    bearer tokens (served at `METADATA_PATH + resource_path` by every app whose 401 names it)."""
    return {
        "resource": str(request.base_url).rstrip("/") + resource_path,
        "resource_name": "pdpp-store",
        "bearer_methods_supported": ["header"],
    }


def www_authenticate(request: Request, code: str, resource_path: str = "") -> str:
    """The challenge of a 401 (RFC 6750 §3, with RFC 9728's `resource_metadata` of the resource
    at `resource_path`)."""
    metadata = metadata_url(request, resource_path)
    challenge = f'Bearer realm="pdpp-store", resource_metadata="{metadata}"'
    if code == "invalid_token":
        challenge += ', error="invalid_token"'
    return challenge


def unauthenticated_response(
    request: Request, error: Unauthenticated, resource_path: str = ""
) -> JSONResponse:
    """The one 401 of every HTTP surface (REST, MCP): the envelope of `error` with the request's
    id, `WWW-Authenticate` naming the RFC 9728 metadata of the resource refused (at
    `resource_path`; the REST API's is ""), and `Cache-Control: no-store`."""
    challenge = www_authenticate(request, error.code, resource_path)
    return error_response(
        request, error, {"WWW-Authenticate": challenge, "Cache-Control": "no-store"}
    )


def error_response(
    request: Request, error: StoreError, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The envelope of `error`, with this request's id in the body and the headers."""
    request_id = _request_id(request.scope)
    body = error.to_dict()
    body["error"]["request_id"] = request_id
    return JSONResponse(
        body,
        status_code=error.http_status,
        headers={**(headers or {}), REQUEST_ID_HEADER: request_id},
    )


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
        if error.status_code == 405:
            store_error = _MethodNotAllowed(
                "method_not_allowed", f"{request.method} is not allowed on this route"
            )
        elif error.status_code == 404:
            store_error = NotFound("route_not_found", "no route matches this path")
        else:  # Starlette raises nothing else on its own; our code raises StoreErrors
            store_error = BadRequest("invalid_request", "the request is not valid")
        return error_response(request, store_error, dict(error.headers or {}))

    async def on_anything_else(request: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error answering %s %s", request.method, request.url.path)
        return error_response(request, _Internal("internal_error", "an internal error occurred"))

    app.add_exception_handler(StoreError, on_store_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_anything_else)
