"""Running operations: the only module that talks to a database connection.

Every operation of the store is written once, as a generator (`Op`) that yields requests and
receives their answers, with no I/O of its own (see `_ops`; the requests are `_sql.requests`').
Thin drivers run them: `run_sync` on a SQLAlchemy `Engine`, `run_async` on an `AsyncEngine`.
A statement that depends on the dialect is built here, from the engine's `Capabilities`
(`_sql.dialects`), and every row is answered as a mapping by column label.

Rules:
1. One operation runs on one connection. A write runs in one transaction (or one per `COMMIT`);
   if it raises, everything since the last commit is rolled back. A read runs in none.
2. Database errors are translated to `StoreError` here and nowhere else, by SQLSTATE (Postgres)
   or SQLite result code (`sqlite_errorcode`), never by message or class-name text, around the
   whole life of a connection: checkout, execute, commit and release.
3. Writes run in one transaction each (where the store `begins_itself`, SQLite, the driver's own
   transaction handling is switched off and the store emits `BEGIN IMMEDIATE` itself, so a
   read-then-write operation is one serialised transaction). Reads run without an explicit
   transaction (see `_options`).
4. A cancelled async operation never hands its connection back to the pool: the connection is
   invalidated (closed, its transaction rolled back by the database) in a shielded cleanup, so
   the next call on the store behaves as on a fresh one.
5. Migration is serialised: a Postgres advisory lock, a SQLite `BEGIN IMMEDIATE`; whoever gets
   it second finds the database at head and does nothing.
6. Reads run below SQLAlchemy, on the DBAPI connection of a held connection (an async read on
   SQLite runs its bounded statements on the event loop and the rest in a connection's thread:
   `AsyncReaders`): each statement is compiled once per dialect into a `Plan` (its SQL and how
   to bind its parameters), and every read statement of the store passes through
   `Statements.send` and `Statements.received`, the one execution point of reads, where
   `observing` lets an observer see each statement, its parameters and every row (the boundary
   audit attaches there). Writes and migrations stay on SQLAlchemy, whose cursor events show
   them.
7. Read connections are kept between reads, so what SQLAlchemy does on a disconnect is done
   here for reads: an error that says the database dropped the connection invalidates the pool
   and every kept connection, so only the read that met it fails (`storage_unavailable`, not
   retried). A disconnect that SQLAlchemy meets first (a write) lets go of the kept connections
   too (`handle_error`). Once the store is closed, a read still running closes its connection at
   its end.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from operator import itemgetter
from pathlib import Path
from typing import Any, Protocol, TypeVar

import psycopg
from sqlalchemy import URL, Connection, Engine, event, text
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import PoolProxiedConnection

from ._core.errors import BadRequest, Conflict, StoreError, Unavailable
from ._core.identity import is_unicode
from ._sql.dialects import Capabilities, capabilities
from ._sql.requests import Commit, DriverSQL, Execute, Op, Request, Rows

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_S",
    "READER_SLOTS",
    "WRITER_SLOTS",
    "AsyncReaders",
    "HeldReader",
    "Observer",
    "Plan",
    "Statements",
    "async_url",
    "busy",
    "check_busy_timeout",
    "configure_sqlite",
    "engine_options",
    "install_hooks",
    "migrate",
    "observing",
    "opening",
    "run_async",
    "run_sync",
    "sync_url",
    "translate_db_error",
]

T = TypeVar("T")


_WRITE = "pdpp_write"
_READ = "pdpp_read"


RETRY_AFTER_S = 1
"""The retry hint (`details.retry_after_s`) of `storage_busy` and `write_conflict`."""

# SQLite primary result codes (the low byte of `sqlite_errorcode`).
_SQLITE_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_SQLITE_UNAVAILABLE = {3, 10, 11, 14, 26}  # PERM, IOERR, CORRUPT, CANTOPEN, NOTADB
_SQLITE_TOOBIG = 18
# Extended codes: a UNIQUE or PRIMARY KEY constraint (a concurrent insert of the same key).
_SQLITE_DUPLICATE = {1555, 2067}

# Postgres SQLSTATEs and classes.
_PG_CONFLICT = {"40001", "40P01"}  # serialization_failure, deadlock_detected
_PG_BUSY = {"55P03", "57014", "53300"}  # lock_not_available, query_canceled, too_many_connections
_PG_UNAVAILABLE = {"57P01", "57P02", "57P03", "3D000"}  # shutdowns, database gone
_PG_UNAVAILABLE_CLASSES = {"08", "28"}  # connection exceptions, authorisation


def busy(message: str = "the database is busy; retry the operation") -> StoreError:
    return Unavailable(
        "storage_busy", message, details={"retryable": True, "retry_after_s": RETRY_AFTER_S}
    )


def _conflict() -> StoreError:
    return Conflict(
        "write_conflict",
        "a concurrent write touched the same rows; retry the operation",
        details={"retryable": True, "retry_after_s": RETRY_AFTER_S},
    )


def _unavailable(what: str) -> StoreError:
    return Unavailable("storage_unavailable", f"the database is unavailable ({what})")


def _refused(what: str) -> StoreError:
    return Unavailable("storage_error", f"the database refused the operation ({what})")


def _too_large(what: str) -> StoreError:
    # Values are checked before they reach the database; this is the backstop for a limit of
    # the database itself that a request still met: the caller's input, not a fault (4xx).
    return BadRequest(
        "invalid_request", f"a value of this request exceeds a limit of the database ({what})"
    )


def translate_db_error(exc: BaseException) -> StoreError:
    """The one place where database exceptions become store errors (Rule 2)."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, PoolTimeoutError):
        return busy("every database connection is in use; retry the operation")
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    sqlite_code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(sqlite_code, int):
        name = getattr(orig, "sqlite_errorname", str(sqlite_code))
        primary = sqlite_code & 0xFF
        if primary in _SQLITE_BUSY:
            return busy()
        if sqlite_code in _SQLITE_DUPLICATE:
            return _conflict()
        if primary in _SQLITE_UNAVAILABLE:
            return _unavailable(name)
        if primary == _SQLITE_TOOBIG:
            return _too_large(name)
        return _refused(name)
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        if sqlstate in _PG_CONFLICT or sqlstate.startswith("23"):
            return _conflict()
        if sqlstate in _PG_BUSY:
            return busy()
        if sqlstate in _PG_UNAVAILABLE or sqlstate[:2] in _PG_UNAVAILABLE_CLASSES:
            return _unavailable(f"SQLSTATE {sqlstate}")
        if sqlstate[:2] in {"22", "54"}:  # data exception, program limit exceeded
            return _too_large(f"SQLSTATE {sqlstate}")
        return _refused(f"SQLSTATE {sqlstate}")
    if (
        isinstance(exc, DBAPIError)
        and (exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError))
    ) or isinstance(orig, _DRIVER_CONNECTION_ERRORS):
        # No code at all: the driver lost or never had its connection (refused, reset, closed).
        return _unavailable("no connection")
    return _refused(type(orig).__name__)


