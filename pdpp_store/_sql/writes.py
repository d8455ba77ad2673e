"""The statements of the write operations (`_ops.writes`): the catalogue (manifests, streams,
connections), records and their fields and chunks, soft deletes, cursor keys, and the planner
statistics the store keeps current on Postgres.

The search index's share of a write is `index`'s, and a blob's rows `blobs`'.

Rules:
1. Writes take their values as bound parameters; the few statements built per call bind the
   call's values themselves (a lookup of one batch's keys), the rest are built once.
2. A batch looks its records up by key and locks them (`existing_records`) before it computes
   their change, so two concurrent upserts of one record cannot both start from one version.
3. Field and chunk rows go in as positional tuples through the driver's own executemany
   (`requests.DriverSQL`, `insert_fields`, `insert_chunks`), the cost that dominates ingestion.
4. What each change changed goes into `change_log` (`tables` Rule 10) in the same transaction,
   one executemany per batch (`insert_changes`); the field rows it replaces are read with their
   instant (`existing_fields`), so an update needs no statement more than before.
5. The word index's rows (`tables` Rule 12) go in as one statement per batch, produced from the
   fields' word counts (`FieldWords`, `insert_words`) as the statement reads them (a copy on
   Postgres, `requests.DriverCopy`; an executemany on SQLite), with one word list per field
   (`insert_word_lists`, the same way), and go out by their whole keys (`delete_words`): no
   structure is in record order, so a field's words are read from its list
   (`stored_word_lists`) first.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache, cached_property, partial
from typing import Any

from sqlalchemy import bindparam, delete, func, insert, select, text, tuple_, update
from sqlalchemy.sql.base import Executable

from pdpp_store._core.manifest import Manifest

from .dialects import Capabilities, bound_rows, insert_ignoring
from .requests import DriverCopy, DriverSQL, Execute, Rows
from .tables import (
    EXISTENCE,
    WORD_KEY,
    change_log,
    connections,
    cursor_keys,
    field_chunks,
    field_values,
    fields,
    manifests,
    records,
    search_vocabulary,
    search_word_lists,
    search_words,
    streams,
)

__all__ = [
    "CHANGE_COLUMNS",
    "CHUNK_COLUMNS",
    "EXISTENCE",
    "FIELD_COLUMNS",
    "LIST_COLUMNS",
    "RECORD_TABLES",
    "VOCABULARY_COLUMNS",
    "WORD_COLUMNS",
    "FieldWords",
    "StoredField",
    "StoredRecord",
    "analyze",
    "cursor_key_ages",
    "cursor_key_list",
    "cursor_keys_newest_first",
    "delete_cursor_keys",
    "delete_fields",
    "delete_words",
    "existing_fields",
    "existing_records",
    "insert_changes",
    "insert_chunks",
    "insert_connection",
    "insert_cursor_key",
    "insert_fields",
    "insert_first_cursor_key",
    "insert_records",
    "insert_vocabulary",
    "insert_word_lists",
    "insert_words",
    "live_record_version",
    "manifest_document",
    "manifest_registered",
    "mark_deleted",
    "newest_cursor_key",
    "newest_key_id",
    "record_version",
    "replace_manifest",
    "stale_table_names",
    "stale_tables",
    "stored_fields",
    "stored_manifest",
    "stored_records",
    "stored_word_lists",
    "update_records",
    "word_lists",
]


# ---------------------------------------------------------------- catalogue


def stored_manifest(connector_id: str) -> Execute:
    """The manifest document a connector registered last (decoded by `manifest_document`)."""
    return Execute(select(manifests.c.document).where(manifests.c.connector_id == connector_id))


def manifest_document(rows: Rows) -> str | None:
    return str(rows[0]["document"]) if rows else None


def replace_manifest(manifest: Manifest, now: datetime) -> tuple[Execute, ...]:
    """The connector's manifest and its streams, in place of those it had."""
    connector = manifest.connector_id
    return (
        Execute(delete(streams).where(streams.c.connector_id == connector)),
        Execute(delete(manifests).where(manifests.c.connector_id == connector)),
        Execute(
            insert(manifests),
            {"connector_id": connector, "document": manifest.document, "registered_at": now},
        ),
        Execute(
            insert(streams),
            [
                {
                    "connector_id": connector,
                    "stream": spec.name,
                    "primary_key": json.dumps(list(spec.primary_key)),
                    "consent_time_field": spec.consent_time_field,
                    "hints": spec.hints_json(),
                }
                for spec in manifest.streams
            ],
        ),
    )


