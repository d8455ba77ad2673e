"""The read executor: how a read's statements reach the database, below SQLAlchemy, on both
fronts.

A read is an operation (`Op`) that yields `Execute` requests. Each statement is compiled once
per dialect into a `Plan` (its SQL, how to bind its parameters, how to label its rows), and run
on the DBAPI connection of a connection the readers hold (`readers`): on the calling thread
(`Store`), on psycopg's async connection on the event loop (`AsyncStore` on Postgres), or on
SQLite's `sqlite3` connection, on the event loop for bounded statements and in an aiosqlite
connection's own thread for the rest (`AsyncStore` on SQLite, `_Held`). The sync front's loop,
`_advance`, drives a read on SQLite on either front.

Rules:
1. Every read statement of the store passes through `Statements.send` and
   `Statements.received`, the one execution point of reads, where `observing` lets an observer
   see each statement, its parameters exactly as the DBAPI gets them and every row (the
   boundary audit attaches there). Writes and migrations stay on SQLAlchemy, whose cursor events
   show them.
2. A statement that needs SQLAlchemy at every execution (an expanding parameter, an
   executemany) is handed back to the caller, which runs it on the held SQLAlchemy connection
   and resumes the read with its rows.
3. On the event loop (`inline`), only bounded statements run (`Execute.bounded`), and none waits
   on a lock: the rest is handed back, to go on in a connection's thread.
4. A read cancelled while it runs in a connection's thread sends no further statement
   (`_Held.interrupt`); its connection is then discarded by the readers.
5. Nothing here translates errors: the readers run every read inside `errors.translating`.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Protocol, TypeVar

import psycopg
from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.pool import PoolProxiedConnection

from pdpp_store._sql.dialects import capabilities
from pdpp_store._sql.requests import Execute, Op, Request, Rows

from .errors import SQLITE_BUSY
from .transactions import reply

__all__ = [
    "Observer",
    "Plan",
    "Statements",
    "observing",
    "read_in_thread",
    "read_psycopg",
    "read_sync",
]

T = TypeVar("T")


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
"""Plans one store keeps; statements are cached by shape (`_sql`'s builders), so a store meets
a few dozen. A statement built per call would otherwise fill the cache: it is then emptied."""


class Statements:
    """The one execution point of reads (Rule 1): every read statement of a store is bound by
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
    answer: Rows | None,
    *,
    held: _Held | None = None,
    request: Request | None = None,
    inline: bool = False,
) -> tuple[bool, Any]:
    """Resume `op` with `answer` (or first answer `request`, one of its requests handed over
    unanswered) and answer its requests on the DBAPI connection `dbapi`, until it ends
    (`(True, its value)`) or asks for a statement that needs SQLAlchemy at execution (`(False,
    that request)`: the caller runs it and resumes `op` with its answer). Both fronts run reads
    through here: the sync one on the calling thread, the async one on SQLite on the event loop
    (`inline`) and in the connection's own thread (`read_in_thread`), where the read may be
    cancelled meanwhile (`held`: then no further statement is sent). `inline` runs only bounded
    statements (`Execute.bounded`) and never waits on a lock: a statement that is not bounded,
    or that finds the database locked (its connection's busy timeout is 0), is handed back
    unanswered, `(False, it)`, for the connection's thread to go on from (Rule 3)."""
    try:
        if request is None:
            request = op.send(answer)
        while True:
            answer = None
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
                    if inline and exc.sqlite_errorcode & 0xFF in SQLITE_BUSY:
                        return False, request  # sent again from the thread, which may wait
                    raise
                finally:
                    cursor.close()
                answer = statements.received(plan, raw, description)
            request = op.send(answer)
    except StopIteration as done:
        return True, done.value


def read_sync(statements: Statements, conn: Connection, op: Op[T]) -> T:
    """Run a read operation on `conn`'s DBAPI connection (a statement that needs SQLAlchemy at
    execution runs on `conn`, observed by SQLAlchemy's cursor events like a write)."""
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    done, value = _advance(statements, dbapi, op, None)
    while not done:
        statement = value.statement_for(statements.dialect)
        done, value = _advance(statements, dbapi, op, reply(conn.execute(statement, value.params)))
    return value  # type: ignore[no-any-return]


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
    pool's: opened, configured (pragmas, execution options) and closed as every other."""

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
        to send no further one (Rule 4)."""
        if self.in_thread:
            self.cancelled = True
            with suppress(Exception):
                self.driver._conn.interrupt()  # safe from any thread


def _advance_on(
    statements: Statements,
    held: _Held,
    op: Op[Any],
    answer: Rows | None,
    request: Request | None = None,
) -> tuple[bool, Any]:
    """`_advance` on an aiosqlite connection's own SQLite connection: run in its thread."""
    dbapi = held.driver._conn  # the thread's: see `_Held`
    return _advance(statements, dbapi, op, answer, held=held, request=request)


async def read_in_thread(
    statements: Statements, held: _Held, op: Op[T], request: Request | None
) -> T:
    """SQLite: the read (from `request`, where the loop handed it over) in the connection's
    thread (see `_Held`), coming back to the loop only for a statement that needs SQLAlchemy
    at execution."""
    driver = held.driver
    done, value = await driver._execute(_advance_on, statements, held, op, None, request)
    while not done:
        statement = value.statement_for(statements.dialect)
        answer = reply(await held.conn.execute(statement, value.params))
        done, value = await driver._execute(_advance_on, statements, held, op, answer)
    return value  # type: ignore[no-any-return]


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


async def read_psycopg(statements: Statements, held: _Held, op: Op[T]) -> T:
    """Postgres: the read on the event loop, on psycopg's async connection."""
    try:
        request = next(op)
        while True:
            answer: Rows | None = None
            if isinstance(request, Execute) and request.runs_on(statements.dialect):
                plan = statements.plan(request)
                if plan is None:
                    statement = request.statement_for(statements.dialect)
                    answer = reply(await held.conn.execute(statement, request.params))
                else:
                    parameters = statements.send(plan, request)
                    raw, description = await _fetch_psycopg(held, plan, parameters)
                    answer = statements.received(plan, raw, description)
            request = op.send(answer)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


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