_DRIVER_CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
"""Errors of a driver called directly (reads, Rule 6) that mean its connection is gone."""
_DB_ERRORS = (DBAPIError, PoolTimeoutError, SQLAlchemyError, sqlite3.Error, psycopg.Error)


def _reply(result: Any) -> Rows | None:
    return result.mappings().all() if result.returns_rows else None


def _options(caps: Capabilities, write: bool) -> dict[str, Any]:
    """Writes run in one transaction (`BEGIN IMMEDIATE` where the store begins itself). Reads
    run without one: each statement sees a consistent snapshot, and a read that takes several
    statements binds them to each other by the field's digest (see `_ops.reads`), so BEGIN and
    COMMIT would only add two round trips per read."""
    if write:
        return {_WRITE: True}
    if caps.autocommit_reads:
        return {"isolation_level": "AUTOCOMMIT"}
    return {_READ: True}


def _drive_sync(conn: Connection, op: Op[T]) -> T:
    """Run a write (or the opener's) operation on SQLAlchemy, committing at its end."""
    dialect = capabilities(conn.dialect.name)
    try:
        request = next(op)
        while True:
            if isinstance(request, Commit):
                conn.commit()
                reply = None
            elif not request.runs_on(dialect):
                reply = None
            else:
                statement = request.prepared(dialect)
                if isinstance(statement, DriverSQL):
                    result = conn.exec_driver_sql(statement.sql, request.rows)
                else:
                    result = conn.execute(statement, request.params)
                reply = _reply(result)
            request = op.send(reply)
    except StopIteration as done:
        conn.commit()
        return done.value  # type: ignore[no-any-return]
    finally:
        op.close()


def run_sync(engine: Engine, op: Op[T], *, write: bool = False) -> T:
    try:
        with engine.connect() as plain:
            conn = plain.execution_options(**_options(capabilities(engine.dialect.name), write))
            return _drive_sync(conn, op)
    except _DB_ERRORS as exc:
        raise translate_db_error(exc) from exc
    finally:
        op.close()


# ---------------------------------------------------------------- reads, below SQLAlchemy (Rule 6)


class Observer(Protocol):
    """Sees every statement a read sends and every row the database hands back for it, on the
    thread that runs the statement: the caller's (`Store`), the event loop's (`AsyncStore` on
    Postgres, and on SQLite for a bounded statement), or a SQLite connection's own thread
    (`AsyncStore` on SQLite, a statement that may scan), so several at once. An observer that
    blocks holds that read only (and, on the event loop, the loop)."""

    def executing(self, engine: Engine, statement: str, parameters: Any) -> None:
        """`statement` is about to run with `parameters`, exactly as the DBAPI gets them."""

    def fetched(self, engine: Engine, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        """The rows `statement` returned, as the driver returned them (all of them: a read
        fetches its whole answer)."""


_observers: tuple[Observer, ...] = ()
"""Replaced whole (never changed in place) under `_observers_changing`, so a read on another
thread iterates over one consistent tuple, at no cost per statement."""
_observers_changing = threading.Lock()


@contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Call `observer` for every read statement of every store while the block runs. `engine`
    (the sync engine, also for an `AsyncStore`) tells the stores apart."""
    global _observers  # noqa: PLW0603 - replaced whole: see `_observers`
    with _observers_changing:
        _observers = (*_observers, observer)
    try:
        yield
    finally:
        with _observers_changing:
            index = _observers.index(observer)
            _observers = _observers[:index] + _observers[index + 1 :]


@dataclass(frozen=True, slots=True)
class Plan:
    """A statement compiled once for a dialect: its SQL, and how to turn an `Execute`'s named
    parameters into what the DBAPI takes (processed, in order where the paramstyle is
    positional). The SQLAlchemy work of a cached statement's `execute` (cache key, parameter
    processing, result metadata) is done here once, not on every read."""

    sql: str
    order: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None
    """The parameter values in the statement's order (positional paramstyle), else None."""
    given: tuple[str, ...]
    constants: Mapping[str, Any]
    """Values the statement carries itself (literals SQLAlchemy binds, e.g. `substr(x, 1)`)."""
    processors: tuple[tuple[str, Callable[[Any], Any]], ...]
    labels: tuple[str, ...] | None
    """The answer's column labels, or None where the statement does not say (textual SQL)."""
    converters: tuple[tuple[int, Callable[[Any], Any]], ...]

    def parameters(self, params: Mapping[str, Any]) -> Any:
        if self.order is None:
            values = {**self.constants, **{name: params[name] for name in self.given}}
        else:  # the order's getter takes the given names (and only those) from `values`
            values = {**params, **self.constants}
        for name, process in self.processors:
            values[name] = process(values[name])
        return values if self.order is None else self.order(values)

    def rows(self, raw: Sequence[Sequence[Any]], description: Any) -> Rows:
        labels = self.labels or tuple(column[0] for column in description or ())
        if raw and len(raw[0]) != len(labels):  # every row of an answer has the same columns
            raise ValueError("the answer's columns are not the statement's")
        if not self.converters:
            return [dict(zip(labels, row, strict=False)) for row in raw]  # checked above
        answer = []
        for row in raw:
            values = list(row)
            for index, convert in self.converters:
                values[index] = convert(values[index])
            answer.append(dict(zip(labels, values, strict=False)))
        return answer