def manifest_registered(connector_id: str) -> Execute:
    """A row if the connector has a registered manifest."""
    return Execute(select(manifests.c.connector_id).where(manifests.c.connector_id == connector_id))


def insert_connection(connection_id: str, connector_id: str, now: datetime) -> Execute:
    return Execute(
        insert(connections),
        {"connection_id": connection_id, "connector_id": connector_id, "created_at": now},
    )


# ---------------------------------------------------------------- records


# The record tables whose statistics the store keeps current on Postgres (see `stale_tables`).
RECORD_TABLES = (
    "records",
    "fields",
    "field_chunks",
    "field_values",
    "change_log",
    "search_words",
    "search_word_lists",
    "search_vocabulary",
)


def stale_tables(pending: Mapping[str, int]) -> Execute:
    """The record tables whose planner statistics lag behind their contents (Postgres).

    Batch writes look records up by key; a planner without statistics takes the
    `(connection_id, stream)` prefix of the key for one row and filters the rest, which scans a
    whole stream per batch and makes ingestion quadratic. Autovacuum keeps statistics current
    where it runs; where it is off (or has not come round yet) the store does the same itself,
    with autovacuum's own rule: analyse once the rows changed since the last analysis exceed
    50 + 10 % of the table. Where the planner needs no statistics for keyed lookups (SQLite,
    `Capabilities.plans_by_statistics`) nothing is sent and the reply is None. `pending` counts
    rows the caller wrote that the database's counts may not show yet. `change_log` is kept the
    same way: a changes page looks up each logged change's later rows by record, and a planner
    without statistics scanned the connection's whole log for each (quadratic: 3.4 s a page at
    2,000 records). Decoded by `stale_table_names`."""
    params = {f"n_{name}": pending.get(name, 0) for name in RECORD_TABLES}
    return Execute(_stale_tables(), params, when=_plans_by_statistics)


def _plans_by_statistics(caps: Capabilities) -> bool:
    return caps.plans_by_statistics


@cache
def _stale_tables() -> Executable:
    names = ", ".join(f"'{name}'" for name in RECORD_TABLES)
    pending = " ".join(f"WHEN '{name}' THEN :n_{name}" for name in RECORD_TABLES)
    return text(
        "SELECT s.relname AS relname"
        " FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid"
        " WHERE s.schemaname = current_schema()"
        f" AND s.relname IN ({names})"
        f" AND s.n_mod_since_analyze + CASE s.relname {pending} END"
        " > 50 + 0.1 * greatest(c.reltuples, 0)"
    )


def stale_table_names(rows: Rows) -> list[str]:
    return [str(row["relname"]) for row in rows]


def analyze(tables: list[str]) -> Execute:
    """`ANALYZE` of the named record tables (names from `RECORD_TABLES` only)."""
    names = [name for name in RECORD_TABLES if name in tables]
    return Execute(text(f"ANALYZE {', '.join(names)}"))


def existing_records(connection_id: str, stream: str, record_ids: list[str]) -> Execute:
    """The records a write is about to change, locked until it commits (Postgres `FOR UPDATE`;
    SQLite's `BEGIN IMMEDIATE` already serialises writers), so two concurrent upserts of one
    record cannot both compute their change from the same old version."""
    return Execute(
        select(records.c.record_id, records.c.version, records.c.digest, records.c.deleted)
        .where(
            records.c.connection_id == connection_id,
            records.c.stream == stream,
            records.c.record_id.in_(record_ids),
        )
        .order_by(records.c.record_id)
        .with_for_update()
    )


@dataclass(frozen=True, slots=True)
class StoredRecord:
    version: int
    digest: str
    deleted: bool


