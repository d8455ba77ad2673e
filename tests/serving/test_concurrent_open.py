"""Safe migrations (issue 10, item 5): processes opening one fresh database at once all succeed,
and agree on everything the first open creates; `migrate=False` refuses a database that is not
migrated; `pdpp-store migrate` migrates it.

Each round creates a fresh, empty database (a new SQLite file, a new Postgres database from
`template0`) and four processes (two on each front) open it at the same moment (a barrier).
"""

from __future__ import annotations

import multiprocessing
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _postgres import PostgresServer
from _serving import open_in_rounds
from click.testing import CliRunner

from pdpp_store import AsyncStore, Store, StoreError
from pdpp_store.cli import cli

PROCESSES = 4
ROUNDS = 10  # 40 opens per database


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    """`ROUNDS` URLs of fresh, empty databases."""
    if request.param == "sqlite":
        yield [f"sqlite:///{tmp_path / f'fresh-{number}.db'}" for number in range(ROUNDS)]
        return
    server: PostgresServer = request.getfixturevalue("pg_server")
    names = [f"pdpp_fresh_{uuid.uuid4().hex}" for _ in range(ROUNDS)]
    urls = [server.create_database(name) for name in names]
    try:
        yield urls
    finally:
        for name in names:
            server.drop_database(name)


def test_processes_opening_one_fresh_database_at_once_all_succeed(fresh_urls: list[str]) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(
            target=open_in_rounds,
            args=(number, fresh_urls, barrier, results, "sync" if number % 2 else "async"),
        )
        for number in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=120) for _ in range(PROCESSES * ROUNDS)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    outcomes = Counter(outcome for _, _, outcome, _ in reports)
    print(f"concurrent opens: {dict(outcomes)} of {len(reports)}")
    failures = [report for report in reports if report[2] != "ok"]
    assert not failures
    assert outcomes["ok"] == PROCESSES * ROUNDS
    # Every opener of one database ended up with the same, single, first cursor key.
    for number in range(ROUNDS):
        keys = {detail for _, round_, _, detail in reports if round_ == number}
        assert len(keys) == 1, keys
    for url in fresh_urls:
        with Store.open(url, migrate=False) as store:
            assert [
                key.key_id for key in (store._ctx.codec.active, *store._ctx.codec.previous)
            ] == [1]


def test_migrate_false_refuses_an_unmigrated_database_and_the_cli_migrates_it(
    fresh_urls: list[str],
) -> None:
    url = fresh_urls[0]
    with pytest.raises(StoreError) as caught:
        Store.open(url, migrate=False)
    error: Any = caught.value
    assert error.code == "storage_unavailable"
    assert "pdpp-store migrate" in error.message
    assert error.details["schema_revision"] is None

    import asyncio

    with pytest.raises(StoreError) as caught:
        asyncio.run(AsyncStore.open(url, migrate=False))
    assert caught.value.code == "storage_unavailable"

    result = CliRunner().invoke(cli, ["--db", url, "migrate"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    Store.open(url, migrate=False).close()
    # Migrating a database already at head does nothing, and says so.
    again = CliRunner().invoke(cli, ["--db", url, "migrate"], catch_exceptions=False)
    assert again.exit_code == 0
