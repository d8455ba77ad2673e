"""`pdpp_store.http`: the door every HTTP surface shares (the REST API and MCP's Streamable HTTP).

    known = Tokens({"token": grant})
    grant = known.grant_of(bearer_token(request.headers.get("authorization")))  # or 401
    return unauthenticated_response(request, refused, "/mcp")   # the one 401
    return error_response(request, error)                       # any envelope, with request_id
    app.add_middleware(RequestIdMiddleware)                     # X-Request-Id on every answer

It holds what both servers answer alike: bearer tokens to grants, the RFC 9728
protected-resource metadata a 401 names, the error envelope (docs/contract.md §7) with the request's
id, and the request ids themselves. `pdpp_store.rest` and `pdpp_store.mcp` import it; it imports
neither (nor `pdpp_store.serve`, which mounts both), so the two servers stand side by side with no
import between them. Behind the `[server]` extra: it needs Starlette, not FastAPI.

Rules:
1. A presented token is compared with every known one in constant time, so how long a refusal
   takes says nothing about how close a guess came.
2. No `Authorization: Bearer <token>` header is `missing_token`; a token not held is
   `invalid_token`. Both are `Unauthenticated` (401), which every surface answers with
   `unauthenticated_response`: the envelope, `WWW-Authenticate` naming the metadata of the
   resource refused, and `Cache-Control: no-store`.
3. Every HTTP request gets an id (`req_` and 24 hex digits), kept in `scope["state"]` and sent as
   `X-Request-Id`; every error envelope carries it as `request_id`.
4. An error a caller may retry as it is (`storage_busy`, `storage_unavailable`, `write_conflict`)
   carries `retry_after_s` in its envelope, and its answer says the same as `Retry-After`.
5. The server names itself (the metadata's `resource`, a 401's `resource_metadata`) by its
   public base URL: the one configured (`serve --public-url`, put in `scope[PUBLIC_URL_KEY]`),
   else the address the connection reached. Never by the request's `Host` header, which a
   client may set to anything.
"""

from __future__ import annotations

import hmac
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import JSONResponse

from pdpp_store import AsyncStore, BadRequest, Grant, StoreError, audit_context

__all__ = [
    "METADATA_PATH",
    "PUBLIC_URL_KEY",
    "REQUEST_ID_HEADER",
    "Access",
    "Refused",
    "RequestIdMiddleware",
    "Resolver",
    "Tokens",
    "Unauthenticated",
    "bearer_token",
    "check_public_url",
    "error_response",
    "metadata_url",
    "protected_resource_metadata",
    "public_base",
    "refused",
    "request_id",
    "resolver",
    "unauthenticated_response",
    "www_authenticate",
]

