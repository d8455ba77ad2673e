"""Every read is one statement, counted by the boundary audit, on both databases and both fronts
(issue 14: the read path runs below SQLAlchemy, so this is what keeps it lean), and the read
connections a store keeps never leak across errors or cancellations.

Counted once the store's catalogue cache knows the stream (the first read of a stream asks the
catalogue once per `DECLARED_TTL_S`). Where a read takes more than one statement, it is by
design, and asserted exactly:
- a match window for the n-th occurrence: one statement per occurrence (each hop is bound to the
  digest the first one saw);
- blob metadata: two (the grant's reach on record tables, then the blob on blob tables, which
  are distributed differently: docs/scaling.md); a blob range: three (that, then the bytes);
- a search page (several by design, issue 13's: `_ops.search`): the catalogue and (unless cached)
  the manifests it names, the word index's ranking (`SEARCH_WORD_STATEMENTS`),
  `SEARCH_SCAN_STATEMENTS` for the first phase's candidates (the next
  keys, then the terms checked on them), and `SEARCH_EVIDENCE_STATEMENTS` for the evidence of the
  whole page: as many for two hits as for one, never one per record searched or per hit shown
  (short fields; a field longer than the page-wide scan may take its own match-window statement).

And the read connections a store keeps: a database that drops its connections fails at most one
read; a read that ends after `close` keeps nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import sqlite3
import threading
from collections.abc import Callable
from contextlib import suppress
from typing import Any, NamedTuple

import pytest
from _data import MAILBOX, attachment, body, grant, manifest, owner, ref_id, setup_mailbox
from _fronts import StoreFront
from _postgres import PostgresServer
from audit import BoundaryAudit
from sqlalchemy import (
    ColumnElement,
    Engine,
    bindparam,
    event,
    literal,
    literal_column,
    select,
    text,
)
from sqlalchemy.engine import make_url
from sqlalchemy.pool import ConnectionPoolEntry, Pool, QueuePool

from pdpp_store import AsyncStore, FieldWindow, NotFound, Store, StoreError
from pdpp_store._core.identity import FieldWindowRef, RecordRef
from pdpp_store._runtime import IN_PROCESS_READERS, READER_SLOTS, RETRY_AFTER_S, observing
from pdpp_store._runtime import executor as _runtime
from pdpp_store._sql.requests import Execute, Op

BODY = ("an invoice for the quarter, " * 200) + "closing words"
REF = ref_id("e1")
SEARCH_SCAN_STATEMENTS = 2
SEARCH_EVIDENCE_STATEMENTS = 2
SEARCH_RANK_STATEMENTS = 3
"""Relevance order on a small result: the hits' order values (ties), their occurrence counts
(the score's bounds) and one batch of scored texts; a larger result scores more batches, each
twice the last (`_ops/search._ranked`)."""
SEARCH_CARD_STATEMENTS = 1
"""The page's record cards, all hits at once (`_ops/cards.page_cards`)."""
SEARCH_WORD_STATEMENTS = 1
"""A query of word terms in relevance order asks the word index first (`_ops/search._word_ranked`);
with fewer positive scores than the page wants it hands over at once (zero-score hits may
belong to the page), before re-checking or scoring any record."""
SEARCH_STATEMENTS = (
    2
    + SEARCH_WORD_STATEMENTS
    + SEARCH_SCAN_STATEMENTS
    + SEARCH_RANK_STATEMENTS
    + SEARCH_EVIDENCE_STATEMENTS
    + SEARCH_CARD_STATEMENTS
)
BOTH = grant(
    {"name": "message_bodies", "instance_ids": [MAILBOX]},
    {"name": "attachments", "instance_ids": [MAILBOX]},
)


def _loaded(store: StoreFront) -> str:
    setup_mailbox(store)
    blob = store.put_blob(b"%PDF-1.7 " * 100, "application/pdf")
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])
    store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
    store.read_field_window(BOTH, REF, "body_text", limit_chars=10)  # the catalogue, cached
    store.read_record(BOTH, ref_id("a1", stream="attachments"))
    return blob.blob_id


def _statements(store: StoreFront, read: Callable[[], object]) -> list[str]:
    with BoundaryAudit(store.engine) as audit:
        read()
    return audit.statements


def test_every_read_is_one_statement(store: StoreFront) -> None:
    blob_id = _loaded(store)
    grant = BOTH
    first = store.read_field_window(grant, REF, "body_text", limit_chars=100)
    assert first.next_cursor is not None
    record = RecordRef(MAILBOX, "message_bodies", "e1")
    one: dict[str, Callable[[], object]] = {
        "offset": lambda: store.read_field_window(
            grant, REF, "body_text", offset_chars=500, limit_chars=100
        ),
        "cursor": lambda: store.read_field_window(
            grant, REF, "body_text", cursor=first.next_cursor
        ),
        "q": lambda: store.read_field_window(grant, REF, "body_text", q="CLOSING", before_chars=5),
        "record": lambda: store.read_record(grant, REF),
        "record, chosen fields": lambda: store.read_record(grant, REF, fields=["body_text", "id"]),
        "describe_field": lambda: store.describe_field(grant, REF, "body_text"),
        "resource: record": lambda: store.read_resource(grant, record.uri),
        "resource: window": lambda: store.read_resource(
            grant, FieldWindowRef(record, "body_text", 10, 20).uri
        ),
    }
    for name, read in one.items():
        assert len(_statements(store, read)) == 1, name
    hops = _statements(
        store, lambda: store.read_field_window(grant, REF, "body_text", q="invoice", occurrence=3)
    )
    assert len(hops) == 3
    assert len(_statements(store, lambda: store.blob_info(grant, blob_id))) == 2
    assert len(_statements(store, lambda: store.read_blob_range(grant, blob_id, 0, 10))) == 3
    pages = []
    searched = _statements(store, lambda: pages.append(store.search(grant, "invoice")))
    assert len(pages[0].hits) == 1
    assert len(searched) <= SEARCH_STATEMENTS
    store.upsert_records(MAILBOX, "message_bodies", [body("e2", "another invoice")])
    searched = _statements(store, lambda: pages.append(store.search(grant, "invoice")))
    assert len(pages[1].hits) == 2
    assert len(searched) <= SEARCH_STATEMENTS


