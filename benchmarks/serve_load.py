"""Load on `pdpp-store serve`: field-window requests from 1, 8 and 32 concurrent clients, against
the library call alone, on each database.

    python -m benchmarks.serve_load [--smoke] [--out docs/benchmarks.md] [--sqlite-only]

For each database: a store with one 1,000,000-code-point mixed-text field; the library figure is
`AsyncStore.read_field_window` awaited in process, one call at a time; the server figures are
the same read (4096 code points at a random offset, by a token whose grant covers the field) as
`GET /v1/.../field-window` over keep-alive loopback connections to a real `pdpp-store serve`
subprocess, with 1, 8 and 32 clients each sending requests back to back. Reported: p50 and p99
latency, requests/s, errors (any status but 200).

Rules:
1. Loopback only (the servers listen on 127.0.0.1, free ports) and bounded: a fixed number of
   requests per level, and a time cap per measured part after which it stops by itself. The
   servers are ended by their pids.
2. The full run rewrites the block between `<!-- serve-load:start -->` and
   `<!-- serve-load:end -->` in docs/benchmarks.md (adding it at the end if absent); the smoke run
   (`--smoke`, small counts) prints the table and checks that every level answered without
   errors, never how fast.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import psycopg

from pdpp_store import AsyncStore, Grant

START = "<!-- serve-load:start -->"
END = "<!-- serve-load:end -->"
FIELD_CHARS = 1_000_000
WINDOW = 4096
TOKEN = "tok_bench_load_000000000000"
CONNECTION = "cin_bench"
STREAM = "message_bodies"
LEVELS = (1, 8, 32)
LEVEL_CAP_SECONDS = 60.0
WORKERS = 2
"""`serve --workers` for the last rows: one process per core of this machine."""
PG_ADMIN = os.environ.get(
    "PDPP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
).replace("postgresql+psycopg://", "postgresql://")

GRANT = {
    "grant_id": "g-bench",
    "streams": [{"name": STREAM, "instance_ids": [CONNECTION], "fields": ["id", "body_text"]}],
}


@dataclass
class Figures:
    label: str
    latencies: list[float]
    seconds: float
    errors: int

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies) * 1000

    @property
    def p99_ms(self) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000

    @property
    def per_second(self) -> float:
        return len(self.latencies) / self.seconds


def _text(size: int) -> str:
    unit = "Dear Zoë, the invoice for März is attached 😀. Regards, 名前. "
    return (unit * (size // len(unit) + 1))[:size]


def _manifest() -> dict[str, object]:
    path = Path(__file__).parent.parent / "pdpp_store" / "_data" / "gmail.json"
    loaded: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return loaded


async def _seed(url: str) -> None:
    store = await AsyncStore.open(url)
    try:
        manifest = _manifest()
        await store.register_manifest(manifest)
        await store.add_connection(CONNECTION, str(manifest["connector_id"]))
        record = {
            "id": "big",
            "message_id": "m-big",
            "message_received_at": "2026-03-01T10:00:00Z",
            "body_text": _text(FIELD_CHARS),
        }
        await store.upsert_records(CONNECTION, STREAM, [record])
    finally:
        await store.close()


def _offsets(count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(0, FIELD_CHARS - WINDOW) for _ in range(count)]


async def _library(url: str, count: int) -> Figures:
    store = await AsyncStore.open(url)
    grant = Grant.from_dict(GRANT)
    ref = f"{CONNECTION}/{STREAM}:big"
    try:
        for offset in _offsets(20, 1):  # warm up
            await store.read_field_window(grant, ref, "body_text", offset_chars=offset)
        latencies = []
        began = time.perf_counter()
        for offset in _offsets(count, 2):
            start = time.perf_counter()
            await store.read_field_window(
                grant, ref, "body_text", offset_chars=offset, limit_chars=WINDOW
            )
            latencies.append(time.perf_counter() - start)
        return Figures("library (in process)", latencies, time.perf_counter() - began, 0)
    finally:
        await store.close()


async def _app_in_process(url: str, count: int) -> Figures:
    """The same request handed to the ASGI app directly: the app's own cost, with no socket,
    no HTTP parsing and no second process."""
    from pdpp_store.rest import create_app

    store = await AsyncStore.open(url)
    app = create_app(store, {TOKEN: Grant.from_dict(GRANT)})
    path = f"/v1/streams/{STREAM}/records/big/field-window"
    headers = [(b"host", b"127.0.0.1"), (b"authorization", f"Bearer {TOKEN}".encode())]
    statuses: list[int] = []

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def one(offset: int) -> None:
        query = f"field=body_text&connection_id={CONNECTION}&offset_chars={offset}"
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "root_path": "",
            "query_string": f"{query}&limit_chars={WINDOW}".encode(),
            "headers": headers,
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        await app(scope, receive, send)

    try:
        for offset in _offsets(20, 1):
            await one(offset)
        latencies = []
        began = time.perf_counter()
        for offset in _offsets(count, 2):
            start = time.perf_counter()
            await one(offset)
            latencies.append(time.perf_counter() - start)
        seconds = time.perf_counter() - began
    finally:
        await store.close()
    errors = sum(status != 200 for status in statuses)
    return Figures("REST app in process (no socket)", latencies, seconds, errors)


class _Connection:
    """One keep-alive HTTP/1.1 connection with the least client work possible (like `wrk`): the
    request is pre-encoded bytes, the answer is read by its Content-Length. httpx would cost more
    per request than the server being measured."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def get(self, target: str) -> int:
        self.writer.write(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await self.reader.readexactly(length)
        return status

    def close(self) -> None:
        self.writer.close()


async def _clients(port: int, clients: int, count: int) -> Figures:
    path = f"/v1/streams/{STREAM}/records/big/field-window"
    targets = [
        f"{path}?field=body_text&connection_id={CONNECTION}&offset_chars={offset}"
        f"&limit_chars={WINDOW}"
        for offset in _offsets(count, 3)
    ]
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + LEVEL_CAP_SECONDS
    connections = [await _Connection.open(port) for _ in range(clients)]
    try:
        for connection, target in zip(connections, targets, strict=False):  # warm each one
            await connection.get(target)

        async def worker(connection: _Connection, mine: list[str]) -> None:
            nonlocal errors
            for target in mine:
                if time.perf_counter() > deadline:
                    return
                start = time.perf_counter()
                try:
                    ok = await connection.get(target) == 200
                except (OSError, asyncio.IncompleteReadError, ValueError):
                    ok = False
                latencies.append(time.perf_counter() - start)
                errors += not ok
                if not ok:
                    return  # the connection may be unusable: stop this client

        began = time.perf_counter()
        await asyncio.gather(*(worker(connections[i], targets[i::clients]) for i in range(clients)))
        seconds = time.perf_counter() - began
    finally:
        for connection in connections:
            connection.close()
    label = f"REST, {clients} client{'s' if clients > 1 else ''}"
    return Figures(label, latencies, seconds, errors)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def _serving(
    url: str, directory: Path, workers: int = 1, options: tuple[str, ...] = ()
) -> Iterator[int]:
    tokens = directory / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: GRANT}), encoding="utf-8")
    port = _free_port()
    cli = Path(sys.executable).with_name("pdpp-store")
    command = [str(cli), "--db", url, "serve", "--tokens", str(tokens), "--port", str(port)]
    command += ["--workers", str(workers), *options]
    log_path = directory / f"serve-{port}.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log)
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120  # a loaded 2-core machine starts a server slowly
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("pdpp-store serve did not start")
            try:
                httpx.get(f"{base_url}/.well-known/oauth-protected-resource", timeout=1)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        yield port
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
        log.close()
        errors = [
            line
            for line in log_path.read_text(errors="replace").splitlines()
            if "Traceback" in line or "ERROR" in line
        ]
        if errors:
            print(f"serve_load: the server logged errors: {errors[:5]}", file=sys.stderr)


