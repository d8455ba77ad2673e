"""Fixtures: a clean database per test on each backend, and a store on each front.

    db_url        one per backend: ``sqlite`` (a file in tmp_path), ``postgres`` (a fresh database)
    store         one per front: ``sqlite-sync``, ``sqlite-async``, ``postgres-sync``,
                  ``postgres-async`` (async = `BlockingAsyncStore`, so tests stay plain functions)
    sqlite_store, pg_store
                  the sync store on one backend, for tests that run once per database (huge fields)
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

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _fronts import FRONTS, StoreFront, open_front
from _postgres import PostgresServer, Unavailable, find_server, unavailable

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


@pytest.fixture
def pg_db_url(pg_server: PostgresServer, pg_template: str) -> Iterator[str]:
    """A fresh, migrated Postgres database for this test alone."""
    name = f"pdpp_test_{uuid.uuid4().hex}"
    url = pg_server.create_database(name, template=pg_template)
    try:
        yield url
    finally:
        pg_server.drop_database(name)


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
    """An open store on a clean database, for each backend x front."""
    backend, front = request.param
    url = request.getfixturevalue(_DB_URL_FIXTURE[backend])
    opened = open_front(front, url)
    try:
        yield opened
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
