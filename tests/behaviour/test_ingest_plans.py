"""Ingestion stays linear on Postgres whatever autovacuum does: the store keeps the record tables'
planner statistics current.

Without statistics the planner takes the `(connection_id, stream)` prefix of the key for one row
and filters a batch's record ids over the whole stream: each batch scans every record already
present, and ingestion goes quadratic (measured: 824 → 343 records/s from 0 to 40,000 present;
with the upkeep, flat at 840-1,120/s). The proof here is the statistics themselves, read from the
catalogue after an ingestion with autovacuum switched off: the planner's row counts are within
a factor of the truth, so the key lookups are planned for the table as it is.
"""

from __future__ import annotations

import pytest
from _data import body, setup_mailbox
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from pdpp_store import Store
from pdpp_store._runtime import sync_url
from pdpp_store._sql import writes as sql

pytestmark = pytest.mark.postgres

RECORDS = 2000


def _run(url: str, *statements: str) -> dict[str, float]:
    """Runs the statements; the last one's rows as {name: number}."""
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            for statement in statements[:-1]:
                conn.execute(text(statement))
            rows = conn.execute(text(statements[-1])).all()
            conn.commit()
    finally:
        engine.dispose()
    return {name: float(value) for name, value in rows}


def test_statistics_follow_the_rows_written(pg_db_url: str) -> None:
    _run(  # as on a server where autovacuum is off
        pg_db_url,
        *(f"ALTER TABLE {table} SET (autovacuum_enabled = false)" for table in sql.RECORD_TABLES),
        "SELECT 'done', 1",
    )
    with Store.open(pg_db_url, batch_size=200) as store:
        setup_mailbox(store)
        store.upsert_records(
            "cin_mail", "message_bodies", (body(f"e{n}", "short text") for n in range(RECORDS))
        )
    names = ", ".join(f"'{table}'" for table in sql.RECORD_TABLES)
    estimated = _run(
        pg_db_url,
        f"SELECT relname, reltuples FROM pg_class WHERE relname IN ({names}) AND relkind = 'r'",
    )
    actual = _run(
        pg_db_url,
        " UNION ALL ".join(
            f"SELECT '{table}', count(*) FROM {table}" for table in sql.RECORD_TABLES
        ),
    )
    assert actual["records"] == RECORDS
    for table in sql.RECORD_TABLES:
        assert actual[table] / 2 <= estimated[table] <= actual[table], (table, estimated, actual)
