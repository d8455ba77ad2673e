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
   the connection's counter is raised by the number of records the batch changes and the new
   top is returned; the batch numbers its records `top - n + 1 .. top` in the order it writes
   them. On Postgres the counter's row stays locked until the write commits, so a later writer
   of the connection waits and takes higher values, and values commit in their order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Select, bindparam, delete, select, update
from sqlalchemy.sql.base import Executable

from .dialects import Capabilities, exact_number
from .requests import DriverSQL, Execute, Rows
from .tables import connections, field_values, manifests

__all__ = [
    "VALUE_COLUMNS",
    "change_seq_top",
    "connection_manifest",
    "delete_record_values",
    "delete_values",
    "insert_values",
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


def take_change_seqs(connection_id: str, count: int) -> Execute:
    """Raise the connection's change sequence by `count` and return its new top (decoded by
    `change_seq_top`), Rule 3."""
    return Execute(_take_change_seqs(), {"k_connection_id": connection_id, "n": count})


@cache
def _take_change_seqs() -> Executable:
    return (
        update(connections)
        .where(connections.c.connection_id == bindparam("k_connection_id"))
        .values(last_change_seq=connections.c.last_change_seq + bindparam("n"))
        .returning(connections.c.last_change_seq)
    )


def change_seq_top(rows: Rows) -> int:
    """`take_change_seqs`' answer: the connection's new top."""
    if not rows:
        raise LookupError("the connection's change sequence is missing")
    return int(rows[0]["last_change_seq"])