def stored_records(rows: Rows) -> dict[str, StoredRecord]:
    """`existing_records`' answer by record id."""
    return {
        row["record_id"]: StoredRecord(int(row["version"]), row["digest"], bool(row["deleted"]))
        for row in rows
    }


def existing_fields(connection_id: str, stream: str, record_ids: list[str]) -> Execute:
    return Execute(
        select(
            fields.c.record_id, fields.c.path, fields.c.kind, fields.c.digest, fields.c.time_value
        ).where(
            fields.c.connection_id == connection_id,
            fields.c.stream == stream,
            fields.c.record_id.in_(record_ids),
        )
    )


@dataclass(frozen=True, slots=True)
class StoredField:
    kind: str
    digest: str
    time_value: str | None


def stored_fields(rows: Rows) -> dict[str, dict[str, StoredField]]:
    """`existing_fields`' answer: per record id, per path, the stored kind, digest and
    instant."""
    found: dict[str, dict[str, StoredField]] = {}
    for row in rows:
        found.setdefault(row["record_id"], {})[row["path"]] = StoredField(
            row["kind"], row["digest"], row["time_value"]
        )
    return found


def insert_records(rows: Sequence[Mapping[str, Any]]) -> Execute:
    """New `records` rows (dicts by column name)."""
    return Execute(insert(records), rows)


def update_records(rows: Sequence[Mapping[str, Any]]) -> Execute:
    """A changed record's new version, digest, deletion flag, time and change sequence value,
    per row (keyed by `k_connection_id`, `k_stream`, `k_record_id`)."""
    return Execute(_update_record(), rows)


def _update_record() -> Executable:
    return (
        update(records)
        .where(
            records.c.connection_id == bindparam("k_connection_id"),
            records.c.stream == bindparam("k_stream"),
            records.c.record_id == bindparam("k_record_id"),
        )
        .values(
            version=bindparam("version"),
            digest=bindparam("digest"),
            deleted=bindparam("deleted"),
            updated_at=bindparam("updated_at"),
            change_seq=bindparam("change_seq"),
        )
    )


FIELD_COLUMNS = tuple(column.name for column in fields.columns)
CHUNK_COLUMNS = tuple(column.name for column in field_chunks.columns)
CHANGE_COLUMNS = tuple(column.name for column in change_log.columns)
"""The column order of the rows `insert_fields`, `insert_chunks` and `insert_changes` take
(tuples)."""


def insert_changes(rows: Sequence[Sequence[Any]]) -> Execute:
    """Rows of `change_log`, as tuples in `CHANGE_COLUMNS` order (Rule 4)."""
    return Execute(_insert_changes, rows=rows)


def _insert_changes(caps: Capabilities) -> DriverSQL:
    return _insert_rows("change_log", CHANGE_COLUMNS, caps)


def insert_fields(rows: Sequence[Sequence[Any]]) -> Execute:
    """Rows of `fields`, as tuples in `FIELD_COLUMNS` order (a `DriverSQL` executemany)."""
    return Execute(_insert_fields, rows=rows)


def insert_chunks(rows: Sequence[Sequence[Any]]) -> Execute:
    """Rows of `field_chunks`, as tuples in `CHUNK_COLUMNS` order."""
    return Execute(_insert_chunks, rows=rows)


def _insert_fields(caps: Capabilities) -> DriverSQL:
    return _insert_rows("fields", FIELD_COLUMNS, caps)


def _insert_chunks(caps: Capabilities) -> DriverSQL:
    return _insert_rows("field_chunks", CHUNK_COLUMNS, caps)


@cache
def _insert_rows(table_name: str, columns: tuple[str, ...], caps: Capabilities) -> DriverSQL:
    markers = ", ".join(caps.positional_marker for _ in columns)
    return DriverSQL(f"INSERT INTO {table_name} ({', '.join(columns)}) VALUES ({markers})")


WORD_COLUMNS = tuple(column.name for column in search_words.columns)
VOCABULARY_COLUMNS = tuple(column.name for column in search_vocabulary.columns)

