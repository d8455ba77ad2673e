"""The boundary audit (`audit.py`) sees every row on every front, and what a read returns.

The proofs other tests build on it are only as good as its sight, so this file shows, on each of
the four fronts (SQLite and Postgres, sync and async, each driven here by its own event loop),
that every row any fetch style hands out went through the audit, and that a canary returned by a
read is seen while one that stays in the database is not.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from _fronts import FRONTS, Front, StoreFront
from audit import AuditBlind, BoundaryAudit
from sqlalchemy import CursorResult, Row, insert, select

from pdpp_store import AsyncStore, Grant, Store
from pdpp_store._sql.tables import cursor_keys, field_chunks

CONNECTION = "cin_audit"
STREAM = "notes"
RECORD = f"{CONNECTION}/{STREAM}:n1"
CONNECTOR = "audit-test"
MANIFEST = {"connector_id": CONNECTOR, "streams": [{"name": STREAM, "primary_key": ["id"]}]}
CANARY = "Canary-7f3a-Ünïcødé-🐤"
CANARY_AT = 3000
FILLER = "lorem ipsum dolor sit amet, "
BODY = (FILLER * 200)[:CANARY_AT] + CANARY + (FILLER * 200)[:3000]
CHUNK_COUNT = -(-len(BODY) // 1024)
GRANT = Grant.owner(CONNECTION, STREAM)


def seed(store: StoreFront | Store) -> None:
    store.register_manifest(MANIFEST)
    store.add_connection(CONNECTION, CONNECTOR)
    store.upsert_records(CONNECTION, STREAM, [{"id": "n1", "title": "t", "body": BODY}])


def _chunks_query() -> Any:
    return (
        select(field_chunks.c.chunk_no, field_chunks.c.text)
        .where(field_chunks.c.record_id == "n1", field_chunks.c.path == "body")
        .order_by(field_chunks.c.chunk_no)
    )


def _one_by_one(result: CursorResult[Any]) -> list[Row[Any]]:
    rows: list[Row[Any]] = []
    while (row := result.fetchone()) is not None:
        rows.append(row)
    return rows


def _in_twos(result: CursorResult[Any]) -> list[Row[Any]]:
    rows: list[Row[Any]] = []
    while batch := result.fetchmany(2):
        rows.extend(batch)
    return rows


def _first_only(result: CursorResult[Any]) -> list[Row[Any]]:
    row = result.first()  # fetches one row, then closes the cursor with the rest unread
    return [] if row is None else [row]


FETCH_STYLES: dict[str, Callable[[CursorResult[Any]], list[Row[Any]]]] = {
    "fetchall": lambda result: list(result.fetchall()),
    "fetchone": _one_by_one,
    "fetchmany": _in_twos,
    "iterate": list,
    "partitions": lambda result: [row for part in result.partitions(3) for row in part],
    "all": lambda result: list(result.all()),
}


Seen = dict[str, list[tuple[Any, ...]]]


Styles = dict[str, Callable[[CursorResult[Any]], list[Row[Any]]]]


def _audited_sync(url: str, styles: Styles, stream: bool) -> tuple[BoundaryAudit, Seen]:
    seen = {}
    with (
        Store.open(url) as store,
        BoundaryAudit(store.engine) as audit,
        store.engine.connect() as conn,
    ):
        for style, fetch in styles.items():
            seen[style] = [tuple(row) for row in fetch(conn.execute(_chunks_query()))]
        if stream:
            streamed = conn.execution_options(stream_results=True, max_row_buffer=2)
            rows = _in_twos(streamed.execute(_chunks_query()))
            seen["server-side"] = [tuple(row) for row in rows]
    return audit, seen


async def _audited_async(url: str, styles: Styles, stream: bool) -> tuple[BoundaryAudit, Seen]:
    seen = {}
    store = await AsyncStore.open(url)
    try:
        with BoundaryAudit(store.engine) as audit:
            async with store.engine.connect() as conn:
                for style, fetch in styles.items():
                    result = await conn.execute(_chunks_query())
                    seen[style] = [tuple(row) for row in fetch(result)]
                if stream:
                    streamed = await conn.stream(_chunks_query())
                    seen["server-side"] = [tuple(row) async for row in streamed]
    finally:
        await store.close()
    return audit, seen


AUDITED: dict[Front, Callable[[str, Styles, bool], tuple[BoundaryAudit, Seen]]] = {
    "sync": _audited_sync,
    # Each async run gets an event loop of its own (no pytest-asyncio involved).
    "async": lambda url, styles, stream: asyncio.run(_audited_async(url, styles, stream)),
}


@pytest.mark.parametrize("front", FRONTS)
def test_every_row_of_every_fetch_style_passes_the_audit(db_url: str, front: Front) -> None:
    with Store.open(db_url) as store:
        seed(store)
    audit, seen = AUDITED[front](db_url, FETCH_STYLES, True)
    for style, rows in seen.items():
        assert len(rows) == CHUNK_COUNT, style
    handed_out = Counter(value for rows in seen.values() for row in rows for value in row)
    assert Counter(audit.values) == handed_out
    assert len(audit.rows) == CHUNK_COUNT * len(seen)
    assert sum(1 for s in audit.statements if "field_chunks" in s) == len(seen)


@pytest.mark.parametrize(
    ("backend", "front", "driver_holds_all"),
    [
        ("sqlite", "sync", False),  # sqlite3 steps lazily: unfetched rows were never made
        ("sqlite", "async", True),  # the aiosqlite adapter buffers every row at execute time
        pytest.param("postgres", "sync", True, marks=pytest.mark.postgres),  # libpq result
        pytest.param("postgres", "async", True, marks=pytest.mark.postgres),
    ],
)
def test_rows_left_in_a_driver_buffer_are_counted(
    request: pytest.FixtureRequest, backend: str, front: Front, driver_holds_all: bool
) -> None:
    url: str = request.getfixturevalue(f"{'pg' if backend == 'postgres' else 'sqlite'}_db_url")
    with Store.open(url) as store:
        seed(store)
    audit, seen = AUDITED[front](url, {"first": _first_only}, False)
    assert seen == {"first": [(0, BODY[:1024])]}
    assert audit.rows[0] == (0, BODY[:1024])
    assert (len(audit.rows) == CHUNK_COUNT) is driver_holds_all


def test_a_canary_returned_by_a_read_is_seen(store: StoreFront) -> None:
    seed(store)
    with BoundaryAudit(store.engine) as audit:
        window = store.read_field_window(
            GRANT, RECORD, "body", offset_chars=CANARY_AT - 10, limit_chars=64
        )
    assert CANARY in window.text
    assert audit.saw(CANARY)
    assert audit.saw(CANARY.upper())  # the audit folds case, as the store does
    assert any(window.text == value for value in audit.values)
    assert audit.chars_returned() < len(BODY) // 4
    assert 64 <= audit.max_text_cell() < 256
    assert audit.saw("n1")  # parameters are searched
    assert audit.saw("field_chunks")  # and statement texts


def test_a_canary_left_in_the_database_is_not_seen(store: StoreFront) -> None:
    seed(store)
    with BoundaryAudit(store.engine) as audit:
        window = store.read_field_window(GRANT, RECORD, "body", offset_chars=0, limit_chars=64)
        store.read_record(GRANT, RECORD)
    assert window.text == BODY[:64]
    assert audit.rows
    assert not audit.saw(CANARY)
    assert not audit.saw(CANARY[:12])


def test_hooks_are_removed_on_exit_even_after_an_error(sqlite_store: Store) -> None:
    seed(sqlite_store)
    audit = BoundaryAudit(sqlite_store.engine)

    def read_then_fail() -> None:
        with audit:
            sqlite_store.read_field_window(GRANT, RECORD, "body", limit_chars=8)
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        read_then_fail()
    assert audit.values
    before = (len(audit.executions), len(audit.values))
    sqlite_store.read_field_window(GRANT, RECORD, "body", offset_chars=CANARY_AT, limit_chars=64)
    assert (len(audit.executions), len(audit.values)) == before
    assert not audit.saw(CANARY)
    with audit, pytest.raises(RuntimeError, match="twice"):
        audit.__enter__()


def test_rows_it_cannot_see_make_it_fail(db_url: str) -> None:
    """INSERT .. RETURNING of several rows runs as "insertmanyvalues", whose rows SQLAlchemy
    fetches behind the execution context's back: the audit must say so, not pass."""
    statement = insert(cursor_keys).returning(cursor_keys.c.key_id)
    rows = [{"key_id": k, "secret": b"s", "created_at": datetime.now(UTC)} for k in (201, 202)]
    with Store.open(db_url) as store:
        audit = BoundaryAudit(store.engine)

        def insert_returning() -> None:
            with audit, store.engine.begin() as conn:
                conn.execute(statement, rows)

        with pytest.raises(AuditBlind, match="insertmanyvalues"):
            insert_returning()
