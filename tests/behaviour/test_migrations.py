"""Migrations: one Alembic history brings SQLite and Postgres to exactly the package's schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _data import MAILBOX, body, run_alembic, setup_mailbox
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect
from sqlalchemy import text as sa_text

from pdpp_store import Grant, NotFound, Store
from pdpp_store._runtime import sync_url
from pdpp_store._sql.tables import SEARCH_INDEX_OBJECTS, metadata

ROOT = Path(__file__).resolve().parents[2]


def _search_object(difference: object) -> str | None:
    """The name of a search-index object a schema difference is about, if it is one."""
    if isinstance(difference, tuple) and difference[0] in {"remove_table", "remove_index"}:
        name = getattr(difference[1], "name", None)
        return name if isinstance(name, str) else None
    return None


def _search_objects_present(conn: Any) -> set[str]:
    if conn.dialect.name == "sqlite":
        query = "SELECT name FROM sqlite_master WHERE name LIKE 'search%%'"
    else:
        query = (
            "SELECT indexname FROM pg_indexes"
            " WHERE tablename IN ('field_chunks', 'search_vocabulary')"
        )
    return {row[0] for row in conn.exec_driver_sql(query)}


def test_open_migrates_to_exactly_the_package_metadata(db_url: str) -> None:
    """The schema is the metadata's, plus exactly the search index's objects (which the
    metadata cannot spell, see `tables.SEARCH_INDEX_OBJECTS`), all present."""
    Store.open(db_url).close()
    engine = create_engine(sync_url(db_url))
    try:
        with engine.connect() as conn:
            differences = compare_metadata(MigrationContext.configure(conn), metadata)
            dialect = conn.dialect.name
            present = _search_objects_present(conn)
    finally:
        engine.dispose()
    expected = SEARCH_INDEX_OBJECTS[dialect]
    assert present >= expected
    assert [d for d in differences if _search_object(d) not in expected] == []
    assert {_search_object(d) for d in differences} <= expected


def test_the_search_index_migration_backfills_and_downgrades(db_url: str) -> None:
    """0005 builds the index from chunks written before it (the backfill), so late matches and
    the search's index phase find them; its downgrade removes every object it made."""
    from unittest import mock

    from _data import owner, ref_id

    from pdpp_store._core.values import CHUNK_CHARS
    from pdpp_store._ops import search as search_ops
    from pdpp_store._sql.index import SCAN_CHUNKS

    late = (SCAN_CHUNKS + 2) * CHUNK_CHARS + 7
    text = "." * late + "Okapi" + "." * 50
    with Store.open(db_url) as store:
        setup_mailbox(store)
        store.upsert_records(
            MAILBOX,
            "message_bodies",
            [body("a", "nothing"), body("b", "okapi first"), body("c", text)],
        )
    run_alembic(db_url, "downgrade", "0004")
    engine = create_engine(sync_url(db_url))
    try:
        with engine.connect() as conn:
            assert _search_objects_present(conn) & SEARCH_INDEX_OBJECTS[conn.dialect.name] == set()
    finally:
        engine.dispose()
    run_alembic(db_url, "upgrade", "head")
    with Store.open(db_url) as store:
        window = store.read_field_window(owner(), ref_id("c"), "body_text", q="OKAPI")
        assert window.match_start_chars == late
        with mock.patch.object(search_ops, "SCAN_RECORDS", 1):
            hits = store.search(owner(), "okapi").to_dict()["data"]
        assert [hit["id"] for hit in hits] == [ref_id("b"), ref_id("c")]


def test_command_line_upgrade_and_downgrade_round_trip(db_url: str) -> None:
    Store.open(db_url).close()  # at head
    run_alembic(db_url, "downgrade", "base")
    engine = create_engine(sync_url(db_url))
    try:
        left = set(inspect(engine).get_table_names()) - {"alembic_version"}
        assert left == set()
        run_alembic(db_url, "upgrade", "head")
        engine.dispose()
        assert set(inspect(engine).get_table_names()) >= set(metadata.tables)
    finally:
        engine.dispose()
    # and a store opens on it without migrating again
    Store.open(db_url).close()