def test_a_refused_read_sends_at_most_its_one_statement(store: StoreFront) -> None:
    _loaded(store)
    grant = owner()
    missing = ref_id("nope")
    with pytest.raises(NotFound):
        store.read_field_window(grant, missing, "body_text", limit_chars=10)
    assert len(_statements(store, lambda: _refused(store, missing))) == 1


def _refused(store: StoreFront, ref: str) -> None:
    with pytest.raises(NotFound):
        store.read_field_window(owner(), ref, "body_text", limit_chars=10)


# ---------------------------------------------------------------- kept connections


def _checked_out(pool: Pool) -> int:
    assert isinstance(pool, QueuePool)
    return pool.checkedout()


def test_sync_reads_keep_no_connection_past_their_bound(db_url: str) -> None:
    with Store.open(db_url) as store:
        _loaded(store)
        for number in range(50):
            _refused(store, ref_id(f"missing{number}"))
            store.read_field_window(owner(), REF, "body_text", limit_chars=10)
        with pytest.raises(StoreError):
            store.read_field_window(owner(), REF, "body_text", cursor="not-a-cursor")
        kept = store._reader.kept()  # the runtime's own count
        assert _checked_out(store.engine.pool) == kept <= 2


async def _cancel_reads(url: str) -> tuple[int, int, str]:
    store = await AsyncStore.open(url)
    try:
        gmail = manifest("gmail")
        await store.register_manifest(gmail)
        await store.add_connection(MAILBOX, gmail["connector_id"])
        await store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])

        async def read() -> object:
            return await store.read_field_window(owner(), REF, "body_text", q="closing")

        for round_number in range(40):
            tasks = [asyncio.ensure_future(read()) for _ in range(READER_SLOTS + 6)]
            await asyncio.sleep(0.0005 * (round_number % 7))
            for task in tasks[::2]:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for _ in range(3):  # missing records: a domain error keeps the connection
                with suppress(NotFound):
                    await store.read_field_window(owner(), ref_id("gone"), "body_text")
        text = (await read()).text  # type: ignore[attr-defined]
        kept = store._readers.kept()  # the runtime's own count
        return _checked_out(store.engine.pool), kept, text
    finally:
        await store.close()


def test_cancelled_and_failed_async_reads_leak_no_connection(db_url: str) -> None:
    checked_out, kept, text = asyncio.run(_cancel_reads(db_url))
    assert "closing" in text
    assert checked_out == kept <= READER_SLOTS


