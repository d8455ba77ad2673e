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
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import URL, Connection, Engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ._core.errors import BadRequest, Conflict, StoreError, Unavailable
from ._core.identity import is_unicode
from ._sql.dialects import Capabilities, capabilities
from ._sql.requests import Commit, Op, Rows

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_S",
    "WRITER_SLOTS",
    "HeldReader",
    "async_url",
    "busy",
    "check_busy_timeout",
    "engine_options",
    "install_hooks",
    "migrate",
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
    if isinstance(exc, DBAPIError) and (
        exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)
    ):
        # No code at all: the driver lost or never had its connection (refused, reset, closed).
        return _unavailable("no connection")
    return _refused(type(orig).__name__)


_DB_ERRORS = (DBAPIError, PoolTimeoutError, SQLAlchemyError)


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


def _drive_sync(conn: Connection, op: Op[T], *, commit: bool = True) -> T:
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
                reply = _reply(conn.execute(request.statement_for(dialect), request.params))
            request = op.send(reply)
    except StopIteration as done:
        if commit:
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


class HeldReader:
    """A few read connections kept open between reads (sync fronts only).

    A read holds no transaction (see `_options`), so keeping its connection costs the database
    nothing, and saves the pool's checkout and return, the largest cost of a SQLite read after
    the SQL itself. Connections are not tied to threads: a read takes an idle one (or a new one
    from the pool) and puts it back, and at most `keep` are kept idle, so readers never hold more
    of the pool than their own concurrency and writers always find room. A connection the
    database dropped is discarded."""

    def __init__(self, engine: Engine, keep: int = 2) -> None:
        self._engine = engine
        self._keep = keep
        self._idle: deque[Connection] = deque()

    def run(self, op: Op[T]) -> T:
        try:
            try:
                conn = self._idle.pop()
            except IndexError:
                conn = self._engine.connect().execution_options(
                    **_options(capabilities(self._engine.dialect.name), write=False)
                )
            try:
                result = _drive_sync(conn, op, commit=False)  # a read has nothing to commit
            except BaseException:
                conn.close()  # after an error, never reuse: a fresh one is cheap enough
                raise
        except _DB_ERRORS as exc:
            raise translate_db_error(exc) from exc
        finally:
            op.close()
        if conn.invalidated or len(self._idle) >= self._keep:
            conn.close()
        else:
            self._idle.append(conn)
        return result

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


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
            reply = _reply(await conn.execute(request.statement_for(dialect), request.params))
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


def install_hooks(engine: Engine, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
    """Where the store begins transactions itself (SQLite): pragmas on connect, and BEGIN
    emitted by the store (Rule 3). Nothing elsewhere. The busy timeout comes first: switching a
    fresh file to WAL takes a lock that another opener may hold."""
    if not capabilities(engine.dialect.name).begins_itself:
        return

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in (
            f"busy_timeout={max(1, round(busy_timeout_s * 1000))}",
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "foreign_keys=ON",
        ):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

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
