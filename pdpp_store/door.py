"""`pdpp_store.door`: the limits `pdpp-store serve` applies before any request reaches an app.

    limits = Limits(max_head_bytes=16384, ...)             # the configurable bounds (`serve`)
    gate = Gate(limits, names)                              # a head's checks, and MCP streams
    config = uvicorn.Config(app, http=door_protocol(limits, gate))  # heads, timeouts, refusals
    app = DoorMiddleware(app, limits, names, gate)          # bodies, and what CORS must answer

Two layers, both in front of authentication (nothing here reads a token or the database):

- `DoorProtocol`, uvicorn's httptools protocol with bounds: it feeds the HTTP parser at most
  `max_head_bytes` of a request head, so a 100 MB header costs 16 KiB of parsing, not 100 MB,
  and judges each complete head by the `Gate` before any task is made for it.
- `DoorMiddleware`, an ASGI middleware: body sizes as the body is read, the body's deadline,
  the `Gate`'s checks of what the protocol left to it, and the heap frozen once the
  application has started.

Rules:
1. A request head longer than `max_head_bytes` (request line and headers) is 431
   `request_head_too_large`; more than `max_headers` header lines is 431 `too_many_headers`; a
   request target longer than `max_request_line` is 414 `request_line_too_long`. Each is the §7
   envelope, answered as soon as the bound is passed: the rest of the head is never parsed.
   Anything the parser refuses is 400 `invalid_request` (`param: "http"`), also an envelope.
2. A head must be complete within `head_timeout_s` of the connection opening (its first request)
   or of its first byte (a later one); a connection that sent part of a head by then is answered
   408 `request_timeout`, one that sent nothing is closed. Between requests, a connection idle
   for `idle_timeout_s` is closed (uvicorn's keep-alive timeout).
3. The body: a declared `Content-Length` over the route's bound (`max_mcp_body_bytes` under
   `/mcp`, `max_body_bytes` elsewhere) is 413 `request_too_large` before the app is called; a
   body sent without a length is counted as it is read, and refused the same way once it passes
   the bound. A body not received whole within `body_timeout_s` of the app first asking for it
   is 408 `request_timeout`. An answer sent before the request's body was read whole closes the
   connection, so an unread body is never drained.
4. Past `max_connections` open connections, a new connection's request is answered 503
   `too_many_connections` (retryable, `Retry-After`) and the connection closed.
5. A connection the server closes while the client may still be sending is closed gently: the
   server stops writing, keeps reading (and discarding) for at most `LINGER_S` seconds or
   `LINGER_BYTES` bytes, then closes; so a client still sending reads its answer instead of a
   reset. A client refused in its head (past a bound, or its deadline) is not read at all
   meanwhile: no well-behaved client sends such a head, and a flood of one would otherwise be
   read at the speed it comes for the whole second.
6. Under `/mcp`, a request whose `Host` does not name this server is 421 `host_not_allowed`, and
   one whose `Origin` is not allowed is 403 `origin_not_allowed` (`DoorNames`): the MCP
   transport's protection against DNS rebinding. A method other than POST is 405
   `method_not_allowed` (`Allow: POST`), as the MCP app itself answers, but before any token.
7. Under `/mcp`, at most `max_mcp_streams_per_token` requests presenting one `Authorization`
   value are in flight at once (in one process); one more is 429 `too_many_streams`, retryable,
   with `Retry-After`. Counted by the value presented, before it is checked: a caller without a
   valid token fills only its own slots, and a valid token's slots are its holder's alone.
8. What the server writes must be read: once a connection's unsent answer passes the
   transport's high-water mark, or the connection is closed with some of it unsent, the client
   has `write_timeout_s` to read it (down to the low-water mark: uvloop's is 16 bytes); then
   the connection is aborted, its unsent bytes let go of, and one line logged.
9. Once the application has started, everything it holds is frozen out of the garbage
   collector's passes (`gc.freeze`): a full pass over a started server's heap (about 190,000
   objects) stalls the loop for 60-180 ms, and a burst of connections triggers one; afterwards
   a pass looks only at what was made since.
10. Every refusal of the door closes its connection: a refused client starts again on a fresh
    one, and a crowd of refused connections is closed by the server as it answers each, not all
    in one turn of the loop when the client lets go of them.
11. The checks of a head (a declared length, rule 3; `Host`, `Origin` and method, rule 6; the
    token's streams, rule 7) are one `Gate`, shared by the protocol and the middleware of a
    server. The protocol makes them as the head completes, before uvicorn makes a task for the
    request, and answers a refusal in one write: a burst of refused requests costs the loop no
    task, no ASGI call and no second write each. A request from an origin given CORS is left
    to the middleware, under `Cors`, which makes the same checks.
12. Deadlines that fall together are met in turns: a head's deadline (its 408, or an idle
    connection's close) and a lingering connection's close are queued, in order, and done at
    most `PACED_PER_TURN` per turn of the loop. 500 slowloris connections opened together reach
    their deadline together; answered in one turn, they held a client already in for the whole
    of it (4.65x its idle p99 on SQLite); in turns, the client is served between every two.
13. A connection's kernel receive buffer is `RECEIVE_BUFFER_BYTES` (the kernel would grow it to
    megabytes): a client refused mid-flood has at most that much more taken from it, not the
    several megabytes a grown buffer lets through before the server stops reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import json
import logging
import secrets
import socket
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from pdpp_store import BadRequest
from pdpp_store.http import Refused, refused, request_id

__all__ = [
    "LINGER_BYTES",
    "LINGER_S",
    "PACED_PER_TURN",
    "RECEIVE_BUFFER_BYTES",
    "DoorMiddleware",
    "DoorNames",
    "DoorProtocol",
    "Gate",
    "Limits",
    "Streams",
    "door_protocol",
    "host_name",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PACED_PER_TURN = 8
"""Deadline work (a head's 408, an idle connection's or a lingering one's close) done per turn
of the loop (rule 12): a few hundred microseconds each on a loaded runner, so a turn gains at
most a few milliseconds however many deadlines fall together."""
RECEIVE_BUFFER_BYTES = 256 * 1024
"""The kernel's receive buffer of each connection (rule 13)."""
LINGER_S = 1.0
LINGER_BYTES = 1024 * 1024
"""How long, and how much, a closing connection is still read (rule 5)."""

log = logging.getLogger("pdpp_store.door")


@dataclass(frozen=True)
class Limits:
    """The door's bounds (each a `serve` option; docs/decisions.md gives the defaults' reasons)."""

    max_head_bytes: int = 16 * 1024
    max_request_line: int = 8 * 1024
    max_headers: int = 100
    max_body_bytes: int = 1024 * 1024
    max_mcp_body_bytes: int = 4 * 1024 * 1024
    head_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 5.0
    write_timeout_s: float = 30.0
    max_connections: int = 1000
    max_mcp_streams_per_token: int = 16

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise BadRequest("invalid_request", f"{name} must be a positive number", param=name)
        if self.max_request_line > self.max_head_bytes:
            raise BadRequest(
                "invalid_request",
                "max_request_line must not be more than max_head_bytes",
                param="max_request_line",
            )


# ---------------------------------------------------------------- refusals


def _envelope(error: Refused, given: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The body and headers of `error`'s answer, with request id `given`."""
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


def _new_request_id() -> str:
    return "req_" + secrets.token_hex(12)


def _busy() -> Refused:
    return refused(
        503,
        "too_many_connections",
        "the server has as many open connections as it serves; retry shortly",
        error_type="api_error",
        details={"retryable": True, "retry_after_s": 1},
    )


def _timeout(what: str) -> Refused:
    return refused(408, "request_timeout", f"the request's {what} did not arrive in time")


def too_large(bound: int) -> Refused:
    return refused(
        413, "request_too_large", f"the request body is larger than {bound:,} bytes", param="body"
    )


# -------------------------------------------------------- the protocol (rules 1, 2, 4, 5, 8)


class _Lingering:
    """The connection's transport, whose `close` lingers (rule 5); everything else is the
    transport's own."""

    def __init__(self, transport: asyncio.Transport, protocol: DoorProtocol) -> None:
        self.raw = transport
        self._protocol = protocol
        self.lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)

    def is_closing(self) -> bool:
        return self.lingering or self.raw.is_closing()

    def close(self) -> None:
        transport = self.raw
        if transport.get_write_buffer_size():
            self._protocol.arm_write_timer()  # closing waits for the answer to be read (rule 8)
        if self.lingering or transport.is_closing():
            transport.close()
            return
        if not self._protocol.may_be_sending() or not transport.can_write_eof():
            transport.close()
            return
        self.lingering = True
        try:
            transport.write_eof()
            if self._protocol.in_head:
                transport.pause_reading()  # a head past a bound or a deadline: none of it is read
            else:
                transport.resume_reading()
        except (OSError, RuntimeError):
            transport.close()
            return
        pacer = self._protocol.pacer
        self._protocol.loop.call_later(LINGER_S, pacer.add, transport.close)


class _Pacer:
    """The deadline work of one server's connections (rule 12): callbacks run in order, at most
    `PACED_PER_TURN` per turn of its event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: deque[Callable[[], object]] = deque()
        self._turn_pending = False

    def add(self, callback: Callable[[], object]) -> None:
        self.waiting.append(callback)
        if not self._turn_pending:
            self._turn_pending = True
            self.loop.call_soon(self._turn)

    def _turn(self) -> None:
        # Called among the loop's ready callbacks, `call_soon` runs the next batch in its next
        # turn, after it has polled the connections (a client's request among them).
        self._turn_pending = False
        for _ in range(min(PACED_PER_TURN, len(self.waiting))):
            self.waiting.popleft()()
        if self.waiting:
            self._turn_pending = True
            self.loop.call_soon(self._turn)


_PACERS: weakref.WeakKeyDictionary[ServerState, _Pacer] = weakref.WeakKeyDictionary()


def _pacer(server_state: ServerState, loop: asyncio.AbstractEventLoop) -> _Pacer:
    """The pacer of the server whose state is `server_state` (one per uvicorn server)."""
    found = _PACERS.get(server_state)
    if found is None or found.loop is not loop:
        found = _PACERS[server_state] = _Pacer(loop)
    return found


class DoorProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under `Limits` (rules 1, 2, 4, 5, 8)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: Limits,
        gate: Gate | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self.gate = gate
        self.pacer = _pacer(server_state, self.loop)
        self._in_head = True  # waiting for, or reading, a request head
        self._head_seen = 0
        self._header_count = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_deadline = 0
        self._write_timer: asyncio.TimerHandle | None = None
        self._over_cap = False
        self._refusal: Refused | None = None
        self._refusal_logged = True
        self._parsing = False
        self._discarded = 0
        self._body_pending = False

    # -- the connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        raw = transport.get_extra_info("socket")
        if raw is not None:
            with contextlib.suppress(OSError):  # rule 13
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
        self._lingering = _Lingering(transport, self)
        super().connection_made(self._lingering)  # type: ignore[arg-type]
        self._over_cap = len(self.connections) > self.limits.max_connections
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        self._cancel_write_timer()
        super().connection_lost(exc)

    @property
    def in_head(self) -> bool:
        """Whether the connection is waiting for, or reading, a request head."""
        return self._in_head

    def may_be_sending(self) -> bool:
        """Whether the client may still be sending this request (rule 5)."""
        return (self._in_head and self._head_seen > 0) or self._body_pending

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_deadline += 1  # a deadline already queued in the pacer is stale now
        timed_out = functools.partial(self._head_timed_out, self._head_deadline)
        self._head_timer = self.loop.call_later(
            self.limits.head_timeout_s, self.pacer.add, timed_out
        )

    def _cancel_head_timer(self) -> None:
        self._head_deadline += 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self, deadline: int) -> None:
        if deadline != self._head_deadline:
            return  # met or re-armed while it waited in the pacer
        self._head_timer = None
        if self.transport.is_closing() or not self._in_head:
            return
        if self._head_seen == 0:
            self._lingering.raw.close()  # an idle connection: nothing to answer
            return
        self.refuse(_timeout("head"))

    def refuse(self, error: Refused, *, logged: bool = True) -> None:
        """Answer `error` at the protocol level, in one write, and close (gently, rule 5)."""
        if self.transport.is_closing():
            return
        self._cancel_head_timer()
        given = _new_request_id()
        content, headers = _envelope(error, given)
        if logged:
            log.warning("refused at the door: %s %s (%s)", error.http_status, error.code, given)
        head = [f"HTTP/1.1 {error.http_status} {_reason(error.http_status)}\r\n".encode()]
        head += [name + b": " + value + b"\r\n" for name, value in headers]
        if error.http_status == 405:
            head.append(b"allow: POST\r\n")
        head.append(b"connection: close\r\n\r\n")
        self.transport.write(b"".join(head) + content)
        self.transport.close()

    # -- bytes out (rule 8)

    def pause_writing(self) -> None:
        super().pause_writing()
        self.arm_write_timer()

    def resume_writing(self) -> None:
        self._cancel_write_timer()
        super().resume_writing()

    def arm_write_timer(self) -> None:
        """Give what is written `write_timeout_s` to be read (rule 8)."""
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(
                self.limits.write_timeout_s, self._write_timed_out
            )

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timed_out(self) -> None:
        self._write_timer = None
        raw = self._lingering.raw
        if raw.get_write_buffer_size() == 0:
            return
        state = self.scope.get("state") if self.scope is not None else None
        given = state.get("request_id") if isinstance(state, dict) else None
        log.warning(
            "closed a connection whose client did not read its answer for %ss (%s)",
            f"{self.limits.write_timeout_s:g}",
            given or "no request id",
        )
        raw.abort()  # the unsent answer is let go of, with the connection

    # -- bytes in

    def data_received(self, data: bytes) -> None:
        if self._lingering.lingering:
            self._discarded += len(data)
            if self._discarded > LINGER_BYTES:
                self._lingering.raw.close()
            return
        self._unset_keepalive_if_required()
        while data and not self.transport.is_closing():
            if self._in_head:
                room = self.limits.max_head_bytes - self._head_seen
                if room <= 0:
                    self.refuse(
                        refused(
                            431,
                            "request_head_too_large",
                            f"the request line and headers are longer than "
                            f"{self.limits.max_head_bytes:,} bytes",
                            param="headers",
                        )
                    )
                    return
                piece, data = data[:room], data[room:]
                self._head_seen += len(piece)
            else:
                piece, data = data, b""
            if not self._feed(piece):
                return

    def _feed(self, data: bytes) -> bool:
        self._parsing = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            pass  # no upgrade is served: the request is answered as a plain one (as uvicorn does)
        except httptools.HttpParserError:
            refusal, self._refusal = self._refusal, None
            logged, self._refusal_logged = self._refusal_logged, True
            self.refuse(
                refusal
                or refused(
                    400, "invalid_request", "the request is not valid HTTP/1.1", param="http"
                ),
                logged=logged,
            )
            return False
        finally:
            self._parsing = False
        return True

    # -- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if not self._in_head:  # a pipelined request's head, begun mid-chunk
            self._in_head = True
            self._head_seen = 0
        self._header_count = 0
        if self.cycle is not None:
            self._arm_head_timer()  # a later request: its head from its first byte

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.max_request_line:
            self._refusal = refused(
                414,
                "request_line_too_long",
                f"the request target is longer than {self.limits.max_request_line:,} bytes",
                param="url",
            )
            raise _Stop

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._refusal = refused(
                431,
                "too_many_headers",
                f"the request has more than {self.limits.max_headers} header lines",
                param="headers",
            )
            raise _Stop
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self._in_head = False
        self._head_seen = 0
        self._body_pending = not self._no_body()
        if self._over_cap:
            self._refusal = _busy()
            raise _Stop
        super().on_headers_complete()

    def _no_body(self) -> bool:
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return False
            if name == b"content-length" and value.strip() not in (b"", b"0"):
                return False
        return True

    def on_message_complete(self) -> None:
        self._body_pending = False
        self._in_head = True
        self._head_seen = 0
        super().on_message_complete()

    # -- the request's head, judged before any task is made (rules 3, 6, 7)

    def _start_asgi_task(self, cycle: Any, app: Any) -> None:
        gate = self.gate
        if gate is not None:
            scope = cycle.scope
            verdict = gate.judge(scope)
            if isinstance(verdict, Refused):
                if self._parsing:  # inside the parser's callback: stopped there, answered by _feed
                    self._refusal, self._refusal_logged = verdict, False
                    raise _Stop
                self.refuse(verdict, logged=False)  # a pipelined request, started later
                return
            if isinstance(verdict, str):  # an MCP request, counted in its token's streams
                app = functools.partial(_counted, app, gate.streams, verdict)
            if verdict is not False:  # False: deferred to the middleware (a CORS origin)
                scope[_JUDGED] = True
        super()._start_asgi_task(cycle, app)


class _Stop(Exception):
    """Raised in a parser callback to stop the parse at a bound (`DoorProtocol._refusal`)."""


def door_protocol(limits: Limits, gate: Gate | None = None) -> Callable[..., DoorProtocol]:
    """uvicorn's `http` protocol class under `limits` (picklable, for worker processes); with
    `gate`, the head checks of `DoorMiddleware` sharing that gate are made by the protocol,
    before any task (the middleware then passes the requests it judged)."""
    return functools.partial(DoorProtocol, limits=limits, gate=gate)


def _reason(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


# ---------------------------------------------------------------- the middleware (rules 3, 6)


@dataclass(frozen=True)
class DoorNames:
    """What `Origin` and `Host` may name under `/mcp` (rule 6). `hosts` are host names (lower
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


def _is_mcp(path: str) -> bool:
    return path == "/mcp" or path.startswith("/mcp/")


_JUDGED = "pdpp_store.door.judged"
"""The scope key the protocol sets on a request whose head it judged and let in."""


class Streams:
    """The MCP requests in flight, by presented `Authorization` value (rule 7), in one server
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


async def _counted(app: ASGIApp, streams: Streams, key: str, *asgi: Any) -> None:
    """`app` on one request counted in `streams` under `key`, let go of when it ends."""
    try:
        await app(*asgi)
    finally:
        streams.leave(key)


class Gate:
    """The checks of a request's head (rules 3, 6, 7): the declared body length, and under
    `/mcp` the `Host`, the `Origin`, the method and the token's streams. Made by the protocol
    before any task exists (a refusal there is one write and a close), and by the middleware
    for what the protocol left to it."""

    def __init__(self, limits: Limits, names: DoorNames) -> None:
        self.limits = limits
        self.names = names
        self.streams = Streams(limits.max_mcp_streams_per_token)

    def judge(self, scope: Scope) -> Refused | str | bool:
        """`check`, or False for a request from an origin given CORS: `Cors` wraps the
        middleware (its preflight and its headers on every answer), so the middleware judges
        those."""
        headers = _headers(scope)
        origin = headers.get("origin")
        if origin is not None and origin.lower().rstrip("/") in self.names.origins:
            return False
        return self.check(scope, headers)

    def check(self, scope: Scope, headers: dict[str, str]) -> Refused | str | bool:
        """The refusal of the request's head; else the key it is counted under in `streams`
        (an MCP request, now counted: the caller lets go of it), or True."""
        mcp = _is_mcp(str(scope.get("path", "")))
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
            return refused(
                429,
                "too_many_streams",
                f"this token already has {self.streams.cap} MCP requests in flight; retry when"
                " one ends",
                error_type="rate_limit_error",
                details={"retryable": True, "retry_after_s": 1},
            )
        return key

    def _names_refusal(self, headers: dict[str, str], method: str) -> Refused | None:
        host = headers.get("host", "")
        if not self.names.host_allowed(host):
            return refused(
                421,
                "host_not_allowed",
                "the Host header does not name this server",
                param="host",
            )
        origin = headers.get("origin")
        if origin is not None and not self.names.origin_allowed(origin, host):
            return refused(
                403,
                "origin_not_allowed",
                "requests from this Origin are not allowed (serve --allow-origin allows one)",
                param="origin",
                error_type="permission_error",
            )
        if method != "POST":
            return refused(
                405,
                "method_not_allowed",
                f"{method} is not served at the MCP endpoint: it takes POST only (the server"
                " is stateless: no GET stream, no session to DELETE)",
                param="method",
            )
        return None


class DoorMiddleware:
    """Body bounds and deadline, and the head checks of `Gate` the protocol left to it (rules
    3, 6, 7)."""

    def __init__(
        self, app: ASGIApp, limits: Limits, names: DoorNames, gate: Gate | None = None
    ) -> None:
        self.app = app
        self.limits = limits
        self.gate = gate or Gate(limits, names)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, _freezing_once_started(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        verdict: Refused | str | bool = True
        if not scope.get(_JUDGED):
            verdict = self.gate.check(scope, headers)
            if isinstance(verdict, Refused):
                await _answer(scope, send, verdict)
                return
        mcp = _is_mcp(str(scope.get("path", "")))
        bound = self.limits.max_mcp_body_bytes if mcp else self.limits.max_body_bytes
        declared = headers.get("content-length", "")
        has_body = "transfer-encoding" in headers or declared not in ("", "0")
        body = _Body(self.app, self.limits.body_timeout_s, bound, has_body)
        if isinstance(verdict, str):
            await _counted(body, self.gate.streams, verdict, scope, receive, send)
        else:
            await body(scope, receive, send)


class _Body:
    """One request's body under its bound and deadline (rule 3)."""

    def __init__(self, app: ASGIApp, timeout_s: float, bound: int, has_body: bool) -> None:
        self.app = app
        self.timeout_s = timeout_s
        self.bound = bound
        self.done = not has_body
        self.size = 0
        self.deadline: float | None = None
        self.started = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def bounded_receive() -> Message:
            if self.done:
                return await receive()
            if self.deadline is None:
                self.deadline = anyio.current_time() + self.timeout_s
            with anyio.move_on_after(max(0.0, self.deadline - anyio.current_time())) as waited:
                message = await receive()
            if waited.cancelled_caught:
                raise _timeout("body")
            if message["type"] == "http.request":
                self.size += len(message.get("body", b""))
                if self.size > self.bound:
                    raise too_large(self.bound)
                self.done = not message.get("more_body", False)
            else:
                self.done = True
            return message

        async def closing_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.started = True
                if not self.done:  # an unread body is not drained (rule 3)
                    message = {**message, "headers": [*message.get("headers", [])]}
                    message["headers"].append((b"connection", b"close"))
            await send(message)

        try:
            await self.app(scope, bounded_receive, closing_send)
        except Refused as refused:  # raised by bounded_receive, not answered by the app
            if self.started:
                raise
            await _answer(scope, send, refused)


def _freezing_once_started(send: Send) -> Send:
    """The lifespan's `send`, freezing the heap as startup completes (rule 9)."""

    async def sending(message: Message) -> None:
        if message["type"] == "lifespan.startup.complete":
            gc.collect()
            gc.freeze()
        await send(message)

    return sending


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers (lower-case names; the last of a repeated one)."""
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", ())
    }


async def _answer(scope: Scope, send: Send, error: Refused) -> None:
    """Answer `error` and close the connection (rule 10)."""
    given = request_id(scope)
    content, headers = _envelope(error, given)
    headers.append((b"connection", b"close"))
    if error.http_status == 405:
        headers.append((b"allow", b"POST"))
    await send({"type": "http.response.start", "status": error.http_status, "headers": headers})
    await send({"type": "http.response.body", "body": content})
