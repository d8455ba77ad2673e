"""`DoorProtocol`, the door's first layer: uvicorn's httptools protocol with bounds, which
judges each complete request head by the `Gate` before any task is made for it.

    config = uvicorn.Config(app, http=door_protocol(limits, gate))

Rules:
1. A request head longer than `max_head_bytes` (request line and headers) is 431
   `request_head_too_large`; more than `max_headers` header lines is 431 `too_many_headers`; a
   request target longer than `max_request_line` is 414 `request_line_too_long`. Each is
   answered as soon as the bound is passed: the parser is fed at most `max_head_bytes` of a
   head, so a 100 MB header costs 16 KiB of parsing, and the rest of the head is never parsed.
   Anything the parser refuses is 400 `invalid_request` (`param: "http"`).
2. A head must be complete within `head_timeout_s` of the connection opening (its first request)
   or of its first byte (a later one); a connection that sent part of a head by then is answered
   408 `request_timeout`, one that sent nothing is closed. Between requests, a connection idle
   for `idle_timeout_s` is closed (uvicorn's keep-alive timeout).
3. Past `max_connections` open connections, a new connection's request is answered 503
   `too_many_connections` (retryable, `Retry-After`) and the connection closed.
4. A connection the server closes while the client may still be sending is closed gently: the
   server stops writing, keeps reading (and discarding) for at most `LINGER_S` seconds or
   `LINGER_BYTES` bytes, then closes; so a client still sending reads its answer instead of a
   reset. A client refused in its head (past a bound, or its deadline) is not read at all
   meanwhile: no well-behaved client sends such a head, and a flood of one would otherwise be
   read at the speed it comes for the whole second.
5. What the server writes must be read: once a connection's unsent answer passes the
   transport's high-water mark, or the connection is closed with some of it unsent, the client
   has `write_timeout_s` to read it (down to the low-water mark: uvloop's is 16 bytes); then
   the connection is aborted, its unsent bytes let go of, and one line logged.
6. With a `Gate`, a complete head is judged as it completes, before uvicorn makes a task for
   the request, and a refusal is answered in one write: a burst of refused requests costs the
   loop no task, no ASGI call and no second write each. What it lets in is marked judged (the
   middleware then passes it); an MCP request is counted in its token's streams until its app
   returns; a request from an origin given CORS is left to the middleware.
7. Deadlines that fall together are met in slices: a head's deadline (its 408, or an idle
   connection's close) and a lingering connection's close are queued, in order, and done for
   at most `PACED_SLICE_S` at a time, with `PACED_REST_S` between two slices while more wait.
   500 slowloris connections opened together reach their deadline together; answered in one
   turn, they held a client already in for the whole of it (4.65x its idle p99 on SQLite);
   even one per turn, the server spent a whole core on them (a client's request on Postgres
   waits out many turns for its database), and the client's p99 read up to 2.1x. In slices
   they take at most about a fifth of a core, and 500 are met within about 150 ms.
8. A connection's kernel receive buffer is `RECEIVE_BUFFER_BYTES` (the kernel would grow it to
   megabytes): a client refused mid-flood has at most that much more taken from it, not the
   several megabytes a grown buffer lets through before the server stops reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from pdpp_store.door._gate import JUDGED, Gate, counted
from pdpp_store.door._limits import Limits
from pdpp_store.door._refusals import (
    busy,
    head_too_large,
    new_request_id,
    not_http,
    request_line_too_long,
    timeout,
    too_many_headers,
    written,
)
from pdpp_store.http import Refused

__all__ = [
    "LINGER_BYTES",
    "LINGER_S",
    "PACED_REST_S",
    "PACED_SLICE_S",
    "RECEIVE_BUFFER_BYTES",
    "DoorProtocol",
    "door_protocol",
]

PACED_SLICE_S = 0.00025
PACED_REST_S = 0.001
"""Deadline work (a head's 408, an idle connection's or a lingering one's close) is done for at
most `PACED_SLICE_S` in one go (at least one deadline), and `PACED_REST_S` passes before the
next slice while more wait (rule 7): about 60 us each on a loaded runner, so a burst of them
takes at most a fifth of the loop's time (the loop's timers count in milliseconds)."""
RECEIVE_BUFFER_BYTES = 256 * 1024
"""The kernel's receive buffer of each connection (rule 8)."""
LINGER_S = 1.0
LINGER_BYTES = 1024 * 1024
"""How long, and how much, a closing connection is still read (rule 4)."""