def test_postgres_storage_settings_are_applied(pg_db_url: str) -> None:
    Store.open(pg_db_url).close()
    engine = create_engine(sync_url(pg_db_url))
    try:
        with engine.connect() as conn:
            options = conn.exec_driver_sql(
                "select reloptions from pg_class where relname = 'field_chunks'"
            ).scalar_one()
            storage = conn.exec_driver_sql(
                "select attstorage from pg_attribute a join pg_class c on c.oid = a.attrelid "
                "where c.relname = 'blob_chunks' and a.attname = 'data'"
            ).scalar_one()
            collation = conn.exec_driver_sql(
                "select collation_name from information_schema.columns "
                "where table_name = 'field_chunks' and column_name = 'text'"
            ).scalar_one()
    finally:
        engine.dispose()
    assert "toast_tuple_target=8160" in options
    assert storage == "e"
    assert collation == "C"


def test_reopening_keeps_data_and_does_not_migrate_again(db_url: str) -> None:
    with Store.open(db_url) as store:
        blob = store.put_blob(b"kept", "text/plain")
    with Store.open(db_url) as store:
        assert store.put_blob(b"kept", "text/plain") == blob


def test_the_lookahead_migration_matches_the_writer() -> None:
    """Rows backfilled by migration 0002 and rows the store writes carry the same look-ahead."""
    import importlib.util

    from pdpp_store._core.values import LOOKAHEAD_CHARS

    path = ROOT / "migrations" / "versions" / "0002_chunk_lookahead.py"
    spec = importlib.util.spec_from_file_location("migration_0002", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.LOOKAHEAD_CHARS == LOOKAHEAD_CHARS


def test_dropping_the_chunk_count_keeps_data_and_its_downgrade_counts_the_chunks(
    db_url: str,
) -> None:
    """0003 drops `fields.chunk_count` on a store holding data; downgrading to 0002 derives it
    again from the chunks (3 for 2100 code points, none for an empty value)."""
    with Store.open(db_url) as store:
        setup_mailbox(store)
        store.upsert_records(MAILBOX, "message_bodies", [body("e1", "x" * 2100), body("e2", "")])
    run_alembic(db_url, "downgrade", "0002")
    engine = create_engine(sync_url(db_url))
    try:
        with engine.connect() as conn:
            counts: dict[str, int] = dict(
                conn.exec_driver_sql(
                    "select record_id, chunk_count from fields where path = 'body_text'"
                ).all()
            )
        assert counts == {"e1": 3, "e2": 0}
        run_alembic(db_url, "upgrade", "head")
        with engine.connect() as conn:
            columns = {column["name"] for column in inspect(conn).get_columns("fields")}
        assert "chunk_count" not in columns
    finally:
        engine.dispose()
    with Store.open(db_url) as store:
        window = store.read_field_window(
            Grant.owner(MAILBOX, "message_bodies"), f"{MAILBOX}/message_bodies:e1", "body_text"
        )
        assert window.text == "x" * 2100


def test_the_refold_migration_rewrites_chunks_folded_by_v1(db_url: str) -> None:
    """Chunks stored under fold v1 (U+0130 kept as itself) are re-folded by 0004: afterwards
    "istanbul" finds "İstanbul", also across a chunk boundary (the look-ahead before it)."""
    from _data import owner, ref_id

    from pdpp_store import fold
    from pdpp_store._core.values import CHUNK_CHARS, LOOKAHEAD_CHARS

    def v1(value: str) -> str:
        return "".join(c if c == "\u0130" else fold(c) for c in value)

    text = "İstanbul " + "." * (CHUNK_CHARS - 12) + "ok İstanbul"
    chunks = [text[i : i + CHUNK_CHARS] for i in range(0, len(text), CHUNK_CHARS)]
    with Store.open(db_url) as store:
        setup_mailbox(store)
        store.upsert_records(MAILBOX, "message_bodies", [body("ist", text)])
        with store.engine.connect() as conn:  # what fold v1 had stored
            for number, chunk in enumerate(chunks):
                ahead = chunks[number + 1][:LOOKAHEAD_CHARS] if number + 1 < len(chunks) else ""
                conn.execute(
                    sa_text(
                        "UPDATE field_chunks SET folded = :f, lookahead = :a"
                        " WHERE record_id = 'ist' AND path = 'body_text' AND chunk_no = :n"
                    ),
                    {"f": v1(chunk), "a": v1(ahead) or None, "n": number},
                )
            conn.commit()
        missed = store.read_field_window
        try:
            missed(owner(), ref_id("ist"), "body_text", q="istanbul")
            raise AssertionError("the v1 state should not match")
        except NotFound:
            pass
    run_alembic(db_url, "downgrade", "0003")
    with Store.open(db_url) as store:  # migrates to head again
        first = store.read_field_window(owner(), ref_id("ist"), "body_text", q="istanbul")
        assert first.match_start_chars == 0
        across = store.read_field_window(owner(), ref_id("ist"), "body_text", q="ok istanbul")
        assert across.match_start_chars == CHUNK_CHARS - 3


def _automerge(db_url: str) -> int | None:
    """SQLite's search index's `automerge` setting (None: FTS5's default, 4)."""
    engine = create_engine(sync_url(db_url))
    try:
        with engine.connect() as conn:
            row = conn.exec_driver_sql(
                "SELECT v FROM search_chunks_config WHERE k = 'automerge'"
            ).first()
            return None if row is None else int(row[0])
    finally:
        engine.dispose()


def test_the_search_index_merges_eight_segments_at_a_time(sqlite_db_url: str) -> None:
    """Migration 0006 sets the index's `automerge` to 8 (its writes' cost then grows more slowly
    with the index's size) and its downgrade sets FTS5's default back."""
    Store.open(sqlite_db_url).close()
    assert _automerge(sqlite_db_url) == 8
    run_alembic(sqlite_db_url, "downgrade", "0005")
    assert _automerge(sqlite_db_url) == 4
    run_alembic(sqlite_db_url, "upgrade", "head")
    assert _automerge(sqlite_db_url) == 8


def _rows_naming(url: str, term: str) -> list[int]:
    """SQLite: the rowids of the search index's rows that are candidates for `term`."""
    from pdpp_store._sql.index import fts_query

    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql(
                "INSERT INTO search_chunks (search_chunks) VALUES ('integrity-check')"
            )
            query = sa_text("SELECT rowid FROM search_chunks WHERE search_chunks MATCH :q")
            return sorted(int(row[0]) for row in conn.execute(query, {"q": fts_query(term)}))
    finally:
        engine.dispose()


def _search_ids(url: str) -> dict[str, int]:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            rows = conn.exec_driver_sql("SELECT record_id, search_id FROM search_fields")
            return {str(record_id): int(search_id) for record_id, search_id in rows}
    finally:
        engine.dispose()


def test_the_whole_field_migration_rebuilds_the_index_both_ways(sqlite_db_url: str) -> None:
    """0007 rebuilds SQLite's index: a field of at most `SCAN_CHUNKS` chunks becomes one row
    named by its id, a longer one keeps a row per chunk below `INDEX_LONG_BASE`; its downgrade
    gives 0006's rows back (`id * 2**22 + chunk`). Both are intact (FTS5's own check), and
    search's index phase and a late match find the same records after each."""
    from unittest import mock

    from _data import owner, ref_id

    from pdpp_store._core.values import CHUNK_CHARS
    from pdpp_store._ops import search as search_ops
    from pdpp_store._sql.index import INDEX_LONG_BASE, INDEX_ROWID_SHIFT

    url = sqlite_db_url
    late = 34 * CHUNK_CHARS + 7  # past the 32 chunks a match scan reads itself
    records = [
        body("a", "nothing"),
        body("b", "x" * CHUNK_CHARS + "okapi in the second chunk"),
        body("c", "." * late + "Okapi" + "." * 50),
        body("d", ""),
    ]
    with Store.open(url) as store:
        setup_mailbox(store)
        store.upsert_records(MAILBOX, "message_bodies", records)
    ids = _search_ids(url)
    # c's chunk 33 holds the term's head in its look-ahead, as b's chunk 0 does.
    long = [INDEX_LONG_BASE + ids["c"] * INDEX_ROWID_SHIFT + n for n in (33, 34)]
    new_layout = [*long, ids["b"]]
    assert _rows_naming(url, "okapi") == new_layout

    def found() -> None:
        with Store.open(url) as store:
            window = store.read_field_window(owner(), ref_id("c"), "body_text", q="OKAPI")
            assert window.match_start_chars == late
            with mock.patch.object(search_ops, "SCAN_RECORDS", 1):
                hits = store.search(owner(), "okapi").to_dict()["data"]
            assert [hit["id"] for hit in hits] == [ref_id("b"), ref_id("c")]

    found()
    run_alembic(url, "downgrade", "0006")
    old_layout = [
        ids[r] * INDEX_ROWID_SHIFT + n for r, n in (("b", 0), ("b", 1), ("c", 33), ("c", 34))
    ]
    assert _rows_naming(url, "okapi") == old_layout
    assert _automerge(url) == 8
    run_alembic(url, "upgrade", "head")
    assert _rows_naming(url, "okapi") == new_layout
    assert _automerge(url) == 8
    found()


def _values_and_changes(url: str, connections: tuple[str, ...]) -> dict[str, Any]:
    """Per connection: its `field_values` rows, and its records in change order with their
    deletion flags (the values the writer gave have gaps where a record changed again, which
    no backfill can know of: the order is what a changes page walks)."""
    from _values import change_seqs, stored_values

    found: dict[str, Any] = {}
    for connection_id in connections:
        seqs, last = change_seqs(url, connection_id)
        assert last == max(seq for seq, _ in seqs.values())
        order = sorted(seqs, key=lambda record_id: seqs[record_id][0])
        found[connection_id] = (
            stored_values(url, connection_id),
            [(record_id, seqs[record_id][1]) for record_id in order],
        )
    return found


def test_the_values_migration_backfills_what_the_writer_stores(db_url: str) -> None:
    """0008 computes `field_values` and the change sequence for data written before it: after a
    downgrade to 0007 (which drops both) and an upgrade, every row is what the writer had
    stored, on two connections, through inserts, updates (a field changed, one removed), a
    delete and a record brought back; a string longer than the comparable bound is left out.
    Records keep their change order, and the writer goes on numbering after the last value."""
    from _values import STREAM, VALUES_MANIFEST

    connector = VALUES_MANIFEST["connector_id"]
    with Store.open(db_url, batch_size=2) as store:
        store.register_manifest(VALUES_MANIFEST)
        for connection_id in ("m1", "m2"):
            store.add_connection(connection_id, connector)
        first: list[dict[str, Any]] = [
            {"id": "a", "title": "Hello", "n": 2**53 + 1, "tags": ["x", "X", 1.5, None, [1]]},
            {"id": "b", "title": "z" * 300, "when": "2026-03-01T10:00:00+02:00", "flag": True},
            {"id": "c", "n": 0.1, "maybe": None, "anything": "2026-01-02", "doc": {"k": 1}},
            {"id": "d", "title": "", "n": 1.2345678901234567, "tags": []},
            {"id": "e", "title": "a\x00b", "raw": "QUJD" * 40},
        ]
        store.upsert_records("m1", STREAM, first)
        store.upsert_records("m2", STREAM, first[:3])
        store.upsert_records("m1", STREAM, [{"id": "a", "title": "Changed", "n": 7}])
        store.delete_record("m1", STREAM, "b")
        store.delete_record("m1", STREAM, "c")
        store.upsert_records("m1", STREAM, [first[2]])
        store.upsert_records("m2", STREAM, [{**first[1], "flag": False}])
    written = _values_and_changes(db_url, ("m1", "m2"))
    assert ("m1", "title", 0, "string", "hello") not in {r[:5] for r in written["m1"][0]}
    assert ("a", "title", 0, "string", "changed") in {r[:5] for r in written["m1"][0]}
    assert not any(row[0] == "b" for row in written["m1"][0])  # deleted: no values
    run_alembic(db_url, "downgrade", "0007")
    engine = create_engine(sync_url(db_url))
    try:
        tables = set(inspect(engine).get_table_names())
        columns = {column["name"] for column in inspect(engine).get_columns("records")}
    finally:
        engine.dispose()
    assert "field_values" not in tables
    assert "change_seq" not in columns
    run_alembic(db_url, "upgrade", "head")
    backfilled = _values_and_changes(db_url, ("m1", "m2"))
    for connection_id in ("m1", "m2"):
        values, order = backfilled[connection_id]
        assert sorted(values, key=repr) == sorted(written[connection_id][0], key=repr)
        assert order == written[connection_id][1]
    from _values import change_seqs

    _, before = change_seqs(db_url, "m1")
    with Store.open(db_url, batch_size=2) as store:  # and the writer goes on from there
        store.upsert_records("m1", STREAM, [{"id": "f"}])
    seqs, last = change_seqs(db_url, "m1")
    assert seqs["f"] == (before + 1, False)
    assert last == before + 1


def _change_log(url: str, connection_id: str) -> list[tuple[Any, ...]]:
    """A connection's `change_log` rows in change order, each with its change value's rank
    (values are numbered per connection; a record changed again leaves gaps)."""
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa_text(
                    "SELECT change_seq, path, stream, record_id, live_before, time_before"
                    " FROM change_log WHERE connection_id = :c ORDER BY change_seq, path"
                ),
                {"c": connection_id},
            ).all()
    finally:
        engine.dispose()
    ranks = {seq: rank for rank, seq in enumerate(sorted({row[0] for row in rows}))}
    return [(ranks[row[0]], row[1], row[2], row[3], bool(row[4]), row[5]) for row in rows]


