"""Fixtures: a clean database per test on each backend, and a store on each front.

    db_url        one per backend: ``sqlite`` (a file in tmp_path), ``postgres`` (a fresh database)
    store         one per front: ``sqlite-sync``, ``sqlite-async``, ``postgres-sync``,
                  ``postgres-async`` (async = `BlockingAsyncStore`, so tests stay plain functions);
                  every card it returns is checked against its JSON Schema (`_cards`)
    sqlite_store, pg_store
                  the sync store on one backend, for tests that run once per database (huge fields)
    each_database one per backend (``sqlite``, ``postgres``): the sync store with the mailbox set
                  up (`_data.setup_mailbox`), for properties whose many examples share one store
    sqlite_db_url, pg_db_url, pg_server, pg_server_url
                  the pieces, for tests that open stores themselves (see `_fronts.open_front`)

Rules:
1. Postgres is found once per session (see `_postgres`) and only when a test asks for it; every
   Postgres-backed parameter carries the ``postgres`` marker (``-m "not postgres"`` runs SQLite
   alone).
2. Each Postgres test gets its own database, ``pdpp_test_<uuid hex>``, copied from a session
   template that `Store.open` has already migrated, and dropped (WITH FORCE) after the test.
3. Under ``CI=true`` a missing Postgres fails every test that needs it; it never skips.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from _cards import CardChecking
from _data import setup_mailbox
from _distribution import REFERENCE_TABLES, StatementRecorder
from _fronts import FRONTS, StoreFront, open_front
from _postgres import PostgresServer, Unavailable, find_server, unavailable
from sqlalchemy import Engine, event

from pdpp_store._runtime import observing

if TYPE_CHECKING:
    from pdpp_store import Store

BACKENDS = ("sqlite", "postgres")


def _backend_param(backend: str, value: object, param_id: str) -> Any:
    marks = [pytest.mark.postgres] if backend == "postgres" else []
    return pytest.param(value, id=param_id, marks=marks)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "postgres: runs against a Postgres server (found or started by the harness)"
    )


# --- Postgres: one server per session, one template, one database per test -----------------------


_servers_used: list[PostgresServer] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for server in _servers_used:
        terminalreporter.write_line(f"postgres: {server.source} server at {server.url}")


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    try:
        server = find_server()
    except Unavailable as why:
        unavailable(str(why))
    _servers_used.append(server)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def pg_server_url(pg_server: PostgresServer) -> str:
    """The server's URL (SQLAlchemy form, maintenance database)."""
    return pg_server.url


@pytest.fixture(scope="session")
def pg_template(pg_server: PostgresServer) -> Iterator[str]:
    """Name of a database migrated to head, from which each test's database is copied."""
    from pdpp_store import Store

    name = f"pdpp_tpl_{uuid.uuid4().hex}"
    url = pg_server.create_database(name)
    try:
        Store.open(url).close()
        pg_server.set_template(name, True)
        yield name
    finally:
        pg_server.set_template(name, False)
        pg_server.drop_database(name)


def _migrations_head() -> str:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from pdpp_store._runtime import _script_location

    config = Config()
    config.set_main_option("script_location", _script_location())
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head is not None
    return head


