"""Ingestion of email-sized records at scale (issue 14 part 3, PERFORMANCE.md goal 9), and what
the search index costs at write time (issue 13, goal 6), side by side in one run per database.

An email-sized record (`email`) is a message as a mail connector sends it: eleven fields, nine
of them short (ids, addresses, a subject, a date, labels, a flag, a snippet) and a body of
1,000-1,600 code points; its manifest declares five of them searchable. `PDPP_BENCH_INGEST_RECORDS`
of them (default 1,000,000; the smoke run 2,000) are ingested through `upsert_records` in ten
steps into one fresh database (autovacuum is off on the benchmark server), and each step reports:

- `library`: records/s of the step, the store's statistics upkeep included (it analyses the
  record tables after a batch once they changed by 10 %; Postgres only);
- `raw`: raw inserts of the same rows, measured in the same database at the same size: the
  write statements the library sent for one batch of `SAMPLE` records, recorded on a scratch
  database (`statement_log`) and replayed with the bare driver (`executemany` as recorded, one
  transaction): the library's own rows (records, fields, chunks and, on SQLite, the search
  index side table and its FTS5 rows), without encoding, planning, lookups or upkeep;
- `plain`: the same sample as one row per email in a plain table of eleven columns (context:
  what the records would cost without the store's layout);
- `indexed` / `unindexed`: one batch of `SAMPLE` records through the library into two small
  databases growing by a batch per step, one with the search index and one without it (SQLite:
  the store writes no index rows; Postgres: the GIN index dropped), back to back, so the
  index's cost is measured under the same load (the first of them is where the raw statements
  are recorded).

One more variant, in a fresh database of its own:

- `no-upkeep` (Postgres only; SQLite has no upkeep to switch off): the steps with the upkeep
  disabled, stopped once it has run `PDPP_BENCH_INGEST_NO_UPKEEP_S` seconds (default 180),
  since the point is how it falls behind.

Each variant is one measurement (`benchmark.pedantic`, one round) whose `extra_info` holds its
steps; `_report_ingest.py` renders them. Duration: the steps run at the library's rate, the
samples add 4 x `SAMPLE` records per step, and the Postgres `no-upkeep` variant its budget. At
30,000 records on this 2-core machine under a load of 5 (other work beside it) the whole module
took 53 s on SQLite and 205 s on Postgres (about 570 and 290 records/s with the samples): for
1,000,000 records that is about 30 and 58 minutes under such load, roughly half of it on an
idle machine; set PDPP_BENCH_INGEST_RECORDS lower where that does not fit. The databases take
about 8 GB each at 1,000,000 records.
"""

from __future__ import annotations

import os
import sqlite3
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pytest_benchmark.fixture import BenchmarkFixture
from sqlalchemy import Engine, event, text

from pdpp_store import Store
from pdpp_store._ops import writes

from ._measure import in_rounds, label
from ._text import field_text

