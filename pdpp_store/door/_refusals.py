"""The door's refusals: each one's status, code and words, said once, and the two ways one is
written (by the protocol, as bytes; by the middleware, as an ASGI answer).

Rules:
1. A refusal is the §7 envelope (`http.Refused`) with its request id, sent as JSON with
   `X-Request-Id` and `Cache-Control: no-store`; a retryable one (`retry_after_s` in its
   details) carries `Retry-After`, and the 405 `Allow: POST`.
2. Every refusal of the door closes its connection (`Connection: close`): a refused client
   starts again on a fresh one, and a crowd of refused connections is closed by the server as
   it answers each, not all in one turn of the loop when the client lets go of them.
3. The protocol writes a refusal whole in one write (`written`), under a request id made here
   (no app has given the request one yet); the middleware answers through ASGI (`answer`),
   under the request's own id (`http.request_id`).
4. Nothing here reads a token or the database: a refusal says only what the request itself
   showed (its head, its body's size, its timing, the count of connections or streams).
"""

from __future__ import annotations

import json
import secrets
from http import HTTPStatus

from pdpp_store.http import Refused, Scope, Send, refused, request_id

__all__ = [
    "answer",
    "busy",
    "envelope",
    "head_too_large",
    "host_not_allowed",
    "method_not_allowed",
    "new_request_id",
    "not_http",
    "origin_not_allowed",
    "request_line_too_long",
    "timeout",
    "too_large",
    "too_many_headers",
    "too_many_streams",
    "written",
]

# ---------------------------------------------------------------- what each refusal says


def head_too_large(bound: int) -> Refused:
    return refused(
        431,
        "request_head_too_large",
        f"the request line and headers are longer than {bound:,} bytes",
        param="headers",
    )


def request_line_too_long(bound: int) -> Refused:
    return refused(
        414,
        "request_line_too_long",
        f"the request target is longer than {bound:,} bytes",
        param="url",
    )


def too_many_headers(bound: int) -> Refused:
    return refused(
        431, "too_many_headers", f"the request has more than {bound} header lines", param="headers"
    )


def not_http() -> Refused:
    return refused(400, "invalid_request", "the request is not valid HTTP/1.1", param="http")


def busy() -> Refused:
    return refused(
        503,
        "too_many_connections",
        "the server has as many open connections as it serves; retry shortly",
        error_type="api_error",
        details={"retryable": True, "retry_after_s": 1},
    )


def timeout(what: str) -> Refused:
    return refused(408, "request_timeout", f"the request's {what} did not arrive in time")


def too_large(bound: int) -> Refused:
    return refused(
        413, "request_too_large", f"the request body is larger than {bound:,} bytes", param="body"
    )


def host_not_allowed() -> Refused:
    return refused(
        421, "host_not_allowed", "the Host header does not name this server", param="host"
    )


def origin_not_allowed() -> Refused:
    return refused(
        403,
        "origin_not_allowed",
        "requests from this Origin are not allowed (serve --allow-origin allows one)",
        param="origin",
        error_type="permission_error",
    )


def method_not_allowed(method: str) -> Refused:
    return refused(
        405,
        "method_not_allowed",
        f"{method} is not served at the MCP endpoint: it takes POST only (the server"
        " is stateless: no GET stream, no session to DELETE)",
        param="method",
    )


def too_many_streams(cap: int) -> Refused:
    return refused(
        429,
        "too_many_streams",
        f"this token already has {cap} MCP requests in flight; retry when one ends",
        error_type="rate_limit_error",
        details={"retryable": True, "retry_after_s": 1},
    )


# ---------------------------------------------------------------- how a refusal is written


def envelope(error: Refused, given: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The body and headers of `error`'s answer, with request id `given` (rule 1)."""
    body = error.to_dict()
    body["error"]["request_id"] = given
    content = json.dumps(body, separators=(",", ":")).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(content)).encode()),
        (b"x-request-id", given.encode()),
        (b"cache-control", b"no-store"),
    ]
    retry = error.details.get("retry_after_s")
    if isinstance(retry, int):
        headers.append((b"retry-after", str(retry).encode()))
    return content, headers


def new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


def written(error: Refused, given: str) -> bytes:
    """`error`'s whole answer as the protocol writes it, request id `given` (rules 1-3)."""
    content, headers = envelope(error, given)
    head = [f"HTTP/1.1 {error.http_status} {_reason(error.http_status)}\r\n".encode()]
    head += [name + b": " + value + b"\r\n" for name, value in headers]
    if error.http_status == 405:
        head.append(b"allow: POST\r\n")
    head.append(b"connection: close\r\n\r\n")
    return b"".join(head) + content


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


async def answer(scope: Scope, send: Send, error: Refused) -> None:
    """Answer `error` through ASGI, and close the connection (rules 1-3)."""
    given = request_id(scope)
    content, headers = envelope(error, given)
    headers.append((b"connection", b"close"))
    if error.http_status == 405:
        headers.append((b"allow", b"POST"))
    await send({"type": "http.response.start", "status": error.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
