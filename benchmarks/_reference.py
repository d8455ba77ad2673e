"""The PDPP reference's search design over the benchmark mailbox (`_mailbox`), side by side with
the store's relevance order (docs/performance.md goal 14), built once and cached:

- SQLite: one FTS5 row per record (record id unindexed; subject and body), tokenizer
  `unicode61`, in its own file beside the mailbox's; a page is `ORDER BY bm25(ref), rowid
  LIMIT 200` candidates, the first 10 kept;
- Postgres: a `simple` `tsvector` of subject and body per record under a GIN index, in the
  mailbox's database (table `bench_ref`); a page is `ORDER BY ts_rank_cd(doc, q) DESC,
  record_id LIMIT 200`, the first 10 kept.

The same SQL as the quality benchmark's reference systems (`quality/systems.py`), over the
mailbox's fields. Also: each design's index size, and its ingestion with the index against
without (records/s), for the report's side-by-side rows.

Rules (as in `_mailbox`): a reference counts as built only once its marker is written, so an
interrupted build is redone; Postgres gets `ANALYZE` after a build.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg

from ._bench import data_dir
from ._mailbox import _version, mailbox_records

__all__ = [
    "CANDIDATES",
    "fts5_ingest",
    "fts5_page",
    "fts5_size",
    "open_fts5",
    "open_tsvector",
    "tsvector_ingest",
    "tsvector_page",
    "tsvector_size",
]

CANDIDATES = 200
_FTS5 = (
    "CREATE VIRTUAL TABLE {name} USING fts5(record_id UNINDEXED, subject, body, "
    "tokenize='unicode61')"
)
_PLAIN = "CREATE TABLE {name} (record_id TEXT, subject TEXT, body TEXT)"
_BATCH = 2000


def _rows(records: Iterable[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(r["id"], r["subject"], r["body"]) for r in records]


def open_fts5(count: int) -> sqlite3.Connection:
    """The FTS5 reference over the first `count` mailbox records (built if missing)."""
    directory = data_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"pdpp-mail-ref-{count}-{_version()}.sqlite"
    for stale in directory.glob(f"pdpp-mail-ref-{count}-*.sqlite*"):
        if not stale.name.startswith(path.name):
            stale.unlink()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE IF NOT EXISTS built (records INTEGER)")
    if db.execute("SELECT count(*) FROM built").fetchone()[0]:
        return db
    db.execute("DROP TABLE IF EXISTS ref")
    db.execute(_FTS5.format(name="ref"))
    batch: list[dict[str, Any]] = []
    for record in mailbox_records(count):
        batch.append(record)
        if len(batch) == _BATCH:
            db.executemany("INSERT INTO ref VALUES (?, ?, ?)", _rows(batch))
            batch = []
    db.executemany("INSERT INTO ref VALUES (?, ?, ?)", _rows(batch))
    db.execute("INSERT INTO ref(ref) VALUES ('optimize')")
    db.execute("INSERT INTO built VALUES (?)", (count,))
    db.commit()
    return db


def fts5_page(db: sqlite3.Connection, term: str, limit: int = 10) -> list[str]:
    rows = db.execute(
        "SELECT record_id FROM ref WHERE ref MATCH ? ORDER BY bm25(ref), rowid LIMIT ?",
        ('"' + term.replace('"', '""') + '"', CANDIDATES),
    ).fetchall()
    return [str(row[0]) for row in rows[:limit]]


def fts5_size(db: sqlite3.Connection) -> int:
    """Bytes of every page of the FTS5 table's shadow tables (`dbstat`)."""
    found = db.execute("SELECT sum(pgsize) FROM dbstat WHERE name LIKE 'ref%'").fetchone()[0]
    return int(found or 0)


def fts5_ingest(tmp: Path, records: list[dict[str, Any]], *, indexed: bool) -> float:
    """Seconds to insert `records` (one transaction) into a fresh FTS5 table, or into a plain
    table of the same columns when not `indexed`."""
    db = sqlite3.connect(tmp / f"ref-ingest-{time.monotonic_ns()}.sqlite")
    try:
        db.execute((_FTS5 if indexed else _PLAIN).format(name="t"))
        rows = _rows(records)
        start = time.perf_counter()
        db.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        db.commit()
        return time.perf_counter() - start
    finally:
        db.close()


def _insert_tsvector(
    conn: psycopg.Connection[Any], table: str, records: list[dict[str, Any]]
) -> None:
    with conn.cursor() as cursor:
        cursor.executemany(
            f"INSERT INTO {table} VALUES (%s, to_tsvector('simple', %s || ' ' || %s))",
            _rows(records),
        )


def open_tsvector(conninfo: str, count: int) -> psycopg.Connection[Any]:
    """The tsvector reference in the mailbox's database (built if missing)."""
    conn = psycopg.connect(conninfo, autocommit=True)
    conn.execute("CREATE TABLE IF NOT EXISTS bench_ref_built (records INTEGER)")
    if conn.execute("SELECT count(*) FROM bench_ref_built").fetchone()[0]:  # type: ignore[index]
        return conn
    conn.execute("DROP TABLE IF EXISTS bench_ref")
    conn.execute("CREATE TABLE bench_ref (record_id text, doc tsvector)")
    batch: list[dict[str, Any]] = []
    for record in mailbox_records(count):
        batch.append(record)
        if len(batch) == _BATCH:
            _insert_tsvector(conn, "bench_ref", batch)
            batch = []
    _insert_tsvector(conn, "bench_ref", batch)
    conn.execute("CREATE INDEX bench_ref_doc ON bench_ref USING gin (doc)")
    conn.execute("ANALYZE bench_ref")
    conn.execute("INSERT INTO bench_ref_built VALUES (%s)", (count,))
    return conn


def tsvector_page(conn: psycopg.Connection[Any], term: str, limit: int = 10) -> list[str]:
    rows = conn.execute(
        "SELECT record_id FROM bench_ref, plainto_tsquery('simple', %s) AS q(tq) "
        "WHERE doc @@ tq ORDER BY ts_rank_cd(doc, tq) DESC, record_id LIMIT %s",
        (term, CANDIDATES),
    ).fetchall()
    return [str(row[0]) for row in rows[:limit]]


def tsvector_size(conn: psycopg.Connection[Any]) -> int:
    """Bytes of the GIN index (the tsvector column itself is the reference's stored text)."""
    found = conn.execute("SELECT pg_relation_size('bench_ref_doc')").fetchone()
    return int(found[0]) if found else 0


def tsvector_ingest(
    conn: psycopg.Connection[Any], records: list[dict[str, Any]], *, indexed: bool
) -> float:
    """Seconds to insert `records` (one transaction) into a fresh tsvector table, with its GIN
    index in place when `indexed`."""
    table = f"bench_ref_ingest_{time.monotonic_ns()}"
    conn.execute(f"CREATE TABLE {table} (record_id text, doc tsvector)")
    try:
        if indexed:
            conn.execute(f"CREATE INDEX ON {table} USING gin (doc)")
        start = time.perf_counter()
        with conn.transaction():
            _insert_tsvector(conn, table, records)
        return time.perf_counter() - start
    finally:
        conn.execute(f"DROP TABLE {table}")
