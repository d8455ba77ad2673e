"""The attacks of the door's tests (tests/surfaces/test_door_limits.py), run in a spawned
process so that the well-behaved client measured in the test's own process shares no
interpreter lock with them. Each returns what it was answered; nothing here allocates more than
a few hundred kilobytes, whatever it sends.
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import time
from collections.abc import Callable
from typing import Any

ATTACK_S = 3.0
PACE_S = 0.1
"""A quick attack (one flood is over in milliseconds) is repeated, one at a time and at most
every `PACE_S` seconds, for `ATTACK_S` seconds, so the well-behaved client's reads are made while
hostile requests keep coming."""
ATTACKERS = 500


def yield_the_cores() -> None:
    """The attacker process's initializer: the lowest CPU priority. On a real network the
    attacker runs on a machine of its own; on a 2-core test runner it would otherwise take a
    core from the server and the client being measured, and the client's latency would measure
    the runner's CPU, not the door. It still sends every byte of every attack."""
    os.nice(19)


def _complete(answer: bytes) -> bool:
    head, found, body = answer.partition(b"\r\n\r\n")
    if not found:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def _flood(port: int, head: bytes, chunk: bytes, total: int) -> tuple[bytes, int, float]:
    """Send `head`, then `chunk` again and again up to `total` bytes, reading all the while;
    stop at a whole answer. Returns the answer, the bytes of `chunk` sent, and the seconds."""
    began = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
        raw.setblocking(False)
        pending, sent, answer = head, 0, b""
        while time.monotonic() - began < 60 and not _complete(answer):
            writable = [raw] if pending or sent < total else []
            readable, ready, _ = select.select([raw], writable, [], 1)
            if readable:
                try:
                    got = raw.recv(65536)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    break
                if not got:
                    break
                answer += got
            elif ready:
                try:
                    if pending:
                        pending = pending[raw.send(pending) :]
                    else:
                        sent += raw.send(chunk)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    writable = []  # reset by the server: the answer may be read still
                    readable, _, _ = select.select([raw], [], [], 2)
                    if not readable:
                        break
    return answer, sent, time.monotonic() - began


def _repeated(attack: Callable[[], Any]) -> list[Any]:
    """`attack` again and again for `ATTACK_S` seconds; what each time returned."""
    results = []
    began = time.monotonic()
    while time.monotonic() - began < ATTACK_S:
        one = time.monotonic()
        results.append(attack())
        time.sleep(max(0.0, PACE_S - (time.monotonic() - one)))
    return results


def _crowd(port: int, heads: list[bytes], trickle: bytes | None) -> list[tuple[bytes, float]]:
    """Open one connection per head, send it, then (with `trickle`) one more header line every
    half second on each; collect what each is answered and when (seconds from its opening: at
    the lowest priority on a loaded runner, opening 500 takes seconds)."""
    began = time.monotonic()
    sockets = []
    opened: dict[socket.socket, float] = {}
    for head in heads:
        opening = time.monotonic()
        raw = socket.create_connection(("127.0.0.1", port), timeout=30)
        opened[raw] = opening
        raw.sendall(head)
        raw.setblocking(False)
        sockets.append(raw)
    answers: dict[socket.socket, bytes] = dict.fromkeys(sockets, b"")
    done: dict[socket.socket, float] = {}
    next_trickle = time.monotonic() + 0.5
    try:
        while len(done) < len(sockets) and time.monotonic() - began < 60:
            open_ = [raw for raw in sockets if raw not in done]
            readable, _, _ = select.select(open_, [], [], 0.2)
            for raw in readable:
                try:
                    got = raw.recv(65536)
                except OSError:
                    got = b""
                answers[raw] += got
                if not got or _complete(answers[raw]):
                    done[raw] = time.monotonic() - opened[raw]
            if trickle is not None and time.monotonic() >= next_trickle:
                next_trickle += 0.5
                for raw in open_:
                    if raw not in done:
                        with contextlib.suppress(OSError):
                            raw.send(trickle)
    finally:
        for raw in sockets:
            raw.close()
    return [(answers[raw], done.get(raw, float("inf"))) for raw in sockets]


def header_flood(port: int, host: bytes) -> list[tuple[bytes, int, float]]:
    """A 100 MB header, again and again."""
    big = b"GET / HTTP/1.1\r\n" + host + b"X-Big: "
    return _repeated(lambda: _flood(port, big, b"a" * 65536, 100 << 20))


def many_headers(port: int, host: bytes) -> list[tuple[bytes, int, float]]:
    """10,000 headers, again and again."""
    many = b"".join(b"X-H%d: v\r\n" % number for number in range(10_000))
    head = b"GET / HTTP/1.1\r\n" + host + many + b"\r\n"
    return _repeated(lambda: _flood(port, head, b"", 0))


def gigabyte_bodies(port: int, host: bytes, auth: bytes) -> list[tuple[bytes, int, float]]:
    """1 GB bodies to /mcp, declared and chunked, again and again."""
    post = b"POST /mcp HTTP/1.1\r\n" + host + auth + b"Content-Type: application/json\r\n"
    declared = post + b"Content-Length: %d\r\n\r\n" % (1 << 30)
    chunked = post + b"Transfer-Encoding: chunked\r\n\r\n"
    chunk = b"%x\r\n%s\r\n" % (1 << 16, b" " * (1 << 16))

    def both() -> list[tuple[bytes, int, float]]:
        return [
            _flood(port, declared, b" " * 65536, 1 << 30),
            _flood(port, chunked, chunk, 1 << 30),
        ]

    return [flood for pair in _repeated(both) for flood in pair]


def slowloris(port: int, host: bytes) -> list[tuple[bytes, float]]:
    """500 connections sending a head one line every half second."""
    heads = [b"GET /v1/streams HTTP/1.1\r\n" + host] * ATTACKERS
    return _crowd(port, heads, b"X-Slow: 1\r\n")


def idle_mcp(
    port: int, host: bytes, auth: bytes
) -> tuple[list[tuple[bytes, float]], list[tuple[bytes, float]]]:
    """500 MCP posts of one token that never send their bodies, and 500 GET streams."""
    post = (
        b"POST /mcp HTTP/1.1\r\n"
        + host
        + auth
        + b"Content-Type: application/json\r\nAccept: application/json\r\n"
        + b"Content-Length: 100\r\n\r\n"
    )
    get = b"GET /mcp HTTP/1.1\r\n" + host + auth + b"Accept: text/event-stream\r\n\r\n"
    return _crowd(port, [post] * ATTACKERS, None), _crowd(port, [get] * ATTACKERS, None)