class _DatabasePool:
    """Migrated databases handed to one test at a time and emptied between tests.

    Creating and dropping a database per test costs 0.4-1 s on a server with a slow disk (each
    DROP DATABASE forces a checkpoint); emptying every table costs a few milliseconds. A database
    returns to the pool only if it is provably clean: still at the migrations' head, every table
    empty after TRUNCATE, no session of the test left in it. Otherwise it is dropped."""

    def __init__(self, server: PostgresServer, template: str) -> None:
        self.server = server
        self.template = template
        self.idle: list[str] = []
        self.owned: list[str] = []
        self.head = _migrations_head()

    def take(self) -> str:
        if self.idle:
            return self.idle.pop()
        name = f"pdpp_test_{uuid.uuid4().hex}"
        self.server.create_database(name, template=self.template)
        self.owned.append(name)
        return name

    def give_back(self, name: str) -> None:
        from pdpp_store._sql.tables import metadata

        tables = ", ".join(f'"{table}"' for table in metadata.tables)
        try:
            with self.server.connect(name) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                conn.execute(f"TRUNCATE {tables}")
                present = {
                    row[0]
                    for row in conn.execute(
                        "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                    )
                }
                version = conn.execute("SELECT version_num FROM alembic_version").fetchall()
            if present != {*metadata.tables, "alembic_version"} or version != [(self.head,)]:
                raise RuntimeError(f"database {name} is not at head")
        except Exception:
            self.owned.remove(name)
            self.server.drop_database(name)
            return
        self.idle.append(name)

    def close(self) -> None:
        for name in self.owned:
            self.server.drop_database(name)


@pytest.fixture(scope="session")
def pg_pool(pg_server: PostgresServer, pg_template: str) -> Iterator[_DatabasePool]:
    pool = _DatabasePool(pg_server, pg_template)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def pg_db_url(pg_server: PostgresServer, pg_pool: _DatabasePool) -> Iterator[str]:
    """A migrated Postgres database with every table empty, for this test alone."""
    name = pg_pool.take()
    try:
        yield pg_server.database_url(name)
    finally:
        pg_pool.give_back(name)


# --- SQLite --------------------------------------------------------------------------------------


@pytest.fixture
def sqlite_db_url(tmp_path: Path) -> str:
    """A SQLite file of this test's own (not created yet: opening the store creates it)."""
    return f"sqlite:///{tmp_path / 'store.db'}"


# --- The matrix ----------------------------------------------------------------------------------

_DB_URL_FIXTURE = {"sqlite": "sqlite_db_url", "postgres": "pg_db_url"}


@pytest.fixture(params=[_backend_param(backend, backend, backend) for backend in BACKENDS])
def db_url(request: pytest.FixtureRequest) -> str:
    """A clean database on each backend (ids ``sqlite``, ``postgres``)."""
    url: str = request.getfixturevalue(_DB_URL_FIXTURE[request.param])
    return url


@pytest.fixture(
    params=[
        _backend_param(backend, (backend, front), f"{backend}-{front}")
        for backend in BACKENDS
        for front in FRONTS
    ]
)
def store(request: pytest.FixtureRequest) -> Iterator[StoreFront]:
    """An open store on a clean database, for each backend x front, whose every call validates
    the evidence cards it returns and the errors it raises against their JSON Schemas
    (`_cards.CardChecking`)."""
    backend, front = request.param
    url = request.getfixturevalue(_DB_URL_FIXTURE[backend])
    opened = open_front(front, url)
    try:
        yield cast("StoreFront", CardChecking(opened))
    finally:
        opened.close()


@pytest.fixture
def sqlite_store(sqlite_db_url: str) -> Iterator[Store]:
    from pdpp_store import Store

    with Store.open(sqlite_db_url) as opened:
        yield opened


@pytest.fixture
def pg_store(pg_db_url: str) -> Iterator[Store]:
    from pdpp_store import Store

    with Store.open(pg_db_url) as opened:
        yield opened


@pytest.fixture(
    params=[
        pytest.param("sqlite_store", id="sqlite"),
        pytest.param("pg_store", id="postgres", marks=pytest.mark.postgres),
    ]
)
def each_database(request: pytest.FixtureRequest) -> Store:
    """The sync store once per database, with the mailbox set up (a property runs many examples
    on one store)."""
    opened: Store = request.getfixturevalue(request.param)
    setup_mailbox(opened)
    return opened


# --- Citus readiness: every statement this session sends to Postgres keeps the rules -------------

_statements = StatementRecorder()
event.listen(Engine, "before_cursor_execute", _statements)
_observation = ExitStack()  # for the whole session: the reads, which run below SQLAlchemy
_observation.enter_context(observing(_statements))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fails the run if any statement sent to Postgres breaks a rule of `_distribution` (a
    statement joining record tables off `connection_id`, or record and blob tables together)."""
    if not _statements.statements:
        return
    from pdpp_store._sql.tables import metadata

    record_tables = {
        table.name for table in metadata.sorted_tables if "connection_id" in table.c
    } - REFERENCE_TABLES
    found = _statements.violations(record_tables)
    if found:
        lines = [f"{len(found)} statement(s) sent to Postgres break the distribution rules:"]
        for statement, problems in found.items():
            lines += [f"- {'; '.join(problems)}:", f"  {' '.join(statement.split())[:600]}"]
        print("\n".join(lines), file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
