"""`query_records` against the raw SQL floor (docs/performance.md goal 12), in one run:

    python -m benchmarks.query_records [--records N] [--rounds R] [--backend sqlite|postgres]

The dataset: one stream of N small records (`id`, `at` a distinct date-time and the stream's
order field, `sender` one of 1,000 values, `subject`), ingested through the library once and
cached (a SQLite file under `.benchmarks-data/`, a Postgres database `pdpp_query_<N>_<version>`).
Beside it in the same database, the floor: a plain table of the same rows, one column per
field, indexed for each query (`(at, id)`, `(sender, at, id)`), asked the same keyset queries
with the driver's own SQL.

Cases (newest first, 25 records a page, under a grant of the one connection and every field):
first page; page 1,000 (its cursor from walking the 999 pages before it; of fewer than 25,000
records, the last whole page, as a smoke run's); a selective exact
filter (`sender`, 1 record in 1,000); a range on the order field (one day); `count="exact"`
with no filter and with the selective one. Each is timed `--rounds` times after one warm-up,
the library and the floor alternating; the medians and their ratio are printed as a Markdown
table.
"""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from pdpp_store import Grant, Store

from ._million import build_and_measure, dataset_url, median_ms, table_count

CONNECTION = "bench"
STREAM = "events"
MANIFEST: dict[str, Any] = {
    "connector_id": "pdpp-bench-query",
    "streams": [
        {
            "name": STREAM,
            "primary_key": ["id"],
            "cursor_field": "at",
            "schema": {
                "properties": {
                    "id": {"type": "string"},
                    "at": {"type": "string", "format": "date-time", "x_pdpp_role": "event-time"},
                    "sender": {"type": "string", "x_pdpp_role": "actor"},
                    "subject": {"type": "string", "x_pdpp_role": "primary-title"},
                }
            },
            "query": {"range_filters": {"at": ["gte", "gt", "lte", "lt"]}},
        }
    ],
}
START = datetime(2020, 1, 1, tzinfo=UTC)
VERSION = hashlib.sha256(repr(MANIFEST).encode()).hexdigest()[:8]
BATCH = 5000
PAGE = 25


def _at(n: int) -> str:
    return (START + timedelta(seconds=60 * n)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _records(start: int, stop: int) -> Iterator[dict[str, Any]]:
    for n in range(start, stop):
        yield {
            "id": f"e{n:07d}",
            "at": _at(n),
            "sender": f"s{n % 1000:03d}@example.com",
            "subject": f"Event number {n}",
        }


def _build(store: Store, engine: Engine, records: int) -> None:
    with engine.connect() as conn:
        done = conn.execute(
            text("SELECT count(*) FROM records WHERE connection_id = :c"), {"c": CONNECTION}
        ).scalar_one()
    if done >= records and table_count(engine, "plain_events") == records:
        return
    if done == 0:
        store.register_manifest(MANIFEST)
        store.add_connection(CONNECTION, MANIFEST["connector_id"])
    began = time.perf_counter()
    for start in range(min(int(done), records), records, BATCH):
        store.upsert_records(CONNECTION, STREAM, list(_records(start, min(start + BATCH, records))))
        if start % 100_000 == 0:
            print(f"  {start:,} records in {time.perf_counter() - began:.0f} s", flush=True)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS plain_events"))
        conn.execute(
            text(
                "CREATE TABLE plain_events (id TEXT PRIMARY KEY, at TEXT NOT NULL,"
                " sender TEXT NOT NULL, subject TEXT NOT NULL)"
            )
        )
        rows = [
            {"id": r["id"], "at": r["at"], "sender": r["sender"], "subject": r["subject"]}
            for r in _records(0, records)
        ]
        for start in range(0, len(rows), 50_000):
            conn.execute(
                text("INSERT INTO plain_events VALUES (:id, :at, :sender, :subject)"),
                rows[start : start + 50_000],
            )
        conn.execute(text("CREATE INDEX ix_plain_at ON plain_events (at, id)"))
        conn.execute(text("CREATE INDEX ix_plain_sender ON plain_events (sender, at, id)"))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE" if engine.dialect.name == "sqlite" else "VACUUM ANALYZE"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument(
        "--stop-at",
        type=int,
        default=None,
        help="fill the dataset of --records only this far (a multiple of 5,000) and measure that",
    )
    args = parser.parse_args()
    url = dataset_url(args.backend, "query", args.records, VERSION)
    size = args.records if args.stop_at is None else args.stop_at
    build_and_measure(url, size, _build, _measure, rounds=args.rounds, backend=args.backend)