class _Holding:
    """Counts the read statements of one store (`observing`, the audit's seam) and, once asked
    (`hold`), holds the reads at their statement until `release`: the read keeps its slot and its
    connection meanwhile. How it holds them is the database's (the subclasses)."""

    def __init__(self) -> None:
        self.engine: object = None
        self.arrived = 0
        self.all_held = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._holding: int | None = None
        self._counting = threading.Lock()

    def executing(self, engine: object, statement: str, parameters: object) -> None:
        if engine is not self.engine or self._holding is None:
            return
        with self._counting:
            self.arrived += 1
            everyone = self.arrived >= self._holding
        if everyone:
            self._loop.call_soon_threadsafe(self.all_held.set)
        self._arrived()

    def fetched(self, engine: object, statement: str, rows: object) -> None:
        pass

    def _arrived(self) -> None:
        """A read reached its statement while held."""

    async def hold(self, reads: int) -> None:
        """Hold reads from now on; `all_held` is set once `reads` of them are held."""
        self._holding = reads

    def release(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        self.release()


class _Blocking(_Holding):
    """SQLite: the observer blocks the read's thread (a SQLite read that may scan, as the held
    ones here, runs in its connection's thread, never on the event loop's: a read that does
    would fail this test, not hang it)."""

    def __init__(self) -> None:
        super().__init__()
        self.on_the_loop = 0
        self._opened = threading.Event()

    def _arrived(self) -> None:
        if threading.get_ident() == self._loop_thread:
            self.on_the_loop += 1
            return
        assert self._opened.wait(30), "held reads were never released"

    async def hold(self, reads: int) -> None:
        self._loop_thread = threading.get_ident()
        await super().hold(reads)

    def release(self) -> None:
        self._opened.set()


class _Stalled(_Holding):
    """Postgres: the store talks to the database through a TCP relay whose answers are held
    back while holding (as a stalled network would): the reads wait on their sockets."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self._upstream = make_url(url)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def relayed(self) -> str:
        """The URL of the database through the relay."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return self._upstream.set(host="127.0.0.1", port=port).render_as_string(False)

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        server, to_server = await asyncio.open_connection(
            self._upstream.host, self._upstream.port or 5432
        )
        for pipe in (self._pipe(client, to_server, False), self._pipe(server, to_client, True)):
            task = asyncio.ensure_future(pipe)
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def _pipe(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, answers: bool
    ) -> None:
        try:
            while data := await source.read(65536):
                if answers:
                    await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        except OSError:
            pass
        finally:
            sink.close()

    async def hold(self, reads: int) -> None:
        self._flowing.clear()
        await super().hold(reads)

    def release(self) -> None:
        self._flowing.set()

    async def close(self) -> None:
        self.release()
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


BUSY_TIMEOUT_S = 0.2


async def _read_with_every_slot_held(url: str) -> tuple[StoreError, float, int, int]:
    in_process = make_url(url).get_backend_name() == "sqlite"
    holding: _Holding = _Blocking() if in_process else _Stalled(url)
    if isinstance(holding, _Stalled):
        url = await holding.relayed()
    store = await AsyncStore.open(url, busy_timeout_s=BUSY_TIMEOUT_S)
    holding.engine = store.engine.sync_engine
    try:
        with observing(holding):
            gmail = manifest("gmail")
            await store.register_manifest(gmail)
            await store.add_connection(MAILBOX, gmail["connector_id"])
            await store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])
            await _matching(store)  # the catalogue, cached: one statement per read
            slots = IN_PROCESS_READERS if in_process else READER_SLOTS
            # A connection per slot, opened now and kept: a held read waits at its statement
            # only (through the stalled relay, opening a connection would wait too). Reads that
            # may scan: on SQLite, bounded ones run on the event loop and take no slot.
            await asyncio.gather(*(_matching(store) for _ in range(slots)))
            assert store._readers.kept() == slots
            await holding.hold(slots)
            holders = [asyncio.ensure_future(_matching(store)) for _ in range(slots)]
            await asyncio.wait_for(holding.all_held.wait(), 30)
            held = _checked_out(store.engine.pool)
            started = asyncio.get_running_loop().time()
            with pytest.raises(StoreError) as refused:
                await asyncio.wait_for(_matching(store), 30)
            waited = asyncio.get_running_loop().time() - started
            assert holding.arrived == slots  # the refused read never reached the database
            assert _checked_out(store.engine.pool) == held == slots  # nor took a connection
            if isinstance(holding, _Blocking):  # a bounded read needs no slot: it answers
                assert (await store.read_record(BOTH, REF)).ref.record_id == "e1"
                assert holding.on_the_loop == 1  # on the event loop
            holding.release()
            answers = await asyncio.gather(*holders)
            assert all("closing" in answer.text for answer in answers)
            if isinstance(holding, _Blocking):
                assert holding.on_the_loop == 1  # reads that may scan ran off the event loop
            # Every slot is free again: as many reads at once as there are slots, then one more.
            await asyncio.gather(*(_matching(store) for _ in range(slots)))
            await _matching(store)
        return refused.value, waited, _checked_out(store.engine.pool), store._readers.kept()
    finally:
        await holding.close()
        await store.close()


async def _matching(store: AsyncStore) -> FieldWindow:
    """A read that may scan (a match): never run on the event loop, on SQLite either."""
    return await store.read_field_window(BOTH, REF, "body_text", q="closing")


def test_an_async_read_finding_every_slot_in_use_answers_storage_busy(db_url: str) -> None:
    error, waited, checked_out, kept = asyncio.run(_read_with_every_slot_held(db_url))
    assert error.code == "storage_busy"
    assert error.details == {"retryable": True, "retry_after_s": RETRY_AFTER_S}
    assert BUSY_TIMEOUT_S * 0.9 <= waited < 30  # waited for a slot, for about the timeout
    assert checked_out == kept <= READER_SLOTS


# ---------------------------------------------------------------- dropped connections, close


WARM_CONNECTIONS = 3


def _terminate_backends(server: PostgresServer, url: str) -> int:
    """End every backend of the database at `url` from another connection (as a restart or an
    operator's `pg_terminate_backend` would), waiting until each is gone."""
    database = make_url(url).database
    row = (
        server.admin()
        .execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            (database,),
        )
        .fetchone()
    )
    assert row is not None
    return int(row[0])


def _outcome(read: Callable[[], object]) -> str:
    try:
        read()
    except StoreError as error:
        return error.code
    return "ok"


def _at_most_the_first_fails(outcomes: list[str]) -> None:
    assert outcomes[0] in {"ok", "storage_unavailable"}, outcomes
    assert outcomes[1:] == ["ok"] * (len(outcomes) - 1), outcomes


@pytest.mark.postgres
def test_sync_reads_recover_at_once_when_the_database_drops_connections(
    pg_server: PostgresServer, pg_db_url: str
) -> None:
    """Every connection of the store, kept by its reader or idle in the pool, is dropped by the
    database: the first read may fail, the next ones find fresh connections."""
    with Store.open(pg_db_url) as store:
        _loaded(store)
        pooled = [store.engine.connect() for _ in range(WARM_CONNECTIONS)]
        for conn in pooled:
            conn.exec_driver_sql("SELECT 1")
            conn.close()
        store.read_record(BOTH, REF)  # one more, kept by the reader
        assert _terminate_backends(pg_server, pg_db_url) >= WARM_CONNECTIONS + 1
        outcomes = [_outcome(lambda: store.read_record(BOTH, REF)) for _ in range(6)]
        _at_most_the_first_fails(outcomes)
        assert _checked_out(store.engine.pool) == store._reader.kept()


