"""What the hand-run million-record benchmarks (`aggregate`, `query_records`) share: where a
dataset is cached and how a case is timed.

Rules:
1. A dataset `<name>` of N records at a version is a SQLite file
   `.benchmarks-data/pdpp-<name>-<N>-<version>.sqlite`, or a Postgres database
   `pdpp_<name>_<N>_<version>` on the local server, created when missing.
2. A case's time is the median of its rounds in milliseconds; warming up is the caller's.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import SQLAlchemyError

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def dataset_url(backend: str, name: str, records: int, version: str) -> str:
    """The URL of the cached dataset (Rule 1); a missing Postgres database is created."""
    if backend == "sqlite":
        data = Path(".benchmarks-data")
        data.mkdir(exist_ok=True)
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
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"


def table_count(engine: Engine, table: str) -> int:
    """The rows of `table`, 0 when it is not there yet."""
    with engine.connect() as conn:
        try:
            return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
        except SQLAlchemyError:  # the table is not there yet
            return 0


def median_ms(run: Callable[[], object], rounds: int) -> float:
    """The median of `rounds` timed calls of `run`, in milliseconds (Rule 2)."""
    times = []
    for _ in range(rounds):
        began = time.perf_counter()
        run()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)
