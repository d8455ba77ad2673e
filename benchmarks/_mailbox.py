"""The mailbox the search benchmarks read: `SEARCH_RECORDS` email-sized records, cached.

Every record has a subject and a body of `BODY_CHARS` code points of mixed text (both searchable,
`MAIL_MANIFEST`). Every second record holds the `COMMON` term (so a first page of it is found in
the first records of the key order); the `RARE` term sits in one record of `RARE_EVERY` and in
the third-to-last one (so its first page needs the whole key range: the index, not a scan).

Environment:
    PDPP_BENCH_SEARCH_RECORDS   records in the mailbox (default 100,000; the smoke run: 2,000)
    PDPP_BENCH_SEARCH_BODY      code points per body (default 3,000)

Rules (as in `_bench`):
1. A mailbox is cached: a SQLite file `pdpp-mail-<records>-<version>.sqlite` under the
   benchmark data directory and a Postgres database `pdpp_mail_<records>_<version>`, where the
   version digests the dataset version of `_bench` (layout, folding, migrations) and everything
   else that decides the mailbox's rows, the search index's rule of which fields it holds
   included (`writes._indexed` applied to the mailbox's records). It counts as built only once
   `bench_mailbox` records it, so an interrupted build is finished; other versions of the same
   size are deleted when a run opens its own (the smoke run's small mailbox and the full run's
   stay side by side).
2. Postgres gets `VACUUM ANALYZE` after a build, as autovacuum would soon do.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from typing import Any

import psycopg
from sqlalchemy import text

from pdpp_store import Store
from pdpp_store._core.manifest import Manifest
from pdpp_store._core.values import encode_record
from pdpp_store._ops import writes

from ._bench import CONNECTION, data_dir, dataset_version
from ._text import field_text

__all__ = [
    "BODY_CHARS",
    "COMMON",
    "MAIL",
    "MAIL_MANIFEST",
    "RARE",
    "SEARCH_RECORDS",
    "mailbox_records",
    "open_mailbox",
    "rare_ids",
]

SEARCH_RECORDS = int(os.environ.get("PDPP_BENCH_SEARCH_RECORDS") or 100_000)
BODY_CHARS = int(os.environ.get("PDPP_BENCH_SEARCH_BODY") or 3000)
RARE = "wombatquasar"
RARE_EVERY = 20_000
COMMON = "zorblatt"
MAIL_CONNECTOR = "pdpp-bench-mail"
MAIL = "mail"
MAIL_MANIFEST: dict[str, Any] = {
    "connector_id": MAIL_CONNECTOR,
    "streams": [
        {
            "name": MAIL,
            "primary_key": ["id"],
            "schema": {
                "properties": {
                    "id": {"type": "string"},
                    "subject": {"type": "string"},
                    "body": {"type": "string"},
                }
            },
            "query": {"search": {"lexical_fields": ["subject", "body"]}},
        }
    ],
}
BATCH = 2000
_MAILBOX_VERSION = 1
"""Bump when the records `mailbox_records` makes change in a way the digest cannot see."""


def _has_rare(number: int, count: int) -> bool:
    return number % RARE_EVERY == RARE_EVERY // 2 or number == count - 3


def rare_ids(count: int = SEARCH_RECORDS) -> list[str]:
    """The ids of the records holding `RARE`, in key order."""
    return [f"m{n:07d}" for n in range(count) if _has_rare(n, count)]


def mailbox_records(count: int, prefix: str = "m") -> Iterator[dict[str, Any]]:
    """`count` email-sized records with ids `<prefix><number>` (7 digits: key order is number
    order)."""
    source = field_text("mixed", 400_000)
    for number in range(count):
        start = (number * 7919) % (len(source) - BODY_CHARS)
        body = source[start : start + BODY_CHARS]
        if number % 2 == 0:
            third = BODY_CHARS // 3
            body = body[:third] + f" the {COMMON.title()} is attached " + body[third:]
        if _has_rare(number, count):
            two_thirds = BODY_CHARS * 2 // 3
            body = body[:two_thirds] + f" {RARE.upper()} " + body[two_thirds:]
        yield {"id": f"{prefix}{number:07d}", "subject": f"Message {number}", "body": body}


def open_store(url: str) -> Store:
    """A store with the mail manifest registered and the mailbox's connection added."""
    store = Store.open(url)
    store.register_manifest(MAIL_MANIFEST)
    store.add_connection(CONNECTION, MAIL_CONNECTOR)
    return store


def _index_rule() -> list[list[object]]:
    """Which fields of the mailbox's records the SQLite search index holds (`writes._indexed`,
    applied to the first records): a cached mailbox built under another rule is rebuilt."""
    spec = Manifest.from_json(json.dumps(MAIL_MANIFEST)).spec(MAIL)
    assert spec is not None
    searchable = frozenset(spec.lexical_fields)
    return [
        [item.path, writes._indexed(item, searchable)]
        for number, record in enumerate(mailbox_records(2))
        for item in encode_record(record, spec, number).fields
    ]


def _version() -> str:
    parts = [dataset_version(), _MAILBOX_VERSION, BODY_CHARS, RARE, COMMON, RARE_EVERY]
    parts += [MAIL_MANIFEST, _index_rule()]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def _built(store: Store) -> bool:
    with store.engine.connect() as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS bench_mailbox (records INTEGER)"))
        conn.commit()
        return bool(conn.execute(text("SELECT count(*) FROM bench_mailbox")).scalar_one() > 0)


def _fill(store: Store, count: int) -> None:
    batch: list[dict[str, Any]] = []
    for record in mailbox_records(count):
        batch.append(record)
        if len(batch) == BATCH:
            store.upsert_records(CONNECTION, MAIL, batch)
            batch = []
    if batch:
        store.upsert_records(CONNECTION, MAIL, batch)
    with store.engine.connect() as conn:
        conn.execute(text("INSERT INTO bench_mailbox VALUES (:n)"), {"n": count})
        conn.commit()


def open_mailbox(backend: str, server: Any = None, count: int = SEARCH_RECORDS) -> Store:
    """The cached mailbox of `count` records on `backend` (built if missing). `server`: the
    `_postgres.PostgresServer` for Postgres."""
    version = _version()
    if backend == "sqlite":
        directory = data_dir()
        directory.mkdir(parents=True, exist_ok=True)
        stem = f"pdpp-mail-{count}-{version}.sqlite"
        for stale in directory.glob(f"pdpp-mail-{count}-*.sqlite*"):
            if not stale.name.startswith(stem):
                stale.unlink()
        store = open_store(f"sqlite:///{directory / stem}")
        if not _built(store):
            _fill(store, count)
        return store
    name = f"pdpp_mail_{count}_{version}"
    admin = server.admin()
    existing = {
        row[0]
        for row in admin.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"pdpp\\_mail\\_{count}\\_%",)
        ).fetchall()
    }
    for stale in sorted(existing - {name}):
        with contextlib.suppress(psycopg.errors.ObjectInUse):
            admin.execute(psycopg.sql.SQL("DROP DATABASE {}").format(psycopg.sql.Identifier(stale)))
    if name not in existing:
        server.create_database(name)
    store = open_store(server.database_url(name))
    if not _built(store):
        _fill(store, count)
        with server.connect(name) as conn:
            conn.execute("VACUUM ANALYZE")
    return store