async def _reads_after_a_drop(server: PostgresServer, url: str) -> tuple[list[str], int, int]:
    store = await AsyncStore.open(url)
    try:
        gmail = manifest("gmail")
        await store.register_manifest(gmail)
        await store.add_connection(MAILBOX, gmail["connector_id"])
        await store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])
        pooled = [store.engine.connect() for _ in range(WARM_CONNECTIONS)]
        for conn in pooled:
            await conn.start()
            await conn.exec_driver_sql("SELECT 1")
        for conn in pooled:
            await conn.close()
        # Reads at once: each holds a connection of its own, all kept afterwards.
        await asyncio.gather(*(store.read_record(BOTH, REF) for _ in range(4)))
        kept_before = store._readers.kept()
        terminated = _terminate_backends(server, url)
        assert terminated >= WARM_CONNECTIONS + 1
        outcomes = []
        for _ in range(6):
            try:
                await store.read_record(BOTH, REF)
                outcomes.append("ok")
            except StoreError as error:
                outcomes.append(error.code)
        assert _checked_out(store.engine.pool) == store._readers.kept()
        return outcomes, kept_before, terminated
    finally:
        await store.close()


@pytest.mark.postgres
def test_async_reads_recover_at_once_when_the_database_drops_connections(
    pg_server: PostgresServer, pg_db_url: str
) -> None:
    outcomes, kept_before, _ = asyncio.run(_reads_after_a_drop(pg_server, pg_db_url))
    assert kept_before >= 1
    _at_most_the_first_fails(outcomes)


@pytest.mark.postgres
def test_a_sync_write_that_meets_a_drop_lets_go_of_the_kept_read_connections(
    pg_server: PostgresServer, pg_db_url: str
) -> None:
    """A write, run on SQLAlchemy, is the first to meet the dropped connections (its pooled one):
    the reader's kept connection is let go as well, so no read fails afterwards."""
    with Store.open(pg_db_url) as store:
        _loaded(store)
        assert store._reader.kept() >= 1  # a read's connection, kept by the reader
        store.upsert_records(MAILBOX, "message_bodies", [body("e2", "y")])  # a write's, pooled
        assert _terminate_backends(pg_server, pg_db_url) >= 2
        write = _outcome(lambda: store.upsert_records(MAILBOX, "message_bodies", [body("e3", "x")]))
        assert write == "storage_unavailable"  # the write met the drop first
        outcomes = [_outcome(lambda: store.read_record(BOTH, REF)) for _ in range(4)]
        assert outcomes == ["ok"] * 4
        assert _checked_out(store.engine.pool) == store._reader.kept()


async def _reads_after_a_write_meets_a_drop(
    server: PostgresServer, url: str
) -> tuple[int, str, list[str], int, int]:
    store = await AsyncStore.open(url)
    try:
        gmail = manifest("gmail")
        await store.register_manifest(gmail)
        await store.add_connection(MAILBOX, gmail["connector_id"])
        await store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])
        await asyncio.gather(*(store.read_record(BOTH, REF) for _ in range(3)))
        kept_before = store._readers.kept()
        await store.upsert_records(MAILBOX, "message_bodies", [body("e2", "y")])  # one pooled
        _terminate_backends(server, url)
        try:
            await store.upsert_records(MAILBOX, "message_bodies", [body("e3", "x")])
            write = "ok"
        except StoreError as error:
            write = error.code
        outcomes = []
        for _ in range(4):
            try:
                await store.read_record(BOTH, REF)
                outcomes.append("ok")
            except StoreError as error:
                outcomes.append(error.code)
        return kept_before, write, outcomes, _checked_out(store.engine.pool), store._readers.kept()
    finally:
        await store.close()


@pytest.mark.postgres
def test_an_async_write_that_meets_a_drop_lets_go_of_the_kept_read_connections(
    pg_server: PostgresServer, pg_db_url: str
) -> None:
    kept_before, write, outcomes, checked_out, kept = asyncio.run(
        _reads_after_a_write_meets_a_drop(pg_server, pg_db_url)
    )
    assert kept_before >= 1
    assert write == "storage_unavailable"  # the write met the drop first
    assert outcomes == ["ok"] * 4
    assert checked_out == kept


class _CloseDuringRead:
    """An observer that closes the store while the store's first read is under way (its
    statement is about to be sent), as another thread or task may."""

    def __init__(self, engine: object, close: Callable[[], object]) -> None:
        self._engine = engine
        self._close = close
        self.closed_during = 0

    def executing(self, engine: object, statement: str, parameters: object) -> None:
        if engine is self._engine and not self.closed_during:
            self.closed_during += 1
            self._close()

    def fetched(self, engine: object, statement: str, rows: object) -> None:
        pass


class _Checkouts:
    """The pool entries of every connection checked out of `engine` from now on."""

    def __init__(self, engine: Engine) -> None:
        self.entries: list[ConnectionPoolEntry] = []
        event.listen(engine, "checkout", self._seen)

    def _seen(self, _dbapi: object, entry: ConnectionPoolEntry, _proxy: object) -> None:
        self.entries.append(entry)

    def still_open(self) -> int:
        """How many of them still hold a database connection (a closed one holds none)."""
        return sum(entry.dbapi_connection is not None for entry in self.entries)


