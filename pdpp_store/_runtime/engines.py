"""Engines and opening: URLs, pool bounds and timeouts, how a connection of the store is set up,
and the errors of opening a store.

Rules:
1. Only `sqlite://` (a file) and `postgresql://` are accepted; each front gets its own driver
   (`sync_url`: sqlite3, psycopg; `async_url`: aiosqlite, psycopg's async connection).
2. One busy timeout bounds every wait of a call: a pooled connection, a lock (SQLite's
   `busy_timeout`, Postgres' `lock_timeout`), connecting, a writer's or a reader's slot.
   Every Postgres connection of the store runs without JIT compilation (`jit=off`, set at
   connection start with the lock timeout): every statement here is short, and the planner,
   costing some far above their work, compiled them for longer than they ran
   (docs/decisions.md, "No JIT on the store's connections").
3. Writes run in one transaction each: where the store `begins_itself` (SQLite), the driver's
   own transaction handling is switched off and the store emits `BEGIN IMMEDIATE` itself, so a
   read-then-write operation is one serialised transaction. Reads run without an explicit
   transaction (`execution_options`).
4. Opening a store (`opening`) translates as every boundary does (`errors.translating`), and
   says that the store could not be opened: a bad URL is `invalid_request` naming `url`, and
   any database error but `storage_busy` and `invalid_request` is `storage_unavailable`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Connection, Engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from pdpp_store._core.errors import BadRequest, StoreError, Unavailable
from pdpp_store._core.identity import is_unicode
from pdpp_store._sql.dialects import Capabilities, capabilities

from .errors import RETRY_HINT, translating

__all__ = [
    "DEFAULT_BUSY_TIMEOUT_S",
    "IN_PROCESS_READERS",
    "MAX_BUSY_TIMEOUT_S",
    "READER_SLOTS",
    "WRITER_SLOTS",
    "WRITE_OPTION",
    "async_url",
    "check_busy_timeout",
    "configure_sqlite",
    "engine_options",
    "execution_options",
    "install_hooks",
    "opening",
    "sync_url",
]

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
thread that runs such a read (`executor._Held`), contending for the interpreter with the other
and with the event loop; two let one read's SQL run while another's Python does, and more only
convoy on the interpreter (measured before bounded reads ran on the loop: 1, 2, 3 and 4 gave the
same reads/s within the noise at 4 and 16 tasks, with 1 falling most as tasks rise)."""

WRITE_OPTION = "pdpp_write"
"""The execution option of a write: `BEGIN IMMEDIATE` where the store begins itself."""
_READ_OPTION = "pdpp_read"
"""The execution option of a read where the store begins itself: no `BEGIN` at all."""


def execution_options(caps: Capabilities, write: bool) -> dict[str, Any]:
    """Writes run in one transaction (`BEGIN IMMEDIATE` where the store begins itself). Reads
    run without one: each statement sees a consistent snapshot, and a read that takes several
    statements binds them to each other by the field's digest (see `_ops.reads`), so BEGIN and
    COMMIT would only add two round trips per read."""
    if write:
        return {WRITE_OPTION: True}
    if caps.autocommit_reads:
        return {"isolation_level": "AUTOCOMMIT"}
    return {_READ_OPTION: True}


@contextmanager
def opening(url: object) -> Iterator[None]:
    """Translate what can go wrong while opening a store: a bad URL, an unreachable server
    (Rule 4)."""

    def cannot_open(error: StoreError) -> StoreError:
        if error.code in ("storage_busy", "invalid_request"):
            return error
        return Unavailable(
            "storage_unavailable",
            f"cannot open the database at {_safe(url)} ({error.message})",
            details=dict(RETRY_HINT),
        )

    with translating(cannot_open):
        try:
            yield
        except (ArgumentError, ValueError, TypeError) as exc:  # before `translating`: a URL's
            raise BadRequest(
                "invalid_request", f"not a usable database URL: {exc}", param="url"
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
        lock_timeout = max(1, round(busy_timeout_s * 1000))
        options["connect_args"] = {
            "connect_timeout": max(1, round(busy_timeout_s)),
            "options": f"-c lock_timeout={lock_timeout} -c jit=off",
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
        if options.get(_READ_OPTION, False):
            return  # a read: every statement in its own implicit transaction
        conn.exec_driver_sql("BEGIN IMMEDIATE" if options.get(WRITE_OPTION, False) else "BEGIN")