@contextmanager
def _databases(directory: Path, sqlite_only: bool) -> Iterator[list[tuple[str, str]]]:
    found = [("SQLite", f"sqlite:///{directory / 'load.db'}")]
    name = f"pdpp_load_{uuid.uuid4().hex}"
    created = False
    if not sqlite_only:
        try:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            created = True
            base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
            found.append(("PostgreSQL", f"{base}/{name}"))
        except psycopg.Error as error:
            print(f"serve_load: no Postgres ({error}); SQLite only", file=sys.stderr)
    try:
        yield found
    finally:
        if created:
            with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _merged(parts: list[Figures]) -> Figures:
    return Figures(
        parts[0].label,
        [latency for part in parts for latency in part.latencies],
        sum(part.seconds for part in parts),
        sum(part.errors for part in parts),
    )


def measure(smoke: bool, sqlite_only: bool) -> list[tuple[str, list[Figures]]]:
    """Per database: the one-at-a-time figures (library, app in process, one client) measured
    in interleaved rounds, so that all three see the same machine; then 8 and 32 clients, on one
    worker and on `WORKERS`, also in interleaved rounds (both servers run throughout; the one not
    measured sits idle)."""
    rounds, per_round = (2, 100) if smoke else (10, 200)
    per_level = {8: 200, 32: 320} if smoke else {8: 4000, 32: 6400}
    level_rounds = 2 if smoke else 4
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="pdpp-load-") as temporary,
        _databases(Path(temporary), sqlite_only) as databases,
    ):
        for name, url in databases:
            asyncio.run(_seed(url))
            with (
                _serving(url, Path(temporary)) as port,
                _serving(url, Path(temporary), workers=WORKERS) as more_port,
            ):
                one_at_a_time: list[list[Figures]] = [[], [], []]
                for _ in range(rounds):
                    one_at_a_time[0].append(asyncio.run(_library(url, per_round)))
                    one_at_a_time[1].append(asyncio.run(_app_in_process(url, per_round)))
                    one_at_a_time[2].append(asyncio.run(_clients(port, 1, per_round)))
                figures = [_merged(parts) for parts in one_at_a_time]
                loaded: dict[tuple[int, int], list[Figures]] = {}
                for _ in range(level_rounds):
                    for clients in LEVELS[1:]:
                        count = per_level[clients] // level_rounds
                        for workers, at in ((1, port), (WORKERS, more_port)):
                            part = asyncio.run(_clients(at, clients, count))
                            loaded.setdefault((workers, clients), []).append(part)
                for (workers, _), parts in sorted(loaded.items()):
                    merged = _merged(parts)
                    more = f", {workers} workers" if workers > 1 else ""
                    figures.append(replace(merged, label=f"{merged.label}{more}"))
            results.append((name, figures))
    return results


