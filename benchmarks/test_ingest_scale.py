"""Ingestion of email-sized records at scale (issue 14 part 3, docs/performance.md goal 9), and what
the search index costs at write time (issue 13, docs/performance.md goal 6), side by side in one run
per database.

An email-sized record (`email`) is a message as a mail connector sends it: eleven fields, nine of
them short (ids, addresses, a subject, a date, labels, a flag, a snippet) and a body of 1,000-1,600
code points; its manifest declares five of them searchable. One fresh database (autovacuum is off on
the benchmark server) grows to `PDPP_BENCH_INGEST_RECORDS` of them (default 1,000,000; the smoke run
2,000) in `PDPP_BENCH_INGEST_STEPS` steps (default 10): the first step's records go through
`upsert_records` (timed: `fill_rate`), later steps copy those rows inside the database under new ids
(records, fields, chunks and, on SQLite, the search index's side table and FTS5 rows, as the library
writes them), about twice as fast as the library (1.7-2.8x measured): the same kinds of rows and
indexes, the copies repeating the first step's values under new record ids (a copy's `id` field
still names the record it came from). Measured at each of the `STEPS + 1` points, from empty to
full, after an untimed warm-up batch (which, on Postgres, runs the statistics upkeep that the fill
made due), `PDPP_BENCH_INGEST_ROUNDS` rounds (default 5; at the last point, the goal's,
`PDPP_BENCH_INGEST_LAST_ROUNDS`, default four times as many) of:

- `rate`: a batch of `SAMPLE` records through the library into the big database, the store's
  statistics upkeep included (it analyses the record tables once they changed by 10 %;
  Postgres only);
- `empty_rate`: the same through the library into a fresh empty database, so that the goal's
  ratio (into empty tables / with N present) compares figures taken under the same load; the
  write statements of this batch are recorded (`statement_log`) for
- `raw_rate`: raw inserts of the same rows, those statements replayed with the bare driver
  (`executemany` as recorded, one transaction) into the big database: the library's own rows
  without encoding, planning, lookups or upkeep;
- `indexed` / `unindexed` seconds: that batch against one through the library into a fresh
  database without the search index (SQLite: the store writes no index rows; Postgres: the GIN
  index dropped);
- `plain_rate`: the batch as one row per email in a plain table of eleven columns (context:
  what the records would cost without the store's layout).

Rounds alternate which of the two library batches goes first; each figure is the median of its
rounds (the per-round seconds are kept as `library_s`, `empty_s`, `raw_s`). On SQLite every timed
sample starts from an empty write-ahead log and includes the checkpoint of its own pages
(`Mailbox.checkpoint`), so that no sample pays for the pages of another.

One more variant, in a fresh database of its own:

- `no-upkeep` (Postgres only; SQLite has no upkeep to switch off): steps of `RECORDS / STEPS`
  (at most `NO_UPKEEP_STEP`) through the library with the upkeep disabled, each timed whole,
  stopped once it has run `PDPP_BENCH_INGEST_NO_UPKEEP_S` seconds (default 180), since the
  point is how it falls behind.

Each variant is one measurement (`benchmark.pedantic`, one round) whose `extra_info` holds its
steps; `_report_ingest.py` renders them. Duration at 1,000,000 records on this 2-core machine
under other work: see CHANGELOG.md, sessions 4 and 5 (ingestion at scale). The databases take about
12 GB (SQLite) each at 1,000,000 records: give pytest a `--basetemp` on a disk with room, which also
keeps other pytest runs from cleaning the directory away under a long run.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from sqlalchemy import Engine, event, text

from pdpp_store import Store
from pdpp_store._ops import writes
from pdpp_store._sql import tables
from pdpp_store._sql import writes as write_sql
from pdpp_store._sql.index import index_rows

from ._measure import in_rounds, label
from ._text import field_text

RECORDS = int(os.environ.get("PDPP_BENCH_INGEST_RECORDS") or 1_000_000)
STEPS = int(os.environ.get("PDPP_BENCH_INGEST_STEPS") or 10)
SAMPLE = min(500, max(RECORDS // STEPS, 1))
"""Records per sample (the store's default batch size)."""
ROUNDS = int(os.environ.get("PDPP_BENCH_INGEST_ROUNDS") or 5)
"""Samples of each kind per step (medians are reported)."""
LAST_ROUNDS = int(os.environ.get("PDPP_BENCH_INGEST_LAST_ROUNDS") or 4 * ROUNDS)
"""Samples of each kind at the last point, the goal's (single batches varied 3x on a shared
machine; more of them, for both sides alike, make its medians steadier)."""
COPY_SLICE = 5000
"""Records copied per transaction when filling."""
NO_UPKEEP_BUDGET_S = float(os.environ.get("PDPP_BENCH_INGEST_NO_UPKEEP_S") or 180)
NO_UPKEEP_STEP = 10_000
"""Records per step of the `no-upkeep` variant at most (it runs on a time budget)."""
BATCH = 500
CONNECTION = "cin_mail"
CONNECTOR = "pdpp-bench-mailbox"
STREAM = "messages"
TEXT_FIELDS = ("id", "thread_id", "subject", "from_name", "from_email", "date", "snippet", "body")
MANIFEST = {
    "connector_id": CONNECTOR,
    "streams": [
        {
            "name": STREAM,
            "primary_key": ["id"],
            "schema": {
                "properties": {
                    **{name: {"type": "string"} for name in TEXT_FIELDS},
                    "to": {"type": "array"},
                    "labels": {"type": "array"},
                    "is_seen": {"type": "boolean"},
                }
            },
            "query": {
                "search": {
                    "lexical_fields": ["subject", "from_name", "from_email", "snippet", "body"]
                }
            },
        }
    ],
}
PLAIN_COLUMNS = (
    *("id", "thread_id", "subject", "from_name", "from_email", "to_addrs", "date"),
    *("labels", "is_seen", "snippet", "body"),
)

_SOURCE: list[str] = []


def _source() -> str:
    if not _SOURCE:
        _SOURCE.append(field_text("mixed", 400_000))
    return _SOURCE[0]


def email(number: int, prefix: str) -> dict[str, Any]:
    """One deterministic email-sized record."""
    source = _source()
    size = 1000 + number * 37 % 600
    start = number * 7919 % (len(source) - size)
    body = source[start : start + size]
    return {
        "id": f"{prefix}{number:08d}",
        "thread_id": f"t{prefix}{number // 3:08d}",
        "subject": f"Re: invoice {number} for March",
        "from_name": "Ana Souza",
        "from_email": f"ana{number % 97}@example.com",
        "to": ["bob@example.com", f"team{number % 13}@example.com"],
        "date": f"2026-{1 + number % 12:02d}-{1 + number % 28:02d}T08:{number % 60:02d}:00Z",
        "labels": ["INBOX"] if number % 3 else ["INBOX", "IMPORTANT"],
        "is_seen": number % 2 == 0,
        "snippet": body[:160],
        "body": body,
    }


def emails(count: int, prefix: str) -> Iterator[dict[str, Any]]:
    return (email(number, prefix) for number in range(count))


# ---------------------------------------------------------------- databases


class Mailbox:
    """A fresh store with the mail manifest, its URL, and a bare driver connection to it."""

    def __init__(self, backend: str, request: pytest.FixtureRequest, directory: Path) -> None:
        self.backend = backend
        self._server: Any = None
        if backend == "sqlite":
            path = directory / f"mailbox-{uuid.uuid4().hex[:8]}.sqlite"
            url = f"sqlite:///{path}"
            self._connect: Callable[[], Any] = lambda: sqlite3.connect(path, isolation_level=None)
        else:
            self._server = request.getfixturevalue("pg_server")
            self._name = f"pdpp_bench_mailbox_{uuid.uuid4().hex[:12]}"
            url = self._server.create_database(self._name)
            conninfo = self._server.conninfo(self._name)
            self._connect = lambda: psycopg.connect(conninfo)
        self.store = Store.open(url)
        self.store.register_manifest(MANIFEST)
        self.store.add_connection(CONNECTION, CONNECTOR)
        self.raw = self._connect()
        self._plain_made = False
        self._replays = 0

    def drop_index(self) -> None:
        """No search index: Postgres's GIN index dropped; on SQLite the store writes no index
        rows (the triggers only act on indexed fields)."""
        if self.backend == "postgres":
            with self.store.engine.connect() as conn:
                conn.execute(text("DROP INDEX ix_field_chunks_trigram"))
                conn.commit()

    def checkpoint(self) -> None:
        """SQLite: copy the write-ahead log into the database and empty it (Postgres: nothing).
        Each timed sample starts from an empty log and ends with its own pages checkpointed
        (`_own_pages`), so no sample pays for the pages of the samples written before it: the big
        database also takes the raw replay and the plain table's rows between library batches,
        and their pages, checkpointed during the next library batch, made a batch into it cost
        1.25-1.32x one into a fresh database when both were still empty."""
        if self.backend == "sqlite":
            self.raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()

    @contextmanager
    def _own_pages(self) -> Iterator[list[float]]:
        """Times the block plus the checkpoint of the pages it wrote, from an empty log."""
        self.checkpoint()
        timed: list[float] = []
        started = time.perf_counter()
        yield timed
        self.checkpoint()
        timed.append(time.perf_counter() - started)

    def ingest(self, count: int, prefix: str) -> float:
        """Seconds to ingest `count` records through the library (`_own_pages`)."""
        with self._own_pages() as timed:
            result = self.store.upsert_records(CONNECTION, STREAM, emails(count, prefix))
        assert result.inserted == count
        return timed[0]

    def replay(self, statements: list[tuple[str, Any, bool]]) -> float:
        """Seconds to run recorded write statements on the bare driver, in one transaction.
        The change values they log were drawn on the scratch store, where the big database has
        already logged the same ones: they are moved past every value it holds first, outside
        the timing (`_changes_apart`)."""
        self._replays += 1
        return self._timed_transaction(_changes_apart(statements, self._replays * _REPLAY_SPAN))

    def _timed_transaction(self, statements: list[tuple[str, Any, bool]]) -> float:
        """Seconds to run `statements` (each `(sql, parameters, many)`) in one transaction on
        the bare driver, as the store writes: `BEGIN IMMEDIATE` on SQLite."""
        cursor = self.raw.cursor()
        with self._own_pages() as timed:
            if self.backend == "sqlite":
                cursor.execute("BEGIN IMMEDIATE")
            for statement, parameters, many in statements:
                if many:
                    cursor.executemany(statement, parameters)
                else:
                    cursor.execute(statement, parameters)
            if self.backend == "sqlite":
                cursor.execute("COMMIT")
            else:
                self.raw.commit()
        cursor.close()
        return timed[0]

    def run_named(self, statements: list[str], params: dict[str, Any]) -> None:
        """Run `statements` (`:name` parameters) in one transaction on the store's engine."""
        with self.store.engine.connect() as conn:
            for statement in statements:
                conn.execute(text(statement), params)
            conn.commit()

    @staticmethod
    def columns(table: str) -> list[str]:
        return [column.name for column in tables.metadata.tables[table].columns]

    @staticmethod
    def primary_key(table: str) -> list[str]:
        return [column.name for column in tables.metadata.tables[table].primary_key.columns]

    def plain(self, count: int, prefix: str) -> float:
        """Seconds to insert `count` records as one row each into a plain table."""
        marker = "?" if self.backend == "sqlite" else "%s"
        if not self._plain_made:
            columns = ", ".join(f"{name} TEXT" for name in PLAIN_COLUMNS[1:])
            cursor = self.raw.cursor()
            cursor.execute(f"CREATE TABLE plain_mail (id TEXT PRIMARY KEY, {columns})")
            cursor.close()
            self.raw.commit()
            self._plain_made = True
        insert = (
            f"INSERT INTO plain_mail ({', '.join(PLAIN_COLUMNS)})"
            f" VALUES ({', '.join(marker for _ in PLAIN_COLUMNS)})"
        )
        rows = [
            (
                *(r[name] for name in ("id", "thread_id", "subject", "from_name", "from_email")),
                ",".join(r["to"]),
                r["date"],
                ",".join(r["labels"]),
                "1" if r["is_seen"] else "0",
                r["snippet"],
                r["body"],
            )
            for r in emails(count, prefix)
        ]
        return self._timed_transaction([(insert, rows, True)])

    def close(self) -> None:
        self.raw.close()
        self.store.close()
        if self._server is not None:
            self._server.drop_database(self._name)


@contextmanager
def statement_log(engine: Engine) -> Iterator[list[tuple[str, Any, bool]]]:
    """The write statements (INSERT, UPDATE, DELETE) sent to the driver while the block runs,
    with their parameters as the driver got them."""
    log: list[tuple[str, Any, bool]] = []

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *more: Any) -> None:
        many = bool(more[-1])  # (context, executemany)
        if statement.lstrip().split(None, 1)[0].upper() in {"INSERT", "UPDATE", "DELETE"}:
            log.append((statement, parameters, many))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield log
    finally:
        event.remove(engine, "before_cursor_execute", record)


