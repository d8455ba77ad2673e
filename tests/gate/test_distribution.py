"""Ready to scale out: the migrated schema and the library's SQL keep Citus's rules.

The rules are in `tests/_distribution.py`. Three layers of proof:
- the migrated Postgres schema: every table classified, every key holds its distribution column;
- every statement the operations send, under narrow and wide grants (here, in one test);
- every statement the whole test session sends to Postgres (`tests/conftest.py` checks them when
  the session ends and fails the run on a violation).
The checker itself is shown to bite on statements that break each rule.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _data import attachment, body, grant, owner, ref_id, setup_mailbox
from _distribution import (
    BLOB_TABLES,
    REFERENCE_TABLES,
    StatementRecorder,
    record_tables_of,
    schema_violations,
    sqlite_only_violations,
    statement_violations,
)
from sqlalchemy import create_engine, event
from sqlalchemy.pool import NullPool

from pdpp_store import Store
from pdpp_store._runtime import observing, sync_url

pytestmark = pytest.mark.postgres

RECORDS = frozenset(
    {"records", "fields", "field_chunks", "search_words", "search_word_lists", "search_vocabulary"}
)


def test_migrated_schema_keeps_the_rules(pg_db_url: str) -> None:
    engine = create_engine(sync_url(pg_db_url), poolclass=NullPool)
    try:
        assert schema_violations(engine) == []
        tables = record_tables_of(engine)
        assert {"records", "fields", "field_chunks"} <= tables
        assert not tables & (REFERENCE_TABLES | BLOB_TABLES)
    finally:
        engine.dispose()


def test_sqlite_only_tables_are_classified_and_keyed_by_connection(tmp_path: Path) -> None:
    """The search index's SQLite side table never reaches Postgres, but is classified and led
    by `connection_id` like every record table; an unclassified one is reported."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    Store.open(url).close()
    engine = create_engine(url, poolclass=NullPool)
    try:
        assert sqlite_only_violations(engine) == []
        with engine.begin() as conn:
            conn.exec_driver_sql("CREATE TABLE stray (connection_id TEXT, x TEXT)")
        assert sqlite_only_violations(engine) == [
            "table stray is not classified (record, blob or reference)"
        ]
    finally:
        engine.dispose()


def test_every_operation_keeps_the_rules(pg_db_url: str) -> None:
    recorder = StatementRecorder()
    with Store.open(pg_db_url) as store, observing(recorder):
        event.listen(store.engine, "before_cursor_execute", recorder)
        setup_mailbox(store)
        blob = store.put_blob(b"%PDF-1.7 " * 100, "application/pdf")
        store.upsert_records("cin_mail", "message_bodies", [body("e1", "an invoice " * 500)])
        store.upsert_records("cin_mail", "attachments", [attachment("a1", blob.as_ref())])
        narrow = grant(
            {
                "name": "message_bodies",
                "instance_ids": ["cin_mail"],
                "fields": ["id", "body_text"],
                "resources": ["e1"],
                "time_constraint": {"field": "message_received_at", "since": "2020-01-01T00:00Z"},
            },
            {"name": "attachments", "instance_ids": ["cin_mail"]},
        )
        for g in (owner(), narrow):
            ref = ref_id("e1")
            first = store.read_field_window(g, ref, "body_text", limit_chars=100)
            store.read_field_window(g, ref, "body_text", cursor=first.next_cursor)
            store.read_field_window(g, ref, "body_text", q="INVOICE", before_chars=10)
            store.read_record(g, ref)
            store.describe_field(g, ref, "body_text")
        store.blob_info(narrow, blob.blob_id)
        store.read_blob_range(narrow, blob.blob_id, 0, 10)
        store.read_record(narrow, ref_id("a1", stream="attachments"))
        store.delete_record("cin_mail", "message_bodies", "e1")
        setup_mailbox(store, "cin_mail_2")  # a word ranking over two connections
        store.upsert_records("cin_mail_2", "message_bodies", [body("e2", "invoices " * 9)])
        store.search(grant({"name": "message_bodies", "fields": ["id", "body_text"]}), "invoice")
    assert len(recorder.statements) > 10
    assert recorder.violations(RECORDS) == {}