FieldWords = tuple[str, str, int, Mapping[str, int]]
"""A text-like field's words (Rule 5): `(record_id, path, size_chars, {word: count})`."""


def insert_words(connection_id: str, stream: str, fields: Sequence[FieldWords]) -> Execute:
    """The rows of `search_words` (the word index, `tables` Rule 12) of one batch's fields,
    one row per field and word, in `WORD_COLUMNS` order, one statement per batch (Rule 5): an
    executemany on SQLite (in process, the cheapest: SQLite 3.40's `json_each` took three
    times as long), a copy on Postgres (`requests.DriverCopy`: a batch's 150,000 rows in about
    0.9 s against 1.2 s for one `INSERT ... SELECT` expanding one JSON document of the fields,
    whose encoding took 0.07 s more). The rows are produced as the statement reads them
    (`_WordRows`), so nothing is built for a database that does not take them that way."""
    return Execute(_insert_words, rows=_WordRows(connection_id, stream, fields))


class _WordRows:
    """A batch's word rows (`insert_words`), produced each time they are iterated."""

    __slots__ = ("_connection_id", "_fields", "_stream")

    def __init__(self, connection_id: str, stream: str, fields: Sequence[FieldWords]) -> None:
        self._connection_id = connection_id
        self._stream = stream
        self._fields = fields

    def __iter__(self) -> Iterator[tuple[str, str, str, str, str, int, int]]:
        connection_id, stream = self._connection_id, self._stream
        return (
            (connection_id, stream, record_id, path, word, count, size)
            for record_id, path, size, counts in self._fields
            for word, count in counts.items()
        )


class _FieldsDocument(Mapping[str, str]):
    """The parameters of a Postgres statement over a batch's fields (`w_conn`, `w_stream`, and
    `w_fields`: the fields as one JSON document, encoded when first read: only the Postgres
    statement reads it)."""

    def __init__(self, connection_id: str, stream: str, fields: Sequence[Sequence[Any]]) -> None:
        self._fields = fields
        self._scalars = {"w_conn": connection_id, "w_stream": stream}

    @cached_property
    def _document(self) -> str:
        return json.dumps(self._fields, ensure_ascii=False)

    def __getitem__(self, key: str) -> str:
        if key == "w_fields":
            return self._document
        return self._scalars[key]

    def __iter__(self) -> Iterator[str]:
        return iter(("w_conn", "w_stream", "w_fields"))

    def __len__(self) -> int:
        return 3


def _on_postgres(caps: Capabilities) -> bool:
    return caps.name == "postgresql"


def _not_on_postgres(caps: Capabilities) -> bool:
    return not _on_postgres(caps)


@cache
def _copied_rows(
    table_name: str, columns: tuple[str, ...], caps: Capabilities
) -> DriverSQL | DriverCopy:
    """Many positional rows into `table_name`: a copy where the database takes one
    (`Capabilities.copies_rows`), else an executemany (`_insert_rows`)."""
    if caps.copies_rows:
        return DriverCopy(table_name, columns)
    return _insert_rows(table_name, columns, caps)


def _insert_words(caps: Capabilities) -> DriverSQL | DriverCopy:
    return _copied_rows("search_words", WORD_COLUMNS, caps)


_DOCUMENT_FIELDS = "jsonb_array_elements(CAST(:w_fields AS jsonb)) AS f"


LIST_COLUMNS = tuple(column.name for column in search_word_lists.columns)
WORD_SEPARATOR = " "
"""Joins a field's words in `search_word_lists.words` (no word holds it: `_core.words`)."""


def insert_word_lists(connection_id: str, stream: str, fields: Sequence[FieldWords]) -> Execute:
    """One `search_word_lists` row per field of `fields`: the words its rows hold (`tables`
    Rule 12), one statement per batch: an executemany, or a copy where the database takes one
    (Postgres: 12 ms against 42 ms for a batch's 2,000 lists)."""
    rows = [
        (connection_id, stream, record_id, path, WORD_SEPARATOR.join(counts))
        for record_id, path, _, counts in fields
    ]
    return Execute(_insert_word_lists, rows=rows)