_REPLAY_SPAN = 10**12
"""How far each replay moves the change values it logs: past any a store here draws."""
_CHANGE_SEQ = write_sql.CHANGE_COLUMNS.index("change_seq")


def _changes_apart(
    statements: list[tuple[str, Any, bool]], offset: int
) -> list[tuple[str, Any, bool]]:
    """`statements` with the change values of their `change_log` rows moved by `offset`
    (`change_log` is keyed by them: the scratch store's values are the big database's too)."""
    moved: list[tuple[str, Any, bool]] = []
    for statement, parameters, many in statements:
        if many and statement.lstrip().upper().startswith("INSERT INTO CHANGE_LOG"):
            rows = [
                (*row[:_CHANGE_SEQ], row[_CHANGE_SEQ] + offset, *row[_CHANGE_SEQ + 1 :])
                for row in parameters
            ]
            moved.append((statement, rows, many))
        else:
            moved.append((statement, parameters, many))
    return moved


def recorded_batch(scratch: Mailbox, prefix: str) -> tuple[list[tuple[str, Any, bool]], float]:
    """The statements the library writes for `SAMPLE` records, recorded on `scratch`, and the
    seconds it took (the statement log only keeps references: it costs next to nothing)."""
    with statement_log(scratch.store.engine) as log:
        seconds = scratch.ingest(SAMPLE, prefix)
    return log, seconds


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


