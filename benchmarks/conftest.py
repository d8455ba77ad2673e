"""Fixtures of the benchmarks: one cached benchmark database per backend, and scratch ones.

    bench       the backend's `BenchDatabase` (``sqlite``, ``postgres``), holding every dataset of
                the size matrix (`_measure.SIZES`) in both text kinds; built on first use and
                reused across runs (see `_bench`)
    ingest_db   a fresh database per backend for the ingestion benchmarks, removed afterwards

Postgres is found as the tests find it (`tests/_postgres.py`): under ``CI=true`` a missing
server fails, otherwise it skips. ``-m "not postgres"`` runs SQLite alone.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _postgres import PostgresServer, Unavailable, find_server, unavailable
from pytest_benchmark.utils import get_commit_info

from ._bench import (
    BenchDatabase,
    dataset_version,
    open_postgres,
    open_sqlite,
    postgres_database,
    sqlite_database,
)
from ._measure import DATASETS

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "postgres: runs against a Postgres server")
    config.stash[_COMMIT_AT_START] = get_commit_info()  # type: ignore[no-untyped-call]


_COMMIT_AT_START = pytest.StashKey[dict[str, Any]]()
"""The checkout's commit when the run began: pytest-benchmark asks at the end, and a run of
half an hour may end on a later commit than the code it measured."""


def pytest_benchmark_generate_commit_info(config: pytest.Config) -> dict[str, Any]:
    return config.stash[_COMMIT_AT_START]


def pytest_benchmark_update_machine_info(
    config: pytest.Config, machine_info: dict[str, Any]
) -> None:
    """Record how busy the machine was (the 15-minute figure spans most of a full run): the
    report prints it, since other processes on the CPUs inflate every latency, round trips most."""
    machine_info["load_average"] = os.getloadavg()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    try:
        server = find_server()
    except Unavailable as why:
        unavailable(str(why))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session", params=BACKENDS)
def bench(request: pytest.FixtureRequest) -> Iterator[BenchDatabase]:
    version = dataset_version()
    if request.param == "sqlite":
        database = open_sqlite(version)
    else:
        database = open_postgres(request.getfixturevalue("pg_server"), version)
    try:
        database.ensure(DATASETS)
        yield database
    finally:
        database.close()


@pytest.fixture(scope="session", params=BACKENDS)
def ingest_db(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BenchDatabase]:
    server: Any = None
    if request.param == "sqlite":
        path: Path = tmp_path_factory.mktemp("ingest") / "ingest.sqlite"
        database = sqlite_database(path)
    else:
        server = request.getfixturevalue("pg_server")
        name = f"pdpp_bench_ingest_{uuid.uuid4().hex[:12]}"
        server.create_database(name)
        database = postgres_database(server, name)
    try:
        yield database
    finally:
        database.close()
        if server is not None:
            server.drop_database(name)
