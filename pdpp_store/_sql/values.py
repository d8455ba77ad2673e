"""The statements that keep `field_values` (what filters compare, `tables` Rule 8) and the change
sequence (`tables` Rule 9) in step with the records, on the write path (`_ops.writes`).

Rules:
1. A field's comparable rows are written with the field and removed with it, in the same
   transaction: a record's rows are always `_core.filters.comparable_rows` of its stored fields.
   A deleted record has none (it matches no filter); what its tombstone needs stays on `records`
   (key, `change_seq`) and `fields` (the consent-time instant the grant's time constraint reads).
2. Rows go in as positional tuples in `VALUE_COLUMNS` order through the driver's executemany,
   like the chunk rows; a number is bound as the driver's int or float and stored exactly
   (`dialects.exact_number`).
3. A write takes its change sequence values in one statement per batch (`take_change_seqs`):
   the connection's counter (`change_counters`) is raised by the number of records the batch
   changes and the new top is returned; the batch numbers its records `top - n + 1 .. top` in
   the order it writes them. On Postgres the counter's row stays locked until the write
   commits, so a later writer of the connection waits and takes higher values, and values
   commit in their order.
4. When a manifest changes which fields are declared and text-like, the rows of stored records
   follow (`_ops.writes.register_manifest`): rows of fields no longer declared are removed
   (`delete_path_values`), and fields newly declared are read back (`short_values`: only what
   can have a comparable form, a page of records at a time) and valued as a write would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Select, and_, bindparam, delete, insert, or_, select, update
from sqlalchemy.sql.base import Executable

from pdpp_store._core.filters import MAX_COMPARABLE_CHARS

from .dialects import Capabilities, exact_number
from .requests import DriverSQL, Execute, Rows
from .tables import (
    change_counters,
    connections,
    field_chunks,
    field_values,
    fields,
    manifests,
    records,
)

__all__ = [
    "VALUE_COLUMNS",
    "change_seq_top",
    "connection_ids",
    "connection_manifest",
    "connector_connections",
    "delete_path_values",
    "delete_record_values",
    "delete_values",
    "insert_change_counter",
    "insert_values",
    "live_record_ids",
    "live_record_page",
    "short_values",
    "stored_short_values",
    "take_change_seqs",
]

VALUE_COLUMNS = tuple(column.name for column in field_values.columns)
"""The column order of the rows `insert_values` takes (tuples)."""


def connection_manifest(connection_id: str) -> Execute:
    """The stored manifest document of a connection's connector (decoded by
    `Manifest.from_json`): what fields a write stores comparable values for is the manifest's
    declaration (`comparable_rows`), which the stream's stored row does not keep."""
    return Execute(_connection_manifest(), {"r_conn": connection_id}, bounded=True)


@cache
def _connection_manifest() -> Select[Any]:
    return (
        select(manifests.c.document)
        .select_from(
            connections.join(manifests, manifests.c.connector_id == connections.c.connector_id)
        )
        .where(connections.c.connection_id == bindparam("r_conn"))
    )


def insert_values(rows: Sequence[Sequence[Any]]) -> Execute:
    """Rows of `field_values`, as tuples in `VALUE_COLUMNS` order (a `DriverSQL` executemany)."""
    return Execute(_insert_values, rows=rows)


@cache
def _insert_values(caps: Capabilities) -> DriverSQL:
    marker = caps.positional_marker
    markers = ", ".join(
        exact_number(marker, caps) if name == "num" else marker for name in VALUE_COLUMNS
    )
    return DriverSQL(f"INSERT INTO field_values ({', '.join(VALUE_COLUMNS)}) VALUES ({markers})")


def delete_values(rows: Sequence[Mapping[str, Any]]) -> Execute:
    """The comparable rows of one record's listed paths per row (keyed by `k_connection_id`,
    `k_stream`, `k_record_id`, `k_path`, as `writes.delete_fields`)."""
    return Execute(_delete_values(), rows)


@cache
def _delete_values() -> Executable:
    return delete(field_values).where(
        field_values.c.connection_id == bindparam("k_connection_id"),
        field_values.c.stream == bindparam("k_stream"),
        field_values.c.record_id == bindparam("k_record_id"),
        field_values.c.path == bindparam("k_path"),
    )


def delete_record_values(connection_id: str, stream: str, record_id: str) -> Execute:
    """Every comparable row of one record (it is being deleted)."""
    return Execute(
        delete(field_values).where(
            field_values.c.connection_id == connection_id,
            field_values.c.stream == stream,
            field_values.c.record_id == record_id,
        )
    )