class Samples:
    """The measurements taken at each point: `ROUNDS` rounds, each a batch of `SAMPLE` records
    through the library into the big database, the same through the library into a fresh empty
    one with the search index (`scratch`, where the raw statements are recorded) and one without
    it (`bare`), the recorded statements replayed raw into the big database, and a plain-table
    sample, interleaved so that every ratio compares figures taken under the same load; medians
    of the rounds."""

    def __init__(
        self,
        fresh: Callable[[], Mailbox],
        unindexed: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self.fresh = fresh
        self.unindexed = unindexed
        """Makes the store write no index rows while it is entered (SQLite)."""

    def take(self, box: Mailbox, step: int, rounds: int = ROUNDS) -> dict[str, Any]:
        scratch = self.fresh()
        bare = self.fresh()
        bare.drop_index()
        try:
            # Warm-up, not timed: compiled statements, caches, and on the big database the
            # statistics upkeep that a fill makes due (it is the library's own, measured per
            # step in `fill_seconds` when the fill runs through the library).
            box.ingest(SAMPLE, f"w{step}-")
            scratch.ingest(SAMPLE, f"w{step}-")
            with self.unindexed():
                bare.ingest(SAMPLE, f"w{step}-")
            library: list[float] = []
            raw: list[float] = []
            indexed: list[float] = []
            unindexed: list[float] = []
            plain: list[float] = []
            for n in range(rounds):
                if n % 2:  # alternate which goes first, so neither always follows the other
                    statements, seconds = recorded_batch(scratch, f"r{step}.{n}-")
                    library.append(box.ingest(SAMPLE, f"m{step}.{n}-"))
                else:
                    library.append(box.ingest(SAMPLE, f"m{step}.{n}-"))
                    statements, seconds = recorded_batch(scratch, f"r{step}.{n}-")
                indexed.append(seconds)
                raw.append(box.replay(statements))
                with self.unindexed():
                    unindexed.append(bare.ingest(SAMPLE, f"b{step}.{n}-"))
                plain.append(box.plain(SAMPLE, f"p{step}.{n}-"))
        finally:
            scratch.close()
            bare.close()
        return {
            "rate": _rate(SAMPLE, _median(library)),
            "raw_rate": _rate(SAMPLE, _median(raw)),
            "empty_rate": _rate(SAMPLE, _median(indexed)),
            "plain_rate": _rate(SAMPLE, _median(plain)),
            "indexed_seconds": _median(indexed),
            "unindexed_seconds": _median(unindexed),
            "library_s": library,
            "raw_s": raw,
            "empty_s": indexed,
            "rounds": rounds,
            "added": SAMPLE * (1 + 2 * rounds),  # warm-up, library and raw rounds
        }


# ---------------------------------------------------------------- filling


def _copy_statements(box: Mailbox) -> list[str]:
    """Statements that copy the first step's records (`s0-` ids in `[:lo, :hi)`) under new ids
    (`:p` prepended) within the database: records, fields, chunks and, on SQLite, the search
    index's side table and FTS5 rows, as the library writes them."""
    key = "connection_id = :c AND stream = :s AND record_id >= :lo AND record_id < :hi"
    found = []
    for table in ("records", "fields", "field_chunks"):
        columns = box.columns(table)
        picked = ", ".join(":p || record_id" if c == "record_id" else c for c in columns)
        found.append(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {picked} FROM {table}"
            f" WHERE {key} ORDER BY {', '.join(box.primary_key(table))}"
        )
    if box.backend == "sqlite":
        found.append(
            "INSERT INTO search_fields (connection_id, stream, record_id, path, whole)"
            " SELECT connection_id, stream, :p || record_id, path, whole FROM search_fields"
            f" WHERE {key} ORDER BY record_id, path"
        )
        copied = (
            "sf.connection_id = :c AND sf.stream = :s"
            " AND sf.record_id >= :p || :lo AND sf.record_id < :p || :hi"
        )
        found += [index_rows("search_fields sf", copied, whole) for whole in (False, True)]
    return found


def copy_fill(box: Mailbox, count: int, step: int) -> None:
    """Add `count` records by copying the first step's (which the library wrote) inside the
    database, `COPY_SLICE` records per transaction."""
    statements = _copy_statements(box)
    for start in range(0, count, COPY_SLICE):
        end = min(start + COPY_SLICE, count)
        params = {
            "c": CONNECTION,
            "s": STREAM,
            "p": f"c{step}-",
            "lo": f"s0-{start:08d}",
            "hi": f"s0-{end:08d}",
        }
        box.run_named(statements, params)


# ---------------------------------------------------------------- the runs


def _rate(records: int, seconds: float) -> float:
    return records / seconds if seconds > 0 else 0.0


def run_steps(box: Mailbox, samples: Samples) -> list[dict[str, Any]]:
    """Measure at `STEPS + 1` points, 0 to `RECORDS` records present: the first step's records
    go through the library (timed: `fill_rate`), later steps copy them inside the database."""
    per_step = max(RECORDS // STEPS, 1)
    present = 0
    found: list[dict[str, Any]] = []
    for step in range(STEPS + 1):
        cell: dict[str, Any] = {"step": step + 1, "present": present, "records": SAMPLE}
        cell.update(samples.take(box, step, LAST_ROUNDS if step == STEPS else ROUNDS))
        present += cell.pop("added")
        if step < STEPS:
            started = time.perf_counter()
            if step == 0:
                box.ingest(per_step, "s0-")
                cell["fill"] = "library"
            else:
                copy_fill(box, per_step, step)
                cell["fill"] = "copy"
            cell["fill_seconds"] = time.perf_counter() - started
            cell["fill_rate"] = _rate(per_step, cell["fill_seconds"])
            present += per_step
        found.append(cell)
    return found


def run_library_steps(box: Mailbox, budget_s: float) -> list[dict[str, Any]]:
    """Ingest through the library in steps of `RECORDS / STEPS` (at most `NO_UPKEEP_STEP`),
    each timed whole, until `RECORDS` are in or `budget_s` seconds were spent."""
    per_step = min(max(RECORDS // STEPS, 1), NO_UPKEEP_STEP)
    present = 0
    spent = 0.0
    found: list[dict[str, Any]] = []
    for step in range(-(-RECORDS // per_step)):
        seconds = box.ingest(per_step, f"s{step}-")
        spent += seconds
        found.append(
            {
                "step": step + 1,
                "present": present,
                "records": per_step,
                "seconds": seconds,
                "rate": _rate(per_step, seconds),
            }
        )
        present += per_step
        if spent > budget_s:
            break
    return found


CELLS = [
    pytest.param("sqlite", "library", id="sqlite-library"),
    pytest.param("postgres", "library", id="postgres-library", marks=pytest.mark.postgres),
    # SQLite has no upkeep to switch off: it plans keyed lookups without statistics.
    pytest.param("postgres", "no-upkeep", id="postgres-no-upkeep", marks=pytest.mark.postgres),
]


@pytest.mark.parametrize(("backend", "variant"), CELLS)
def test_ingest_in_steps(
    request: pytest.FixtureRequest, benchmark: BenchmarkFixture, backend: str, variant: str
) -> None:
    tmp_path: Path = request.getfixturevalue("tmp_path")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    box = Mailbox(backend, request, tmp_path)
    try:
        label(
            benchmark,
            f"ingest-scale {backend}",
            suite="ingest-scale",
            backend=backend,
            impl=variant,
            records=RECORDS,
            sample=SAMPLE,
            rounds=ROUNDS,
            last_rounds=LAST_ROUNDS,
        )
        if variant == "no-upkeep":

            def no_upkeep(changed: Any) -> Generator[Any, Any, bool]:
                return False
                yield  # a generator, like the operation it stands in for

            monkeypatch.setattr(writes, "_keep_statistics_current", no_upkeep)
            found = in_rounds(
                benchmark, lambda: run_library_steps(box, NO_UPKEEP_BUDGET_S), rounds=1
            )
        else:

            @contextmanager
            def unindexed() -> Iterator[None]:
                with monkeypatch.context() as patch:
                    patch.setattr(writes, "_indexed", lambda item, searchable: False)
                    yield

            samples = Samples(lambda: Mailbox(backend, request, tmp_path), unindexed)
            found = in_rounds(benchmark, lambda: run_steps(box, samples), rounds=1)
        benchmark.extra_info["steps"] = found
        assert found
        assert all(cell["rate"] > 0 for cell in found)
    finally:
        box.close()