def _plan(statement: Any, dialect: Any) -> Plan | None:
    """`statement` compiled for `dialect`, or None when it needs SQLAlchemy at every execution
    (an expanding or literal-rendered parameter: then it runs on SQLAlchemy, still observed)."""
    compiled = statement.compile(dialect=dialect)
    if compiled.post_compile_params or compiled.literal_execute_params:
        return None
    given: dict[str, None] = {}
    constants: dict[str, Any] = {}
    processors: dict[str, Callable[[Any], Any]] = {}
    for bind, name in compiled.bind_names.items():
        if bind.required:
            given[name] = None
        else:
            constants[name] = bind.effective_value
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if process is not None:
            processors.setdefault(name, process)
    labels: tuple[str, ...] | None = None
    converters: list[tuple[int, Callable[[Any], Any]]] = []
    columns = getattr(statement, "selected_columns", None)
    if columns is not None:
        labels = tuple(columns.keys())
        for index, column in enumerate(columns):
            convert = column.type.dialect_impl(dialect).result_processor(dialect, None)
            if convert is not None:
                converters.append((index, convert))
    return Plan(
        compiled.string,
        _in_order(compiled.positiontup) if compiled.positional else None,
        tuple(given),
        constants,
        tuple(processors.items()),
        labels,
        tuple(converters),
    )


_log = logging.getLogger("pdpp_store.sql")
"""Reads bypass SQLAlchemy's logging, so they log here in its manner: each statement at INFO
(never its parameters, as the engine's `hide_parameters`), each row at DEBUG."""


def _in_order(names: Sequence[str]) -> Callable[[Mapping[str, Any]], tuple[Any, ...]]:
    """A C-level getter of `names`' values, as a tuple whatever their number."""
    if not names:
        return lambda _: ()
    getter = itemgetter(*names)
    if len(names) == 1:
        return lambda values: (getter(values),)
    return getter


_PLANS_KEPT = 1024
"""Plans one store keeps; statements are cached by shape (`_sql.statements`), so a store meets
a few dozen. A statement built per call would otherwise fill the cache: it is then emptied."""


class Statements:
    """The one execution point of reads (Rule 6): every read statement of a store is bound by
    `send`, which tells the observers what goes to the database, and answered by `received`,
    which tells them every row that came back. Plans are cached per statement object (builders
    cache statements by shape, so the same object comes back for the same shape)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = capabilities(engine.dialect.name)
        self._plans: dict[int, tuple[Any, Plan | None]] = {}

    def plan(self, request: Execute) -> Plan | None:
        """The request's plan; None where it runs on SQLAlchemy (an executemany, or a statement
        that needs SQLAlchemy at every execution)."""
        params = request.params
        if params is not None and type(params) is not dict and not isinstance(params, Mapping):
            return None
        statement = request.statement_for(self.dialect)
        found = self._plans.get(id(statement))
        if found is None or found[0] is not statement:
            if len(self._plans) >= _PLANS_KEPT:
                self._plans.clear()
            found = (statement, _plan(statement, self.engine.dialect))
            self._plans[id(statement)] = found
        return found[1]

    def send(self, plan: Plan, request: Execute) -> Any:
        """The request's parameters as the DBAPI takes them, told to every observer."""
        params = request.params
        assert params is None or type(params) is dict or isinstance(params, Mapping)  # `plan`
        parameters = plan.parameters(params or {})
        for observer in _observers:
            observer.executing(self.engine, plan.sql, parameters)
        if _log.isEnabledFor(logging.INFO):
            _log.info("%s\n[parameters hidden]", plan.sql)
        return parameters

    def received(self, plan: Plan, raw: Sequence[Sequence[Any]], description: Any) -> Rows | None:
        if description is None and plan.labels is None:
            return None
        for observer in _observers:
            observer.fetched(self.engine, plan.sql, raw)
        if _log.isEnabledFor(logging.DEBUG):
            for row in raw:
                _log.debug("Row %r", tuple(row))
        return plan.rows(raw, description)


class _ReadCancelled(Exception):
    """Ends a read, in its connection's thread, that was cancelled between two of its statements
    (`_Held.interrupt`): it sends no further one. Nobody awaits it: the read's caller is gone."""


