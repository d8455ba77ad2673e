"""Database errors leave the runtime only through `_runtime.errors.translating` (no database here:
the drivers' errors are built by hand, with the codes a database would give them).

A database error raised in a `translating()` block leaves it as the `StoreError` its SQLite
result code or SQLSTATE means, chained to it; every other exception passes unchanged, in sync and
async code alike; and no module of the package calls `translate_db_error` but the context
manager itself, so every boundary translates the same way.
"""

from __future__ import annotations

import ast
import asyncio
import sqlite3
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from pdpp_store import BadRequest, StoreError
from pdpp_store._runtime import opening, translating

PACKAGE = Path(__file__).resolve().parents[2] / "pdpp_store"


def _sqlite_error(code: int) -> sqlite3.Error:
    error = sqlite3.OperationalError(f"sqlite error {code}")
    error.sqlite_errorcode = code
    error.sqlite_errorname = f"CODE_{code}"
    return error


def _postgres_error(sqlstate: str) -> psycopg.Error:
    return psycopg.errors.lookup(sqlstate)(f"SQLSTATE {sqlstate}")


def _translated(exc: BaseException) -> BaseException:
    with pytest.raises(BaseException) as raised, translating():  # noqa: PT011 - any exception
        raise exc
    return raised.value


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (_sqlite_error(5), "storage_busy"),  # SQLITE_BUSY
        (_sqlite_error(262), "storage_busy"),  # SQLITE_LOCKED_SHAREDCACHE: its primary code
        (_sqlite_error(2067), "write_conflict"),  # SQLITE_CONSTRAINT_UNIQUE
        (_sqlite_error(14), "storage_unavailable"),  # SQLITE_CANTOPEN
        (_sqlite_error(18), "invalid_request"),  # SQLITE_TOOBIG
        (_sqlite_error(1), "storage_error"),
        (_postgres_error("40001"), "write_conflict"),
        (_postgres_error("23505"), "write_conflict"),
        (_postgres_error("55P03"), "storage_busy"),
        (_postgres_error("57P01"), "storage_unavailable"),
        (_postgres_error("08006"), "storage_unavailable"),
        (_postgres_error("22021"), "invalid_request"),
        (_postgres_error("42P01"), "storage_error"),
        (psycopg.OperationalError("connection refused"), "storage_unavailable"),
        (OperationalError("SELECT 1", {}, sqlite3.OperationalError()), "storage_unavailable"),
        (PoolTimeoutError("pool exhausted"), "storage_busy"),
    ],
)
def test_a_database_error_leaves_the_block_as_the_store_error_it_means(
    exc: BaseException, code: str
) -> None:
    error = _translated(exc)
    assert isinstance(error, StoreError)
    assert error.code == code
    assert error.__cause__ is exc


@pytest.mark.parametrize(
    "exc",
    [
        BadRequest("invalid_request", "a domain error"),
        ValueError("not the database's"),
        asyncio.CancelledError(),
        KeyboardInterrupt(),
    ],
)
def test_every_other_exception_passes_unchanged(exc: BaseException) -> None:
    assert _translated(exc) is exc


def test_a_block_that_raises_nothing_is_left_as_it_ran() -> None:
    ran = []
    with translating():
        ran.append(True)
    assert ran == [True]
    assert translating() is translating()  # the plain one is shared: nothing allocated per use


def test_an_awaited_call_is_translated_like_any_other() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise _sqlite_error(5)

    async def main() -> BaseException:
        try:
            with translating():
                await failing()
        except StoreError as error:
            return error
        raise AssertionError("not raised")

    assert asyncio.run(main()).code == "storage_busy"  # type: ignore[attr-defined]


def test_a_refinement_sees_only_translated_errors() -> None:
    seen: list[str] = []

    def refine(error: StoreError) -> StoreError:
        seen.append(error.code)
        return BadRequest("invalid_request", "refined")

    with pytest.raises(ValueError, match="passes"), translating(refine):
        raise ValueError("passes")
    with pytest.raises(BadRequest, match="refined"), translating(refine):
        raise _sqlite_error(1)
    assert seen == ["storage_error"]


@pytest.mark.parametrize(
    ("exc", "code", "param"),
    [
        (ArgumentError("bad URL"), "invalid_request", "url"),  # a SQLAlchemyError, yet the URL's
        (ValueError("bad port"), "invalid_request", "url"),
        (_sqlite_error(14), "storage_unavailable", None),
        (_sqlite_error(5), "storage_busy", None),
    ],
)
def test_opening_says_what_could_not_be_opened(
    exc: BaseException, code: str, param: str | None
) -> None:
    with pytest.raises(StoreError) as raised, opening("postgresql://user:secret@host/db"):
        raise exc
    assert (raised.value.code, raised.value.param) == (code, param)
    assert raised.value.__cause__ is exc
    assert "secret" not in raised.value.message
    if code == "storage_unavailable":
        assert raised.value.message.startswith("cannot open the database at postgresql://")


def test_only_the_context_manager_translates() -> None:
    """`translate_db_error` is called in one place: `translating`, which every boundary uses."""
    callers = [
        str(path.relative_to(PACKAGE))
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "translate_db_error"
    ]
    assert callers == ["_runtime/errors.py"]