def render(results: list[tuple[str, list[Figures]]]) -> str:
    lines = [
        START,
        "## The server: field windows over REST under load",
        "",
        "Generated by `python -m benchmarks.serve_load` (`benchmarks/run` runs it): "
        f"{WINDOW}-code-point windows at random offsets of a {FIELD_CHARS:,}-code-point mixed "
        "field, through `AsyncStore.read_field_window` in process (one call at a time), "
        "through the REST app called in process (ASGI, no socket), and as "
        "`GET /v1/streams/{stream}/records/{id}/field-window` to a `pdpp-store serve` subprocess "
        "over loopback keep-alive connections, from 1, 8 and 32 concurrent clients sending back "
        "to back (a minimal HTTP/1.1 client on asyncio streams, so that the figures are the "
        "server's, not a client library's). The clients run in one process on the same 2 CPUs "
        "as the server (and, here, beside other work), so latency under concurrency includes "
        "waiting for a CPU. The first three rows are measured in interleaved rounds, so that "
        "their ratios compare like with like on a busy machine; so are the rows of 8 and 32 "
        f"clients, on one server process and on `serve --workers {WORKERS}` (both run "
        "throughout).",
        "",
    ]
    for name, figures in results:
        library, in_process, one = figures[0], figures[1], figures[2]
        busiest = figures[1 + len(LEVELS)]  # one worker's last level (the two-worker rows follow)
        lines += [
            f"**{name}**: at one client the server's p50 is "
            f"{one.p50_ms / library.p50_ms:.2f}\N{MULTIPLICATION SIGN} the library's "
            f"(goal: 2\N{MULTIPLICATION SIGN}); the app alone, without a socket, "
            f"{in_process.p50_ms / library.p50_ms:.2f}\N{MULTIPLICATION SIGN}; the rest is "
            "the loopback round trip and a second process on the same CPUs. Under "
            f"{LEVELS[-1]} clients: {busiest.errors} errors, "
            f"{busiest.per_second:,.0f} requests/s ({one.per_second:,.0f} at one client); "
            f"on {WORKERS} workers, {figures[-1].per_second:,.0f} requests/s "
            f"(p99 {figures[-1].p99_ms:.2f} ms against {busiest.p99_ms:.2f} ms).",
            "",
        ]
        lines += [
            f"### {name}",
            "",
            "| | requests | p50 | p99 | requests/s | p50 / library p50 | errors |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for item in figures:
            lines.append(
                f"| {item.label} | {len(item.latencies):,} | {item.p50_ms:.2f} ms "
                f"| {item.p99_ms:.2f} ms | {item.per_second:,.0f} "
                f"| {item.p50_ms / library.p50_ms:.2f}\N{MULTIPLICATION SIGN} | {item.errors} |"
            )
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_block(path: Path, block: str, start: str = START, end: str = END) -> None:
    """Put `block` between the `start` and `end` markers of `path` (at its end if absent)."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if start in old and end in old:
        head, _, rest = old.partition(start)
        _, _, tail = rest.partition(end)
        new = head + block.rstrip("\n") + tail
    else:
        new = old.rstrip("\n") + "\n\n" + block
    path.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="small counts; check, don't write")
    parser.add_argument("--sqlite-only", action="store_true", help="skip Postgres")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks.md"))
    args = parser.parse_args(argv)
    results = measure(args.smoke, args.sqlite_only)
    block = render(results)
    print(block)
    failed = [(name, f.label) for name, figures in results for f in figures if f.errors]
    if failed:
        raise SystemExit(f"serve_load: errors under load: {failed}")
    if not args.smoke:
        write_block(args.out, block)


if __name__ == "__main__":
    main()