def _insert_word_lists(caps: Capabilities) -> DriverSQL | DriverCopy:
    return _copied_rows("search_word_lists", LIST_COLUMNS, caps)


def stored_word_lists(connection_id: str, stream: str, keys: Sequence[tuple[str, str]]) -> Execute:
    """The word lists of the fields of `keys` (`(record_id, path)` pairs) that have word rows
    (decoded by `word_lists`), read before their rows are deleted (`delete_words`). The keys
    are bound as one JSON document (`dialects.bound_rows`): a batch's fields may be more than
    a statement may have parameters."""
    params = {"k_conn": connection_id, "k_stream": stream, "k_fields": json.dumps(list(keys))}
    return Execute(_stored_word_lists, params)


@cache
def _stored_word_lists(caps: Capabilities) -> Executable:
    lists = search_word_lists
    keys = bound_rows(caps, "k_fields", (("record_id", True), ("path", True)))
    # `IN` the keys, not a join: SQLite joined by scanning the stream's lists (1.6 s -> 5 s
    # for a batch of 1,000 rewritten bodies); this way both look each key up.
    return select(lists.c.record_id, lists.c.path, lists.c.words).where(
        lists.c.connection_id == bindparam("k_conn"),
        lists.c.stream == bindparam("k_stream"),
        tuple_(lists.c.record_id, lists.c.path).in_(select(keys.c.record_id, keys.c.path)),
    )


def word_lists(rows: Rows) -> list[tuple[str, str, list[str]]]:
    """`stored_word_lists`' answer: `(record_id, path, words)` per field."""
    return [(row["record_id"], row["path"], row["words"].split(WORD_SEPARATOR)) for row in rows]


def delete_words(
    connection_id: str, stream: str, fields: Sequence[tuple[str, str, Sequence[str]]]
) -> tuple[Execute, Execute]:
    """The rows of `search_words` of the fields `(record_id, path, words)`, each by its whole
    key (`tables` Rule 12: no structure in record order): an executemany on SQLite, one
    `DELETE` of the rows each key names, looked up one by one from the fields bound as one
    JSON document, on Postgres (`_delete_words_json`)."""
    rows = [
        (stream, path, word, connection_id, record_id)
        for record_id, path, words in fields
        for word in words
    ]
    return (
        Execute(_delete_words, rows=rows, when=_not_on_postgres),
        Execute(_delete_words_json(), _FieldsDocument(connection_id, stream, fields), _on_postgres),
    )


@cache
def _delete_words(caps: Capabilities) -> DriverSQL:
    marker = caps.positional_marker
    where = " AND ".join(f"{name} = {marker}" for name in WORD_KEY)
    return DriverSQL(f"DELETE FROM search_words WHERE {where}")


@cache
def _delete_words_json() -> Executable:
    # Each key looked up by itself (`LATERAL`, `OFFSET 0`: not pulled up), then deleted by its
    # row's address: as a join, Postgres estimated the keys at 10,000 and hashed them against
    # a scan of the whole table, whatever the batch held.
    return text(
        "DELETE FROM search_words AS w WHERE w.connection_id = :w_conn"
        " AND w.ctid = ANY (ARRAY(SELECT p.ctid"
        f" FROM {_DOCUMENT_FIELDS}, jsonb_array_elements_text(f -> 2) AS k(word),"
        " LATERAL (SELECT x.ctid FROM search_words AS x WHERE x.stream = :w_stream"
        ' AND x.path = (f ->> 1) COLLATE "C" AND x.word = k.word COLLATE "C"'
        ' AND x.connection_id = :w_conn AND x.record_id = (f ->> 0) COLLATE "C"'
        " OFFSET 0) AS p))"
    )


def insert_vocabulary(rows: Sequence[Sequence[Any]]) -> Execute:
    """Rows of `search_vocabulary` in `VOCABULARY_COLUMNS` order, those already there kept: one
    executemany per batch, in key order (concurrent writers meet their common words in the
    same order, so neither waits on the other in a cycle)."""
    return Execute(_insert_vocabulary, rows=rows)


