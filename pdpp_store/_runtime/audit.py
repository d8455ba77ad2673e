"""The read audit's writers: entries wait in memory and are written in batches, off the reads.

    pending = Pending()            # a read appends its entry: no I/O, no lock held across I/O
    writer = SyncAuditWriter(engine, pending, write_op)    # a thread: writes every second
    writer.close()                 # stops it, then writes what is left

Rules:
1. A read never waits for the audit: appending an entry is a list append. The writer (a daemon
   thread for `Store`, a task of the event loop for `AsyncStore`) takes every pending entry at
   least once per `FLUSH_INTERVAL_S`, and writes them in one transaction per `BATCH_ROWS`.
2. `flush()` writes what is pending now (the owner's `list_audit` asks for it first, so a
   process sees its own reads); `close()` stops the writer and flushes, so a store closed in
   the ordinary way loses nothing. A process that dies loses at most the last interval. Once
   closed, no writer starts again: the entry of a read that ends after `close` is not written.
3. The writer has an engine of its own (one connection, the store's options and hooks), made at
   its first batch: it never takes a pooled connection a read or a write of the store waits
   for, and the store's engine carries only the store's own statements.
4. A batch the database refuses (locked past the busy timeout, gone) is kept and retried at the
   next interval; at most `MAX_PENDING` entries wait, and past that the oldest are dropped and
   counted. The log says how many, never what: an entry holds query terms.
5. Closing is bounded (`AsyncAuditWriter.close`): it never cancels a batch being written, as a
   write is never cancelled either (a statement cancelled inside the driver leaves its
   connection in an unknown state, and psycopg can report such a cancellation as another
   error). It wakes the writer from its pause; the writer's task ends the batch it is writing
   (bounded like any write, by the busy timeout's waits), writes what is left and ends;
   `close` waits for it at most `busy_timeout_s`, and past that leaves it to end on its own.
   A writer task cancelled by someone else (the end of `asyncio.run`) ends too, whatever
   error the driver made of the cancellation: it never goes on pausing and writing after a
   cancellation, so nothing that waits for it waits for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from pdpp_store._core.errors import StoreError
from pdpp_store._sql.requests import Op

from .engines import engine_options, install_hooks
from .transactions import run_async, run_sync

__all__ = [
    "BATCH_ROWS",
    "FLUSH_INTERVAL_S",
    "MAX_PENDING",
    "AsyncAuditWriter",
    "Pending",
    "SyncAuditWriter",
]

log = logging.getLogger("pdpp_store.audit")

FLUSH_INTERVAL_S = 1.0
BATCH_ROWS = 1000
MAX_PENDING = 100_000

Entry = Mapping[str, Any]
WriteOp = Callable[[list[Entry]], Op[None]]


class Pending:
    """Entries not written yet (rule 1). `add` is called from any thread; `take` and `keep` by
    the writer."""

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._lock = threading.Lock()
        self.dropped = 0

    def add(self, entry: Entry) -> None:
        with self._lock:
            self._entries.append(entry)
            if len(self._entries) > MAX_PENDING:
                del self._entries[0]
                self.dropped += 1

    def take(self) -> list[Entry]:
        with self._lock:
            taken, self._entries = self._entries, []
            return taken

    def keep(self, entries: list[Entry]) -> None:
        """Put back entries a failed batch held, before any added since (rule 3)."""
        with self._lock:
            merged = entries + self._entries
            excess = max(0, len(merged) - MAX_PENDING)
            self.dropped += excess
            self._entries = merged[excess:]

    def __len__(self) -> int:
        return len(self._entries)


def _own_options(url: str, busy_timeout_s: float) -> dict[str, Any]:
    return {**engine_options(url, busy_timeout_s), "pool_size": 1, "max_overflow": 0}


def _own_sync(engine: Engine, busy_timeout_s: float) -> Engine:
    """The writer's own engine beside the store's (rule 3)."""
    url = engine.url.render_as_string(hide_password=False)
    own = create_engine(url, **_own_options(url, busy_timeout_s))
    install_hooks(own, busy_timeout_s)
    return own


def _own_async(engine: AsyncEngine, busy_timeout_s: float) -> AsyncEngine:
    url = engine.url.render_as_string(hide_password=False)
    own = create_async_engine(url, **_own_options(url, busy_timeout_s))
    install_hooks(own.sync_engine, busy_timeout_s)
    return own


def _batches(entries: list[Entry]) -> list[list[Entry]]:
    return [entries[i : i + BATCH_ROWS] for i in range(0, len(entries), BATCH_ROWS)]


def _report(pending: Pending, error: BaseException | None) -> None:
    if error is not None and not isinstance(error, asyncio.CancelledError):  # closing: kept
        code = error.code if isinstance(error, StoreError) else type(error).__name__
        log.warning("read audit: %d entries wait, writing failed (%s)", len(pending), code)
    if pending.dropped:
        log.warning("read audit: %d entries dropped (too many waiting)", pending.dropped)
        pending.dropped = 0


class SyncAuditWriter:
    """`Store`'s writer: a daemon thread (rule 1)."""

    def __init__(
        self,
        engine: Engine,
        pending: Pending,
        write: WriteOp,
        busy_timeout_s: float,
        interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self._store_engine = engine
        self._busy_timeout_s = busy_timeout_s
        self._engine: Engine | None = None
        self._pending = pending
        self._write = write
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._flushing = threading.Lock()
        self._starting = threading.Lock()
        self._thread: threading.Thread | None = None

    def started(self) -> None:
        """Start the thread if it is not running (called after each add: a store that serves no
        read under a grant runs none)."""
        if self._thread is not None or self._stop.is_set():
            return
        with self._starting:
            if self._thread is None:
                thread = threading.Thread(target=self._loop, name="pdpp-store-audit", daemon=True)
                thread.start()
                self._thread = thread

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            with contextlib.suppress(Exception):  # kept and reported by flush (rule 3)
                self.flush()

    def flush(self) -> None:
        """Write every pending entry now (rule 2); a failure keeps them and raises."""
        with self._flushing:
            entries = self._pending.take()
            error: BaseException | None = None
            try:
                for number, batch in enumerate(_batches(entries)):
                    try:
                        if self._engine is None:
                            self._engine = _own_sync(self._store_engine, self._busy_timeout_s)
                        run_sync(self._engine, self._write(batch), write=True)
                    except BaseException as failed:
                        self._pending.keep(entries[number * BATCH_ROWS :])
                        error = failed
                        raise
            finally:
                _report(self._pending, error)

    def close(self) -> None:
        self._stop.set()
        with self._starting:
            thread = self._thread
        if thread is not None:
            thread.join()
        with contextlib.suppress(Exception):  # reported by flush; closing does not raise for it
            self.flush()
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


class AsyncAuditWriter:
    """`AsyncStore`'s writer: a task on the loop of the reads, started by the first entry."""

    def __init__(
        self,
        engine: AsyncEngine,
        pending: Pending,
        write: WriteOp,
        busy_timeout_s: float,
        interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        self._store_engine = engine
        self._busy_timeout_s = busy_timeout_s
        self._engine: AsyncEngine | None = None
        self._pending = pending
        self._write = write
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._flushing: asyncio.Lock | None = None
        self._pause: asyncio.Future[None] | None = None
        """What the writer's task awaits between batches: resolved by its timer, or by
        `close` (rule 5)."""
        self._closed = False

    def started(self) -> None:
        """Start the writer on the running loop if it is not running (called after each add);
        never once closed (rule 2)."""
        if self._closed:
            return
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()
            self._flushing = asyncio.Lock()
            self._task = loop.create_task(self._loop(), name="pdpp-store-audit")

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        while not self._closed:
            pause = self._pause = loop.create_future()
            timer = loop.call_later(self._interval_s, _resolve, pause)
            try:
                await pause
            finally:
                timer.cancel()
                self._pause = None
            if self._closed:
                break
            cancelled = False
            try:
                await self.flush()
            except asyncio.CancelledError:
                cancelled = True
            except Exception:  # kept and reported by flush (rule 4)
                # A cancellation the driver reported as another error still ends the writer.
                cancelled = task is not None and task.cancelling() > 0
            if cancelled:  # raised here, the batch's error and its frames are not kept (rule 5)
                raise asyncio.CancelledError
        await self._finish()  # closed: what is left, by the task `close` waits for

    async def flush(self) -> None:
        """Write every pending entry now (rule 2); a failure keeps them and raises."""
        if self._flushing is None:
            self._flushing = asyncio.Lock()
        async with self._flushing:
            entries = self._pending.take()
            error: BaseException | None = None
            try:
                for number, batch in enumerate(_batches(entries)):
                    try:
                        if self._engine is None:
                            self._engine = _own_async(self._store_engine, self._busy_timeout_s)
                        await run_async(self._engine, self._write(batch), write=True)
                    except BaseException as failed:
                        self._pending.keep(entries[number * BATCH_ROWS :])
                        error = failed
                        raise
            finally:
                _report(self._pending, error)
                error = None  # not kept by this frame: a traceback holds the driver's objects

    async def close(self) -> None:
        """Stop the writer, then write what is left (rule 2), without cancelling a batch being
        written and without waiting for the writer more than `busy_timeout_s` (rule 5)."""
        self._closed = True
        if self._pause is not None:
            _resolve(self._pause)
        task, self._task = self._task, None
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=self._busy_timeout_s)  # it writes what is left
            if not task.done():
                log.warning(
                    "read audit: the writer did not stop within %g s; it goes on alone",
                    self._busy_timeout_s,
                )
            return
        del task  # none ran, or it was cancelled (rule 5): what is left is written here
        await self._finish()

    async def _finish(self) -> None:
        """Write what is left and let go of the writer's engine."""
        with contextlib.suppress(Exception):  # reported by flush; closing does not raise for it
            await self.flush()
        if self._engine is not None:
            engine, self._engine = self._engine, None
            await engine.dispose()


def _resolve(pause: asyncio.Future[None]) -> None:
    if not pause.done():
        pause.set_result(None)