RECORDS = int(os.environ.get("PDPP_BENCH_INGEST_RECORDS") or 1_000_000)
STEPS = 10
SAMPLE = min(500, max(RECORDS // STEPS, 1))
"""Records per raw and plain sample (the store's default batch size)."""
NO_UPKEEP_BUDGET_S = float(os.environ.get("PDPP_BENCH_INGEST_NO_UPKEEP_S") or 180)
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

    def drop_index(self) -> None:
        """No search index: Postgres's GIN index dropped; on SQLite the store writes no index
        rows (the triggers only act on indexed fields)."""
        if self.backend == "postgres":
            with self.store.engine.connect() as conn:
                conn.execute(text("DROP INDEX ix_field_chunks_trigram"))
                conn.commit()

    def ingest(self, count: int, prefix: str) -> float:
        """Seconds to ingest `count` records through the library."""
        started = time.perf_counter()
        result = self.store.upsert_records(CONNECTION, STREAM, emails(count, prefix))
        elapsed = time.perf_counter() - started
        assert result.inserted == count
        return elapsed

    def replay(self, statements: list[tuple[str, Any, bool]]) -> float:
        """Seconds to run recorded write statements on the bare driver, in one transaction."""
        return self._timed_transaction(statements)

    def _timed_transaction(self, statements: list[tuple[str, Any, bool]]) -> float:
        """Seconds to run `statements` (each `(sql, parameters, many)`) in one transaction on
        the bare driver, as the store writes: `BEGIN IMMEDIATE` on SQLite."""
        cursor = self.raw.cursor()
        started = time.perf_counter()
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
        elapsed = time.perf_counter() - started
        cursor.close()
        return elapsed

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


def recorded_batch(scratch: Mailbox, prefix: str) -> tuple[list[tuple[str, Any, bool]], float]:
    """The statements the library writes for `SAMPLE` records, recorded on `scratch`, and the
    seconds it took (the statement log only keeps references: it costs next to nothing)."""
    with statement_log(scratch.store.engine) as log:
        seconds = scratch.ingest(SAMPLE, prefix)
    return log, seconds


@dataclass
class Samples:
    """The databases of the samples taken after each step: `scratch` (with the index, where
    the raw statements are recorded) and `bare` (the same store without the index)."""

    scratch: Mailbox
    bare: Mailbox
    unindexed: Callable[[], AbstractContextManager[None]]
    """Makes the store write no index rows while it is entered (SQLite)."""

    def take(self, box: Mailbox, step: int) -> dict[str, Any]:
        statements, indexed_s = recorded_batch(self.scratch, f"r{step}-")
        with self.unindexed():
            bare_s = self.bare.ingest(SAMPLE, f"b{step}-")
        raw_s = box.replay(statements)
        plain_s = box.plain(SAMPLE, f"p{step}-")
        return {
            "raw_records": SAMPLE,
            "raw_seconds": raw_s,
            "raw_rate": _rate(SAMPLE, raw_s),
            "plain_rate": _rate(SAMPLE, plain_s),
            "indexed_seconds": indexed_s,
            "unindexed_seconds": bare_s,
        }


# ---------------------------------------------------------------- the runs


def _rate(records: int, seconds: float) -> float:
    return records / seconds if seconds > 0 else 0.0


def run_steps(
    box: Mailbox, samples: Samples | None, *, budget_s: float | None = None
) -> list[dict[str, Any]]:
    """Ingest `RECORDS` in `STEPS` steps; with `samples`, the samples after each."""
    per_step = max(RECORDS // STEPS, 1)
    present = 0
    spent = 0.0
    found: list[dict[str, Any]] = []
    for step in range(STEPS):
        seconds = box.ingest(per_step, f"s{step}-")
        spent += seconds
        cell: dict[str, Any] = {
            "step": step + 1,
            "present": present,
            "records": per_step,
            "seconds": seconds,
            "rate": _rate(per_step, seconds),
        }
        present += per_step
        if samples is not None:
            cell.update(samples.take(box, step))
            present += SAMPLE
        found.append(cell)
        if budget_s is not None and spent > budget_s:
            break
    return found


VARIANTS = ("library", "no-upkeep")
BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_ingest_in_steps(
    request: pytest.FixtureRequest, benchmark: BenchmarkFixture, backend: str, variant: str
) -> None:
    if variant == "no-upkeep" and backend == "sqlite":
        pytest.skip("SQLite plans keyed lookups without statistics: the store keeps none")
    tmp_path: Path = request.getfixturevalue("tmp_path")
    monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
    box = Mailbox(backend, request, tmp_path)
    samples = None
    if variant == "library":

        @contextmanager
        def unindexed() -> Iterator[None]:
            with monkeypatch.context() as patch:
                patch.setattr(writes, "_indexed", lambda item, searchable: False)
                yield

        bare = Mailbox(backend, request, tmp_path)
        bare.drop_index()
        samples = Samples(Mailbox(backend, request, tmp_path), bare, unindexed)
    try:
        budget = None
        if variant == "no-upkeep":

            def no_upkeep(changed: Any) -> Generator[Any, Any, bool]:
                return False
                yield  # a generator, like the operation it stands in for

            monkeypatch.setattr(writes, "_keep_statistics_current", no_upkeep)
            budget = NO_UPKEEP_BUDGET_S
        label(
            benchmark,
            f"ingest-scale {backend}",
            suite="ingest-scale",
            backend=backend,
            impl=variant,
            records=RECORDS,
            sample=SAMPLE,
        )
        found = in_rounds(benchmark, lambda: run_steps(box, samples, budget_s=budget), rounds=1)
        benchmark.extra_info["steps"] = found
        assert found
        assert all(cell["rate"] > 0 for cell in found)
    finally:
        box.close()
        if samples is not None:
            samples.scratch.close()
            samples.bare.close()