def test_a_sync_read_ending_after_close_keeps_no_connection(db_url: str) -> None:
    with Store.open(db_url) as store:
        _loaded(store)
    store = Store.open(db_url)
    checkouts = _Checkouts(store.engine)
    closer = _CloseDuringRead(store.engine, store.close)
    with observing(closer):
        store.read_record(BOTH, REF)
    assert closer.closed_during == 1
    assert checkouts.entries
    assert store._reader.kept() == checkouts.still_open() == 0


async def _read_while_closing(url: str) -> tuple[int, int, int]:
    store = await AsyncStore.open(url)
    checkouts = _Checkouts(store.engine.sync_engine)
    closing: list[asyncio.Future[None]] = []
    loop = asyncio.get_running_loop()
    on_the_loop = threading.get_ident()

    async def begin_closing() -> None:
        closing.append(asyncio.ensure_future(store.close()))
        await asyncio.sleep(0)  # the close has begun: the readers are marked closed

    def close() -> None:
        """Observers run where the read runs: on the loop (Postgres), or in the connection's
        thread (SQLite, a read that may scan), which then waits until the close has begun."""
        if threading.get_ident() == on_the_loop:
            closing.append(asyncio.ensure_future(store.close()))
        else:
            asyncio.run_coroutine_threadsafe(begin_closing(), loop).result(30)

    closer = _CloseDuringRead(store.engine.sync_engine, close)
    with observing(closer):
        await _matching(store)
    await asyncio.gather(*closing)
    assert checkouts.entries
    return closer.closed_during, store._readers.kept(), checkouts.still_open()


def test_an_async_read_ending_after_close_keeps_no_connection(db_url: str) -> None:
    with Store.open(db_url) as store:
        _loaded(store)
    closed_during, kept, still_open = asyncio.run(_read_while_closing(db_url))
    assert closed_during == 1
    assert kept == still_open == 0


# ---------------------------------------------------------------- statements SQLAlchemy runs


def _mixed() -> Op[list[Any]]:
    """A read whose middle statement needs SQLAlchemy at every execution (an expanding
    parameter): the read path hands it back to SQLAlchemy and resumes the operation after it."""
    one: ColumnElement[int] = literal_column("1")
    first = yield Execute(select(literal(1).label("n")))
    middle = yield Execute(
        select(one.label("n")).where(one.in_(bindparam("ns", expanding=True))), {"ns": [1, 2]}
    )
    last = yield Execute(select(literal(3).label("n")))
    return [first, middle, last]


async def _mixed_async(url: str) -> tuple[list[Any], list[str]]:
    store = await AsyncStore.open(url)
    try:
        with BoundaryAudit(store.engine) as audit:
            answer = await store._readers.run(_mixed())
        return answer, audit.statements
    finally:
        await store.close()


def test_a_read_statement_that_needs_sqlalchemy_runs_there_mid_operation(db_url: str) -> None:
    expected = [[{"n": 1}], [{"n": 1}], [{"n": 3}]]
    with Store.open(db_url) as store, BoundaryAudit(store.engine) as audit:
        assert store._reader.run(_mixed()) == expected
    assert len(audit.statements) == 3  # each seen: two by the read path, one by SQLAlchemy
    answer, statements = asyncio.run(_mixed_async(db_url))
    assert answer == expected
    assert len(statements) == 3


# ---------------------------------------------------------------- cancelled reads, SQLite's thread
# An `AsyncStore` read on SQLite runs whole in its connection's thread
# (`_runtime.executor._Held`): when it is cancelled, the statement running there is interrupted,
# and no further one is sent.

SQLITE_INTERRUPT = 9  # sqlite3's result code of an interrupted statement