def insert_change_counter(connection_id: str) -> Execute:
    """A new connection's change sequence, at 0 (written with the connection)."""
    return Execute(insert(change_counters), {"connection_id": connection_id, "last_change_seq": 0})


def take_change_seqs(connection_id: str, count: int) -> Execute:
    """Raise the connection's change sequence by `count` and return its new top (decoded by
    `change_seq_top`), Rule 3."""
    return Execute(_take_change_seqs(), {"k_connection_id": connection_id, "n": count})


@cache
def _take_change_seqs() -> Executable:
    return (
        update(change_counters)
        .where(change_counters.c.connection_id == bindparam("k_connection_id"))
        .values(last_change_seq=change_counters.c.last_change_seq + bindparam("n"))
        .returning(change_counters.c.last_change_seq)
    )


def change_seq_top(rows: Rows) -> int:
    """`take_change_seqs`' answer: the connection's new top."""
    if not rows:
        raise LookupError("the connection's change sequence is missing")
    return int(rows[0]["last_change_seq"])


# ---------------------------------------------------------------- a manifest declares anew


def connector_connections(connector_id: str) -> Execute:
    """The connections of a connector, in id order (decoded by `connection_ids`)."""
    return Execute(
        select(connections.c.connection_id)
        .where(connections.c.connector_id == connector_id)
        .order_by(connections.c.connection_id)
    )


def connection_ids(rows: Rows) -> list[str]:
    return [str(row["connection_id"]) for row in rows]


def live_record_page(connection_id: str, stream: str, after: str, limit: int) -> Execute:
    """The next `limit` live records of a stream after record id `after`, in id order (decoded
    by `live_record_ids`)."""
    return Execute(
        select(records.c.record_id)
        .where(
            records.c.connection_id == connection_id,
            records.c.stream == stream,
            records.c.deleted == False,  # noqa: E712 - SQL comparison
            records.c.record_id > after,
        )
        .order_by(records.c.record_id)
        .limit(limit)
    )


def live_record_ids(rows: Rows) -> list[str]:
    return [str(row["record_id"]) for row in rows]


def short_values(
    connection_id: str, stream: str, record_ids: Sequence[str], paths: Sequence[str]
) -> Execute:
    """The stored text of the records' listed fields that can have a comparable form: strings
    of at most `MAX_COMPARABLE_CHARS` code points whatever their kind, JSON scalars and arrays
    (never an object, never a longer string), chunks in order (decoded by
    `stored_short_values`)."""
    chunk_of_field = and_(
        field_chunks.c.connection_id == fields.c.connection_id,
        field_chunks.c.stream == fields.c.stream,
        field_chunks.c.record_id == fields.c.record_id,
        field_chunks.c.path == fields.c.path,
    )
    return Execute(
        select(fields.c.record_id, fields.c.path, fields.c.kind, field_chunks.c.text)
        .select_from(fields.outerjoin(field_chunks, chunk_of_field))
        .where(
            fields.c.connection_id == connection_id,
            fields.c.stream == stream,
            fields.c.record_id.in_(list(record_ids)),
            fields.c.path.in_(list(paths)),
            or_(
                and_(
                    fields.c.kind.in_(["text", "base64", "binary"]),
                    fields.c.size_chars <= MAX_COMPARABLE_CHARS,
                ),
                and_(fields.c.kind == "json", fields.c.json_type != "object"),
            ),
        )
        .order_by(fields.c.record_id, fields.c.path, field_chunks.c.chunk_no)
    )


def stored_short_values(rows: Rows) -> dict[str, dict[str, Any]]:
    """`short_values`' answer as values, per record id and path: a string as it is, JSON (and a
    string holding NUL, kept as its JSON text) decoded."""
    texts: dict[tuple[str, str], tuple[str, list[str]]] = {}
    for row in rows:
        key = (str(row["record_id"]), str(row["path"]))
        kind, pieces = texts.setdefault(key, (str(row["kind"]), []))
        if row["text"] is not None:
            pieces.append(str(row["text"]))
    found: dict[str, dict[str, Any]] = {}
    for (record_id, path), (kind, pieces) in texts.items():
        text = "".join(pieces)
        found.setdefault(record_id, {})[path] = (
            json.loads(text) if kind in ("json", "binary") else text
        )
    return found


def delete_path_values(connection_id: str, stream: str, paths: Sequence[str]) -> Execute:
    """Every comparable row of the listed fields in a connection's stream."""
    return Execute(
        delete(field_values).where(
            field_values.c.connection_id == connection_id,
            field_values.c.stream == stream,
            field_values.c.path.in_(list(paths)),
        )
    )
