"""The serving loop's accepting in batches (`pdpp_store.door._accept`), on real loopback
sockets, on uvloop (what `serve` runs) and on asyncio's own loop: a burst of connections is let
in `ACCEPTED_AT_ONCE` at a time with a rest between, where the loop's own server lets it in at
once; every connection is still served; closing stops accepting; a process out of descriptors
pauses accepting and resumes; anything but a listening socket is the loop's own server."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import resource
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import uvicorn
import uvloop

from pdpp_store.door import ACCEPTED_AT_ONCE, DOOR_LOOP
from pdpp_store.door._accept import (
    ACCEPT_REST_S,
    ACCEPT_RETRY_S,
    BatchServer,
    accepting_in_batches,
)

BURST = 40
BASES: dict[str, type[asyncio.AbstractEventLoop]] = {
    "uvloop": uvloop.Loop,
    "asyncio": asyncio.SelectorEventLoop,
}


class _Echo(asyncio.Protocol):
    """Records each connection made in `made`, and echoes what it is sent."""

    def __init__(self, made: list[_Echo]) -> None:
        self.made = made
        self.transport: Any = None  # uvloop's transports are not asyncio's classes

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.made.append(self)

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


def _listening() -> socket.socket:
    """A bound loopback socket, as uvicorn's `bind_socket` leaves it (not yet listening)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextlib.contextmanager
def _clients(address: tuple[str, int], count: int) -> Iterator[list[socket.socket]]:
    """`count` connections to `address`, each complete in the kernel's backlog (a listening
    socket completes the handshake before it is accepted)."""
    clients = [socket.create_connection(address) for _ in range(count)]
    try:
        yield clients
    finally:
        for client in clients:
            client.close()


async def _turns_until(made: list[_Echo], count: int, limit: int = 10**6) -> list[int]:
    """How many connections had been made after each turn of the loop, until `count` were."""
    after: list[int] = []
    while len(made) < count and len(after) < limit:
        await asyncio.sleep(0)  # one turn
        after.append(len(made))
    return after


def _run(base: type[asyncio.AbstractEventLoop], main: Callable[[], object]) -> None:
    with asyncio.Runner(loop_factory=base) as runner:
        runner.run(main())  # type: ignore[arg-type]


def _echoed(client: socket.socket) -> bytes:
    client.sendall(b"ping")
    return client.recv(16)


@pytest.mark.serial  # uvloop's own server differs by time alone: a preempted 0.4 ms run is 8 ms
@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_a_burst_of_connections_is_let_in_a_batch_at_a_time(
    base: type[asyncio.AbstractEventLoop],
) -> None:
    def served(loop_class: type[asyncio.AbstractEventLoop]) -> tuple[list[int], float]:
        after: list[int] = []
        took = [0.0]

        async def main() -> None:
            made: list[_Echo] = []
            sock = _listening()
            loop = asyncio.get_running_loop()
            server = await loop.create_server(lambda: _Echo(made), sock=sock, backlog=BURST)
            with _clients(sock.getsockname(), BURST) as clients:
                began = time.perf_counter()
                after.extend(await _turns_until(made, BURST))
                took[0] = time.perf_counter() - began
                assert len(made) == BURST
                for client in clients:  # each is served
                    assert await asyncio.to_thread(_echoed, client) == b"ping"
            server.close()
            await server.wait_closed()

        _run(loop_class, main)
        return after, took[0]

    def batched(after: list[int], took: float) -> bool:
        """Whether the burst came in at most a batch per turn, with a rest after each batch: at
        least one tick of the loop's clock (whole milliseconds on uvloop, so a rest may end
        early within its first millisecond)."""
        grew = [later - earlier for earlier, later in zip([0, *after], after, strict=False)]
        rests = BURST // ACCEPTED_AT_ONCE - 2
        return max(grew) <= ACCEPTED_AT_ONCE and took >= rests * ACCEPT_REST_S

    paced, took = served(accepting_in_batches(base))
    assert paced[-1] == BURST
    assert batched(paced, took), (paced, took)
    # The loop's own server lets the burst in at once (asyncio's), or one per turn with no rest
    # (uvloop's): what the batches change.
    at_once, took = served(base)
    assert not batched(at_once, took), (at_once, took)


@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_closing_stops_accepting(base: type[asyncio.AbstractEventLoop]) -> None:
    async def main() -> None:
        made: list[_Echo] = []
        sock = _listening()
        address = sock.getsockname()
        server = await asyncio.get_running_loop().create_server(
            lambda: _Echo(made), sock=sock, backlog=8
        )
        assert isinstance(server, BatchServer)
        assert server.is_serving()
        assert list(server.sockets) == [sock]
        with _clients(address, 1) as clients:
            await _turns_until(made, 1)
            assert await asyncio.to_thread(_echoed, clients[0]) == b"ping"
        server.close()
        await server.wait_closed()
        assert not server.is_serving()
        assert list(server.sockets) == []
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(address, timeout=5)
        server.close()  # again: nothing more to do

    _run(accepting_in_batches(base), main)


