"""`pdpp_store.door_headers`: what `pdpp-store serve` adds to answers: CORS for the origins it
is told to allow, and gzip where it pays.

    app = Cors(GzipJson(app), origins=frozenset({"https://app.example"}))

Rules:
1. CORS is off unless origins are configured (`serve --allow-origin`). A request whose `Origin`
   is one of them gets `Access-Control-Allow-Origin` (that origin, never `*`), `Vary: Origin`
   and the headers a client reads (`ETag`, `Content-Range`, `X-Request-Id`, `Retry-After`,
   `WWW-Authenticate`, ...) exposed; its preflight (`OPTIONS` with
   `Access-Control-Request-Method`) is answered 204 here, before any token is asked for. No
   credentials mode: tokens are bearer headers, never cookies. Any other origin gets no CORS
   header at all (a browser then refuses to hand the answer to its page).
2. A `GET` answered 200 with `application/json`, in one piece, of at least `GZIP_MIN_BYTES`, to
   a client that accepts gzip, is sent gzip-compressed with `Vary: Accept-Encoding`; its `HEAD`
   says the same headers (the server sends no body for it). Nothing else is compressed: not a
   blob (it announces `Accept-Ranges`), not a 206 or any other status, not a streamed body.
   The `ETag` is kept: it names the JSON document, which is never served in ranges (where a
   tag per coding would matter), so `If-None-Match` works whatever the coding.
"""

from __future__ import annotations

import gzip

from pdpp_store.http import ASGIApp, Message, Receive, Scope, Send

__all__ = ["GZIP_MIN_BYTES", "Cors", "GzipJson"]

GZIP_MIN_BYTES = 16 * 1024
"""Smaller answers (a field window of the default size, a record) cross any link in a round trip
or two whatever their coding; compressing them costs CPU on every request for no time saved."""

_ALLOW_METHODS = b"GET, HEAD, POST, DELETE, OPTIONS"
_ALLOW_HEADERS = (
    b"Authorization, Content-Type, Accept, If-None-Match, If-Match, If-Range, Range, "
    b"Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID"
)
_EXPOSE_HEADERS = (
    b"ETag, Content-Range, Accept-Ranges, Content-Length, X-Request-Id, Retry-After, "
    b"WWW-Authenticate, Mcp-Session-Id, Link"
)


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == wanted:
            return str(value.decode("latin-1"))
    return None


class Cors:
    """CORS for `origins` (rule 1); with none, the app as it is."""

    def __init__(self, app: ASGIApp, origins: frozenset[str]) -> None:
        self.app = app
        self.origins = frozenset(origin.lower().rstrip("/") for origin in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = _header(scope, b"origin") if scope["type"] == "http" else None
        if origin is None or origin.lower().rstrip("/") not in self.origins:
            await self.app(scope, receive, send)
            return
        allowed = origin.encode("latin-1")
        if scope.get("method") == "OPTIONS" and _header(scope, b"access-control-request-method"):
            headers = [
                (b"access-control-allow-origin", allowed),
                (b"access-control-allow-methods", _ALLOW_METHODS),
                (b"access-control-allow-headers", _ALLOW_HEADERS),
                (b"access-control-max-age", b"600"),
                (b"vary", b"Origin"),
                (b"content-length", b"0"),
            ]
            await send({"type": "http.response.start", "status": 204, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return

        async def with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", [])]
                headers += [
                    (b"access-control-allow-origin", allowed),
                    (b"access-control-expose-headers", _EXPOSE_HEADERS),
                    (b"vary", b"Origin"),
                ]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, with_cors)


def _accepts_gzip(scope: Scope) -> bool:
    accepted = _header(scope, b"accept-encoding") or ""
    for part in accepted.split(","):
        coding, _, parameters = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            quality = parameters.strip().lower().removeprefix("q=").strip()
            try:
                return not quality or float(quality) > 0
            except ValueError:
                return False
    return False


class GzipJson:
    """gzip for large JSON answers, nothing else (rule 2)."""

    def __init__(self, app: ASGIApp, minimum: int = GZIP_MIN_BYTES) -> None:
        self.app = app
        self.minimum = minimum

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method")
        if scope["type"] != "http" or method not in ("GET", "HEAD") or not _accepts_gzip(scope):
            await self.app(scope, receive, send)
            return
        held: list[Message] = []

        async def compressing(message: Message) -> None:
            if message["type"] == "http.response.start":
                if _compressible(message):
                    held.append(message)
                    return
            elif held and message["type"] == "http.response.body":
                start = held.pop()
                body = message.get("body", b"")
                if message.get("more_body", False) or len(body) < self.minimum:
                    await send(start)
                    await send(message)
                    return
                packed = gzip.compress(body, compresslevel=6, mtime=0)
                headers = [
                    (name, value)
                    for name, value in start.get("headers", [])
                    if name.lower() != b"content-length"
                ]
                headers += [
                    (b"content-encoding", b"gzip"),
                    (b"content-length", str(len(packed)).encode()),
                    (b"vary", b"Accept-Encoding"),
                ]
                await send({**start, "headers": headers})
                await send({"type": "http.response.body", "body": packed})
                return
            await send(message)

        await self.app(scope, receive, compressing)


def _compressible(start: Message) -> bool:
    if start.get("status") != 200:
        return False
    kinds = {name.lower(): value.lower() for name, value in start.get("headers", [])}
    media = kinds.get(b"content-type", b"").split(b";")[0].strip()
    return (
        media == b"application/json"
        and b"content-encoding" not in kinds
        and b"content-range" not in kinds
        and b"accept-ranges" not in kinds
    )