@pytest.mark.parametrize(
    ("sql", "problem"),
    [
        (
            "SELECT * FROM records JOIN fields ON fields.record_id = records.record_id",
            "not all tied by equality on connection_id",
        ),
        (
            "SELECT * FROM fields WHERE fields.connection_id = %(a)s AND EXISTS "
            "(SELECT * FROM field_chunks WHERE field_chunks.connection_id = %(b)s)",
            "not all tied by equality on connection_id",
        ),
        (
            "SELECT * FROM records, fields WHERE records.connection_id IN (%(a)s, %(b)s) "
            "AND fields.connection_id IN (%(a)s, %(b)s)",
            "not all tied by equality on connection_id",
        ),
        (
            "SELECT * FROM blobs WHERE EXISTS (SELECT * FROM fields "
            "WHERE fields.blob_id = blobs.blob_id)",
            "touches record tables and blob tables",
        ),
        (
            "DELETE FROM field_chunks WHERE EXISTS (SELECT * FROM fields "
            "WHERE fields.record_id = field_chunks.record_id)",
            "not all tied by equality on connection_id",
        ),
        (  # two parameters: two shards
            "DELETE FROM search_words AS w WHERE w.connection_id = %(a)s AND w.ctid = ANY (ARRAY("
            "SELECT x.ctid FROM search_words AS x WHERE x.connection_id = %(b)s))",
            "not all tied by equality on connection_id",
        ),
        (
            "SELECT 1 FROM blobs UNION ALL SELECT 1 FROM records JOIN fields "
            "ON fields.stream = records.stream",
            "not all tied by equality on connection_id",
        ),
        (
            "SELECT * FROM blobs JOIN blob_chunks ON blob_chunks.chunk_no = 0",
            "not all tied by equality on blob_id",
        ),
        (  # a derived table's column that is an expression of connection_id carries nothing
            "SELECT * FROM (SELECT fields.connection_id || '' AS connection_id FROM fields) AS f "
            "JOIN records ON records.connection_id = f.connection_id",
            "not all tied by equality on connection_id",
        ),
        (  # nor does one named connection_id that is another column
            "WITH w AS (SELECT fields.stream AS connection_id FROM fields) SELECT * FROM w "
            "JOIN LATERAL (SELECT records.record_id FROM records "
            "WHERE records.connection_id = w.connection_id) AS r ON true",
            "not all tied by equality on connection_id",
        ),
    ],
)
def test_the_checker_bites(sql: str, problem: str) -> None:
    assert any(problem in found for found in statement_violations(sql, RECORDS))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM records JOIN fields ON fields.connection_id = records.connection_id",
        "SELECT * FROM fields WHERE fields.connection_id = %(c)s AND EXISTS "
        '(SELECT * FROM records WHERE records.connection_id = %(c)s::VARCHAR COLLATE "C")',
        "SELECT * FROM fields AS f WHERE f.connection_id = %(c)s AND EXISTS (SELECT * FROM "
        "fields AS g WHERE g.connection_id = f.connection_id)",
        "SELECT * FROM blobs JOIN blob_chunks ON blob_chunks.blob_id = blobs.blob_id",
        "INSERT INTO streams (connector_id) VALUES (%(c)s)",
        "SELECT count(*) FROM records UNION ALL SELECT count(*) FROM fields",
        "WITH w AS (SELECT fields.connection_id, fields.record_id FROM fields WHERE "
        "fields.connection_id IN (%(a)s, %(b)s) UNION ALL SELECT c.connection_id, c.record_id "
        "FROM json_rows AS c) SELECT * FROM (SELECT p.connection_id FROM w JOIN LATERAL "
        "(SELECT records.connection_id FROM records WHERE records.connection_id = "
        "w.connection_id) AS p ON true) AS d JOIN field_chunks "
        "ON field_chunks.connection_id = d.connection_id",
        # a DELETE routed to one shard: its own WHERE and its subquery's by one parameter
        "DELETE FROM search_words AS w WHERE w.connection_id = %(c)s AND w.ctid = ANY (ARRAY("
        "SELECT x.ctid FROM search_words AS x WHERE x.connection_id = %(c)s))",
        "UPDATE field_chunks SET lookahead = (SELECT nxt.text FROM field_chunks AS nxt WHERE "
        "nxt.connection_id = field_chunks.connection_id) WHERE EXISTS (SELECT 1 FROM fields "
        "WHERE fields.connection_id = field_chunks.connection_id)",
    ],
)
def test_the_checker_passes_what_citus_routes(sql: str) -> None:
    assert statement_violations(sql, RECORDS) == []
