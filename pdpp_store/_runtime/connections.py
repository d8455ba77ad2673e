"""Letting go of connections: back to the pool when healthy, closed when their state is unknown,
and every kept one when the database dropped them.

Rules:
1. A connection is given back to the pool only after an operation that ended normally or with a
   domain error (`errors.healthy`); after a database error or a cancellation its state is
   unknown, and it is discarded: closed without going back, the database rolling back whatever
   it had begun.
2. A cancelled async operation never hands its connection back to the pool: the cleanup runs
   shielded (`shielded`), to its end, so the next call on the store behaves as on a fresh one.
3. Read connections are kept between reads, so what SQLAlchemy does on a disconnect is done here
   for reads: an error that says the database dropped the connection invalidates the pool
   (`dropped`), and the readers discard every connection they keep. On SQLite, an error that
   says the file cannot be read as the database counts as such a drop (`files`, Rule 3).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Coroutine
from contextlib import suppress
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.pool import PoolProxiedConnection

from .errors import file_unusable

__all__ = ["discard", "discard_sync", "dropped", "forget_pooled", "release", "shielded"]


def forget_pooled(engine: Engine) -> None:
    """Every connection of `engine`'s pool opened before now is replaced at its next checkout
    (SQLAlchemy's own step on a disconnect, without a connection to name)."""
    engine.pool._invalidate_time = time.time()


def dropped(engine: Engine, pooled: PoolProxiedConnection | None, exc: BaseException) -> bool:
    """Whether `exc` says the database dropped the connection (a restart, `pg_terminate_backend`):
    then every connection opened before it is presumed gone too. Where SQLAlchemy ran the
    statement it has already invalidated the pool; for a read run on the driver (below
    SQLAlchemy) the pool is invalidated here as SQLAlchemy would (its connections older than now
    are replaced at their next checkout). The caller discards the connections it keeps itself."""
    if file_unusable(exc):
        forget_pooled(engine)
        return True
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated
    if pooled is None or not isinstance(exc, sqlite3.Error | psycopg.Error):
        return False
    driver_error: Any = exc  # the dialect's DBAPI module's error: typed by SQLAlchemy as such
    if not engine.dialect.is_disconnect(driver_error, pooled, None):
        return False
    engine.pool._invalidate(pooled, exc, _checkin=False)  # SQLAlchemy's own step on disconnect
    return True


def discard_sync(conn: Connection) -> None:
    """Close `conn`'s database connection without giving it back to the pool."""
    with suppress(Exception):
        conn.invalidate()
    with suppress(Exception):
        conn.close()


_cleanups: set[asyncio.Task[None]] = set()
"""Cleanups still running after the task that started them was cancelled (kept referenced)."""


async def shielded(cleanup: Coroutine[Any, Any, None]) -> None:
    """Run `cleanup` to its end even if the awaiting task is cancelled (again) meanwhile."""
    task = asyncio.ensure_future(cleanup)
    _cleanups.add(task)
    task.add_done_callback(_cleanups.discard)
    await asyncio.shield(task)


async def discard(conn: AsyncConnection, driver: Any) -> None:
    """Close a connection whose state is unknown (cancelled mid-statement, driver error) without
    giving it back to the pool; the database rolls back whatever it had begun.

    The driver's connection (`driver`: the aiosqlite or psycopg connection, taken right after
    checkout) is closed directly as well: when a cancellation interrupts SQLAlchemy mid-call,
    its own invalidation may already have run and failed to close it, which would leave the
    connection, and on SQLite its write lock, open until garbage collection."""
    try:
        if not conn.closed:
            await conn.invalidate()
    except Exception:  # a broken connection may fail to close: it is gone anyway
        pass
    if driver is not None:
        with suppress(Exception):
            await driver.close()
    with suppress(Exception):
        await conn.close()


async def release(conn: AsyncConnection) -> None:
    """Return a healthy connection to the pool (rolling back what is uncommitted)."""
    try:
        await conn.close()
    except Exception:  # could not roll back: never reuse it
        await discard(conn, None)