REQUEST_ID_HEADER = "X-Request-Id"
PUBLIC_URL_KEY = "pdpp_store.public_url"
"""The `scope` key of the server's public base URL, set by whatever serves the app (rule 5)."""
METADATA_PATH = "/.well-known/oauth-protected-resource"
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*")
"""A DNS name or IPv4 address, or an IPv6 address (as `urlsplit` gives it, unbracketed)."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# ---------------------------------------------------------------- bearer tokens


class Unauthenticated(StoreError):
    """No bearer token, or one the tokens file does not hold (401)."""

    http_status = 401
    error_type = "authentication_error"


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization` header value if it is a bearer token, else None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


@dataclass(frozen=True, slots=True)
class Access:
    """What a bearer token lets in: its grant, and the client it was issued to (when the
    token's issuer says)."""

    grant: Grant
    client: str | None = None


@runtime_checkable
class Resolver(Protocol):
    """Bearer token -> `Access`, however the server is configured: a fixed map (`Tokens`), a
    tokens file, OAuth introspection or JWT access tokens (`pdpp_store.auth`). Both servers ask
    it on every request; it raises `Unauthenticated` (401) for a missing or unknown token, and
    a `StoreError` of its own status (503) when it cannot tell, never a grant it is unsure of.
    `store` is the served store, where grants a token names by id are kept."""

    @property
    def authorization_servers(self) -> Sequence[str]:
        """The issuers of its tokens, named in the RFC 9728 metadata (none for static tokens)."""
        ...

    async def resolve(self, presented: str | None, store: AsyncStore) -> Access: ...


def resolver(tokens: Mapping[str, Grant] | Resolver) -> Resolver:
    """What a server is given as its tokens, as a `Resolver`: a map of token -> grant becomes
    `Tokens`; a resolver is itself."""
    return Tokens(tokens) if isinstance(tokens, Mapping) else tokens


class Tokens:
    """The server's tokens: which grant a presented bearer token carries (rule 1)."""

    authorization_servers: Sequence[str] = ()

    def __init__(self, tokens: Mapping[str, Grant]) -> None:
        self._known = [(token.encode(), grant) for token, grant in tokens.items()]

    async def resolve(self, presented: str | None, store: AsyncStore) -> Access:
        """As `grant_of`, for the `Resolver` interface."""
        return Access(self.grant_of(presented))

    def grant_of(self, presented: str | None) -> Grant:
        """The grant of `presented`, or `Unauthenticated` (rule 2)."""
        if presented is None:
            raise Unauthenticated(
                "missing_token", "this request needs an Authorization: Bearer <token> header"
            )
        found = None
        candidate = presented.encode()
        for token, grant in self._known:
            if hmac.compare_digest(token, candidate):
                found = grant
        if found is None:
            raise Unauthenticated("invalid_token", "the bearer token is not known to this server")
        return found


# ---------------------------------------------------------------- protected-resource metadata


def check_public_url(value: object) -> str:
    """`value` as the server's public base URL (rule 5): an `http` or `https` origin (a host and
    an optional port, no user, path, query or fragment), without a trailing slash; anything else
    is `invalid_request` naming `public_url`."""

    def refuse(why: str) -> BadRequest:
        return BadRequest("invalid_request", f"public_url {why}", param="public_url")

    if not isinstance(value, str) or not value or len(value) > 2048:
        raise refuse("must be an http or https URL of at most 2048 characters")
    if not value.isascii() or not value.isprintable() or any(c.isspace() for c in value):
        raise refuse("must be printable ASCII without spaces (write a non-ASCII host in IDNA)")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise refuse("is not a well-formed URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise refuse("must be an http or https URL with a host")
    if not _HOST.fullmatch(parts.hostname):
        raise refuse("must name a host by letters, digits, dots and hyphens, or an IP address")
    if parts.username is not None or parts.password is not None:
        raise refuse("must not carry a user or a password")
    if parts.path not in ("", "/") or parts.query or parts.fragment or value.endswith(("?", "#")):
        raise refuse("must be an origin: no path, query or fragment")
    if port == 0:
        raise refuse("must not name port 0")
    return f"{parts.scheme}://{parts.netloc}"


def public_base(scope: Scope) -> str:
    """The base URL this server names itself by (rule 5): the configured public URL if serving
    set one in `scope`, else the address the connection reached (`scope["server"]`), never the
    request's `Host` header."""
    configured = scope.get(PUBLIC_URL_KEY)
    if isinstance(configured, str):
        return configured
    scheme = "https" if scope.get("scheme") in ("https", "wss") else "http"
    server = scope.get("server")
    if not server:
        return f"{scheme}://localhost"
    host, port = str(server[0]), server[1]
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{host}" if port in (None, default) else f"{scheme}://{host}:{port}"


def metadata_url(request: Request, resource_path: str = "") -> str:
    """The URL of the RFC 9728 protected-resource metadata (of the resource at `resource_path`)."""
    return f"{public_base(request.scope)}{METADATA_PATH}{resource_path}"


def protected_resource_metadata(
    request: Request, resource_path: str = "", authorization_servers: Sequence[str] = ()
) -> dict[str, Any]:
    """RFC 9728 metadata of the resource at `resource_path`: its URL, how to present its
    bearer tokens, and the authorization servers that issue them, if any (served at
    `METADATA_PATH + resource_path` by every app whose 401 names it)."""
    metadata: dict[str, Any] = {
        "resource": public_base(request.scope) + resource_path,
        "resource_name": "pdpp-store",
        "bearer_methods_supported": ["header"],
    }
    if authorization_servers:
        metadata["authorization_servers"] = list(authorization_servers)
    return metadata


def www_authenticate(request: Request, code: str, resource_path: str = "") -> str:
    """The challenge of a 401 (RFC 6750 §3, with RFC 9728's `resource_metadata` of the resource
    at `resource_path`)."""
    metadata = metadata_url(request, resource_path)
    challenge = f'Bearer realm="pdpp-store", resource_metadata="{metadata}"'
    if code == "invalid_token":
        challenge += ', error="invalid_token"'
    return challenge


# ---------------------------------------------------------------- request ids and envelopes


def request_id(scope: Scope) -> str:
    """The id of the request of `scope`, given on first asking (rule 3)."""
    state = scope.setdefault("state", {})
    found = state.get("request_id")
    if not isinstance(found, str):
        found = "req_" + secrets.token_hex(12)
        state["request_id"] = found
    return found


class RequestIdMiddleware:
    """Gives each HTTP request an id (in `scope["state"]`) and sends it as `X-Request-Id`; with
    a `surface`, the store's read audit records the request's reads as that surface's, under
    this id (`pdpp_store.audit_context`)."""

    def __init__(self, app: ASGIApp, surface: str | None = None) -> None:
        self.app = app
        self.surface = surface

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = request_id(scope)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if REQUEST_ID_HEADER not in headers:
                    headers.append(REQUEST_ID_HEADER, given)
            await send(message)

        if self.surface is None:
            await self.app(scope, receive, send_with_id)
            return
        with audit_context(self.surface, request_id=given):
            await self.app(scope, receive, send_with_id)


def error_response(
    request: Request, error: StoreError, headers: dict[str, str] | None = None
) -> JSONResponse:
    """The envelope of `error`, with this request's id in the body and the headers, and its
    retry hint (if any) as `Retry-After` (rule 4)."""
    given = request_id(request.scope)
    body = error.to_dict()
    body["error"]["request_id"] = given
    sent = {**(headers or {}), REQUEST_ID_HEADER: given}
    retry_after = error.details.get("retry_after_s")
    if isinstance(retry_after, int) and not isinstance(retry_after, bool):
        sent["Retry-After"] = str(retry_after)
    return JSONResponse(body, status_code=error.http_status, headers=sent)


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


# ---------------------------------------------------------------- transport refusals


class Refused(StoreError):
    """A refusal of the HTTP transport itself (a bound, a method, a header), made by `refused`,
    whose subclass carries the status."""


_REFUSALS: dict[tuple[int, str], type[Refused]] = {}


def refused(
    status: int,
    code: str,
    message: str,
    *,
    param: str | None = None,
    error_type: str = "invalid_request_error",
    details: Mapping[str, Any] | None = None,
) -> Refused:
    """A `Refused` answered with `status`, its envelope's `type` `error_type`."""
    kind = _REFUSALS.get((status, error_type))
    if kind is None:
        attributes = {"http_status": status, "error_type": error_type}
        kind = type(f"Refused{status}", (Refused,), attributes)
        _REFUSALS[status, error_type] = kind
    return kind(code, message, param=param, details=details)
