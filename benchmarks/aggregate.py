"""`aggregate` against the raw SQL floor (docs/performance.md goal 13), in one run:

    python -m benchmarks.aggregate [--records N] [--rounds R] [--backend sqlite|postgres]
    python -m benchmarks.aggregate --ingest [--without counts|indexes] [--rounds R]
        [--backend sqlite|postgres]

The dataset: one stream of N small records (`id`; `at`, a date-time over three years; `sender`,
one of 1,000 values; `label`, one of 20; `amount`, a number with two decimals), cached (a SQLite
file under `.benchmarks-data/`, a Postgres database `pdpp_aggregate_<N>_<version>`). The first
`BASE` records go through the library (`upsert_records`); the rest are copies of them made
inside the database under new record ids, row for row as the library wrote them (`records`,
`fields`, `field_chunks`, `field_values`), so a million records take minutes, not an hour. Beside
them in the same database, the floor: a plain table of the same rows (one column per field; on
Postgres `at` is a `timestamptz` and `amount` a `numeric`), indexed for each question.

Cases, under a grant of the one connection and every field:
- count by month in `America/New_York` (a zone with DST). The floor on Postgres groups
  `date_trunc('month', at AT TIME ZONE zone)`; SQLite has no time zones, so its floor groups
  the UTC month (`substr(at, 1, 7)`): the cheapest GROUP BY of a month, not the same work;
- count by `sender` (a declared `group_by`), 25 largest groups: `GROUP BY sender`;
- `sum` of `amount` where `label` is one value (1 record in 20): `sum(amount) WHERE label = ?`.
Each is timed `--rounds` times after one warm-up, the library and the floor alternating; the
medians and their ratio are printed as a Markdown table with the load average.

`--ingest` measures what the counts per value of migration 0016 (`value_counts`, kept by every
write; `--without counts`, the default) or the indexes of migration 0014 (`ix_records_live`,
`ix_field_values_own_instants`; `--without indexes`) cost a write: two scratch stores, one
with them and one without (the counts' statements left out of its writes, or the indexes
dropped), each given the same `INGEST_BATCH` new records per round through
`upsert_records`, the two alternating (and which goes first alternating); the median batch of
each, and their ratio. The scratch stores are removed afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Engine, create_engine, text

from pdpp_store import Grant, Store
from pdpp_store._sql import values as value_sql

from ._million import ADMIN_URL, build_and_measure, dataset_url, median_ms, table_count

CONNECTION = "bench"
STREAM = "events"
ZONE = "America/New_York"
MANIFEST: dict[str, Any] = {
    "connector_id": "pdpp-bench-aggregate",
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
                    "label": {"type": "string"},
                    "amount": {"type": "number"},
                }
            },
            "query": {
                "range_filters": {"at": ["gte", "lt"]},
                "aggregations": {
                    "count": True,
                    "sum": ["amount"],
                    "group_by": ["sender", "label"],
                    "group_by_time": ["at"],
                },
            },
        }
    ],
}
START = datetime(2021, 1, 1, tzinfo=UTC)
SPAN_MINUTES = 3 * 365 * 24 * 60
VERSION = hashlib.sha256(repr(MANIFEST).encode()).hexdigest()[:8]
BASE = 50_000
BATCH = 5000
COPY_TABLES = ("records", "fields", "field_chunks", "field_values")
INGEST_BATCH = 1000
INDEXES_0014 = ("ix_records_live", "ix_field_values_own_instants")


def _at(n: int) -> str:
    return (START + timedelta(minutes=(n * SPAN_MINUTES) // BASE)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _record(n: int) -> dict[str, Any]:
    """Record `n`: its fields repeat every `BASE` records (the copies), its id does not."""
    base = n % BASE
    return {
        "id": f"e{n:07d}",
        "at": _at(base),
        "sender": f"s{base % 1000:03d}@example.com",
        "label": f"label{base % 20:02d}",
        "amount": float(Decimal((base * 7919) % 1_000_000) / 100),
    }


def _records(start: int, stop: int) -> Iterator[dict[str, Any]]:
    return (_record(n) for n in range(start, stop))


def _columns(engine: Engine, table: str) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(text(f"SELECT * FROM {table} LIMIT 0")).keys())


def _build(store: Store, engine: Engine, records: int) -> None:
    """The stream (BASE records through the library, the rest copied inside the database, one
    slice of ids per transaction) and the plain table; idempotent."""
    done = table_count(engine, "records")
    if done >= records and table_count(engine, "plain_events") == records:
        return
    began = time.perf_counter()
    if done == 0:
        store.register_manifest(MANIFEST)
        store.add_connection(CONNECTION, MANIFEST["connector_id"])
    first = min(records, BASE)
    for start in range(min(done, first), first, BATCH):
        store.upsert_records(CONNECTION, STREAM, list(_records(start, min(start + BATCH, first))))
    print(f"  {first:,} records through the library in {time.perf_counter() - began:.0f} s")
    key = "connection_id = :c AND stream = :s AND record_id >= :lo AND record_id < :hi"
    statements = []
    for table in COPY_TABLES:
        columns = _columns(engine, table)
        picked = ", ".join(":p || record_id" if c == "record_id" else c for c in columns)
        statements.append(
            text(
                f"INSERT INTO {table} ({', '.join(columns)}) SELECT {picked} FROM {table}"
                f" WHERE {key}"
            )
        )
    for start in range(max(table_count(engine, "records"), first), records, BASE):
        # copy k of the BASE records (ids e0000000..) is named c<k>-e0000000..
        with engine.begin() as conn:
            for statement in statements:
                params = {"c": CONNECTION, "s": STREAM, "p": f"c{start // BASE:03d}-"}
                conn.execute(statement, {**params, "lo": "e", "hi": "f"})
        if start % 100_000 == 0:
            print(f"  {start:,} records in {time.perf_counter() - began:.0f} s", flush=True)
    _plain(engine, records)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE" if engine.dialect.name == "sqlite" else "VACUUM ANALYZE"))
    print(f"  built in {time.perf_counter() - began:.0f} s", flush=True)


def _plain(engine: Engine, records: int) -> None:
    postgres = engine.dialect.name == "postgresql"
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS plain_events"))
        conn.execute(
            text(
                "CREATE TABLE plain_events (id TEXT PRIMARY KEY,"
                f" at {'TIMESTAMPTZ' if postgres else 'TEXT'} NOT NULL, sender TEXT NOT NULL,"
                f" label TEXT NOT NULL, amount {'NUMERIC' if postgres else 'REAL'} NOT NULL)"
            )
        )
        for start in range(0, records, 50_000):
            conn.execute(
                text("INSERT INTO plain_events VALUES (:id, :at, :sender, :label, :amount)"),
                list(_records(start, min(start + 50_000, records))),
            )
        conn.execute(text("CREATE INDEX ix_plain_at ON plain_events (at)"))
        conn.execute(text("CREATE INDEX ix_plain_sender ON plain_events (sender)"))
        conn.execute(text("CREATE INDEX ix_plain_label ON plain_events (label, amount)"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--ingest", action="store_true", help="the cost of counts or indexes")
    parser.add_argument("--without", choices=["counts", "indexes"], default="counts")
    args = parser.parse_args()
    if args.ingest:
        _ingest(args.backend, args.rounds, args.without)
        return
    if args.records % BASE and args.records > BASE:
        parser.error(f"--records: a multiple of {BASE:,} above {BASE:,}")
    url = dataset_url(args.backend, "aggregate", args.records, VERSION)
    build_and_measure(url, args.records, _build, _measure, rounds=args.rounds, backend=args.backend)


@contextmanager
def _scratch(backend: str, name: str) -> Iterator[str]:
    """A scratch store's URL, removed afterwards (a temporary file, or a Postgres database)."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield f"sqlite:///{directory}/{name}.sqlite"
        return
    database = f"pdpp_aggregate_ingest_{name}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}"'))
            conn.execute(text(f'CREATE DATABASE "{database}"'))
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{database}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def _uncounted() -> Iterator[None]:
    """Writes that leave `value_counts` alone (the statements of `_sql.values` Rule 5 left out),
    for `--ingest --without counts` only: the counts are wrong afterwards."""
    saved = (value_sql.count_values, value_sql.uncount_values)
    value_sql.count_values = lambda rows: None
    value_sql.uncount_values = lambda *args: ()  # type: ignore[assignment]
    try:
        yield
    finally:
        value_sql.count_values, value_sql.uncount_values = saved