@cache
def _insert_vocabulary(caps: Capabilities) -> DriverSQL:
    columns = VOCABULARY_COLUMNS
    markers = ", ".join(caps.positional_marker for _ in columns)
    return DriverSQL(
        f"INSERT INTO search_vocabulary ({', '.join(columns)}) VALUES ({markers})"
        " ON CONFLICT DO NOTHING"
    )


def delete_fields(
    rows: Sequence[Mapping[str, Any]],
) -> tuple[Execute, Execute, Execute, Execute]:
    """The comparable values, the word lists, the chunks, then the fields, of one record's
    listed paths per row (keyed by `k_connection_id`, `k_stream`, `k_record_id`, `k_path`);
    their word rows go before, by the lists' words (`delete_words`)."""
    return (
        Execute(_delete_fields(field_values), rows),
        Execute(_delete_fields(search_word_lists), rows),
        Execute(_delete_fields(field_chunks), rows),
        Execute(_delete_fields(fields), rows),
    )


def _delete_fields(table: Any) -> Executable:
    return delete(table).where(
        table.c.connection_id == bindparam("k_connection_id"),
        table.c.stream == bindparam("k_stream"),
        table.c.record_id == bindparam("k_record_id"),
        table.c.path == bindparam("k_path"),
    )


def live_record_version(connection_id: str, stream: str, record_id: str) -> Execute:
    """The version of a record that is not deleted, locked until the write commits (decoded by
    `record_version`)."""
    return Execute(
        select(records.c.version)
        .where(
            records.c.connection_id == connection_id,
            records.c.stream == stream,
            records.c.record_id == record_id,
            records.c.deleted == False,  # noqa: E712 - SQL comparison
        )
        .with_for_update()
    )


def record_version(rows: Rows) -> int | None:
    return int(rows[0]["version"]) if rows else None


def mark_deleted(
    connection_id: str, stream: str, record_id: str, *, version: int, now: datetime, change_seq: int
) -> Execute:
    """The record deleted (softly: its fields stay, for its tombstone's visibility), as version
    `version` and change `change_seq`."""
    return Execute(
        update(records)
        .where(
            records.c.connection_id == connection_id,
            records.c.stream == stream,
            records.c.record_id == record_id,
        )
        .values(deleted=True, version=version, updated_at=now, change_seq=change_seq)
    )


# ---------------------------------------------------------------- cursor keys


def cursor_keys_newest_first() -> Execute:
    """Every stored cursor key, newest first (decoded by `cursor_key_list`)."""
    return Execute(
        select(cursor_keys.c.key_id, cursor_keys.c.secret).order_by(cursor_keys.c.key_id.desc())
    )


def cursor_key_list(rows: Rows) -> list[tuple[int, bytes]]:
    return [(int(row["key_id"]), bytes(row["secret"])) for row in rows]


def insert_first_cursor_key(secret: bytes, now: datetime) -> Execute:
    """Key 1, unless there is one (stores opening one fresh database at once all insert it)."""
    return Execute(
        partial(insert_ignoring, cursor_keys),
        {"key_id": 1, "secret": secret, "created_at": now},
    )


def newest_cursor_key() -> Execute:
    """The highest key id, NULL when there is none (decoded by `newest_key_id`)."""
    return Execute(select(func.max(cursor_keys.c.key_id).label("newest")))


def newest_key_id(rows: Rows) -> int:
    """`newest_cursor_key`'s answer, 0 when there is no key."""
    return int((rows[0]["newest"] if rows else None) or 0)


def insert_cursor_key(key_id: int, secret: bytes, now: datetime) -> Execute:
    return Execute(insert(cursor_keys), {"key_id": key_id, "secret": secret, "created_at": now})


def cursor_key_ages() -> Execute:
    """Every key's id and creation time, newest first."""
    return Execute(
        select(cursor_keys.c.key_id, cursor_keys.c.created_at).order_by(cursor_keys.c.key_id.desc())
    )


def delete_cursor_keys(key_ids: Sequence[int]) -> Execute:
    return Execute(delete(cursor_keys).where(cursor_keys.c.key_id.in_(key_ids)))