log = logging.getLogger("pdpp_store.door")


class _Lingering:
    """The connection's transport, whose `close` lingers (rule 4); everything else is the
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
            self._protocol.arm_write_timer()  # closing waits for the answer to be read (rule 5)
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
    """The deadline work of one server's connections (rule 7): callbacks run in order, in
    slices of at most `PACED_SLICE_S`, `PACED_REST_S` apart while more wait."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: deque[Callable[[], object]] = deque()
        self._pending = False
        self._rested = 0.0  # when the rest after the last slice ends

    def add(self, callback: Callable[[], object]) -> None:
        self.waiting.append(callback)
        if not self._pending:
            self._pending = True
            resting = self._rested - time.perf_counter()
            if resting > 0:
                self.loop.call_later(resting, self._slice)
            else:
                self.loop.call_soon(self._slice)

    def _slice(self) -> None:
        ends = time.perf_counter() + PACED_SLICE_S
        try:
            while self.waiting:
                self.waiting.popleft()()
                if time.perf_counter() >= ends:
                    break
        finally:  # a deadline that raised (the loop logs it) does not stop those after it
            self._rested = time.perf_counter() + PACED_REST_S
            if self.waiting:
                self.loop.call_later(PACED_REST_S, self._slice)
            else:
                self._pending = False


_PACERS: weakref.WeakKeyDictionary[ServerState, _Pacer] = weakref.WeakKeyDictionary()


def _pacer(server_state: ServerState, loop: asyncio.AbstractEventLoop) -> _Pacer:
    """The pacer of the server whose state is `server_state` (one per uvicorn server)."""
    found = _PACERS.get(server_state)
    if found is None or found.loop is not loop:
        found = _PACERS[server_state] = _Pacer(loop)
    return found


class DoorProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under `Limits`, judging heads by `gate` (rules 1-8)."""

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
            with contextlib.suppress(OSError):  # rule 8
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
        """Whether the client may still be sending this request (rule 4)."""
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
        self.refuse(timeout("head"))

    def refuse(self, error: Refused, *, logged: bool = True) -> None:
        """Answer `error` at the protocol level, in one write, and close (gently, rule 4)."""
        if self.transport.is_closing():
            return
        self._cancel_head_timer()
        given = new_request_id()
        if logged:
            log.warning("refused at the door: %s %s (%s)", error.http_status, error.code, given)
        self.transport.write(written(error, given))
        self.transport.close()

    # -- bytes out (rule 5)

    def pause_writing(self) -> None:
        super().pause_writing()
        self.arm_write_timer()

    def resume_writing(self) -> None:
        self._cancel_write_timer()
        super().resume_writing()

    def arm_write_timer(self) -> None:
        """Give what is written `write_timeout_s` to be read (rule 5)."""
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
                    self.refuse(head_too_large(self.limits.max_head_bytes))
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
            self.refuse(refusal or not_http(), logged=logged)
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
            self._refusal = request_line_too_long(self.limits.max_request_line)
            raise _Stop

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._refusal = too_many_headers(self.limits.max_headers)
            raise _Stop
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        self._in_head = False
        self._head_seen = 0
        self._body_pending = not self._no_body()
        if self._over_cap:
            self._refusal = busy()
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

    # -- the request's head, judged before any task is made (rule 6)

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
                app = functools.partial(counted, app, gate.streams, verdict)
            if verdict is not False:  # False: deferred to the middleware (a CORS origin)
                scope[JUDGED] = True
        super()._start_asgi_task(cycle, app)


class _Stop(Exception):
    """Raised in a parser callback to stop the parse at a bound (`DoorProtocol._refusal`)."""


def door_protocol(limits: Limits, gate: Gate | None = None) -> Callable[..., DoorProtocol]:
    """uvicorn's `http` protocol class under `limits` (picklable, for worker processes); with
    `gate`, the head checks of `DoorMiddleware` sharing that gate are made by the protocol,
    before any task (the middleware then passes the requests it judged)."""
    return functools.partial(DoorProtocol, limits=limits, gate=gate)