@pytest.mark.serial  # the process's descriptor limit, lowered: no other test's thread may open one
@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_out_of_descriptors_accepting_pauses_and_resumes(
    base: type[asyncio.AbstractEventLoop], caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        made: list[_Echo] = []
        sock = _listening()
        server = await asyncio.get_running_loop().create_server(
            lambda: _Echo(made), sock=sock, backlog=8
        )
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        with _clients(sock.getsockname(), 3) as clients:
            lowest_free = os.dup(0)
            os.close(lowest_free)
            resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
            try:  # no descriptor is left for an accepted connection
                await asyncio.sleep(ACCEPT_RETRY_S / 8)
                spent = time.process_time()
                await asyncio.sleep(ACCEPT_RETRY_S / 4)
                assert made == []
                assert server.is_serving()  # paused, still serving
                # Paused, not spinning on the readable socket (a reader left on would run every
                # turn: a whole core).
                assert time.process_time() - spent < ACCEPT_RETRY_S / 16
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            await asyncio.wait_for(_turns_until(made, 3, limit=10**9), ACCEPT_RETRY_S * 10)
            assert server.is_serving()
            for client in clients:
                assert await asyncio.to_thread(_echoed, client) == b"ping"
        server.close()
        await server.wait_closed()

    with caplog.at_level(logging.WARNING, logger="pdpp_store.door"):
        _run(accepting_in_batches(base), main)
    paused = [r.getMessage() for r in caplog.records if "accepting paused" in r.getMessage()]
    assert paused, caplog.records
    assert "Too many open files" in paused[0]


def test_anything_but_a_listening_socket_is_the_loops_own_server() -> None:
    async def main() -> None:
        made: list[_Echo] = []
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Echo(made), "127.0.0.1", 0)
        try:
            assert not isinstance(server, BatchServer)
            port = server.sockets[0].getsockname()[1]
            with _clients(("127.0.0.1", port), 1) as clients:
                await _turns_until(made, 1)
                assert await asyncio.to_thread(_echoed, clients[0]) == b"ping"
        finally:
            server.close()
            await server.wait_closed()

    _run(accepting_in_batches(uvloop.Loop), main)


def test_uvicorn_serves_on_the_door_loop_in_every_process() -> None:
    """uvicorn's `loop` setting names the door's loop (an import string: worker processes
    import it), and the loop it makes is uvloop's, accepting in batches."""
    factory = uvicorn.Config("pdpp_store.rest:create_app", loop=DOOR_LOOP).get_loop_factory()
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert isinstance(loop, accepting_in_batches(uvloop.Loop))
    finally:
        loop.close()


class _Refusing(asyncio.Protocol):
    def __init__(self) -> None:
        raise RuntimeError("no protocol for this one")


@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_a_connection_that_cannot_be_served_is_closed_at_once(
    base: type[asyncio.AbstractEventLoop], caplog: pytest.LogCaptureFixture
) -> None:
    """A protocol factory that fails: the accepted socket is closed then and there (the client
    sees the end), not left to the garbage collector; the next connection is still accepted."""

    async def main() -> None:
        sock = _listening()
        made: list[_Echo] = []
        calls = [0]

        def factory() -> asyncio.Protocol:
            calls[0] += 1
            return _Refusing() if calls[0] == 1 else _Echo(made)

        server = await asyncio.get_running_loop().create_server(factory, sock=sock, backlog=8)
        with _clients(sock.getsockname(), 1) as refused:
            refused[0].settimeout(5)
            assert await asyncio.to_thread(refused[0].recv, 16) == b""
        with _clients(sock.getsockname(), 1) as served:
            await _turns_until(made, 1)
            assert await asyncio.to_thread(_echoed, served[0]) == b"ping"
        server.close()
        await server.wait_closed()

    # With the collector off, a socket left to it would stay open (the client's read times
    # out); one dropped unclosed warns as it goes.
    gc.disable()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            with caplog.at_level(logging.WARNING, logger="pdpp_store.door"):
                _run(accepting_in_batches(base), main)
    finally:
        gc.enable()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert any("could not serve an accepted connection" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("base", BASES.values(), ids=BASES.keys())
def test_serving_forever_ends_when_closed(base: type[asyncio.AbstractEventLoop]) -> None:
    async def main() -> None:
        sock = _listening()
        server = await asyncio.get_running_loop().create_server(
            lambda: _Echo([]), sock=sock, backlog=8, start_serving=False
        )
        assert not server.is_serving()
        serving = asyncio.ensure_future(server.serve_forever())
        await asyncio.sleep(0.01)
        assert server.is_serving()
        server.close()
        await asyncio.wait_for(serving, 5)
        assert not server.is_serving()

    _run(accepting_in_batches(base), main)