def _advance(
    statements: Statements,
    dbapi: Any,
    op: Op[Any],
    reply: Rows | None,
    *,
    held: _Held | None = None,
    request: Request | None = None,
    inline: bool = False,
) -> tuple[bool, Any]:
    """Resume `op` with `reply` (or first answer `request`, one of its requests handed over
    unanswered) and answer its requests on the DBAPI connection `dbapi`, until it ends
    (`(True, its value)`) or asks for a statement that needs SQLAlchemy at execution (`(False,
    that request)`: the caller runs it and resumes `op` with its answer). Both fronts run reads
    through here: the sync one on the calling thread, the async one on SQLite on the event loop
    (`inline`) and in the connection's own thread (`AsyncReaders`), where the read may be
    cancelled meanwhile (`held`: then no further statement is sent). `inline` runs only bounded
    statements (`Execute.bounded`) and never waits on a lock: a statement that is not bounded,
    or that finds the database locked (its connection's busy timeout is 0), is handed back
    unanswered, `(False, it)`, for the connection's thread to go on from."""
    try:
        if request is None:
            request = op.send(reply)
        while True:
            reply = None
            if isinstance(request, Execute) and request.runs_on(statements.dialect):
                if inline and not request.bounded:
                    return False, request
                plan = statements.plan(request)
                if plan is None:
                    return False, request
                if held is not None and held.cancelled:
                    raise _ReadCancelled
                parameters = statements.send(plan, request)
                cursor = dbapi.cursor()
                try:
                    cursor.execute(plan.sql, parameters)
                    description = cursor.description
                    raw = cursor.fetchall() if description is not None else ()
                except sqlite3.OperationalError as exc:
                    if inline and exc.sqlite_errorcode & 0xFF in _SQLITE_BUSY:
                        return False, request  # sent again from the thread, which may wait
                    raise
                finally:
                    cursor.close()
                reply = statements.received(plan, raw, description)
            request = op.send(reply)
    except StopIteration as done:
        return True, done.value


def _read_sync(statements: Statements, conn: Connection, op: Op[T]) -> T:
    """Run a read operation on `conn`'s DBAPI connection (a statement that needs SQLAlchemy at
    execution runs on `conn`, observed by SQLAlchemy's cursor events like a write)."""
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    done, value = _advance(statements, dbapi, op, None)
    while not done:
        statement = value.statement_for(statements.dialect)
        done, value = _advance(statements, dbapi, op, _reply(conn.execute(statement, value.params)))
    return value  # type: ignore[no-any-return]


def _healthy(exc: BaseException) -> bool:
    """Whether a connection is fit for reuse after `exc` ended an operation on it: a domain
    error raised by the operation leaves it so; a database error or a cancellation may not."""
    return isinstance(exc, Exception) and not isinstance(exc, _DB_ERRORS)


def _dropped(engine: Engine, pooled: PoolProxiedConnection | None, exc: BaseException) -> bool:
    """Whether `exc` says the database dropped the connection (a restart, `pg_terminate_backend`):
    then every connection opened before it is presumed gone too. Where SQLAlchemy ran the
    statement it has already invalidated the pool; for a read run on the driver (Rule 6) the
    pool is invalidated here as SQLAlchemy would (its connections older than now are replaced
    at their next checkout). The caller discards the connections it keeps itself."""
    if isinstance(exc, DBAPIError):
        return exc.connection_invalidated
    if pooled is None or not isinstance(exc, sqlite3.Error | psycopg.Error):
        return False
    driver_error: Any = exc  # the dialect's DBAPI module's error: typed by SQLAlchemy as such
    if not engine.dialect.is_disconnect(driver_error, pooled, None):
        return False
    engine.pool._invalidate(pooled, exc, _checkin=False)  # SQLAlchemy's own step on disconnect
    return True


def _discard_sync(conn: Connection) -> None:
    """Close `conn`'s database connection without giving it back to the pool."""
    with suppress(Exception):
        conn.invalidate()
    with suppress(Exception):
        conn.close()


class HeldReader:
    """A few read connections kept open between reads (sync fronts only).

    A read holds no transaction (see `_options`), so keeping its connection costs the database
    nothing, and saves the pool's checkout and return, the largest cost of a SQLite read after
    the SQL itself. Connections are not tied to threads: a read takes an idle one (or a new one
    from the pool) and puts it back, and at most `keep` are kept idle, so readers never hold more
    of the pool than their own concurrency and writers always find room. After a database error
    the connection is invalidated (never reused, never pooled); after one that says the database
    dropped it, every kept connection is discarded too (`_dropped`), so only the read that met
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
            try:
                conn = self._idle.pop()
            except IndexError:
                conn = self._engine.connect().execution_options(
                    **_options(capabilities(self._engine.dialect.name), write=False)
                )
            try:
                result = _read_sync(self.statements, conn, op)
            except BaseException as exc:
                self._failed(conn, epoch, exc)
                raise
        except _DB_ERRORS as exc:
            raise translate_db_error(exc) from exc
        finally:
            op.close()
        self._put_back(conn, epoch)
        return result

    def _failed(self, conn: Connection, epoch: int, exc: BaseException) -> None:
        if _healthy(exc):
            self._put_back(conn, epoch)
            return
        pooled = None if conn.invalidated or conn.closed else conn.connection
        if _dropped(self._engine, pooled, exc):
            self._let_go_of_idle(closing=False)
        _discard_sync(conn)

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
            _discard_sync(conn)
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
                _discard_sync(conn)

    def kept(self) -> int:
        """How many read connections are kept open (idle) between reads."""
        return len(self._idle)

    def close(self) -> None:
        """Let go of the kept connections; a read still running closes its own at its end."""
        self._let_go_of_idle(closing=True)


_cleanups: set[asyncio.Task[None]] = set()
"""Cleanups still running after the task that started them was cancelled (kept referenced)."""


async def _shielded(cleanup: Coroutine[Any, Any, None]) -> None:
    """Run `cleanup` to its end even if the awaiting task is cancelled (again) meanwhile."""
    task = asyncio.ensure_future(cleanup)
    _cleanups.add(task)
    task.add_done_callback(_cleanups.discard)
    await asyncio.shield(task)


async def _discard(conn: AsyncConnection, driver: Any) -> None:
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


async def _release(conn: AsyncConnection) -> None:
    """Return a healthy connection to the pool (rolling back what is uncommitted)."""
    try:
        await conn.close()
    except Exception:  # could not roll back: never reuse it
        await _discard(conn, None)


async def _drive_async(conn: AsyncConnection, op: Op[T], dialect: Capabilities) -> T:
    try:
        request = next(op)
    except StopIteration as done:  # an operation that needs no statement
        return done.value  # type: ignore[no-any-return]
    while True:
        if isinstance(request, Commit):
            await conn.commit()
            reply = None
        elif not request.runs_on(dialect):
            reply = None
        else:
            statement = request.prepared(dialect)
            if isinstance(statement, DriverSQL):
                result = await conn.exec_driver_sql(statement.sql, request.rows)
            else:
                result = await conn.execute(statement, request.params)
            reply = _reply(result)
        try:
            request = op.send(reply)
        except StopIteration as done:
            await conn.commit()
            return done.value  # type: ignore[no-any-return]


async def run_async(engine: AsyncEngine, op: Op[T], *, write: bool = False) -> T:
    dialect = capabilities(engine.dialect.name)
    conn = engine.connect()
    driver: Any = None
    try:
        try:
            await conn.start()
            driver = (await conn.get_raw_connection()).driver_connection
            await conn.execution_options(**_options(dialect, write))
            result = await _drive_async(conn, op, dialect)
        except BaseException as exc:
            # Cancelled (or a database error) mid-operation: the connection's state is unknown.
            # A domain error raised by the operation leaves it healthy: roll back and reuse.
            healthy = isinstance(exc, Exception) and not isinstance(exc, _DB_ERRORS)
            await _shielded(_release(conn) if healthy else _discard(conn, driver))
            raise
        await _shielded(_release(conn))
        return result
    except _DB_ERRORS as exc:
        raise translate_db_error(exc) from exc
    finally:
        op.close()


def _advance_on(
    statements: Statements,
    held: _Held,
    op: Op[Any],
    reply: Rows | None,
    request: Request | None = None,
) -> tuple[bool, Any]:
    """`_advance` on an aiosqlite connection's own SQLite connection: run in its thread."""
    dbapi = held.driver._conn  # the thread's: see `_Held`
    return _advance(statements, dbapi, op, reply, held=held, request=request)


