"""Database faults are translated around the whole life of a connection (issue 10, item 4):
injected on the real databases, on both fronts.

    dropped database under an open store   storage_unavailable
    a connection lost between calls        storage_unavailable once, then served again
    a COMMIT that fails                    storage_error, nothing of the write kept
    a lock held past the busy timeout      storage_busy, with a retry hint
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from _data import MAILBOX, body, owner, ref_id, setup_mailbox
from _fronts import FRONTS, StoreFront, open_front
from _postgres import PostgresServer

from pdpp_store import StoreError

REF = ref_id("e1")
fronts = pytest.mark.parametrize("front", FRONTS)
backends = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)


def _error(call: Any, *args: Any, **kwargs: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call(*args, **kwargs)
    return caught.value


def _outcome(call: Any, *args: Any) -> str:
    try:
        call(*args)
    except StoreError as error:
        return error.code
    return "ok"


def _loaded(front: str, url: str, **options: Any) -> StoreFront:
    store = open_front(front, url, **options)  # type: ignore[arg-type]
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello")])
    return store


@pytest.fixture
def own_pg_database(pg_server: PostgresServer, pg_template: str) -> Iterator[tuple[str, str]]:
    """A migrated Postgres database of this test's own (it may be dropped): name and URL."""
    name = f"pdpp_fault_{uuid.uuid4().hex}"
    url = pg_server.create_database(name, template=pg_template)
    try:
        yield name, url
    finally:
        pg_server.drop_database(name)


# ---------------------------------------------------------------- dropped, lost


@pytest.mark.postgres
@fronts
def test_a_database_dropped_under_an_open_store_is_storage_unavailable(
    front: str, pg_server: PostgresServer, own_pg_database: tuple[str, str]
) -> None:
    name, url = own_pg_database
    store = _loaded(front, url)
    try:
        store.read_record(owner(), REF)  # a held (or pooled) connection exists
        pg_server.drop_database(name)
        for _ in range(3):
            assert _error(store.read_record, owner(), REF).code == "storage_unavailable"
            error = _error(store.upsert_records, MAILBOX, "message_bodies", [body("e2", "x")])
            assert error.code == "storage_unavailable"
            assert error.http_status == 503
    finally:
        store.close()


@pytest.mark.postgres
@fronts
def test_a_lost_connection_fails_one_call_then_the_store_serves_again(
    front: str, pg_server: PostgresServer, own_pg_database: tuple[str, str]
) -> None:
    name, url = own_pg_database
    store = _loaded(front, url)
    try:
        store.read_record(owner(), REF)
        with pg_server.connect() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )
        codes = [_outcome(store.read_record, owner(), REF) for _ in range(6)]
        # Each pooled connection is found dead at most once, and said so.
        assert set(codes) <= {"ok", "storage_unavailable"}
        failures = codes.count("storage_unavailable")
        assert store.read_record(owner(), REF).to_dict()["data"]["body_text"] == "hello"
        store.upsert_records(MAILBOX, "message_bodies", [body("e2", "after")])
        assert failures <= 2
    finally:
        store.close()


def _garble(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.write(b"garbage, not a SQLite header" * 4)
    for suffix in ("-wal", "-shm"):
        path.with_name(path.name + suffix).unlink(missing_ok=True)


@fronts
def test_a_sqlite_file_that_is_no_longer_a_database_is_storage_unavailable(
    front: str, tmp_path: Path
) -> None:
    path = tmp_path / "store.db"
    _loaded(front, f"sqlite:///{path}").close()
    _garble(path)
    error = _error(open_front, front, f"sqlite:///{path}")
    assert (error.code, error.http_status) == ("storage_unavailable", 503)


# ---------------------------------------------------------------- failing COMMIT


def _fail_commits_postgres(url: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "CREATE FUNCTION pdpp_fail_commit() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'injected commit failure'; END $$"
            )
        )
        conn.execute(
            text(
                "CREATE CONSTRAINT TRIGGER pdpp_fail_commit AFTER INSERT ON records"
                " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION pdpp_fail_commit()"
            )
        )
    engine.dispose()


def _fail_commits_sqlite(path: Path) -> None:
    # A deferred foreign key violated by every new record: the statement succeeds, COMMIT fails.
    with sqlite3.connect(path) as conn:
        conn.executescript(
            "CREATE TABLE pdpp_parent (id INTEGER PRIMARY KEY);"
            "CREATE TABLE pdpp_child (parent INTEGER REFERENCES pdpp_parent (id)"
            " DEFERRABLE INITIALLY DEFERRED);"
            "CREATE TRIGGER pdpp_fail_commit AFTER INSERT ON records"
            " BEGIN INSERT INTO pdpp_child VALUES (42); END;"
        )
    conn.close()


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
@fronts
def test_a_failing_commit_is_storage_error_and_keeps_nothing(
    front: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        path = tmp_path / "store.db"
        url = f"sqlite:///{path}"
        store = _loaded(front, url)
        _fail_commits_sqlite(path)
    else:
        _, url = request.getfixturevalue("own_pg_database")
        store = _loaded(front, url)
        _fail_commits_postgres(url)
    try:
        batch = [body("n1", "one"), body("n2", "two")]
        for _ in range(2):
            error = _error(store.upsert_records, MAILBOX, "message_bodies", batch)
            assert (error.code, error.http_status) == ("storage_error", 503)
        for record in ("n1", "n2"):
            assert _error(store.read_record, owner(), ref_id(record)).code == "not_found"
        # The store itself is fine: reads and writes that commit nothing new still work.
        assert store.read_record(owner(), REF).to_dict()["data"]["body_text"] == "hello"
        store.delete_record(MAILBOX, "message_bodies", "e1")
    finally:
        store.close()


# ---------------------------------------------------------------- lock timeout


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
@fronts
def test_a_lock_held_past_the_busy_timeout_is_storage_busy(
    front: str, backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "sqlite":
        path = tmp_path / "store.db"
        url = f"sqlite:///{path}"
    else:
        _, url = request.getfixturevalue("own_pg_database")
    store = _loaded(front, url, busy_timeout_s=0.3)
    holder: Any
    if backend == "sqlite":
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    else:
        server: PostgresServer = request.getfixturevalue("pg_server")
        holder = psycopg.connect(server.conninfo(url.rsplit("/", 1)[1]))
        holder.execute("LOCK TABLE records IN ACCESS EXCLUSIVE MODE")
    try:
        error = _error(store.upsert_records, MAILBOX, "message_bodies", [body("e1", "changed")])
        assert (error.code, error.http_status) == ("storage_busy", 503)
        assert error.details == {"retryable": True, "retry_after_s": 1}
        holder.rollback() if backend == "postgres" else holder.execute("ROLLBACK")
        # Released: the same store writes (no lingering state from the refused write).
        store.upsert_records(MAILBOX, "message_bodies", [body("e1", "changed")])
        assert store.read_record(owner(), REF).to_dict()["data"]["body_text"] == "changed"
    finally:
        holder.close()
        store.close()