def _ingest(backend: str, rounds: int, without: str) -> None:
    """Writes with and without 0016's counts or 0014's indexes, alternating (the module's
    `--ingest`)."""
    with _scratch(backend, "with") as with_url, _scratch(backend, "without") as without_url:
        stores = {True: Store.open(with_url), False: Store.open(without_url)}
        try:
            for indexed, store in stores.items():
                store.register_manifest(MANIFEST)
                store.add_connection(CONNECTION, MANIFEST["connector_id"])
                if not indexed and without == "indexes":
                    with store.engine.begin() as conn:
                        for index in INDEXES_0014:
                            conn.execute(text(f"DROP INDEX {index}"))
            times: dict[bool, list[float]] = {True: [], False: []}
            for round_ in range(rounds):
                batch = list(_records(round_ * INGEST_BATCH, (round_ + 1) * INGEST_BATCH))
                for indexed in (True, False) if round_ % 2 == 0 else (False, True):
                    plain = not indexed and without == "counts"
                    with _uncounted() if plain else nullcontext():
                        began = time.perf_counter()
                        stores[indexed].upsert_records(CONNECTION, STREAM, batch)
                        times[indexed].append((time.perf_counter() - began) * 1000)
        finally:
            for store in stores.values():
                store.close()
    with_ms, without_ms = statistics.median(times[True]), statistics.median(times[False])
    print(f"\n{backend}, {rounds} batches of {INGEST_BATCH:,} new records into each store\n")
    what = "0016's counts" if without == "counts" else "0014's indexes"
    print(f"| {what} | median batch | records/s |")
    print("| :--- | ---: | ---: |")
    for label, ms in (("with", with_ms), ("without", without_ms)):
        print(f"| {label} | {ms:.0f} ms | {INGEST_BATCH / ms * 1000:,.0f} |")
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\nwith / without: {with_ms / without_ms:.3f}x; load average (1, 5, 15 min) {load}")