_CURSOR_KEPT_ROWS = 64
"""A psycopg cursor is kept for the next read on its connection after an answer of at most this
many rows: it holds its last answer until then (a window is a few chunk rows)."""


async def _fetch_psycopg(held: _Held, plan: Plan, parameters: Any) -> tuple[Any, Any]:
    """The rows of one statement, on the cursor kept with the connection (creating a psycopg
    cursor costs as much as a third of its execution), and the cursor's description only where
    the plan does not know its labels (textual SQL): psycopg builds it anew, a `Column` per
    column, when asked. A cursor whose statement failed or was cancelled is not kept (nor is its
    connection)."""
    cursor, held.cursor = held.cursor or held.driver.cursor(), None
    await cursor.execute(plan.sql, parameters)
    description = None
    if plan.labels is not None:
        raw = await cursor.fetchall()
    else:
        description = cursor.description
        raw = await cursor.fetchall() if description is not None else ()
    if len(raw) <= _CURSOR_KEPT_ROWS:
        held.cursor = cursor
    else:
        await cursor.close()
    return raw, description


class _Held:
    """A read connection checked out of the pool and kept: SQLAlchemy's, and its driver's.

    An aiosqlite connection is a thread that owns a `sqlite3` connection and runs what it is
    given, in order; a SQLite read that may scan runs there (from its first statement that is
    not bounded to its end), `_advance` driving the operation on that `sqlite3` connection, so
    it costs one hop to the thread and back, whatever its number of statements, and its Python
    runs off the event loop (which only waits on a future). This uses two private names of
    aiosqlite, `_execute` (queue a function on the thread) and `_conn` (the thread's `sqlite3`
    connection), as SQLAlchemy's own aiosqlite adapter does (`_tx`, `_conn`);
    aiosqlite's versions are bounded in `pyproject.toml` for that reason. The connection is the
    pool's: opened, configured (pragmas, `_options`) and closed as every other."""

    __slots__ = ("cancelled", "conn", "cursor", "driver", "in_thread", "pooled")

    def __init__(self, conn: AsyncConnection, pooled: PoolProxiedConnection, driver: Any) -> None:
        self.conn = conn
        self.pooled = pooled
        self.driver = driver
        self.in_thread = not isinstance(driver, psycopg.AsyncConnection)
        self.cursor: Any = None
        """psycopg: the cursor of the last read, kept for the next (`_fetch_psycopg`)."""
        self.cancelled = False
        """Set by `interrupt`: the read running in the thread sends no further statement."""

    def interrupt(self) -> None:
        """Stop the read running in the connection's thread (it was cancelled, or failed; the
        connection is then discarded): the statement running now is interrupted, as a scan of a
        large field would otherwise hold the thread, and the connection, to its end; and as
        SQLite's interrupt stops only a statement already running, `cancelled` tells `_advance`
        to send no further one."""
        if self.in_thread:
            self.cancelled = True
            with suppress(Exception):
                self.driver._conn.interrupt()  # safe from any thread


async def _close_all(
    connections: Sequence[_Held], stale: Sequence[_Held], *, healthy: bool
) -> None:
    """Close `connections` (back to the pool if `healthy`) and the `stale` ones (discarded)."""
    for held in connections:
        await (_release(held.conn) if healthy else _discard(held.conn, held.driver))
    for held in stale:
        await _discard(held.conn, held.driver)


