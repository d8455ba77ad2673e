"""The checks of a request's head (`Gate`), what `Host` and `Origin` may name (`DoorNames`), and
the MCP requests in flight per token (`Streams`).

Rules:
1. A declared `Content-Length` over the route's bound (`max_mcp_body_bytes` under `/mcp`,
   `max_body_bytes` elsewhere) is 413 `request_too_large` before the app is called.
2. Under `/mcp`, a request whose `Host` does not name this server is 421 `host_not_allowed`, and
   one whose `Origin` is not allowed is 403 `origin_not_allowed` (`DoorNames`): the MCP
   transport's protection against DNS rebinding. A method other than POST is 405
   `method_not_allowed` (`Allow: POST`), as the MCP app itself answers, but before any token.
3. Under `/mcp`, at most `max_mcp_streams_per_token` requests presenting one `Authorization`
   value are in flight at once (in one process); one more is 429 `too_many_streams`, retryable,
   with `Retry-After`. Counted by the value presented, before it is checked: a caller without a
   valid token fills only its own slots, and a valid token's slots are its holder's alone.
4. These checks are one `Gate`, shared by the protocol and the middleware of a server. The
   protocol makes them as the head completes, before uvicorn makes a task for the request, and
   marks what it let in (`JUDGED`); the middleware makes them for what the protocol did not
   judge. A request from an origin given CORS is left to the middleware, under `Cors`, which
   makes the same checks.
5. A request counted in its token's streams is let go of when its app returns or fails
   (`counted`), whichever layer counted it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pdpp_store.door._limits import Limits
from pdpp_store.door._refusals import (
    host_not_allowed,
    method_not_allowed,
    origin_not_allowed,
    too_large,
    too_many_streams,
)
from pdpp_store.http import ASGIApp, Refused, Scope

__all__ = ["JUDGED", "DoorNames", "Gate", "Streams", "counted", "headers_of", "host_name", "is_mcp"]

JUDGED = "pdpp_store.door.judged"
"""The scope key the protocol sets on a request whose head it judged and let in."""


@dataclass(frozen=True)
class DoorNames:
    """What `Origin` and `Host` may name under `/mcp` (rule 2). `hosts` are host names (lower
    case, IPv6 bracketed, no port: a rebinding page differs from this server by its name, and a
    proxy may rewrite the port); empty when the server cannot know its names (a wildcard address
    and no public URL), and then `Host` is not checked. `origins` are allowed besides the
    server's own (an http or https origin on one of `hosts`, or on the request's `Host` when
    `hosts` is empty)."""

    hosts: frozenset[str] = field(default_factory=frozenset)
    origins: frozenset[str] = field(default_factory=frozenset)

    def host_allowed(self, host: str) -> bool:
        return not self.hosts or host_name(host) in self.hosts

    def origin_allowed(self, origin: str, host: str) -> bool:
        origin = origin.lower().rstrip("/")
        if origin in self.origins:
            return True
        scheme, _, netloc = origin.partition("://")
        if scheme not in ("http", "https") or not netloc:
            return False
        return host_name(netloc) in (self.hosts or {host_name(host)})


def host_name(netloc: str) -> str:
    """The host name of a `Host` value or an origin's authority: lower case, no port."""
    netloc = netloc.strip().lower()
    if netloc.startswith("["):
        return netloc.partition("]")[0] + "]"
    return netloc.partition(":")[0]


def is_mcp(path: str) -> bool:
    return path == "/mcp" or path.startswith("/mcp/")


def headers_of(scope: Scope) -> dict[str, str]:
    """The request's headers (lower-case names; the last of a repeated one)."""
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", ())
    }


class Streams:
    """The MCP requests in flight, by presented `Authorization` value (rule 3), in one server
    process: shared by its protocol and its middleware (one object in one pickle, so a worker
    process's two share theirs)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.counts: dict[str, int] = {}

    def enter(self, key: str) -> bool:
        """Count one more request of `key`, unless it has `cap` in flight already."""
        now = self.counts.get(key, 0)
        if now >= self.cap:
            return False
        self.counts[key] = now + 1
        return True

    def leave(self, key: str) -> None:
        left = self.counts[key] - 1
        if left:
            self.counts[key] = left
        else:
            del self.counts[key]


async def counted(app: ASGIApp, streams: Streams, key: str, *asgi: Any) -> None:
    """`app` on one request counted in `streams` under `key`, let go of when it ends (rule 5)."""
    try:
        await app(*asgi)
    finally:
        streams.leave(key)


class Gate:
    """The checks of a request's head (rules 1-3): the declared body length, and under `/mcp`
    the `Host`, the `Origin`, the method and the token's streams. Made by the protocol before
    any task exists (a refusal there is one write and a close), and by the middleware for what
    the protocol left to it (rule 4)."""

    def __init__(self, limits: Limits, names: DoorNames) -> None:
        self.limits = limits
        self.names = names
        self.streams = Streams(limits.max_mcp_streams_per_token)

    def judge(self, scope: Scope) -> Refused | str | bool:
        """`check`, or False for a request from an origin given CORS: `Cors` wraps the
        middleware (its preflight and its headers on every answer), so the middleware judges
        those."""
        headers = headers_of(scope)
        origin = headers.get("origin")
        if origin is not None and origin.lower().rstrip("/") in self.names.origins:
            return False
        return self.check(scope, headers)

    def check(self, scope: Scope, headers: dict[str, str]) -> Refused | str | bool:
        """The refusal of the request's head; else the key it is counted under in `streams`
        (an MCP request, now counted: the caller lets go of it), or True."""
        mcp = is_mcp(str(scope.get("path", "")))
        if mcp:
            refusal = self._names_refusal(headers, str(scope.get("method", "")))
            if refusal is not None:
                return refusal
        bound = self.limits.max_mcp_body_bytes if mcp else self.limits.max_body_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and (len(declared) > 18 or int(declared) > bound):
            return too_large(bound)
        if not mcp:
            return True
        key = headers.get("authorization", "")
        if not self.streams.enter(key):
            return too_many_streams(self.streams.cap)
        return key

    def _names_refusal(self, headers: dict[str, str], method: str) -> Refused | None:
        host = headers.get("host", "")
        if not self.names.host_allowed(host):
            return host_not_allowed()
        origin = headers.get("origin")
        if origin is not None and not self.names.origin_allowed(origin, host):
            return origin_not_allowed()
        if method != "POST":
            return method_not_allowed(method)
        return None