class _Endings:
    """How each run of a read in a SQLite connection's thread ended (the exception, or None):
    the function that runs it there (`_runtime._advance_on`) is wrapped for the test."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ended: list[BaseException | None] = []
        self.one_ended = asyncio.Event()
        loop = asyncio.get_running_loop()
        run = _runtime._advance_on

        def recorded(*args: Any) -> Any:
            try:
                result = run(*args)
            except BaseException as exc:
                self.ended.append(exc)
                raise
            else:
                self.ended.append(None)
                return result
            finally:
                loop.call_soon_threadsafe(self.one_ended.set)

        monkeypatch.setattr(_runtime, "_advance_on", recorded)


class _Discarding:
    """Set once the store begins discarding a connection (SQLAlchemy's pool `invalidate` event):
    a cancelled read's connection, after the read was told to stop (`_Held.interrupt`)."""

    def __init__(self, engine: Engine) -> None:
        self.begun = threading.Event()
        event.listen(engine, "invalidate", lambda *_: self.begun.set())

    def wait(self) -> bool:
        return self.begun.wait(30)


def _free_slots(readers: Any) -> int:
    """How many read slots of an `AsyncStore` are free."""
    free: int = readers._slots.free()
    return free


_SPIN = text(
    "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE spin(n))"
    " SELECT count(*) AS n FROM r"
)
SPIN_ROWS = 1000


def _spinning() -> Op[Any]:
    """A read of one statement that runs until `spin` (a function of the test) says stop."""
    return (yield Execute(_SPIN))


class _Aftermath(NamedTuple):
    """A store's state once a cancelled read has ended, and its next read's text."""

    checked_out: int
    kept: int
    free_slots: int
    next_text: str


async def _after_the_cancel(store: AsyncStore) -> _Aftermath:
    text = (await store.read_field_window(BOTH, REF, "body_text", q="closing")).text
    readers = store._readers
    return _Aftermath(_checked_out(store.engine.pool), readers.kept(), _free_slots(readers), text)


def _assert_recovered(after: _Aftermath) -> None:
    """No connection or slot was lost with the cancelled read, and the next read answers."""
    assert after.checked_out == after.kept <= IN_PROCESS_READERS
    assert after.free_slots == IN_PROCESS_READERS
    assert "closing" in after.next_text


async def _cancel_a_running_statement(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[BaseException | None], _Aftermath]:
    store = await AsyncStore.open(url)
    try:
        endings = _Endings(monkeypatch)
        discarding = _Discarding(store.engine.sync_engine)
        running = asyncio.Event()
        loop = asyncio.get_running_loop()

        def spin(n: int) -> bool:
            """Called for every row, in the connection's thread: the first call tells the test
            that the statement runs, and waits until the read is cancelled and its connection
            being discarded (the statement is still running: an interrupt now ends it)."""
            if n == 1:
                loop.call_soon_threadsafe(running.set)
                discarding.wait()
            return n < SPIN_ROWS

        await _matching(store)  # a connection kept by the reader threads, warm
        assert store._readers._idle
        for held in store._readers._idle:
            await held.driver.create_function("spin", 1, spin)
        endings.ended.clear()
        read = asyncio.ensure_future(store._readers.run(_spinning()))
        await asyncio.wait_for(running.wait(), 30)
        read.cancel()
        with pytest.raises(asyncio.CancelledError):
            await read
        await asyncio.wait_for(endings.one_ended.wait(), 30)
        return list(endings.ended), await _after_the_cancel(store)
    finally:
        await store.close()


def test_a_cancelled_sqlite_read_interrupts_its_running_statement(
    sqlite_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite-async only (Postgres reads run on the event loop, where psycopg cancels them)."""
    with Store.open(sqlite_db_url) as store:
        _loaded(store)
    ended, after = asyncio.run(_cancel_a_running_statement(sqlite_db_url, monkeypatch))
    assert len(ended) == 1
    assert isinstance(ended[0], sqlite3.OperationalError), ended  # not run to its end
    assert ended[0].sqlite_errorcode == SQLITE_INTERRUPT
    _assert_recovered(after)


class _CancelAfterFirstStatement:
    """An observer that, once armed, counts the statements a read sends and, when its first
    statement has answered, cancels the read and waits (in the connection's thread) until its
    connection is being discarded before letting the read go on."""

    def __init__(self, engine: Engine, discarding: _Discarding) -> None:
        self._engine = engine
        self._discarding = discarding
        self._loop = asyncio.get_running_loop()
        self.read: asyncio.Future[Any] | None = None
        self.sent = 0

    def executing(self, engine: object, statement: str, parameters: object) -> None:
        if engine is self._engine and self.read is not None:
            self.sent += 1

    def fetched(self, engine: object, statement: str, rows: object) -> None:
        if engine is self._engine and self.read is not None and self.sent == 1:
            self._loop.call_soon_threadsafe(self.read.cancel)
            assert self._discarding.wait(), "the cancelled read's connection was not discarded"


async def _cancel_between_statements(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[BaseException | None], _Aftermath]:
    store = await AsyncStore.open(url)
    try:
        endings = _Endings(monkeypatch)
        engine = store.engine.sync_engine
        cancelling = _CancelAfterFirstStatement(engine, _Discarding(engine))
        await store.read_field_window(BOTH, REF, "body_text", limit_chars=10)  # the catalogue
        endings.ended.clear()
        endings.one_ended.clear()
        with observing(cancelling):
            cancelling.read = asyncio.ensure_future(
                store.read_field_window(BOTH, REF, "body_text", q="invoice", occurrence=3)
            )  # three statements, one per occurrence
            with pytest.raises(asyncio.CancelledError):
                await cancelling.read
            await asyncio.wait_for(endings.one_ended.wait(), 30)
        return cancelling.sent, list(endings.ended), await _after_the_cancel(store)
    finally:
        await store.close()


def test_a_sqlite_read_cancelled_between_its_statements_sends_no_further_one(
    sqlite_db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite's interrupt stops only a statement already running: a read cancelled between two
    of its statements is told to stop by its connection (`_Held.cancelled`). SQLite-async only."""
    with Store.open(sqlite_db_url) as store:
        _loaded(store)
    sent, ended, after = asyncio.run(_cancel_between_statements(sqlite_db_url, monkeypatch))
    assert sent == 1
    assert len(ended) == 1
    assert ended[0] is not None  # the read ended without its answer
    _assert_recovered(after)


def _cleaning_up_badly() -> Op[Any]:
    try:
        yield Execute(select(literal_column("no_such_column")))
    finally:
        raise ValueError("the operation's own cleanup failed")


def test_an_operations_own_cleanup_error_is_not_hidden(db_url: str) -> None:
    """A read ended by a database error is closed by the runtime (`_close`), whose cleanup then
    runs; a `ValueError` it raises is not mistaken for the runtime's "still running"."""

    async def run() -> None:
        store = await AsyncStore.open(db_url)
        try:
            await store._readers.run(_cleaning_up_badly())
        finally:
            await store.close()

    with pytest.raises(ValueError, match="own cleanup"):
        asyncio.run(run())


def test_an_operation_still_running_in_a_thread_is_left_to_it() -> None:
    """`_close` on an operation a connection's thread is running (a read cancelled twice) leaves
    it to that thread, without an error."""
    running, release = threading.Event(), threading.Event()

    def op() -> Op[Any]:
        yield Execute(select(literal(1)))
        running.set()
        release.wait(30)
        yield Execute(select(literal(2)))

    read = op()
    next(read)
    thread = threading.Thread(target=read.send, args=([],))
    thread.start()
    try:
        assert running.wait(30)
        _runtime._close(read)  # no "generator already executing"
        assert inspect.getgeneratorstate(read) == inspect.GEN_RUNNING
    finally:
        release.set()
        thread.join(30)
    _runtime._close(read)
    assert inspect.getgeneratorstate(read) == inspect.GEN_CLOSED


# ---------------------------------------------------------------- SQLite: reads on the event loop
# An `AsyncStore` read on SQLite runs its bounded statements (`Execute.bounded`: a window, a
# projection, metadata, the catalogue) on the event loop, on a connection of its own with a busy
# timeout of 0, and any other statement (one that may scan) in a reader connection's thread.


class _Where:
    """The thread each read statement of one store ran on: the event loop's or another."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._loop_thread = threading.get_ident()
        self.ran: list[bool] = []
        """Per statement sent, in order: whether it ran on the event loop's thread."""

    def executing(self, engine: object, statement: str, parameters: object) -> None:
        if engine is self._engine:
            self.ran.append(threading.get_ident() == self._loop_thread)

    def fetched(self, engine: object, statement: str, rows: object) -> None:
        pass

    def of(self, read: Callable[[], Any]) -> Callable[[], Any]:
        async def where() -> list[bool]:
            self.ran = []
            await read()
            return self.ran

        return where


async def _where_reads_run(
    url: str,
) -> tuple[list[bool], dict[str, list[bool]], dict[str, list[bool]]]:
    store = await AsyncStore.open(url)
    try:
        blob = await store.put_blob(b"%PDF-1.7 " * 100, "application/pdf")
        await store.register_manifest(manifest("gmail"))
        await store.add_connection(MAILBOX, manifest("gmail")["connector_id"])
        await store.upsert_records(MAILBOX, "message_bodies", [body("e1", BODY)])
        await store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
        where = _Where(store.engine.sync_engine)
        with observing(where):  # the catalogue (bounded) first, then the match (may scan)
            assert "closing" in (await _matching(store)).text
        handed_over = where.ran
        first = await store.read_field_window(BOTH, REF, "body_text", limit_chars=100)
        await store.read_record(BOTH, ref_id("a1", stream="attachments"))  # the catalogue
        record = RecordRef(MAILBOX, "message_bodies", "e1")
        bounded = {
            "offset": lambda: store.read_field_window(
                BOTH, REF, "body_text", offset_chars=500, limit_chars=100
            ),
            "cursor": lambda: store.read_field_window(
                BOTH, REF, "body_text", cursor=first.next_cursor
            ),
            "record": lambda: store.read_record(BOTH, REF),
            "describe_field": lambda: store.describe_field(BOTH, REF, "body_text"),
            "resource: record": lambda: store.read_resource(BOTH, record.uri),
            "resource: window": lambda: store.read_resource(
                BOTH, FieldWindowRef(record, "body_text", 10, 20).uri
            ),
        }
        may_scan = {
            "q": lambda: store.read_field_window(BOTH, REF, "body_text", q="closing"),
            "q, occurrence": lambda: store.read_field_window(
                BOTH, REF, "body_text", q="invoice", occurrence=3
            ),
            "search": lambda: store.search(BOTH, "invoice"),
            "blob_info": lambda: store.blob_info(BOTH, blob.blob_id),
            "read_blob_range": lambda: store.read_blob_range(BOTH, blob.blob_id, 0, 10),
        }
        with observing(where):
            on_loop = {name: await where.of(read)() for name, read in bounded.items()}
            off_loop = {name: await where.of(read)() for name, read in may_scan.items()}
        return handed_over, on_loop, off_loop
    finally:
        await store.close()


def test_async_sqlite_reads_run_on_the_loop_only_when_bounded(sqlite_db_url: str) -> None:
    """Bounded reads never hop to a reader thread; reads that may scan never run on the loop
    (`_runtime.AsyncReaders`: one rule, set per statement where it is built)."""
    handed_over, on_loop, off_loop = asyncio.run(_where_reads_run(sqlite_db_url))
    # A read goes on in a thread from its first statement that may scan, to its end.
    assert len(handed_over) >= 2
    assert handed_over == [True] * (len(handed_over) - 1) + [False]
    for name, ran in on_loop.items():
        assert ran == [True], name  # one statement, on the event loop
    for name, ran in off_loop.items():
        assert ran, name
        assert not any(ran), name  # every statement in a reader thread
    assert len(off_loop["q, occurrence"]) == 3


async def _reading_in_a_loop(url: str, reads: int) -> tuple[list[int], int]:
    store = await AsyncStore.open(url)
    try:
        progress: list[int] = []
        done = 0

        async def reader() -> None:
            nonlocal done
            for _ in range(reads):
                await store.read_record(BOTH, REF)
                done += 1

        async def other() -> None:
            while done < reads:
                progress.append(done)
                await asyncio.sleep(0)

        await store.read_record(BOTH, REF)  # the catalogue
        await asyncio.gather(other(), reader())
        return progress, done
    finally:
        await store.close()


def test_a_task_reading_on_the_loop_lets_other_tasks_run(sqlite_db_url: str) -> None:
    """A read on the loop does not suspend, so a task reading in a loop would hold the loop to
    its end; the readers let the loop's other tasks run between reads (`_INLINE_TURN_S`)."""
    with Store.open(sqlite_db_url) as store:
        _loaded(store)
    reads = 200  # each a SQLite statement and the read's Python: far longer than one turn
    progress, done = asyncio.run(_reading_in_a_loop(sqlite_db_url, reads))
    assert done == reads
    assert any(0 < seen < reads for seen in progress)  # the other task ran meanwhile


class _ExclusiveLock:
    """Another connection that holds the database in SQLite's exclusive locking mode, so that
    every other connection meets `SQLITE_BUSY` (WAL readers too: sqlite.org/wal.html, "Sometimes
    queries return SQLITE_BUSY in WAL mode"). It can take it only while no other connection is
    open (a WAL connection keeps a shared lock while open)."""

    def __init__(self, url: str) -> None:
        database = make_url(url).database
        assert database is not None
        self._db = sqlite3.connect(database, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA locking_mode=EXCLUSIVE")
        self._db.execute("SELECT count(*) FROM records").fetchall()  # takes the lock, keeps it
        self.released = False

    def release(self, *_: object) -> None:
        if not self.released:
            self.released = True
            self._db.close()


async def _read_under_a_lock(
    url: str, busy_timeout_s: float, released_at_connect: bool
) -> tuple[list[bool], str, float, int]:
    """A bounded read while another connection holds the database locked: its statement, run
    on the loop, meets the lock at once, and is sent again in a reader thread, which waits for it
    up to the busy timeout. With `released_at_connect`, the lock goes when the reader thread
    opens its connection (after the loop's attempt: there is no connection left to reuse)."""
    store = await AsyncStore.open(url, busy_timeout_s=busy_timeout_s)
    lock: _ExclusiveLock | None = None
    try:
        await store.read_record(BOTH, REF)  # the catalogue, cached
        # No connection left open, so the lock can be taken: as after a dropped connection.
        await store._readers._let_go_of_idle(closing=False)
        await store.engine.dispose()
        lock = _ExclusiveLock(url)
        if released_at_connect:
            event.listen(store.engine.sync_engine, "do_connect", lock.release)
        where = _Where(store.engine.sync_engine)
        ticks = 0

        async def ticking() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.ensure_future(ticking())
        started = asyncio.get_running_loop().time()
        with observing(where):
            try:
                outcome = (await store.read_record(BOTH, REF)).ref.record_id
            except StoreError as error:
                outcome = error.code
        waited = asyncio.get_running_loop().time() - started
        ticker.cancel()
        with suppress(asyncio.CancelledError):
            await ticker
        return where.ran, outcome, waited, ticks
    finally:
        if lock is not None:
            lock.release()
        await store.close()


def test_a_bounded_read_meeting_a_lock_goes_on_in_a_reader_thread(sqlite_db_url: str) -> None:
    with Store.open(sqlite_db_url) as store:
        _loaded(store)
    ran, outcome, _, _ = asyncio.run(_read_under_a_lock(sqlite_db_url, 30, True))
    assert outcome == "e1"
    assert ran == [True, False]  # met the lock on the loop, then answered in a thread


def test_a_bounded_read_waits_for_a_lock_off_the_loop_up_to_the_busy_timeout(
    sqlite_db_url: str,
) -> None:
    with Store.open(sqlite_db_url) as store:
        _loaded(store)
    ran, outcome, waited, ticks = asyncio.run(
        _read_under_a_lock(sqlite_db_url, BUSY_TIMEOUT_S, False)
    )
    assert outcome == "storage_busy"
    assert ran == [True]  # the thread's connection never got past opening (its pragmas wait)
    assert BUSY_TIMEOUT_S * 0.9 <= waited < 30  # waited for the lock, in the reader thread
    assert ticks >= 2  # meanwhile, the event loop ran other tasks


def _failing_on_the_loop() -> Op[Any]:
    return (yield Execute(select(literal_column("no_such_column")), bounded=True))


async def _the_loops_connection(url: str) -> tuple[str, bool, bool, bool]:
    store = await AsyncStore.open(url)
    try:
        await store.read_record(BOTH, REF)
        first = store._readers._inline
        assert first is not None  # kept for the next read
        with pytest.raises(StoreError) as failed:
            await store._readers.run(_failing_on_the_loop())
        discarded = store._readers._inline is None and _closed(first)
        await store.read_record(BOTH, REF)
        second = store._readers._inline
        assert second is not None
    finally:
        await store.close()
    return failed.value.code, discarded, _closed(second), store._readers._inline is None


def _closed(connection: sqlite3.Connection) -> bool:
    try:
        connection.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


def test_the_loops_connection_is_discarded_after_an_error_and_closed_with_the_store(
    sqlite_db_url: str,
) -> None:
    with Store.open(sqlite_db_url) as store:
        _loaded(store)
    code, discarded, closed, none_kept = asyncio.run(_the_loops_connection(sqlite_db_url))
    assert code == "storage_error"
    assert discarded
    assert closed
    assert none_kept
