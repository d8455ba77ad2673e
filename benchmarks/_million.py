"""What the hand-run dataset benchmarks (`aggregate`, `changes`, `query_records`) share: where a
dataset is cached, how it is opened, filled and measured, and how a case is timed.

Rules:
1. A dataset `<name>` of N records at a version is a SQLite file
   `.benchmarks-data/pdpp-<name>-<N>-<version>.sqlite` (the directory `PDPP_BENCH_DATA` names,
   if set: a smoke run's temporary one), or a Postgres database `pdpp_<name>_<N>_<version>` on
   the local server (the tests' one, `PDPP_TEST_POSTGRES_URL`, if set), created when missing.
2. A run opens the dataset's store and a plain engine on the same database, fills the dataset
   to the size asked (the benchmark's `build`, which keeps what an earlier run left), then
   measures it (`measure`); both are closed whatever happens.
   With `PDPP_BENCH_DROP` set (a smoke run), a Postgres dataset is dropped after it is
   measured, so a run that only checks leaves no database behind.
3. A case's time is the median of its rounds in milliseconds; warming up is the caller's.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from pdpp_store import Store
from pdpp_store._runtime import sync_url

ADMIN_URL = os.environ.get(
    "PDPP_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
).replace("postgresql://", "postgresql+psycopg://", 1)
"""The server's maintenance database: the tests' server when `PDPP_TEST_POSTGRES_URL` names one."""


def dataset_url(backend: str, name: str, records: int, version: str) -> str:
    """The URL of the cached dataset (Rule 1); a missing Postgres database is created."""
    if backend == "sqlite":
        data = Path(os.environ.get("PDPP_BENCH_DATA") or ".benchmarks-data")
        data.mkdir(parents=True, exist_ok=True)
        return f"sqlite:///{data / f'pdpp-{name}-{records}-{version}.sqlite'}"
    database = f"pdpp_{name}_{records}_{version}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            found = conn.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": database}
            ).first()
            if not found:
                conn.execute(text(f'CREATE DATABASE "{database}"'))
    finally:
        admin.dispose()
    return f"{ADMIN_URL.rsplit('/', 1)[0]}/{database}"


def build_and_measure(
    url: str,
    size: int,
    build: Callable[[Store, Engine, int], None],
    measure: Callable[[Store, Engine, int, int, str], None],
    *,
    rounds: int,
    backend: str,
) -> None:
    """Fill the dataset at `url` to `size` records, then measure it (Rule 2)."""
    store = Store.open(url)
    engine = create_engine(sync_url(url))
    try:
        build(store, engine, size)
        measure(store, engine, size, rounds, backend)
    finally:
        engine.dispose()
        store.close()
        if os.environ.get("PDPP_BENCH_DROP") and backend == "postgres":
            _drop(url.rpartition("/")[2])


def _drop(database: str) -> None:
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
    finally:
        admin.dispose()


def table_count(engine: Engine, table: str) -> int:
    """The rows of `table`, 0 when it is not there yet."""
    with engine.connect() as conn:
        try:
            return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
        except SQLAlchemyError:  # the table is not there yet
            return 0


def median_ms(run: Callable[[], object], rounds: int) -> float:
    """The median of `rounds` timed calls of `run`, in milliseconds (Rule 3)."""
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)
