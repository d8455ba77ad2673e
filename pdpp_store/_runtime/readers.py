"""The reader pools: the read connections each front keeps between reads, and how a read gets
one, runs on it (`executor`) and gives it back.

Rules:
1. A read holds no transaction (`engines.execution_options`), so a kept connection costs the
   database nothing; keeping it saves the pool's checkout and return.
2. Every read runs inside `errors.translating`: checkout, every statement, and giving back.
3. A connection whose read was cancelled or met a database error is discarded, never kept
   (`connections`); after an error that says the database dropped it, every kept connection is
   discarded too, so only the read that met it fails (`storage_unavailable`, not retried). A
   disconnect that SQLAlchemy meets first (a write's) lets go of the kept connections too
   (`handle_error`). A read that started before such a drop, or ends after `close`, keeps
   nothing.
4. An `AsyncStore`'s reads that hold a connection wait for a slot (`slots`), never on the pool.
5. On SQLite, every read first looks at the file (`files`): replaced or removed, the read is
   `storage_unavailable`; written since the last read looked, every kept connection is let go
   of and the pool invalidated, so that no read answers from a page cache the file no longer
   backs while another meets what the file holds now.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Sequence
from contextlib import suppress
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.ext.asyncio import AsyncEngine

from pdpp_store._sql.dialects import capabilities
from pdpp_store._sql.requests import Op, Request

from .connections import discard, discard_sync, dropped, forget_pooled, release, shielded
from .engines import IN_PROCESS_READERS, READER_SLOTS, configure_sqlite, execution_options
from .errors import file_unusable, healthy, translating
from .executor import (
    Statements,
    _advance,
    _close,
    _Held,
    read_in_thread,
    read_psycopg,
    read_sync,
)
from .files import database_file
from .slots import _Slots

__all__ = ["AsyncReaders", "HeldReader"]

T = TypeVar("T")


class HeldReader:
    """A few read connections kept open between reads (sync fronts only).

    A read holds no transaction, so keeping its connection costs the database nothing, and
    saves the pool's checkout and return, the largest cost of a SQLite read after the SQL
    itself. Connections are not tied to threads: a read takes an idle one (or a new one from the
    pool) and puts it back, and at most `keep` are kept idle, so readers never hold more of the
    pool than their own concurrency and writers always find room. After a database error the
    connection is invalidated (never reused, never pooled); after one that says the database
    dropped it, every kept connection is discarded too (`dropped`), so only the read that met
    it fails. A read that started before such a drop, or ends after `close`, keeps nothing."""

    def __init__(self, engine: Engine, keep: int = 2) -> None:
        self._engine = engine
        self._keep = keep
        self._idle: deque[Connection] = deque()
        self._lock = threading.Lock()
        """Orders `_put_back` against `_let_go_of_idle` (taking one is an atomic `pop`)."""
        self._epoch = 0
        """Bumped when the kept connections are let go: a read begun before keeps nothing."""
        self._closed = False
        self._file = database_file(engine)
        """SQLite: the file, looked at before every read (Rule 5)."""
        self.statements = Statements(engine)
        event.listen(engine, "handle_error", self._on_error)

    def _on_error(self, context: ExceptionContext) -> None:
        """SQLAlchemy met a dropped connection first (a write's): it invalidates its pool, and
        the kept read connections, opened before, are let go of too (only other, idle
        connections are closed here: nothing runs on the failing one)."""
        if context.is_disconnect:
            self._let_go_of_idle(closing=False)

    def run(self, op: Op[T]) -> T:
        epoch = self._epoch
        try:
            with translating():
                if self._file is not None and self._file.written():
                    self._let_go_of_idle(closing=False)
                    forget_pooled(self._engine)
                try:
                    conn = self._idle.pop()
                except IndexError:
                    conn = self._engine.connect().execution_options(
                        **execution_options(capabilities(self._engine.dialect.name), write=False)
                    )
                try:
                    result = read_sync(self.statements, conn, op)
                except BaseException as exc:
                    self._failed(conn, epoch, exc)
                    raise
        finally:
            op.close()
        self._put_back(conn, epoch)
        return result

    def _failed(self, conn: Connection, epoch: int, exc: BaseException) -> None:
        if healthy(exc):
            self._put_back(conn, epoch)
            return
        pooled = None if conn.invalidated or conn.closed else conn.connection
        if dropped(self._engine, pooled, exc):
            self._let_go_of_idle(closing=False)
        discard_sync(conn)

    def _put_back(self, conn: Connection, epoch: int) -> None:
        with self._lock:
            if (
                epoch == self._epoch
                and not self._closed
                and not conn.invalidated
                and len(self._idle) < self._keep
            ):
                self._idle.append(conn)
                return
        if self._closed:  # the pool is (being) disposed of: close the connection itself
            discard_sync(conn)
        else:
            with suppress(Exception):
                conn.close()

    def _let_go_of_idle(self, *, closing: bool) -> None:
        """Stop keeping connections: for good (`closing`: back to the pool, which the store then
        disposes of), or because the database dropped them (closed here)."""
        with self._lock:
            self._epoch += 1
            self._closed = self._closed or closing
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                return
            if closing:
                with suppress(Exception):
                    conn.close()
            else:
                discard_sync(conn)

    def kept(self) -> int:
        """How many read connections are kept open (idle) between reads."""
        return len(self._idle)

    def close(self) -> None:
        """Let go of the kept connections; a read still running closes its own at its end."""
        self._let_go_of_idle(closing=True)


async def _close_all(
    connections: Sequence[_Held], stale: Sequence[_Held], *, back_to_pool: bool
) -> None:
    """Close `connections` (back to the pool if `back_to_pool`) and the `stale` ones
    (discarded)."""
    for held in connections:
        await (release(held.conn) if back_to_pool else discard(held.conn, held.driver))
    for held in stale:
        await discard(held.conn, held.driver)


_INLINE_TURN_S = 0.0005
"""How long reads on the event loop run back to back before letting the loop's other tasks run:
a read that runs on the loop whole does not suspend, so a task reading in a loop would hold the
loop to its end. A yield costs ~2 µs, 4% of a SQLite window read: paid once per turn, not per
read, so a task holds the loop at most this long plus one read (each of them bounded)."""


class AsyncReaders:
    """The read connections of an `AsyncStore`: at most `READER_SLOTS` at once, kept open
    between reads (a read holds no transaction, so a kept connection costs the database
    nothing), each read running below SQLAlchemy on the driver (`executor`): on Postgres on the
    event loop (psycopg's async connection). On SQLite, the sync front's own `_advance` drives
    it: on the event loop while it asks for bounded statements (`Execute.bounded`: each a few
    index lookups, tens of microseconds), on a connection of the loop's own (`_inline`, no slot,
    no hop: a hop to a thread and back cost more than such a read itself), and from its first
    statement that may scan (a match, a search, a blob range: milliseconds on a large field)
    whole in a reader connection's thread (`_Held`). On the loop, no statement waits on a lock:
    that connection's busy timeout is 0, and a statement that meets one is sent again in the
    thread, which waits up to `busy_timeout_s`. Reads on the loop let the loop's other tasks run
    every `_INLINE_TURN_S`.

    Readers in a thread or on Postgres wait for a slot (`_Slots`: at most `busy_timeout_s`, then
    `storage_busy`), never on the pool: the pool's overflow connections would otherwise be
    opened and closed on every read once more than `POOL_SIZE` run at once, and throughput would
    fall as concurrency rises. Together with `WRITER_SLOTS` the slots fit the pool, so writers
    always find a connection. A connection whose read was cancelled or met a database error is
    discarded (Rule 3); after an error that says the database dropped it, every kept connection
    is discarded too (`dropped`), so only the read that met it fails. A read that started before
    such a drop, or ends after `close`, keeps nothing."""

    def __init__(self, engine: AsyncEngine, busy_timeout_s: float) -> None:
        self._engine = engine
        self.statements = Statements(engine.sync_engine)
        in_process = self.statements.dialect.runs_in_process
        self._slots = _Slots(IN_PROCESS_READERS if in_process else READER_SLOTS, busy_timeout_s)
        self._on_the_loop = in_process
        """Bounded statements run on the event loop (SQLite), on `_inline`."""
        self._inline: sqlite3.Connection | None = None
        """The SQLite connection of reads on the loop, opened at the first (`_inline_connection`):
        one serves them all, as they run one at a time, each to its end or hand-over."""
        self._turn_ends = 0.0
        """When reads on the loop next let other tasks run (`_INLINE_TURN_S`)."""
        self._idle: list[_Held] = []
        self._stale: list[_Held] = []
        """Kept connections let go by `_on_error`, closed by the next read or `close`."""
        self._epoch = 0
        """Bumped when the kept connections are let go: a read begun before keeps nothing."""
        self._closed = False
        self._file = database_file(engine.sync_engine)
        """SQLite: the file, looked at before every read (Rule 5)."""
        event.listen(engine.sync_engine, "handle_error", self._on_error)

    def _on_error(self, context: ExceptionContext) -> None:
        """As `HeldReader._on_error`; a listener cannot await, so the kept connections are only
        set aside here, and closed by the next read (or `close`). The loop's own SQLite
        connection is closed at once: it runs nothing now (its reads never await), and closing
        it does not wait."""
        if context.is_disconnect:
            self._set_aside()

    def _set_aside(self) -> None:
        """Let go of every kept connection: the loop's own closed at once, the others closed by
        the next read (or `close`)."""
        self._epoch += 1
        self._stale += self._idle
        self._idle = []
        self._close_inline()

    async def run(self, op: Op[T]) -> T:
        try:
            with translating():
                if self._file is not None and self._file.written():
                    self._set_aside()
                    forget_pooled(self._engine.sync_engine)
                request: Request | None = None
                if self._on_the_loop:
                    if time.monotonic() >= self._turn_ends:  # see `_INLINE_TURN_S`
                        await asyncio.sleep(0)
                        self._turn_ends = time.monotonic() + _INLINE_TURN_S
                    done, value = self._run_inline(op)
                    if done:
                        return value  # type: ignore[no-any-return]
                    request = value
                await self._acquire()
                try:
                    return await self._run(op, request)
                finally:
                    self._slots.release()
        finally:
            _close(op)

    def _run_inline(self, op: Op[Any]) -> tuple[bool, Any]:
        """Run `op` on the event loop while it asks for bounded statements: `(True, its value)`,
        or `(False, the request to go on from)` in a connection's thread."""
        dbapi = self._inline_connection()
        try:
            return _advance(self.statements, dbapi, op, None, inline=True)
        except BaseException as exc:
            if file_unusable(exc):  # as `dropped`: no kept connection is better off
                self._set_aside()
                forget_pooled(self._engine.sync_engine)
            elif not healthy(exc):
                self._close_inline()
            raise
        finally:
            if self._closed:  # a read that ends after `close` keeps nothing
                self._close_inline()

    def _inline_connection(self) -> sqlite3.Connection:
        """The loop's SQLite connection, opened if none is kept: configured as the pool's
        (`configure_sqlite`), but with a busy timeout of 0, as the loop never waits on a lock,
        and without touching the file, so opening it meets none."""
        if self._inline is not None:
            return self._inline
        database = self._engine.url.database
        assert database is not None  # `sync_url` refuses a SQLite URL without a file
        dbapi = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        try:
            configure_sqlite(dbapi, busy_timeout_ms=0, writes=False)
        except BaseException:
            dbapi.close()
            raise
        self._inline = dbapi
        return dbapi

    def _close_inline(self) -> None:
        dbapi, self._inline = self._inline, None
        if dbapi is not None:
            with suppress(Exception):
                dbapi.close()

    async def _acquire(self) -> None:
        """A read slot, waited for at most `busy_timeout_s` (`_Slots`)."""
        if not self._slots.take():
            await self._slots.wait()

    async def _run(self, op: Op[T], request: Request | None) -> T:
        if self._stale:
            await self._let_go_of_idle(closing=False)
        epoch = self._epoch
        held = self._idle.pop() if self._idle else await self._checkout()
        try:
            if held.in_thread:
                result = await read_in_thread(self.statements, held, op, request)
            else:
                assert request is None  # only a SQLite read begins on the loop, handed over
                result = await read_psycopg(self.statements, held, op)
        except BaseException as exc:
            if healthy(exc):
                await self._put_back(held, epoch)
            else:
                held.interrupt()
                if dropped(self._engine.sync_engine, held.pooled, exc):
                    await self._let_go_of_idle(closing=False)
                await shielded(discard(held.conn, held.driver))
            raise
        await self._put_back(held, epoch)
        return result

    async def _put_back(self, held: _Held, epoch: int) -> None:
        """Keep a healthy connection, unless its read began before the kept ones were let go."""
        if epoch == self._epoch and not self._closed:
            self._idle.append(held)
        elif self._closed:  # the pool is (being) disposed of: close the connection itself
            await shielded(discard(held.conn, held.driver))
        else:
            await shielded(release(held.conn))

    async def _let_go_of_idle(self, *, closing: bool) -> None:
        """Stop keeping connections: for good (`closing`: back to the pool, which the store then
        disposes of), or because the database dropped them (closed here). All are taken at
        once, and closed in one shielded task, so a cancellation leaves none behind."""
        self._epoch += 1
        self._closed = self._closed or closing
        self._close_inline()
        idle, self._idle = self._idle, []
        stale, self._stale = self._stale, []
        if idle or stale:
            await shielded(_close_all(idle, stale, back_to_pool=closing))

    async def _checkout(self) -> _Held:
        conn = self._engine.connect()
        driver: Any = None
        try:
            await conn.start()
            pooled = await conn.get_raw_connection()
            driver = pooled.driver_connection
            await conn.execution_options(**execution_options(self.statements.dialect, False))
        except BaseException:
            await shielded(discard(conn, driver))
            raise
        return _Held(conn, pooled, driver)

    def kept(self) -> int:
        """How many read connections are kept open (idle) between reads."""
        return len(self._idle)

    async def close(self) -> None:
        """Let go of the kept connections; a read still running closes its own at its end."""
        await self._let_go_of_idle(closing=True)
