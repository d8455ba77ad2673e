"""`door_loop`, the serving loop: uvicorn's choice of loop (uvloop when installed), whose
servers on a listening socket accept new connections in batches, with rests between.

    config = uvicorn.Config(app, loop="pdpp_store.door:door_loop")  # and serve(sockets=[...])

Rules:
1. A server made on a listening socket (`create_server(sock=...)`, how uvicorn serves the
   socket it bound) accepts new connections from a reader on that socket, at most
   `ACCEPTED_AT_ONCE` at a time; after a full batch it rests `ACCEPT_REST_S` before accepting
   more, and the connections beyond wait in the kernel's backlog. The loop's own servers
   accept every pending connection at once: 500 connections opened together cost the server
   30-60 ms in one or two turns (the accept, its transport and its protocol, about 60-120 us
   each), and a client already in waited for all of it (17-22 ms on a read whose p99 is 2 ms);
   one per turn, the server still spent a whole core on them while they lasted. In batches,
   a burst takes about a quarter of the loop's time, and 500 are let in within about 150 ms
   (a sustained rate of over 3,000 new connections a second per process).
2. Out of file descriptors (or kernel memory), accepting pauses for `ACCEPT_RETRY_S` and one
   line is logged; the connections wait in the backlog meanwhile. Any other failure to accept
   one connection is that connection's alone: the next is accepted.
3. An accepted connection's protocol is made here, and a factory that fails closes the socket
   at once (not when the garbage collector finds it); its transport is made by the loop's
   `connect_accepted_socket`, as the loop's own servers make theirs (uvloop's transports,
   flow control and socket options).
4. Anything else (a host and port, TLS, or options this server does not know) is the loop's
   own `create_server`: nothing here changes what it does.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

__all__ = [
    "ACCEPTED_AT_ONCE",
    "ACCEPT_REST_S",
    "ACCEPT_RETRY_S",
    "DOOR_LOOP",
    "BatchServer",
    "accepting_in_batches",
    "door_loop",
]

DOOR_LOOP = "pdpp_store.door:door_loop"
"""`door_loop` as uvicorn's `loop` setting names it (an import string, for worker processes)."""

ACCEPTED_AT_ONCE = 4
ACCEPT_REST_S = 0.001
"""New connections accepted in one go, and the rest after a full batch (rule 1; the loop's
timers count in milliseconds)."""
ACCEPT_RETRY_S = 0.5
"""How long accepting pauses when the process is out of descriptors (rule 2)."""
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

log = logging.getLogger("pdpp_store.door")


class BatchServer(asyncio.AbstractServer):
    """A server on the listening socket `sock`, accepting in batches (rules 1-3)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        backlog: int,
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._factory = protocol_factory
        self._backlog = backlog
        self._reading = False  # a reader is on the socket (not during a rest)
        self._serving = False
        self._ended: asyncio.Future[None] = loop.create_future()  # resolved by `close`
        self._admitting: set[asyncio.Task[Any]] = set()
        self._resume: asyncio.TimerHandle | None = None
        sock.setblocking(False)

    # -- asyncio's Server

    @property
    def _closed(self) -> bool:
        return self._ended.done()

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        """Whether it accepts connections (resting between batches, or paused, included)."""
        return self._serving and not self._closed

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return () if self._closed else (self._sock,)

    async def start_serving(self) -> None:
        if self._closed or self._serving:
            return
        self._serving = True
        self._sock.listen(self._backlog)
        self._read()

    async def serve_forever(self) -> None:
        """Serve until closed."""
        await self.start_serving()
        await asyncio.shield(self._ended)

    def close(self) -> None:
        """Stop accepting and close the listening socket; connections made are left to their
        server (uvicorn ends them)."""
        if self._closed:
            return
        self._ended.set_result(None)
        self._unread()
        if self._resume is not None:
            self._resume.cancel()
            self._resume = None
        self._sock.close()

    async def wait_closed(self) -> None:
        """Once closed, wait for the connections being made to be made (or to fail)."""
        if self._admitting:
            await asyncio.wait(set(self._admitting))

    # -- accepting (rules 1-3)

    def _read(self) -> None:
        self._loop.add_reader(self._sock.fileno(), self._accept)
        self._reading = True

    def _unread(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._sock.fileno())
            self._reading = False

    def _accept(self) -> None:
        for _ in range(ACCEPTED_AT_ONCE):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return  # nothing pending (or the client gave up first)
            except OSError as error:
                if error.errno not in _OUT_OF_RESOURCES:
                    log.warning("could not accept a connection: %s", error.strerror or error)
                    continue
                log.warning(
                    "accepting paused for %ss: %s", f"{ACCEPT_RETRY_S:g}", error.strerror or error
                )
                self._rest(ACCEPT_RETRY_S)
                return
            conn.setblocking(False)
            admitting = self._loop.create_task(self._admit(conn))
            self._admitting.add(admitting)
            admitting.add_done_callback(self._admitted)
        self._rest(ACCEPT_REST_S)  # a full batch: more may wait

    async def _admit(self, conn: socket.socket) -> None:
        try:
            protocol = self._factory()
        except BaseException:
            conn.close()  # no transport owns it yet: closed now, not by the garbage collector
            raise
        await self._loop.connect_accepted_socket(lambda: protocol, conn)

    def _admitted(self, admitting: asyncio.Task[Any]) -> None:
        self._admitting.discard(admitting)
        if not admitting.cancelled() and (error := admitting.exception()) is not None:
            log.warning("could not serve an accepted connection: %s", error)

    def _rest(self, seconds: float) -> None:
        self._unread()
        self._resume = self._loop.call_later(seconds, self._resumed)

    def _resumed(self) -> None:
        self._resume = None
        if not self._closed:
            self._read()


class _AcceptsInBatches(asyncio.AbstractEventLoop):
    """A loop whose servers on a listening socket are `BatchServer`s (rule 4 for the rest)."""

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: Any = None,
        *,
        sock: socket.socket | None = None,
        backlog: int = 100,
        ssl: Any = None,
        start_serving: bool = True,
        **options: Any,
    ) -> asyncio.AbstractServer:
        if sock is None or host is not None or port is not None or ssl is not None or options:
            return await super().create_server(
                protocol_factory,
                host,
                port,
                sock=sock,
                backlog=backlog,
                ssl=ssl,
                start_serving=start_serving,
                **options,
            )
        server = BatchServer(self, sock, protocol_factory, backlog)
        if start_serving:
            await server.start_serving()
        return server


_BATCHED: dict[type[asyncio.AbstractEventLoop], type[asyncio.AbstractEventLoop]] = {}


def accepting_in_batches(base: type[asyncio.AbstractEventLoop]) -> type[asyncio.AbstractEventLoop]:
    """The loop class `base` whose servers on a listening socket are `BatchServer`s (one class
    per base)."""
    found = _BATCHED.get(base)
    if found is None:
        found = _BATCHED[base] = type(
            f"{base.__name__}AcceptingInBatches", (_AcceptsInBatches, base), {}
        )
    return found


def door_loop() -> asyncio.AbstractEventLoop:
    """A new serving loop (uvicorn's `loop` setting, as `DOOR_LOOP`): uvloop's when installed,
    else asyncio's, accepting in batches."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is in the server extra on every POSIX
        return accepting_in_batches(asyncio.SelectorEventLoop)()
    return accepting_in_batches(uvloop.Loop)()
