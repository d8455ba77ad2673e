"""Running operations: the only module that talks to a database connection.

Every operation of the store is written once, as a generator (`Op`) that yields requests and
receives their answers, with no I/O of its own (see `_ops`; the requests are `_sql.requests`').
Thin drivers run them: `run_sync` on a SQLAlchemy `Engine`, `run_async` on an `AsyncEngine`.
A statement that depends on the dialect is built here, from the engine's `Capabilities`
(`_sql.dialects`), and every row is answered as a mapping by column label.

Rules:
1. One operation runs on one connection. A write runs in one transaction (or one per `COMMIT`);
   if it raises, everything since the last commit is rolled back. A read runs in none.
2. Database errors are translated to `StoreError` here and nowhere else, by SQLSTATE / exception
   class, never by message text.
3. Writes run in one transaction each (where the store `begins_itself`, SQLite, the driver's own
   transaction handling is switched off and the store emits `BEGIN IMMEDIATE` itself, so a
   read-then-write operation is one serialised transaction). Reads run without an explicit
   transaction (see `_options`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from ._core.errors import BadRequest, Conflict, StoreError, Unavailable
from ._sql.dialects import Capabilities, capabilities
from ._sql.requests import Commit, Op, Rows

__all__ = [
    "HeldReader",
    "async_url",
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


def translate_db_error(exc: DBAPIError) -> StoreError:
    """The one place where database exceptions become store errors."""
    sqlstate = getattr(exc.orig, "sqlstate", None)
    if isinstance(exc, IntegrityError) or sqlstate == "40001":
        return Conflict(
            "write_conflict",
            "a concurrent write touched the same rows; retry the operation",
        )
    if isinstance(exc, OperationalError) and "locked" in type(exc.orig).__name__.lower():
        return Unavailable("storage_busy", "the database is busy; retry the operation")
    return Unavailable(
        "storage_error", f"the database refused the operation ({type(exc.orig).__name__})"
    )


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
            else:
                reply = _reply(conn.execute(request.statement_for(dialect), request.params))
            request = op.send(reply)
    except StopIteration as done:
        if commit:
            conn.commit()
        return done.value  # type: ignore[no-any-return]
    except DBAPIError as exc:
        raise translate_db_error(exc) from exc
    finally:
        op.close()


def run_sync(engine: Engine, op: Op[T], *, write: bool = False) -> T:
    with engine.connect() as plain:
        caps = capabilities(engine.dialect.name)
        return _drive_sync(plain.execution_options(**_options(caps, write)), op)


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
        if conn.invalidated or len(self._idle) >= self._keep:
            conn.close()
        else:
            self._idle.append(conn)
        return result

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


async def run_async(engine: AsyncEngine, op: Op[T], *, write: bool = False) -> T:
    dialect = capabilities(engine.dialect.name)
    async with engine.connect() as plain:
        conn = await plain.execution_options(**_options(dialect, write))
        try:
            request = next(op)
            while True:
                if isinstance(request, Commit):
                    await conn.commit()
                    reply = None
                else:
                    reply = _reply(
                        await conn.execute(request.statement_for(dialect), request.params)
                    )
                request = op.send(reply)
        except StopIteration as done:
            await conn.commit()
            return done.value  # type: ignore[no-any-return]
        except DBAPIError as exc:
            raise translate_db_error(exc) from exc
        finally:
            op.close()


@contextmanager
def opening(url: str) -> Iterator[None]:
    """Translate what can go wrong while opening a store: a bad URL, an unreachable server."""
    try:
        yield
    except ArgumentError as exc:
        raise BadRequest("invalid_request", f"not a database URL: {exc}", param="url") from exc
    except DBAPIError as exc:
        raise Unavailable(
            "storage_unavailable",
            f"cannot open the database at {_safe(url)} ({type(exc.orig).__name__})",
        ) from exc


def _safe(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "the given URL"


def _backend(url: str) -> tuple[Any, Capabilities]:
    parsed = make_url(url)
    try:
        return parsed, capabilities(parsed.get_backend_name())
    except ValueError:
        raise BadRequest(
            "invalid_request",
            f"unsupported database URL scheme {parsed.drivername!r}: use sqlite:// or "
            "postgresql://",
            param="url",
        ) from None


def sync_url(url: str) -> str:
    parsed, caps = _backend(url)
    if caps.file_based and parsed.database in (None, "", ":memory:"):
        raise BadRequest(
            "invalid_request",
            "an in-memory SQLite database is not supported (each connection would see its "
            "own empty database): give a file, sqlite:///path/to/store.db",
            param="url",
        )
    return str(parsed.set(drivername=caps.sync_driver).render_as_string(hide_password=False))


def async_url(url: str) -> str:
    parsed, caps = _backend(sync_url(url))
    return str(parsed.set(drivername=caps.async_driver).render_as_string(hide_password=False))


def install_hooks(engine: Engine) -> None:
    """Where the store begins transactions itself (SQLite): pragmas on connect, and BEGIN
    emitted by the store (Rule 3). Nothing elsewhere."""
    if not capabilities(engine.dialect.name).begins_itself:
        return

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in (
            "journal_mode=WAL",
            "synchronous=NORMAL",
            "busy_timeout=10000",
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


def migrate(connection: Connection) -> None:
    """Bring the database behind `connection` to the newest revision."""
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", _script_location())
    head = ScriptDirectory.from_config(config).get_current_head()
    if MigrationContext.configure(connection).get_current_revision() == head:
        return
    config.attributes["connection"] = connection
    command.upgrade(config, "head")
