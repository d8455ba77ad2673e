from __future__ import annotations

import time
from typing import Any

import pytest
import sqlalchemy as sa

from _postgres import PostgresServer

SEEN: dict[str, list[str]] = {"sqlite": [], "postgres": []}
TIMES: list[float] = []


@pytest.mark.parametrize("n", range(4))
def test_fresh_db(db_url: str, n: int, request: pytest.FixtureRequest) -> None:
    backend = "postgres" if db_url.startswith("postgresql") else "sqlite"
    engine = sa.create_engine(db_url)
    with engine.begin() as conn:
        tables = sa.inspect(conn).get_table_names()
        conn.execute(sa.text("create table mine (x int)"))
        conn.execute(sa.text("insert into mine values (1)"))
        assert conn.execute(sa.text("select count(*) from mine")).scalar() == 1
    engine.dispose()
    print(backend, db_url, tables)
    assert db_url not in SEEN[backend]
    if backend == "postgres":
        server: PostgresServer = request.getfixturevalue("pg_server")
        names = {r[0] for r in server.admin().execute("select datname from pg_database")}
        for old in SEEN["postgres"]:
            assert old.rsplit("/", 1)[1] not in names, "previous test db not dropped"
        assert db_url.rsplit("/", 1)[1] in names
    SEEN[backend].append(db_url)


def test_time_creation(pg_server: PostgresServer, pg_template: str) -> None:
    import uuid
    ts = []
    for _ in range(30):
        name = f"pdpp_test_{uuid.uuid4().hex}"
        t = time.perf_counter()
        pg_server.create_database(name, template=pg_template)
        ts.append(time.perf_counter() - t)
        t2 = time.perf_counter()
        pg_server.drop_database(name)
        TIMES.append(time.perf_counter() - t2)
    ts.sort(); TIMES.sort()
    print(f"\nsource={pg_server.source} create median {ts[15]*1000:.1f} ms p90 {ts[27]*1000:.1f}; drop median {TIMES[15]*1000:.1f} ms")


def test_store_fronts(store: Any) -> None:
    print(type(store).__name__)