def _measure(store: Store, engine: Engine, records: int, rounds: int, backend: str) -> None:
    grant = Grant.from_dict(
        {"grant_id": "bench", "streams": [{"name": STREAM, "instance_ids": [CONNECTION]}]}
    )
    postgres = backend == "postgres"
    conn = engine.connect()

    def floor(sql: str, **params: Any) -> Callable[[], object]:
        statement = text(sql)
        return lambda: conn.execute(statement, params).all()

    month_floor = (
        "SELECT date_trunc('month', at AT TIME ZONE :z) AS m, count(*) FROM plain_events"
        " GROUP BY m ORDER BY m"
        if postgres
        else "SELECT substr(at, 1, 7) AS m, count(*) FROM plain_events GROUP BY m ORDER BY m"
    )
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            f"count by month in {ZONE}",
            lambda: store.aggregate(
                grant, STREAM, group_by_time="at", granularity="month", time_zone=ZONE, limit=100
            ),
            floor(month_floor, **({"z": ZONE} if postgres else {})),
        ),
        (
            "count by sender (group_by), 25 largest",
            lambda: store.aggregate(grant, STREAM, group_by="sender", limit=25),
            floor(
                "SELECT sender, count(*) AS n FROM plain_events GROUP BY sender"
                " ORDER BY n DESC, sender LIMIT 25"
            ),
        ),
        (
            "sum of amount, filter label (1 in 20)",
            lambda: store.aggregate(
                grant, STREAM, metric="sum", field="amount", filter={"label": "label07"}
            ),
            floor("SELECT sum(amount) FROM plain_events WHERE label = :l", l="label07"),
        ),
    ]
    _check(store=store, grant=grant, conn=conn, records=records, postgres=postgres, cases=cases)
    print(f"\n{backend}, {records:,} records, medians of {rounds} rounds\n")
    print("| case | library | raw SQL floor | library / floor |")
    print("| :--- | ---: | ---: | ---: |")
    for name, library, raw in cases:
        library()
        raw()
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(rounds):  # alternating, so a change of load falls on both
            ours.append(median_ms(library, 1))
            theirs.append(median_ms(raw, 1))
        mine, floor_ms = statistics.median(ours), statistics.median(theirs)
        print(
            f"| {name} | {mine:.0f} ms | {floor_ms:.0f} ms | {mine / floor_ms:.1f}x |", flush=True
        )
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"\nload average (1, 5, 15 min) at the end: {load} on {os.cpu_count()} CPUs")
    conn.close()


def _check(
    *,
    store: Store,
    grant: Grant,
    conn: Any,
    records: int,
    postgres: bool,
    cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]],
) -> None:
    """The library and the floor agree where they ask the same question (the dataset is what
    the benchmark says it is)."""
    by_sender = cases[1][1]()
    floor_sender = cases[1][2]()
    assert [(g.key, g.records) for g in by_sender.groups] == [tuple(r) for r in floor_sender]
    total = cases[2][1]().value
    floor_total = cases[2][2]()[0][0]
    exact = sum(
        (Decimal(repr(r["amount"])) for r in _records(0, records) if r["label"] == "label07"),
        Decimal(0),
    )
    assert total == (int(exact) if exact == exact.to_integral_value() else float(exact)), total
    if postgres:
        assert Decimal(floor_total) == exact
    months = cases[0][1]()
    assert sum(g.records for g in months.groups) + months.other_count == records


if __name__ == "__main__":
    main()
