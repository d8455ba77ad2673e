"""Database errors as store errors: the one translation, and the one context manager that
applies it at every boundary where the runtime meets a connection.

Rules:
1. An error of SQLAlchemy or of a driver (`sqlite3`, psycopg) becomes a `StoreError` by its
   SQLite result code (`sqlite_errorcode`) or its Postgres SQLSTATE, never by message or
   class-name text; an error with no code at all says the connection is gone or never was.
2. Every boundary translates through `translating` (a `with` block, in sync and async code
   alike: an awaited call raises inside the block like any other): a write's whole transaction
   (`transactions`), each read on either front (`readers`), and opening a store (`opening`, which
   refines the translation). Nothing else in the package catches a database error to report it.
3. Inside a boundary the raw error is still what handlers see (whether a connection is fit for
   reuse, `healthy`; whether the database dropped it), so translation is the outermost step.
4. Only the store's own refusals (`StoreError`) leave a connection fit for reuse: after any other
   error its state is unknown, and it is discarded, never handed back to the pool.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from types import TracebackType

import psycopg
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError, SQLAlchemyError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from pdpp_store._core.errors import BadRequest, Conflict, StoreError, Unavailable

__all__ = [
    "DB_ERRORS",
    "RETRY_AFTER_S",
    "RETRY_HINT",
    "SQLITE_BUSY",
    "busy",
    "file_unusable",
    "healthy",
    "translate_db_error",
    "translating",
]

RETRY_AFTER_S = 1
"""The retry hint (`details.retry_after_s`) of `storage_busy`, `write_conflict` and
`storage_unavailable`; a server also sends it as `Retry-After`."""

RETRY_HINT = {"retryable": True, "retry_after_s": RETRY_AFTER_S}
"""The details of every error a caller may retry as it is."""

# SQLite primary result codes (the low byte of `sqlite_errorcode`).
SQLITE_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_SQLITE_UNAVAILABLE = {3, 10, 11, 14, 26}  # PERM, IOERR, CORRUPT, CANTOPEN, NOTADB
_SQLITE_TOOBIG = 18
# Extended codes: a UNIQUE or PRIMARY KEY constraint (a concurrent insert of the same key).
_SQLITE_DUPLICATE = {1555, 2067}

# Postgres SQLSTATEs and classes.
_PG_CONFLICT = {"40001", "40P01"}  # serialization_failure, deadlock_detected
_PG_BUSY = {"55P03", "57014", "53300"}  # lock_not_available, query_canceled, too_many_connections
_PG_UNAVAILABLE = {"57P01", "57P02", "57P03", "3D000"}  # shutdowns, database gone
_PG_UNAVAILABLE_CLASSES = {"08", "28"}  # connection exceptions, authorisation

_DRIVER_CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)
"""Errors of a driver called directly (reads below SQLAlchemy) that mean its connection is gone."""
DB_ERRORS = (DBAPIError, PoolTimeoutError, SQLAlchemyError, sqlite3.Error, psycopg.Error)
"""What `translating` translates: everything SQLAlchemy or a driver raises."""


def busy(message: str = "the database is busy; retry the operation") -> StoreError:
    return Unavailable("storage_busy", message, details=dict(RETRY_HINT))


def _conflict() -> StoreError:
    return Conflict(
        "write_conflict",
        "a concurrent write touched the same rows; retry the operation",
        details=dict(RETRY_HINT),
    )


def _unavailable(what: str) -> StoreError:
    # A lost connection or an outage: the same call may well succeed once the database is back.
    return Unavailable(
        "storage_unavailable", f"the database is unavailable ({what})", details=dict(RETRY_HINT)
    )


def _refused(what: str) -> StoreError:
    return Unavailable("storage_error", f"the database refused the operation ({what})")


def _too_large(what: str) -> StoreError:
    # Values are checked before they reach the database; this is the backstop for a limit of
    # the database itself that a request still met: the caller's input, not a fault (4xx).
    return BadRequest(
        "invalid_request", f"a value of this request exceeds a limit of the database ({what})"
    )


def translate_db_error(exc: BaseException) -> StoreError:
    """The store error that a database exception means (Rule 1)."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, PoolTimeoutError):
        return busy("every database connection is in use; retry the operation")
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    sqlite_code = getattr(orig, "sqlite_errorcode", None)
    if isinstance(sqlite_code, int):
        name = getattr(orig, "sqlite_errorname", str(sqlite_code))
        primary = sqlite_code & 0xFF
        if primary in SQLITE_BUSY:
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


def file_unusable(exc: BaseException) -> bool:
    """Whether `exc` is a SQLite error that says the file cannot be read as the database (not a
    database, corrupt, an I/O error, gone): the other connections to it are no better off."""
    orig = exc.orig if isinstance(exc, DBAPIError) else exc
    code = getattr(orig, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in _SQLITE_UNAVAILABLE


def healthy(exc: BaseException) -> bool:
    """Whether a connection is fit for reuse after `exc` ended an operation on it: a domain
    error the operation raised (a `StoreError`) leaves it so; a database error, a cancellation,
    or any other error may not (a driver interrupted mid-call can report the interruption as an
    error of its own, psycopg's `AssertionError` of a pipeline left entered: Rule 4)."""
    return isinstance(exc, StoreError)


def translating(refine: Callable[[StoreError], StoreError] | None = None) -> _Translating:
    """`with translating():` lets a database error leave the block only as the `StoreError` it
    means (`translate_db_error`, then `refine` where given), chained to it (`from`); every other
    exception passes unchanged (Rule 2)."""
    return _PLAIN if refine is None else _Translating(refine)


class _Translating:
    """The context manager of `translating`: a class rather than a generator, as every read
    enters one, and the plain one is shared, so entering it allocates nothing."""

    __slots__ = ("_refine",)

    def __init__(self, refine: Callable[[StoreError], StoreError] | None) -> None:
        self._refine = refine

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if exc is None or not isinstance(exc, DB_ERRORS):
            return
        error = translate_db_error(exc)
        if self._refine is not None:
            error = self._refine(error)
        raise error from exc


_PLAIN = _Translating(None)