def _measure(store: Store, engine: Engine, records: int, rounds: int, backend: str) -> None:
    grant = Grant.from_dict(
        {"grant_id": "bench", "streams": [{"name": STREAM, "instance_ids": [CONNECTION]}]}
    )
    page = store.query_records(grant, STREAM, limit=PAGE)
    far = min(1000, records // PAGE)
    for _ in range(far - 2):  # to page far - 1, whose cursor reads page far
        page = store.query_records(grant, STREAM, limit=PAGE, cursor=page.next_cursor)
    cursor_far = page.next_cursor
    last = records - PAGE * (far - 1)  # the last record of page far - 1
    page_far_at, page_far_id = _at(last), f"e{last:07d}"
    assert page.rows[-1].ref.record_id == page_far_id
    sender = "s042@example.com"
    day = (_at(records // 2), _at(records // 2 + 1440))
    conn = engine.connect()
    first_id = f"e{records - 1:07d}"

    def floor(sql: str, **params: Any) -> Callable[[], object]:
        statement = text(sql)
        return lambda: conn.execute(statement, params).all()

    cases: list[tuple[str, Callable[[], object], Callable[[], object]]] = [
        (
            "first page",
            lambda: store.query_records(grant, STREAM, limit=PAGE),
            floor("SELECT * FROM plain_events ORDER BY at DESC, id DESC LIMIT 25"),
        ),
        (
            f"page {far:,}",
            lambda: store.query_records(grant, STREAM, limit=PAGE, cursor=cursor_far),
            floor(
                "SELECT * FROM plain_events WHERE (at, id) < (:at, :id)"
                " ORDER BY at DESC, id DESC LIMIT 25",
                at=page_far_at,
                id=page_far_id,
            ),
        ),
        (
            "selective exact filter (1 in 1,000)",
            lambda: store.query_records(grant, STREAM, limit=PAGE, filter={"sender": sender}),
            floor(
                "SELECT * FROM plain_events WHERE sender = :s ORDER BY at DESC, id DESC LIMIT 25",
                s=sender,
            ),
        ),
        (
            "range on the order field (one day)",
            lambda: store.query_records(
                grant, STREAM, limit=PAGE, filter={"at": {"gte": day[0], "lt": day[1]}}
            ),
            floor(
                "SELECT * FROM plain_events WHERE at >= :a AND at < :b"
                " ORDER BY at DESC, id DESC LIMIT 25",
                a=day[0],
                b=day[1],
            ),
        ),
        (
            'count="exact"',
            lambda: store.query_records(grant, STREAM, limit=1, count="exact"),
            floor("SELECT count(*) FROM plain_events"),
        ),
        (
            'count="exact", selective filter',
            lambda: store.query_records(
                grant, STREAM, limit=1, count="exact", filter={"sender": sender}
            ),
            floor("SELECT count(*) FROM plain_events WHERE sender = :s", s=sender),
        ),
    ]
    assert store.query_records(grant, STREAM, limit=1).rows[0].ref.record_id == first_id
    print(f"\n{backend}, {records:,} records, medians of {rounds} rounds\n")
    print("| case | library | raw SQL floor | library / floor |")
    print("| :--- | ---: | ---: | ---: |")
    for name, library, raw in cases:
        library()  # one warm-up each
        ours = median_ms(library, rounds)
        raw()
        theirs = median_ms(raw, rounds)
        print(f"| {name} | {ours:.1f} ms | {theirs:.2f} ms | {ours / theirs:.1f}x |", flush=True)
    conn.close()


if __name__ == "__main__":
    main()
