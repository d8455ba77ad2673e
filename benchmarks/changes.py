"""`query_records`' changes walk (docs/contract.md §11.2, "Changes") against a raw scan of the
change log, in one run:

    python -m benchmarks.changes [--records N] [--rounds R] [--backend sqlite|postgres]

The dataset: one stream of N email-sized records (`id`, `at` the stream's order and consent time
field, `sender`, `subject`, a 600-character `body`), ingested through the library in batches of
1,000 and cached (a SQLite file under `.benchmarks-data/`, a Postgres database
`pdpp_changes_<N>_<version>`). After each batch the batch before it is changed through the
library, so the log interleaves inserts and updates the way a live mailbox does: a quarter of
its records get a new `subject`, a quarter a new `body`, one in 50 a new `at` a year later (out
of the window below) and one in 100 is deleted.

Cases, each the first page of a walk from `beginning`:
- the floor: the first 26 rows of the connection's change log in its key order, raw SQL on the
  driver (what any walk reads at least);
- every field granted (no time window), 25 a page: the baseline every other case is a ratio of;
- `id`, `at`, `subject` granted and a time window on `at` holding all but the last tenth of the
  records (the case a correlated look-up per logged change made slow on Postgres), 25 and 100
  a page;
- the same fields under a window that starts halfway: the first page skips the first half's
  changes, which the grant cannot see (what a page costs grows with them: docs/decisions.md,
  "A changes page's work and the changes a grant cannot see").

Each is timed `--rounds` times after one warm-up; the medians, their ratio to the baseline and
the load average are printed as a Markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, text

from pdpp_store import Grant, Store

from ._million import build_and_measure, dataset_url, median_ms

CONNECTION = "bench"
STREAM = "mail"
MANIFEST: dict[str, Any] = {
    "connector_id": "pdpp-bench-changes",
    "streams": [
        {
            "name": STREAM,
            "primary_key": ["id"],
            "cursor_field": "at",
            "consent_time_field": "at",
            "schema": {
                "properties": {
                    "id": {"type": "string"},
                    "at": {"type": "string", "format": "date-time", "x_pdpp_role": "event-time"},
                    "sender": {"type": "string", "x_pdpp_role": "actor"},
                    "subject": {"type": "string", "x_pdpp_role": "primary-title"},
                    "body": {"type": "string"},
                }
            },
            "query": {"range_filters": {"at": ["gte", "gt", "lte", "lt"]}},
        }
    ],
}
START = datetime(2020, 1, 1, tzinfo=UTC)
VERSION = hashlib.sha256(repr(MANIFEST).encode() + b"v1").hexdigest()[:8]
BATCH = 1000
WORDS = [
    "invoice",
    "meeting",
    "travel",
    "report",
    "lunch",
    "budget",
    "review",
    "contract",
    "draft",
    "notes",
]


def _at(n: int, moved: bool = False) -> str:
    return (START + timedelta(minutes=n, days=366 if moved else 0)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _record(n: int, *, subject: int = 0, body: int = 0, moved: bool = False) -> dict[str, Any]:
    words = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(6))
    return {
        "id": f"m{n:07d}",
        "at": _at(n, moved),
        "sender": f"s{n % 500:03d}@example.com",
        "subject": f"{words} {n} rev {subject}",
        "body": (f"{words} body {n} rev {body}. " * 20)[:600],
    }


def _changed(start: int, stop: int) -> Iterator[dict[str, Any]]:
    """The changes made to records `start..stop` once the next batch is in (the docstring)."""
    for n in range(start, stop):
        if n % 4 == 0:
            yield _record(n, subject=1)
        elif n % 4 == 1:
            yield _record(n, body=1, moved=n % 50 == 1)


def _build(store: Store, engine: Engine, records: int) -> None:
    with engine.connect() as conn:
        done = conn.execute(
            text("SELECT count(*) FROM records WHERE connection_id = :c"), {"c": CONNECTION}
        ).scalar_one()
    if done >= records:
        return
    if done == 0:
        store.register_manifest(MANIFEST)
        store.add_connection(CONNECTION, MANIFEST["connector_id"])
    began = time.perf_counter()
    for start in range(int(done) - int(done) % BATCH, records, BATCH):
        stop = min(start + BATCH, records)
        store.upsert_records(CONNECTION, STREAM, [_record(n) for n in range(start, stop)])
        if start >= BATCH:
            store.upsert_records(CONNECTION, STREAM, list(_changed(start - BATCH, start)))
            for n in range(start - BATCH, start, 100):
                store.delete_record(CONNECTION, STREAM, f"m{n + 2:07d}")
        if start % 20_000 == 0:
            print(f"  {start:,} records in {time.perf_counter() - began:.0f} s", flush=True)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE" if engine.dialect.name == "sqlite" else "VACUUM ANALYZE"))


def _grant(fields: list[str] | None, since: str | None, until: str | None) -> Grant:
    stream: dict[str, Any] = {"name": STREAM, "instance_ids": [CONNECTION]}
    if fields is not None:
        stream["fields"] = fields
    if since is not None or until is not None:
        window: dict[str, Any] = {"field": "at"}
        if since is not None:
            window["since"] = since
        if until is not None:
            window["until"] = until
        stream["time_constraint"] = window
    return Grant.from_dict({"grant_id": "bench", "streams": [stream]})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    url = dataset_url(args.backend, "changes", args.records, VERSION)
    build_and_measure(url, args.records, _build, _measure, rounds=args.rounds, backend=args.backend)


def _measure(store: Store, engine: Engine, records: int, rounds: int, backend: str) -> None:
    some = ["id", "at", "subject"]
    window = _grant(some, _at(0), _at(records - records // 10))
    late = _grant(some, _at(records // 2), None)
    every = _grant(None, None, None)
    conn = engine.connect()
    floor_sql = text(
        "SELECT * FROM change_log WHERE connection_id = :c AND stream = :s"
        " ORDER BY change_seq, path LIMIT 26"
    )

    def walk(grant: Grant, limit: int) -> Callable[[], object]:
        return lambda: store.query_records(grant, STREAM, limit=limit, changes_since="beginning")

    cases: list[tuple[str, Callable[[], object]]] = [
        (
            "raw scan of the change log (26 rows)",
            lambda: conn.execute(floor_sql, {"c": CONNECTION, "s": STREAM}).all(),
        ),
        ("every field, 25 a page", walk(every, 25)),
        ("some fields and a time window, 25 a page", walk(window, 25)),
        ("some fields and a time window, 100 a page", walk(window, 100)),
        ("some fields, a window from halfway, 25 a page", walk(late, 25)),
    ]
    first = store.query_records(window, STREAM, limit=25, changes_since="beginning")
    assert len(first.rows) == 25, len(first.rows)
    print(
        f"\n{backend}, {records:,} records, medians of {rounds} rounds,"
        f" load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}\n"
    )
    print("| first page of a walk from `beginning` | time | / every field, 25 a page |")
    print("| :--- | ---: | ---: |")
    baseline = 0.0
    for name, run in cases:
        run()  # one warm-up each
        ours = median_ms(run, rounds)
        if name.startswith("every field"):
            baseline = ours
        ratio = f"{ours / baseline:.2f}x" if baseline else ""
        print(f"| {name} | {ours:.1f} ms | {ratio} |", flush=True)
    conn.close()


if __name__ == "__main__":
    main()
