"""Write transactions: an operation run on SQLAlchemy in one transaction, on either front.

Writes (and the opener's operation, which loads the cursor keys) run here, on SQLAlchemy, whose
cursor events show their statements; reads run below it (`executor`). A copy of rows
(`DriverCopy`, Postgres) runs on the same connection's driver, in the same transaction (Rule 4).

Rules:
1. One operation runs on one connection, in one transaction (or one per `COMMIT` it yields);
   its end commits, and if it raises, everything since the last commit is rolled back.
2. The whole life of the connection, checkout to release, is inside `errors.translating`.
3. A cancelled or failed async write discards its connection in a shielded cleanup
   (`connections`); a domain error raised by the operation leaves it healthy: rolled back and
   reused. After a discard the locals of the frames the error went through are cleared
   (`_let_go_of_frames`), so that nothing of the discarded connection outlives the call.
4. A `DriverCopy` streams its rows through psycopg's copy protocol on the driver connection
   under the SQLAlchemy connection, once that connection's transaction has begun (SQLAlchemy
   begins its own on the first statement; a copy sends none through it, so it begins one
   first where none has): its rows commit or roll back with the operation's other statements.
   No cursor event sees it; it is logged as a read is (`pdpp_store.sql`, rows hidden).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from pdpp_store._sql.dialects import Capabilities, capabilities
from pdpp_store._sql.requests import Commit, DriverCopy, DriverSQL, Op, Rows

from .connections import discard, release, shielded
from .engines import execution_options
from .errors import healthy, translating

__all__ = ["reply", "run_async", "run_sync"]

T = TypeVar("T")


def reply(result: Any) -> Rows | None:
    """A SQLAlchemy result as an operation receives it: its rows as mappings, or None."""
    return result.mappings().all() if result.returns_rows else None


_log = logging.getLogger("pdpp_store.sql")
"""A copy bypasses SQLAlchemy's logging, as reads do (`executor`): logged here in its manner."""


def _listed(rows: Iterable[Sequence[Any]] | None) -> list[Sequence[Any]] | None:
    """The rows of an executemany as SQLAlchemy takes them (a list; built here if lazy)."""
    if rows is None or isinstance(rows, list):
        return rows
    return list(rows)


def _copying(copy: DriverCopy) -> None:
    if _log.isEnabledFor(logging.INFO):
        _log.info("%s\n[rows hidden]", copy.sql)


def _copy_sync(conn: Connection, copy: DriverCopy, rows: Iterable[Sequence[Any]]) -> None:
    """`rows` into `copy.table` on `conn`'s psycopg connection, in `conn`'s transaction."""
    if not conn.in_transaction():
        conn.begin()
    dbapi: Any = conn.connection.dbapi_connection  # psycopg's: `Capabilities.copies_rows`
    _copying(copy)
    with dbapi.cursor() as cursor, cursor.copy(copy.sql) as sink:
        for row in rows:
            sink.write_row(row)


async def _copy_async(
    conn: AsyncConnection, copy: DriverCopy, rows: Iterable[Sequence[Any]]
) -> None:
    """`rows` into `copy.table` on `conn`'s psycopg async connection, in its transaction."""
    if not conn.in_transaction():
        await conn.begin()
    driver: Any = (await conn.get_raw_connection()).driver_connection  # psycopg's
    _copying(copy)
    async with driver.cursor() as cursor, cursor.copy(copy.sql) as sink:
        for row in rows:
            await sink.write_row(row)


def _drive_sync(conn: Connection, op: Op[T]) -> T:
    """Run a write (or the opener's) operation on SQLAlchemy, committing at its end."""
    dialect = capabilities(conn.dialect.name)
    try:
        request = next(op)
        while True:
            if isinstance(request, Commit):
                conn.commit()
                answer = None
            elif not request.runs_on(dialect):
                answer = None
            else:
                statement = request.prepared(dialect)
                if isinstance(statement, DriverCopy):
                    _copy_sync(conn, statement, request.rows or ())
                    answer = None
                elif isinstance(statement, DriverSQL):
                    answer = reply(conn.exec_driver_sql(statement.sql, _listed(request.rows)))
                else:
                    answer = reply(conn.execute(statement, request.params))
            request = op.send(answer)
    except StopIteration as done:
        conn.commit()
        return done.value  # type: ignore[no-any-return]
    finally:
        op.close()


def run_sync(engine: Engine, op: Op[T], *, write: bool = False) -> T:
    try:
        with translating(), engine.connect() as plain:
            options = execution_options(capabilities(engine.dialect.name), write)
            return _drive_sync(plain.execution_options(**options), op)
    finally:
        op.close()


async def _drive_async(conn: AsyncConnection, op: Op[T], dialect: Capabilities) -> T:
    try:
        request = next(op)
    except StopIteration as done:  # an operation that needs no statement
        return done.value  # type: ignore[no-any-return]
    while True:
        if isinstance(request, Commit):
            await conn.commit()
            answer = None
        elif not request.runs_on(dialect):
            answer = None
        else:
            statement = request.prepared(dialect)
            if isinstance(statement, DriverCopy):
                await _copy_async(conn, statement, request.rows or ())
                answer = None
            elif isinstance(statement, DriverSQL):
                result = await conn.exec_driver_sql(statement.sql, _listed(request.rows))
                answer = reply(result)
            else:
                answer = reply(await conn.execute(statement, request.params))
        try:
            request = op.send(answer)
        except StopIteration as done:
            await conn.commit()
            return done.value  # type: ignore[no-any-return]


def _let_go_of_frames(exc: BaseException) -> None:
    """Clear the locals of the finished frames `exc` went through (and of those of the errors it
    came with): on SQLite a statement still referenced there keeps the discarded connection,
    closed but not yet freed, holding its write lock until the collector finds the cycle
    (SQLAlchemy's frames hold their exception), and every other write waits for it meanwhile.
    The traceback itself is kept whole."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__


async def run_async(engine: AsyncEngine, op: Op[T], *, write: bool = False) -> T:
    dialect = capabilities(engine.dialect.name)
    conn = engine.connect()
    driver: Any = None
    try:
        with translating():
            try:
                await conn.start()
                driver = (await conn.get_raw_connection()).driver_connection
                await conn.execution_options(**execution_options(dialect, write))
                result = await _drive_async(conn, op, dialect)
            except BaseException as exc:
                # Cancelled (or any error but a domain one) mid-operation: the connection's
                # state is unknown. A domain error raised by the operation leaves it healthy:
                # roll back and reuse.
                if healthy(exc):
                    await shielded(release(conn))
                else:
                    _let_go_of_frames(exc)
                    await shielded(discard(conn, driver))
                raise
            await shielded(release(conn))
            return result
    finally:
        op.close()