def _close(op: Op[Any]) -> None:
    """Close `op`, unless it is still running in a connection's thread (its caller was cancelled
    twice, the second time while its connection was being discarded): the thread finishes it,
    and the collector closes it. `close` then raises a `ValueError` without running any of the
    operation's code; one raised by the operation's own cleanup (its traceback goes on into the
    generator) is not hidden. (Asking `op.gi_running` after the error would race with the thread,
    which may have finished its step in between.)"""
    try:
        op.close()
    except ValueError as exc:
        if exc.__traceback__ is None or exc.__traceback__.tb_next is not None:
            raise


_INLINE_TURN_S = 0.0005
"""How long reads on the event loop run back to back before letting the loop's other tasks run:
a read that runs on the loop whole does not suspend, so a task reading in a loop would hold the
loop to its end. A yield costs ~2 µs, 4% of a SQLite window read: paid once per turn, not per
read, so a task holds the loop at most this long plus one read (each of them bounded)."""


class _Slots:
    """The read slots of an `AsyncStore`: a counting semaphore whose waiters, served first come
    first served, each wait at most `timeout_s` (then `storage_busy`).

    Not `asyncio.Semaphore` under `asyncio.timeout`: that arms (and cancels) a timer for every
    read that waits, which at 16 tasks on 10 slots is most of them, and cost 7.2 µs of loop CPU
    per read against 2.9 µs here (measured, a stand-in read of one loop round trip): a cost only
    the higher concurrency paid, so reads/s on Postgres fell from 4 to 16 tasks. Every waiter
    has the same timeout, so their deadlines come in the order they queued: one timer, armed
    for the oldest waiter's deadline, serves them all. A freed slot goes to the oldest waiter
    directly, so a newcomer never takes it from one that waits."""

    __slots__ = ("_free", "_timeout_s", "_timer", "_timer_loop", "_waiters")

    def __init__(self, slots: int, timeout_s: float) -> None:
        self._free = slots
        self._timeout_s = timeout_s
        self._waiters: deque[tuple[float, asyncio.Future[None]]] = deque()
        """(deadline, future) of each waiter, oldest first (a cancelled one stays until met)."""
        self._timer: asyncio.TimerHandle | None = None
        self._timer_loop: asyncio.AbstractEventLoop | None = None
        """The loop `_timer` was armed on: a store used on a later loop (`asyncio.run` per job)
        arms its own, and the timer is cancelled when no one waits, so none outlives its loop."""

    def free(self) -> int:
        """How many slots are free (none, while anyone waits for one)."""
        return self._free

    def take(self) -> bool:
        """Take a free slot, unless none is free or others wait for one (they come first)."""
        if self._free and not self._waiters:
            self._free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Wait for a slot: handed over by `release`, or `storage_busy` at the deadline. A
        waiter cancelled just as a slot was handed to it gives it back: no slot is lost."""
        loop = asyncio.get_running_loop()
        slot = loop.create_future()
        self._waiters.append((loop.time() + self._timeout_s, slot))
        if self._timer is None or self._timer_loop is not loop:  # none, or one of a loop gone
            self._disarm()
            self._arm(loop)
        try:
            await slot
        except asyncio.CancelledError:
            if slot.done() and not slot.cancelled() and slot.exception() is None:
                self.release()
            raise

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = loop.call_at(self._waiters[0][0], self._expire, loop)
        self._timer_loop = loop

    def _disarm(self) -> None:
        """Cancel the timer: no one waits any more (or it belongs to a loop gone)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Refuse the waiters whose deadline has come; arm the timer for the next one."""
        self._timer = None
        now = loop.time()
        while self._waiters:
            deadline, slot = self._waiters[0]
            if not slot.done() and deadline > now:
                break
            self._waiters.popleft()
            if not slot.done():
                slot.set_exception(busy("every read connection of this store is in use; retry"))
        if self._waiters:
            self._arm(loop)

    def release(self) -> None:
        """Give a slot back: to the oldest waiter still waiting, else to the free ones."""
        while self._waiters:
            _, slot = self._waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                if not self._waiters:
                    self._disarm()
                return
        self._disarm()
        self._free += 1


class AsyncReaders:
    """The read connections of an `AsyncStore`: at most `READER_SLOTS` at once, kept open
    between reads (a read holds no transaction, so a kept connection costs the database
    nothing), each read running below SQLAlchemy on the driver (Rule 6): on Postgres on the event
    loop (psycopg's async connection). On SQLite, the sync front's own `_advance` drives it: on
    the event loop while it asks for bounded statements (`Execute.bounded`: each a few index
    lookups, tens of microseconds), on a connection of the loop's own (`_inline`, no slot, no
    hop: a hop to a thread and back cost more than such a read itself), and from its first
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
    discarded (Rule 4); after an error that says the database dropped it, every kept connection
    is discarded too (`_dropped`), so only the read that met it fails. A read that started before
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
        event.listen(engine.sync_engine, "handle_error", self._on_error)

    def _on_error(self, context: ExceptionContext) -> None:
        """As `HeldReader._on_error`; a listener cannot await, so the kept connections are only
        set aside here, and closed by the next read (or `close`). The loop's own SQLite
        connection is closed at once: it runs nothing now (its reads never await), and closing
        it does not wait."""
        if context.is_disconnect:
            self._epoch += 1
            self._stale += self._idle
            self._idle = []
            self._close_inline()

    async def run(self, op: Op[T]) -> T:
        try:
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
            except _DB_ERRORS as exc:
                raise translate_db_error(exc) from exc
            finally:
                self._slots.release()
        finally:
            _close(op)

    def _run_inline(self, op: Op[Any]) -> tuple[bool, Any]:
        """Run `op` on the event loop while it asks for bounded statements: `(True, its value)`,
        or `(False, the request to go on from)` in a connection's thread."""
        try:
            dbapi = self._inline_connection()
            try:
                return _advance(self.statements, dbapi, op, None, inline=True)
            except BaseException as exc:
                if not _healthy(exc):
                    self._close_inline()
                raise
            finally:
                if self._closed:  # a read that ends after `close` keeps nothing
                    self._close_inline()
        except _DB_ERRORS as exc:
            raise translate_db_error(exc) from exc

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
            result = await self._drive(held, op, request)
        except BaseException as exc:
            if _healthy(exc):
                await self._put_back(held, epoch)
            else:
                held.interrupt()
                if _dropped(self._engine.sync_engine, held.pooled, exc):
                    await self._let_go_of_idle(closing=False)
                await _shielded(_discard(held.conn, held.driver))
            raise
        await self._put_back(held, epoch)
        return result

    async def _put_back(self, held: _Held, epoch: int) -> None:
        """Keep a healthy connection, unless its read began before the kept ones were let go."""
        if epoch == self._epoch and not self._closed:
            self._idle.append(held)
        elif self._closed:  # the pool is (being) disposed of: close the connection itself
            await _shielded(_discard(held.conn, held.driver))
        else:
            await _shielded(_release(held.conn))

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
            await _shielded(_close_all(idle, stale, healthy=closing))

    async def _checkout(self) -> _Held:
        conn = self._engine.connect()
        driver: Any = None
        try:
            await conn.start()
            pooled = await conn.get_raw_connection()
            driver = pooled.driver_connection
            await conn.execution_options(**_options(self.statements.dialect, write=False))
        except BaseException:
            await _shielded(_discard(conn, driver))
            raise
        return _Held(conn, pooled, driver)

    async def _drive(self, held: _Held, op: Op[T], request: Request | None) -> T:
        statements = self.statements
        if held.in_thread:
            return await self._drive_in_thread(held, op, request)
        assert request is None  # only a SQLite read begins on the loop and is handed over
        try:
            request = next(op)
            while True:
                reply: Rows | None = None
                if isinstance(request, Execute) and request.runs_on(statements.dialect):
                    plan = statements.plan(request)
                    if plan is None:
                        statement = request.statement_for(statements.dialect)
                        reply = _reply(await held.conn.execute(statement, request.params))
                    else:
                        parameters = statements.send(plan, request)
                        raw, description = await _fetch_psycopg(held, plan, parameters)
                        reply = statements.received(plan, raw, description)
                request = op.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _drive_in_thread(self, held: _Held, op: Op[T], request: Request | None) -> T:
        """SQLite: the read (from `request`, where the loop handed it over) in the connection's
        thread (see `_Held`), coming back to the loop only for a statement that needs SQLAlchemy
        at execution."""
        statements, driver = self.statements, held.driver
        done, value = await driver._execute(_advance_on, statements, held, op, None, request)
        while not done:
            statement = value.statement_for(statements.dialect)
            answer = _reply(await held.conn.execute(statement, value.params))
            done, value = await driver._execute(_advance_on, statements, held, op, answer)
        return value  # type: ignore[no-any-return]

    def kept(self) -> int:
        """How many read connections are kept open (idle) between reads."""
        return len(self._idle)

    async def close(self) -> None:
        """Let go of the kept connections; a read still running closes its own at its end."""
        await self._let_go_of_idle(closing=True)