def _changes_walk(store: Store, grant: Grant, connection_id: str, limit: int) -> list[Any]:
    """Every row of a changes walk from the beginning, the connection named alike."""
    from _values import STREAM

    rows: list[Any] = []
    page = store.query_records(grant, STREAM, changes_since="beginning", limit=limit)
    while True:
        for row in page.to_dict()["data"]:
            rows.append((row["record_id"], row.get("deleted", False), row.get("data")))
        if not page.has_more:
            return rows
        page = store.query_records(
            grant, STREAM, changes_since="beginning", limit=limit, cursor=page.next_cursor
        )


def test_the_change_log_migration_backfills_what_a_fresh_ingest_writes(db_url: str) -> None:
    """0010 gives each stored record the `change_log` row a fresh ingest of its current state
    writes: on a connection only ever inserted into, the writer's rows row for row; on one
    with updates (fields changed, removed, moved out of a time window), deletes and a record
    brought back, the same changes walks (every grant: all fields, some, a time window,
    `resources`; every page size) as a fresh connection holding the same records, written in
    the same change order. After it, the writer logs per field again."""
    from _values import STREAM, VALUES_MANIFEST

    connector = VALUES_MANIFEST["connector_id"]
    since = "2026-03-01T00:00:00Z"
    records: list[dict[str, Any]] = [
        {"id": "a", "title": "one", "n": 1, "when": "2026-03-02T10:00:00Z"},
        {"id": "b", "title": "two", "when": "2026-03-03T10:00:00Z", "flag": True},
        {"id": "c", "title": "three", "when": "2025-01-01T00:00:00Z"},
        {"id": "d", "n": 4, "when": "2026-03-04T00:00:00Z"},
        {"id": "e", "title": "five"},
    ]
    final: dict[str, dict[str, Any]] = {r["id"]: r for r in records}
    deleted: set[str] = set()
    with Store.open(db_url, batch_size=2) as store:
        store.register_manifest(VALUES_MANIFEST)
        for connection_id in ("m1", "m2"):
            store.add_connection(connection_id, connector)
        store.upsert_records("m1", STREAM, records)
        store.upsert_records("m2", STREAM, records)
        for changed in (
            {"id": "a", "title": "changed", "when": "2026-03-02T10:00:00Z"},  # n removed
            {**final["b"], "when": "2024-06-01T00:00:00Z"},  # out of the window
            {**final["c"], "when": "2026-03-05T00:00:00Z"},  # into it
        ):
            store.upsert_records("m2", STREAM, [changed])
            final[changed["id"]] = changed
        store.delete_record("m2", STREAM, "d")
        store.delete_record("m2", STREAM, "e")
        store.upsert_records("m2", STREAM, [final["e"]])  # brought back
        deleted.add("d")
    written = _change_log(db_url, "m1")
    assert [row[1:4] for row in written] == [("", STREAM, r["id"]) for r in records]
    run_alembic(db_url, "downgrade", "0009")
    engine = create_engine(sync_url(db_url))
    try:
        assert "change_log" not in set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    run_alembic(db_url, "upgrade", "head")
    assert _change_log(db_url, "m1") == written
    grants: list[dict[str, Any]] = [
        {"name": STREAM},
        {"name": STREAM, "fields": ["id", "n", "flag"]},
        {"name": STREAM, "time_constraint": {"field": "when", "since": since}},
        {"name": STREAM, "resources": ["a", "b", "d"], "fields": ["id", "title"]},
    ]
    with Store.open(db_url, batch_size=2) as store:
        # the fresh connection: the same records, written in m2's change order
        store.add_connection("m3", connector)
        order = [row[3] for row in _change_log(db_url, "m2")]
        for record_id in order:
            store.upsert_records("m3", STREAM, [final[record_id]])
            if record_id in deleted:
                store.delete_record("m3", STREAM, record_id)
        for terms in grants:
            for limit in (1, 3, 25):
                walks = [
                    _changes_walk(
                        store,
                        Grant.from_dict(
                            {"grant_id": "w", "streams": [{**terms, "instance_ids": [conn]}]}
                        ),
                        conn,
                        limit,
                    )
                    for conn in ("m2", "m3")
                ]
                assert walks[0] == walks[1], (terms, limit)
        assert [
            row[0]
            for row in _changes_walk(
                store,
                Grant.from_dict(
                    {"grant_id": "t", "streams": [{**grants[2], "instance_ids": ["m2"]}]}
                ),
                "m2",
                25,
            )
        ] == ["a", "c", "d"]
        # the writer logs per field again: an ungranted field's change moves no walk
        narrow = Grant.from_dict(
            {"grant_id": "n", "streams": [{**grants[1], "instance_ids": ["m2"]}]}
        )
        bookmark = store.query_records(
            narrow, STREAM, changes_since="beginning", limit=100
        ).next_changes_since
        store.upsert_records("m2", STREAM, [{**final["a"], "title": "again"}])
        assert store.query_records(narrow, STREAM, changes_since=bookmark).rows == ()
        store.upsert_records("m2", STREAM, [{**final["a"], "title": "again", "n": 9}])
        again = store.query_records(narrow, STREAM, changes_since=bookmark)
        assert [row.ref.record_id for row in again.rows] == ["a"]
