"""The benchmark databases and every way of reading them that the benchmarks compare.

One database per backend holds each dataset (a text kind at a size) three times:
- through the library (`Store.upsert_records`): the layout under test;
- `peer_plain`, one row per record with the whole field in one column: the naive peer, which
  selects the value and slices it in Python;
- `peer_json`, the whole record as one JSON document (jsonb on Postgres): the PDPP reference's
  design, which extracts the field with `json_extract` / `->>` and cuts it with `substr`.

The raw-SQL floor replays, on a bare DBAPI connection, the very statements and parameters the
library sent for the same read (captured once by `BoundaryAudit`), in the same transaction
framing (SQLite: the store's own BEGIN, then COMMIT; Postgres: psycopg's implicit BEGIN, then
COMMIT). The ratio library/floor is therefore the cost of the library around its SQL.

Rules:
1. Datasets are cached: a SQLite file under `.benchmarks-data/` and a Postgres database
   `pdpp_bench_<version>`, where the version digests what decides the stored rows (see
   `dataset_version`). A dataset is recorded in `bench_datasets` only after all three layouts
   are written, so an interrupted build is redone. Caches of other versions are deleted when a
   run opens its own (a Postgres one only when no session is using it).
2. Baselines run on an autocommit connection of their own (no BEGIN/COMMIT), the cheapest way
   to run them: their ratios are conservative.
3. Postgres gets `VACUUM ANALYZE` after a build, as autovacuum would soon do; SQLite is left
   without `ANALYZE`, as stores in the wild are.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from audit import BoundaryAudit, Execution

import pdpp_store
from pdpp_store import Grant, NotFound, Store, fold
from pdpp_store._core.folding import FOLDING_NAME, UNICODE_VERSION
from pdpp_store._core.values import CHUNK_CHARS

from . import _text
from ._measure import Dataset
from ._text import check_needles, field_text, needles

__all__ = [
    "CONNECTION",
    "STREAM",
    "WINDOW_CHARS",
    "BenchDatabase",
    "data_dir",
    "dataset_version",
    "record_id",
]

CONNECTION = "cin_bench"
CONNECTOR = "pdpp-bench"
STREAM = "docs"
MANIFEST = {"connector_id": CONNECTOR, "streams": [{"name": STREAM, "primary_key": ["id"]}]}
WINDOW_CHARS = 4096
MATCH_CONTEXT = 2048
"""The default `before_chars`/`after_chars` (docs/contract.md §3)."""

Raw = Any
"""A DBAPI connection (sqlite3 or psycopg): the benchmarks use its common subset only."""
Rows = list[tuple[Any, ...]]
T = TypeVar("T")

if CHUNK_CHARS != _text.CHUNK_CHARS_ASSUMED:
    raise RuntimeError("benchmarks/_text.py places its boundary needle for another chunk size")


def data_dir() -> Path:
    configured = os.environ.get("PDPP_BENCH_DATA")
    return (
        Path(configured)
        if configured
        else Path(__file__).resolve().parent.parent / (".benchmarks-data")
    )


def _migrations_dir() -> Path:
    package = Path(pdpp_store.__file__).resolve().parent
    packaged = package / "_alembic"
    return packaged if packaged.is_dir() else package.parent / "migrations"


def dataset_version() -> str:
    """A digest of what decides a dataset's rows: the generator's version and a sample of its
    output, the peer tables, the store's chunk size and folding (with a sample), and the
    migrations. Cosmetic edits of the library leave it alone; a change of layout does not."""
    sample = "".join(field_text(kind, 20_000) for kind in _text.KINDS)
    parts: list[object] = [
        _text.GENERATOR_VERSION,
        sample,
        [repr(needles(kind, 100_000_000)) for kind in _text.KINDS],
        SQLITE_SQL.create,
        POSTGRES_SQL.create,
        CHUNK_CHARS,
        FOLDING_NAME,
        UNICODE_VERSION,
        fold(sample),
    ]
    digest = hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode())
    for migration in sorted((_migrations_dir() / "versions").glob("*.py")):
        digest.update(migration.name.encode() + b"\0" + migration.read_bytes())
    return digest.hexdigest()[:12]


def record_id(dataset: Dataset) -> str:
    return str(dataset)


@dataclass(frozen=True, slots=True)
class PeerSQL:
    """The baselines' statements in one backend's spelling; parameters in the same order."""

    create: tuple[str, ...]
    insert_plain: str
    insert_json: str
    naive_value: str  # (id) -> the whole field
    naive_record: str  # (id) -> every column
    reference_window: str  # (start 1-based, length, id) -> the cut text
    reference_find: str  # (q, id) -> 1-based position of the lower-cased q, 0 if absent
    reference_record: str  # (id) -> the record document
    insert_dataset: str  # (id, chars, utf8_bytes, build_s): a dataset is complete


SQLITE_SQL = PeerSQL(
    create=(
        "CREATE TABLE IF NOT EXISTS peer_plain"
        " (id TEXT PRIMARY KEY, title TEXT, sent_at TEXT, body TEXT)",
        "CREATE TABLE IF NOT EXISTS peer_json (id TEXT PRIMARY KEY, doc TEXT)",
        "CREATE TABLE IF NOT EXISTS bench_datasets"
        " (id TEXT PRIMARY KEY, chars INTEGER, utf8_bytes INTEGER, build_s REAL)",
    ),
    insert_plain="INSERT OR REPLACE INTO peer_plain VALUES (?, ?, ?, ?)",
    insert_json="INSERT OR REPLACE INTO peer_json VALUES (?, ?)",
    naive_value="SELECT body FROM peer_plain WHERE id = ?",
    naive_record="SELECT id, title, sent_at, body FROM peer_plain WHERE id = ?",
    reference_window="SELECT substr(json_extract(doc, '$.body'), ?, ?) FROM peer_json WHERE id = ?",
    reference_find="SELECT instr(lower(json_extract(doc, '$.body')), lower(?))"
    " FROM peer_json WHERE id = ?",
    reference_record="SELECT doc FROM peer_json WHERE id = ?",
    insert_dataset="INSERT OR REPLACE INTO bench_datasets VALUES (?, ?, ?, ?)",
)

POSTGRES_SQL = PeerSQL(
    create=(
        "CREATE TABLE IF NOT EXISTS peer_plain"
        " (id text PRIMARY KEY, title text, sent_at text, body text)",
        "CREATE TABLE IF NOT EXISTS peer_json (id text PRIMARY KEY, doc jsonb)",
        "CREATE TABLE IF NOT EXISTS bench_datasets"
        " (id text PRIMARY KEY, chars bigint, utf8_bytes bigint, build_s double precision)",
    ),
    insert_plain="INSERT INTO peer_plain VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE"
    " SET title = excluded.title, sent_at = excluded.sent_at, body = excluded.body",
    insert_json="INSERT INTO peer_json VALUES (%s, %s::jsonb)"
    " ON CONFLICT (id) DO UPDATE SET doc = excluded.doc",
    naive_value="SELECT body FROM peer_plain WHERE id = %s",
    naive_record="SELECT id, title, sent_at, body FROM peer_plain WHERE id = %s",
    reference_window="SELECT substr(doc->>'body', %s, %s) FROM peer_json WHERE id = %s",
    reference_find="SELECT strpos(lower(doc->>'body'), lower(%s)) FROM peer_json WHERE id = %s",
    reference_record="SELECT doc FROM peer_json WHERE id = %s",
    insert_dataset="INSERT INTO bench_datasets VALUES (%s, %s, %s, %s)",
)


def _query(raw: Raw, statement: str, params: Sequence[Any] | dict[str, Any] = ()) -> Rows:
    cursor = raw.cursor()
    try:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description is not None else []
    finally:
        cursor.close()


def _match_window(position: int, q: str) -> tuple[int, int]:
    """(start, length) of the default match window (docs/contract.md §3) around a 0-based
    position."""
    start = max(0, position - MATCH_CONTEXT)
    return start, (position - start) + len(q) + MATCH_CONTEXT


@dataclass
class Captured:
    """What the library sent for one read, and the guard values the audit saw."""

    executions: list[Execution]
    rows: list[tuple[object, ...]]
    chars_returned: int
    max_text_cell: int


@dataclass
class BenchDatabase:
    """One backend's cached benchmark database, its store, and its raw connections."""

    backend: str
    url: str
    sql: PeerSQL
    connect_raw: Callable[[bool], Raw]
    """`connect_raw(autocommit)`: a new bare DBAPI connection to the same database."""
    store: Store = field(init=False)
    raw: Raw = field(init=False)
    raw_tx: Raw = field(init=False)
    grant: Grant = field(default_factory=lambda: Grant.owner(CONNECTION, STREAM))
    _cases: dict[tuple[object, ...], Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.store = Store.open(self.url)
        self.raw = self.connect_raw(True)
        self.raw_tx = self.connect_raw(False)
        for statement in self.sql.create:
            _query(self.raw, statement)
        self.store.register_manifest(MANIFEST)
        self.store.add_connection(CONNECTION, CONNECTOR)

    def close(self) -> None:
        self.store.close()
        self.raw.close()
        self.raw_tx.close()

    # ---------------------------------------------------------------- datasets

    def built(self) -> set[str]:
        return {row[0] for row in _query(self.raw, "SELECT id FROM bench_datasets")}

    def ensure(self, datasets: Sequence[Dataset]) -> None:
        """Build every dataset not yet complete in this database."""
        done = self.built()
        missing = [d for d in datasets if record_id(d) not in done]
        for dataset in missing:
            self._build(dataset)
        if missing and self.backend == "postgres":
            for table in ("records", "fields", "field_chunks", "peer_plain", "peer_json"):
                _query(self.raw, f"VACUUM ANALYZE {table}")

    def _build(self, dataset: Dataset) -> None:
        rid = record_id(dataset)
        kind, size = dataset.kind, dataset.chars
        started = time.perf_counter()
        text = field_text(kind, size)
        check_needles(kind, size, text)
        record = {
            "id": rid,
            "title": f"Benchmark field: {kind} text, {dataset.label} code points",
            "sent_at": "2026-01-05T09:30:00Z",
            "body": text,
        }
        self.store.upsert_records(CONNECTION, STREAM, [record])
        plain = (rid, record["title"], record["sent_at"], text)
        doc = json.dumps(record, ensure_ascii=False)
        utf8_bytes = len(text.encode("utf-8"))
        del text, record
        cursor = self.raw_tx.cursor()
        cursor.execute(self.sql.insert_plain, plain)
        cursor.execute(self.sql.insert_json, (rid, doc))
        del plain, doc
        build_s = time.perf_counter() - started
        cursor.execute(self.sql.insert_dataset, (rid, size, utf8_bytes, build_s))
        cursor.close()
        self.raw_tx.commit()

    def case(self, key: tuple[object, ...], make: Callable[[], T]) -> T:
        """`make()` once per key for this database (a read's expected answer, its capture)."""
        if key not in self._cases:
            self._cases[key] = make()
        found: T = self._cases[key]
        return found

    def ref(self, dataset: Dataset) -> str:
        return f"{CONNECTION}/{STREAM}:{record_id(dataset)}"

    # ---------------------------------------------------------------- the library, audited

    def capture(self, read: Callable[[], object]) -> Captured:
        """Run one library read under the boundary audit (a NotFound is an answer too)."""
        with BoundaryAudit(self.store.engine) as audit, contextlib.suppress(NotFound):
            read()
        return Captured(
            list(audit.executions), list(audit.rows), audit.chars_returned(), audit.max_text_cell()
        )

    def replay(self, executions: Sequence[Execution], *, autocommit: bool = False) -> Rows:
        """The raw-SQL floor: the captured statements on a bare connection, in one transaction
        (or, `autocommit`, each on its own, as the store runs its reads)."""
        connection = self.raw if autocommit else self.raw_tx
        cursor = connection.cursor()
        rows: Rows = []
        try:
            for statement, params in executions:
                cursor.execute(statement, params)
                if cursor.description is not None:
                    rows.extend(cursor.fetchall())
        finally:
            cursor.close()
            if not autocommit:
                connection.commit()
        return rows

    # ---------------------------------------------------------------- baselines

    def naive_window(self, rid: str, start: int, limit: int) -> str:
        body: str = _query(self.raw, self.sql.naive_value, (rid,))[0][0]
        return body[start : start + limit]

    def reference_window(self, rid: str, start: int, limit: int) -> str:
        text: str = _query(self.raw, self.sql.reference_window, (start + 1, limit, rid))[0][0]
        return text

    def naive_match(self, rid: str, q: str) -> str | None:
        body: str = _query(self.raw, self.sql.naive_value, (rid,))[0][0]
        position = body.lower().find(q.lower())
        if position < 0:
            return None
        start, length = _match_window(position, q)
        return body[start : start + length]

    def reference_match(self, rid: str, q: str) -> str | None:
        found = int(_query(self.raw, self.sql.reference_find, (q, rid))[0][0])
        if found == 0:
            return None
        start, length = _match_window(found - 1, q)
        return self.reference_window(rid, start, length)

    def naive_record(self, rid: str, preview: int) -> dict[str, Any]:
        row = _query(self.raw, self.sql.naive_record, (rid,))[0]
        return {"id": row[0], "title": row[1], "sent_at": row[2], "body": row[3][:preview]}

    def reference_record(self, rid: str, preview: int) -> dict[str, Any]:
        doc = _query(self.raw, self.sql.reference_record, (rid,))[0][0]
        record: dict[str, Any] = json.loads(doc) if isinstance(doc, str) else doc
        record["body"] = record["body"][:preview]
        return record


# -------------------------------------------------------------------- opening, with caches


def _drop_stale_files(directory: Path, keep: str) -> None:
    for stale in directory.glob("pdpp-bench-*.sqlite*"):
        if not stale.name.startswith(keep):
            stale.unlink()


def open_sqlite(version: str) -> BenchDatabase:
    directory = data_dir()
    directory.mkdir(parents=True, exist_ok=True)
    stem = f"pdpp-bench-{version}.sqlite"
    _drop_stale_files(directory, stem)
    return sqlite_database(directory / stem)


def sqlite_database(path: Path) -> BenchDatabase:
    def connect_raw(autocommit: bool) -> Raw:
        # The store's own hooks switch pysqlite's transaction handling off; so do we. The
        # floor's transaction is then the store's own BEGIN (captured) and our COMMIT.
        del autocommit
        raw = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        raw.execute("PRAGMA busy_timeout=10000")
        return raw

    return BenchDatabase("sqlite", f"sqlite:///{path}", SQLITE_SQL, connect_raw)


def open_postgres(server: Any, version: str) -> BenchDatabase:
    """`server`: a `_postgres.PostgresServer` (tests/_postgres.py)."""
    name = f"pdpp_bench_{version}"
    admin = server.admin()
    existing = {
        row[0]
        for row in admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'pdpp\\_bench\\_%'"
        ).fetchall()
    }
    for stale in sorted(existing - {name}):
        if not stale.startswith("pdpp_bench_ingest_"):
            # Without FORCE: a cache another run is still reading stays until a later run; one
            # that another run dropped since the listing is gone already (IF EXISTS).
            with contextlib.suppress(psycopg.errors.ObjectInUse):
                admin.execute(
                    psycopg.sql.SQL("DROP DATABASE IF EXISTS {}").format(
                        psycopg.sql.Identifier(stale)
                    )
                )
    if name not in existing:
        server.create_database(name)
    return postgres_database(server, name)


def postgres_database(server: Any, name: str) -> BenchDatabase:
    def connect_raw(autocommit: bool) -> Raw:
        return psycopg.connect(server.conninfo(name), autocommit=autocommit)

    return BenchDatabase("postgres", server.database_url(name), POSTGRES_SQL, connect_raw)