DEFAULT_BUSY_TIMEOUT_S = 10.0
"""How long a call waits for a lock, a pooled connection or a writer's slot before it answers
`storage_busy` (`Store.open(..., busy_timeout_s=...)`)."""
MAX_BUSY_TIMEOUT_S = 3600.0
POOL_SIZE = 5
POOL_OVERFLOW = 10
WRITER_SLOTS = 5
"""At most this many writes of one store hold connections at once, so that reads always find
one of the other `POOL_SIZE + POOL_OVERFLOW - WRITER_SLOTS` pooled connections: a read never
queues behind writers waiting for a lock."""
READER_SLOTS = POOL_SIZE + POOL_OVERFLOW - WRITER_SLOTS
"""At most this many reads of one `AsyncStore` hold connections at once (`AsyncReaders`)."""
IN_PROCESS_READERS = 2
"""As `READER_SLOTS` where the database runs in this process (SQLite), for the reads that may
scan (bounded ones run on the event loop and take no slot): each aiosqlite connection is a
thread that runs such a read (`_Held`), contending for the interpreter with the other and with
the event loop; two let one read's SQL run while another's Python does, and more only convoy
on the interpreter (measured before bounded reads ran on the loop: 1, 2, 3 and 4 gave the same
reads/s within the noise at 4 and 16 tasks, with 1 falling most as tasks rise)."""


@contextmanager
def opening(url: object) -> Iterator[None]:
    """Translate what can go wrong while opening a store: a bad URL, an unreachable server."""
    try:
        yield
    except (ArgumentError, ValueError, TypeError) as exc:
        raise BadRequest(
            "invalid_request", f"not a usable database URL: {exc}", param="url"
        ) from exc
    except _DB_ERRORS as exc:
        error = translate_db_error(exc)
        if error.code in ("storage_busy", "invalid_request"):
            raise error from exc
        raise Unavailable(
            "storage_unavailable", f"cannot open the database at {_safe(url)} ({error.message})"
        ) from exc


def _safe(url: object) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)  # type: ignore[arg-type]
    except (ArgumentError, ValueError, TypeError):
        return "the given URL"


def check_busy_timeout(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= MAX_BUSY_TIMEOUT_S
    ):
        raise BadRequest(
            "invalid_request",
            f"busy_timeout_s must be a number of seconds in (0, {MAX_BUSY_TIMEOUT_S:g}]",
            param="busy_timeout_s",
        )
    return float(value)


