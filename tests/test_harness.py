"""The test harness itself: the Postgres sources of `_postgres` and the async front of `_fronts`."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from _fronts import BlockingAsyncStore
from _postgres import (
    ENV_SOURCE,
    ENV_URL,
    PostgresServer,
    Unavailable,
    _reap_orphaned_clusters,
    find_pg_bindir,
    find_server,
    from_initdb,
    from_local,
    unavailable,
    wait_until_down,
)


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_throwaway_initdb_cluster_starts_serves_and_stops() -> None:
    # Source (d) on its own, even where a server already listens on 5432.
    bindir = find_pg_bindir()
    if bindir is None:
        unavailable("no initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin")
    server = from_initdb(bindir)
    try:
        assert server.source == "initdb"
        with psycopg.connect(server.conninfo(), connect_timeout=5) as conn:
            assert conn.execute("select 1").fetchone() == (1,)
            row = conn.execute("show data_directory").fetchone()
            assert row is not None
            data_dir = Path(row[0])
            backend_pid = conn.info.backend_pid
            if Path("/proc").is_dir():
                # Postgres refuses to run as root; as root, the harness runs it as `nobody`.
                assert _uid_of(backend_pid) != 0
        assert data_dir.is_dir()
    finally:
        server.stop()
    assert wait_until_down(server)
    assert not data_dir.exists()
    server.stop()  # idempotent


def test_clusters_of_killed_test_runs_are_reaped() -> None:
    if find_pg_bindir() is None:
        unavailable("no initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin")
    starter = (
        "import _postgres, time\n"
        "server = _postgres.from_initdb()\n"
        "print(server.url, server._stop.__self__.root, flush=True)\n"
        "time.sleep(120)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", starter],
        cwd=Path(__file__).parent,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        url, root = child.stdout.readline().split()
    finally:
        child.kill()  # SIGKILL: no teardown, no atexit
        child.wait()
    orphan = PostgresServer(url, "initdb")
    assert Path(root).is_dir()
    assert not wait_until_down(orphan, timeout_s=0.5)  # still serving
    _reap_orphaned_clusters()
    assert wait_until_down(orphan)
    assert not Path(root).exists()


def test_a_refused_connection_falls_through_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(Unavailable, match="does not answer"):
        from_local(port=_closed_port())
    assert time.monotonic() - started < 1.5


def test_an_explicit_url_is_final(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SOURCE, raising=False)
    monkeypatch.setenv(ENV_URL, f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/x")
    with pytest.raises(Unavailable, match=ENV_URL):
        find_server()


def test_an_unknown_source_name_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_SOURCE, "nowhere")
    with pytest.raises(ValueError, match="expected one of env, local, docker, initdb"):
        find_server()


def test_a_list_of_sources_is_tried_in_its_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first listed source that works is used: here the explicit URL answers nothing, so
    the throwaway cluster listed after it serves. A name not a source is an error."""
    if find_pg_bindir() is None:
        unavailable("no initdb/pg_ctl on PATH or under /usr/lib/postgresql/*/bin")
    monkeypatch.setenv(ENV_URL, f"postgresql+psycopg://postgres@127.0.0.1:{_closed_port()}/x")
    monkeypatch.setenv(ENV_SOURCE, "env, initdb")
    found = find_server()
    try:
        assert found.source == "initdb"
    finally:
        found.stop()
    monkeypatch.setenv(ENV_SOURCE, "initdb,nowhere")
    with pytest.raises(ValueError, match="'nowhere'"):
        find_server()


@pytest.mark.postgres
def test_an_explicit_url_comes_first(
    monkeypatch: pytest.MonkeyPatch, pg_server: PostgresServer
) -> None:
    monkeypatch.delenv(ENV_SOURCE, raising=False)
    monkeypatch.setenv(ENV_URL, pg_server.url)
    found = find_server()
    try:
        assert (found.source, found.url) == ("env", pg_server.url)
    finally:
        found.stop()


def test_database_urls_keep_the_server() -> None:
    server = PostgresServer("postgresql+psycopg://u:p%40w@h:5433/postgres", "env")
    assert server.database_url("x") == "postgresql+psycopg://u:p%40w@h:5433/x"
    assert server.conninfo() == "postgresql://u:p%40w@h:5433/postgres"


@pytest.mark.parametrize("ci", ["true", ""])
def test_missing_postgres_skips_except_under_ci(monkeypatch: pytest.MonkeyPatch, ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    expected = pytest.fail.Exception if ci else pytest.skip.Exception
    with pytest.raises(expected, match="nothing here"):
        unavailable("nothing here")


class _FakeAsyncStore:
    """Stands in for `AsyncStore`: coroutines, a plain attribute, an async iterator."""

    name = "fake"

    def __init__(self) -> None:
        self.closed = 0

    async def add(self, a: int, *, b: int = 0) -> int:
        return a + b

    async def fail(self) -> None:
        raise LookupError("from the coroutine")

    def sync_helper(self) -> str:
        return "plain"

    async def _items(self) -> AsyncIterator[int]:
        for item in (1, 2, 3):
            yield item

    def stream(self) -> AsyncIterator[int]:
        return self._items()

    async def close(self) -> None:
        self.closed += 1


def test_blocking_async_store_forwards_calls() -> None:
    import asyncio

    fake = _FakeAsyncStore()
    loop = asyncio.new_event_loop()
    front = BlockingAsyncStore(fake, loop)  # type: ignore[arg-type]
    with front:
        assert front.add(1, b=2) == 3
        assert front.name == "fake"
        assert front.sync_helper() == "plain"
        assert list(front.stream()) == [1, 2, 3]
        with pytest.raises(LookupError, match="from the coroutine"):
            front.fail()
        with pytest.raises(AttributeError):
            front.missing()
    assert (fake.closed, loop.is_closed()) == (1, True)
    front.close()
    assert fake.closed == 1
