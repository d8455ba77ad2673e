"""The fronts' cost around their SQL (issue 14, docs/performance.md goals 7 and 8), side by side:

- async: `AsyncStore.read_field_window` against the very statement and parameters it sends (as
  the boundary audit captured them), run on the raw async driver (aiosqlite `execute_fetchall`,
  psycopg `AsyncConnection` in autocommit, one connection per task), with 1, 4 and 16 concurrent
  tasks sharing `FRONT_READS` reads per round: reads/s of each;
- across processes: the same reads, by the same 16 tasks, in one process or spread over two
  (`_processes`: an `AsyncStore` on each process's own loop); and the raw driver's statement
  on 1 and on 2 threads of one process (what a second thread adds where the interpreter lock
  is held for most of a read);
- sync: `Store` reads (a window by offset and by cursor, a record projection) against the raw
  floor: the captured statements replayed on a bare autocommit DBAPI connection, as the library
  runs its reads (no transaction).

Every library answer is checked against the expected text, and every raw answer against the rows
the library received. Environment: PDPP_BENCH_FRONT_READS (reads per async round, default 256;
the smoke run uses 32).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import signal
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.context import SpawnProcess
from typing import Any

import aiosqlite
import psycopg
import pytest
from audit import BoundaryAudit
from pytest_benchmark.fixture import BenchmarkFixture
from sqlalchemy.engine import make_url

from pdpp_store import AsyncStore, Store

from ._bench import WINDOW_CHARS, BenchDatabase, Captured
from ._measure import DATASETS, label
from ._processes import WindowRead, serve_orders, shares

FRONT_READS = int(os.environ.get("PDPP_BENCH_FRONT_READS") or 256)
TASKS = (1, 4, 16)
DATASET = DATASETS[0]
"""The smallest field of the matrix (window reads cost the same at any size: the window suite)."""
OFFSET = 321


@dataclass
class AsyncFronts:
    """One event loop with an `AsyncStore` and `max(TASKS)` raw async connections on it."""

    loop: asyncio.AbstractEventLoop
    store: AsyncStore
    raw: list[Any]
    backend: str

    def run(self, work: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(work)

    async def raw_rows(self, connection: Any, statement: str, params: Any) -> list[Any]:
        if self.backend == "sqlite":
            return list(await connection.execute_fetchall(statement, params))
        async with connection.cursor() as cursor:
            await cursor.execute(statement, params)
            return list(await cursor.fetchall())


async def _open_raw(url: str, backend: str) -> Any:
    if backend == "sqlite":
        connection = await aiosqlite.connect(make_url(url).database or "", isolation_level=None)
        await connection.execute("PRAGMA busy_timeout=10000")
        return connection
    conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    return await psycopg.AsyncConnection.connect(conninfo, autocommit=True)


@pytest.fixture(scope="module")
def fronts(bench: BenchDatabase) -> Iterator[AsyncFronts]:
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(AsyncStore.open(bench.url))
    raw = [loop.run_until_complete(_open_raw(bench.url, bench.backend)) for _ in range(max(TASKS))]
    try:
        yield AsyncFronts(loop, store, raw, bench.backend)
    finally:
        for connection in raw:
            loop.run_until_complete(connection.close())
        loop.run_until_complete(store.close())
        loop.close()


async def _concurrently(tasks: int, read: Callable[[int], Awaitable[object]]) -> list[object]:
    """`FRONT_READS` reads split over `tasks` tasks; task `n` reads with `read(n)`."""

    async def worker(n: int, count: int) -> list[object]:
        return [await read(n) for _ in range(count)]

    done = await asyncio.gather(
        *(worker(n, count) for n, count in enumerate(shares(FRONT_READS, tasks)))
    )
    return [answer for answers in done for answer in answers]


def _captured(fronts: AsyncFronts, read: Awaitable[object]) -> Captured:
    """One read of the async store under the boundary audit."""
    with BoundaryAudit(fronts.store.engine) as audit:
        fronts.run(read)
    return Captured(
        list(audit.executions), list(audit.rows), audit.chars_returned(), audit.max_text_cell()
    )


def _single(captured: Captured) -> tuple[str, Any]:
    assert len(captured.executions) == 1, "a window read is one statement"
    return captured.executions[0]


@pytest.mark.parametrize("impl", ["library", "raw"])
@pytest.mark.parametrize("tasks", TASKS)
def test_async_front(
    bench: BenchDatabase, fronts: AsyncFronts, benchmark: BenchmarkFixture, tasks: int, impl: str
) -> None:
    ref, grant = bench.ref(DATASET), bench.grant

    async def library(_: int) -> object:
        window = await fronts.store.read_field_window(
            grant, ref, "body", offset_chars=OFFSET, limit_chars=WINDOW_CHARS
        )
        return window.text

    expected_text = fronts.run(library(0))  # also warms the store's catalogue cache
    captured = bench.case(("fronts-async", DATASET), lambda: _captured(fronts, library(0)))
    statement, params = _single(captured)

    async def raw(n: int) -> object:
        return await fronts.raw_rows(fronts.raw[n], statement, params)

    read = library if impl == "library" else raw
    label(
        benchmark,
        f"fronts async {bench.backend} {tasks} tasks",
        suite="fronts",
        front="async",
        backend=bench.backend,
        impl=impl,
        tasks=tasks,
        reads=FRONT_READS,
    )
    answers = benchmark(lambda: fronts.run(_concurrently(tasks, read)))
    assert len(answers) == FRONT_READS
    expected = expected_text if impl == "library" else captured.rows
    assert all(_plain(answer) == expected for answer in answers)


def _plain(answer: object) -> object:
    """A raw answer as the audit records rows (tuples of plain values); text as it is."""
    if isinstance(answer, list):
        return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in answer]
    return answer


SYNC_READS = ("window-offset", "window-cursor", "window-cursor-elsewhere", "record")
"""`window-cursor` reads back a cursor its own store minted (which the codec remembers, as a
server does for the cursors it hands out); `window-cursor-elsewhere` one minted by another
store on the same database (another process, say), which is decoded and verified in full."""


@pytest.mark.parametrize("impl", ["library", "floor"])
@pytest.mark.parametrize("read", SYNC_READS)
def test_sync_front(
    bench: BenchDatabase, benchmark: BenchmarkFixture, read: str, impl: str
) -> None:
    store, grant, ref = bench.store, bench.grant, bench.ref(DATASET)

    def cursor() -> str:
        after = store.read_field_window(
            grant, ref, "body", offset_chars=OFFSET + WINDOW_CHARS, limit_chars=WINDOW_CHARS
        )
        assert after.previous_cursor is not None
        return after.previous_cursor

    def cursor_elsewhere() -> str:
        other = Store.open(bench.url)
        try:
            after = other.read_field_window(
                grant, ref, "body", offset_chars=OFFSET + WINDOW_CHARS, limit_chars=WINDOW_CHARS
            )
            assert after.previous_cursor is not None
            return after.previous_cursor
        finally:
            other.close()

    token = bench.case(("fronts-cursor", DATASET), cursor)
    foreign = bench.case(("fronts-cursor-elsewhere", DATASET), cursor_elsewhere)
    library: dict[str, Callable[[], object]] = {
        "window-offset": lambda: (
            store.read_field_window(
                grant, ref, "body", offset_chars=OFFSET, limit_chars=WINDOW_CHARS
            ).text
        ),
        "window-cursor": lambda: store.read_field_window(grant, ref, "body", cursor=token).text,
        "window-cursor-elsewhere": lambda: (
            store.read_field_window(grant, ref, "body", cursor=foreign).text
        ),
        "record": lambda: store.read_record(grant, ref).to_dict(),
    }
    expected = library[read]()
    captured = bench.case(("fronts-sync", DATASET, read), lambda: bench.capture(library[read]))
    assert len(captured.executions) == 1, f"{read} is one statement"
    label(
        benchmark,
        f"fronts sync {bench.backend} {read}",
        suite="fronts",
        front="sync",
        backend=bench.backend,
        impl=impl,
        read=read,
    )
    if impl == "library":
        assert benchmark(library[read]) == expected
    else:
        floor = benchmark(lambda: bench.replay(captured.executions, autocommit=True))
        assert floor == captured.rows


PROCESSES = (1, 2)
SPREAD_TASKS = max(TASKS)
"""The tasks of the busiest async level, all in one process or split evenly over the others."""
READY_SECONDS = 60.0


@pytest.fixture(scope="module")
def reader_processes(bench: BenchDatabase) -> Iterator[Callable[[int], list[Connection]]]:
    """`get(n)`: the pipes to `n` reader processes (started on first use, kept for the module,
    then told to stop and ended by their pids)."""
    read = WindowRead(bench.url, bench.ref(DATASET), bench.grant, OFFSET, WINDOW_CHARS)
    context = multiprocessing.get_context("spawn")
    started: dict[int, list[tuple[SpawnProcess, Connection]]] = {}

    def get(count: int) -> list[Connection]:
        if count not in started:
            started[count] = []
            for _ in range(count):
                mine, theirs = context.Pipe()
                process = context.Process(target=serve_orders, args=(read, theirs), daemon=True)
                process.start()
                theirs.close()
                started[count].append((process, mine))
                assert mine.poll(READY_SECONDS), "a reader process did not start"
                assert mine.recv() == "ready"
        return [pipe for _, pipe in started[count]]

    try:
        yield get
    finally:
        for readers in started.values():
            for process, pipe in readers:
                with contextlib.suppress(OSError):
                    pipe.send(None)
                process.join(timeout=30)
                if process.is_alive() and process.pid is not None:
                    os.kill(process.pid, signal.SIGKILL)
                    process.join()


@pytest.mark.parametrize("processes", PROCESSES)
def test_async_processes(
    bench: BenchDatabase,
    reader_processes: Callable[[int], list[Connection]],
    benchmark: BenchmarkFixture,
    processes: int,
) -> None:
    expected = bench.store.read_field_window(
        bench.grant, bench.ref(DATASET), "body", offset_chars=OFFSET, limit_chars=WINDOW_CHARS
    ).text
    pipes = reader_processes(processes)

    def round_trip() -> set[str]:
        for pipe, reads in zip(pipes, shares(FRONT_READS, processes), strict=True):
            pipe.send((reads, SPREAD_TASKS // processes))
        return set().union(*(pipe.recv() for pipe in pipes))

    label(
        benchmark,
        f"fronts processes {bench.backend}",
        suite="fronts",
        front="processes",
        backend=bench.backend,
        impl="library",
        processes=processes,
        tasks=SPREAD_TASKS,
        reads=FRONT_READS,
    )
    assert benchmark(round_trip) == {expected}


THREADS = (1, 2)


@pytest.mark.parametrize("threads", THREADS)
def test_raw_threads(bench: BenchDatabase, benchmark: BenchmarkFixture, threads: int) -> None:
    """The async front's statement on the raw sync driver, `FRONT_READS` a round split over
    `threads` threads of this process, each with its own connection."""
    store, grant, ref = bench.store, bench.grant, bench.ref(DATASET)
    captured = bench.case(
        ("fronts-sync", DATASET, "window-offset"),
        lambda: bench.capture(
            lambda: store.read_field_window(
                grant, ref, "body", offset_chars=OFFSET, limit_chars=WINDOW_CHARS
            )
        ),
    )
    statement, params = _single(captured)
    connections = [bench.connect_raw(True) for _ in range(threads)]

    def reads(connection: Any, count: int) -> list[object]:
        cursor = connection.cursor()
        try:
            answers = []
            for _ in range(count):
                cursor.execute(statement, params)
                answers.append(cursor.fetchall())
            return answers
        finally:
            cursor.close()

    label(
        benchmark,
        f"fronts threads {bench.backend}",
        suite="fronts",
        front="threads",
        backend=bench.backend,
        impl="raw",
        threads=threads,
        reads=FRONT_READS,
    )
    with ThreadPoolExecutor(threads) as pool:

        def round_trip() -> list[object]:
            parts = shares(FRONT_READS, threads)
            done = [pool.submit(reads, c, n) for c, n in zip(connections, parts, strict=True)]
            return [answer for future in done for answer in future.result()]

        answers = benchmark(round_trip)
    for connection in connections:
        connection.close()
    assert len(answers) == FRONT_READS
    assert all(_plain(answer) == captured.rows for answer in answers)