def _parse_url(url: object) -> URL:
    if not isinstance(url, str) or not url or "\x00" in url or not is_unicode(url):
        raise BadRequest(
            "invalid_request", "the database URL must be a string of valid Unicode", param="url"
        )
    try:
        parsed = make_url(url)
        port = parsed.port  # a malformed port raises here, not later
    except (ArgumentError, ValueError, TypeError) as exc:
        raise BadRequest("invalid_request", f"not a database URL: {exc}", param="url") from exc
    if port is not None and not 0 < port < 65536:
        raise BadRequest("invalid_request", f"port {port} is not a TCP port", param="url")
    return parsed


def sync_url(url: object) -> str:
    parsed = _parse_url(url)
    if parsed.get_backend_name() == "postgresql":
        return str(
            parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        )
    if parsed.get_backend_name() == "sqlite":
        if parsed.database in (None, "", ":memory:") or parsed.database.startswith("file:"):
            raise BadRequest(
                "invalid_request",
                "an in-memory SQLite database is not supported (each connection would see its "
                "own empty database): give a file, sqlite:///path/to/store.db",
                param="url",
            )
        if not Path(parsed.database).parent.is_dir():
            raise BadRequest(
                "invalid_request",
                "the SQLite file's directory does not exist: give a file in an existing one",
                param="url",
            )
        return str(parsed.set(drivername="sqlite").render_as_string(hide_password=False))
    raise BadRequest(
        "invalid_request",
        f"unsupported database URL scheme {parsed.drivername!r}: use sqlite:// or postgresql://",
        param="url",
    )


def async_url(url: object) -> str:
    parsed = make_url(sync_url(url))
    driver = "sqlite+aiosqlite" if parsed.get_backend_name() == "sqlite" else "postgresql+psycopg"
    return str(parsed.set(drivername=driver).render_as_string(hide_password=False))


def engine_options(url: str, busy_timeout_s: float) -> dict[str, Any]:
    """Pool bounds and timeouts for `create_engine` / `create_async_engine`: a pooled connection
    and (on Postgres) a lock are each waited for at most `busy_timeout_s`."""
    options: dict[str, Any] = {
        "hide_parameters": True,
        "pool_size": POOL_SIZE,
        "max_overflow": POOL_OVERFLOW,
        "pool_timeout": busy_timeout_s,
        "pool_pre_ping": False,
    }
    if make_url(url).get_backend_name() == "postgresql":
        options["connect_args"] = {
            "connect_timeout": max(1, round(busy_timeout_s)),
            "options": f"-c lock_timeout={max(1, round(busy_timeout_s * 1000))}",
        }
    return options


def configure_sqlite(dbapi_connection: Any, *, busy_timeout_ms: int, writes: bool = True) -> None:
    """A SQLite connection of the store, as it is opened: no driver transactions (Rule 3), a
    busy timeout, WAL. The pool's connections (`install_hooks`) and the async front's connection
    on the event loop (`AsyncReaders`) alike; that one, a reader that never waits on a lock, has
    a busy timeout of 0 and leaves out the two pragmas that concern writing (`writes=False`):
    `journal_mode=WAL` (the store's opener made the file WAL for good) and `synchronous` (when a
    commit syncs; the default, FULL, is the stricter). They are the ones here that touch the
    file, so that connection opens without meeting a lock: its first statement meets any."""
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    written = ("journal_mode=WAL", "synchronous=NORMAL") if writes else ()
    for pragma in (f"busy_timeout={busy_timeout_ms}", *written, "foreign_keys=ON"):
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


def install_hooks(engine: Engine, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
    """Where the store begins transactions itself (SQLite): pragmas on connect, and BEGIN
    emitted by the store (Rule 3). Nothing elsewhere. The busy timeout comes first: switching a
    fresh file to WAL takes a lock that another opener may hold."""
    if not capabilities(engine.dialect.name).begins_itself:
        return

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        configure_sqlite(dbapi_connection, busy_timeout_ms=max(1, round(busy_timeout_s * 1000)))

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        if options.get(_READ, False):
            return  # a read: every statement in its own implicit transaction
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(_WRITE, False) else "BEGIN")


def _script_location() -> str:
    packaged = Path(__file__).with_name("_alembic")
    if packaged.is_dir():
        return str(packaged)
    return str(Path(__file__).resolve().parent.parent / "migrations")


_MIGRATION_LOCK = 0x7064_7070_6D69_6772  # "pdppmigr": the advisory lock that serialises migration


def _current_revision(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    return MigrationContext.configure(connection).get_current_revision()


def migrate(connection: Connection, *, upgrade: bool = True) -> None:
    """Bring the database behind `connection` to the newest revision (Rule 5); the caller
    commits. With `upgrade=False`, only check that it is there: a database that is not is
    `storage_unavailable`, naming the command that migrates it."""
    from alembic import command
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    config = Config()
    config.set_main_option("script_location", _script_location())
    script = ScriptDirectory.from_config(config)
    head = script.get_current_head()
    current = _current_revision(connection)
    if current == head:
        return
    known = current is None or any(rev.revision == current for rev in script.walk_revisions())
    if not upgrade or not known:
        raise Unavailable(
            "storage_unavailable",
            f"the database schema is at revision {current!r}, this library needs {head!r}"
            + (": run `pdpp-store migrate`" if known else " (a newer library wrote it)"),
            details={"schema_revision": current, "required_revision": head},
        )
    if connection.in_transaction():
        connection.rollback()
    if connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _MIGRATION_LOCK})
    else:
        connection.execution_options(**{_WRITE: True})
        connection.execute(text("SELECT 1"))  # begins the write transaction: BEGIN IMMEDIATE
    if _current_revision(connection) == head:
        return  # another opener migrated it while this one waited for the lock
    config.attributes["connection"] = connection
    try:
        command.upgrade(config, "head")
    except CommandError as exc:
        raise Unavailable("storage_unavailable", f"cannot migrate the database: {exc}") from exc
