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
5. `value_counts` (`tables` Rule 11) changes with `field_values`, in the same transaction, one
   statement per batch each way: the rows a write inserts are counted in Python and added by
   key (`count_values`: an upsert per distinct value, `ON CONFLICT DO UPDATE`); the rows it is
   about to remove are counted in SQL and subtracted before they go (`uncount_values`,
   `uncount_record_values`), and the keys left at 0 removed at once (`spent_counts`), so no
   key of a vanished value remains. A field no longer declared loses its counts with its rows
   (`delete_path_values`). Writers of one connection are already serialised by the change
   counter's row lock (Rule 3), which a manifest's revaluing takes too (`lock_changes`), and
   keys lead with `connection_id`, so the counts add no contention between connections.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    Select,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.sql.base import Executable

from pdpp_store._core.filters import MAX_COMPARABLE_CHARS

from .dialects import Capabilities, bound_rows, exact_number, insert_adding
from .requests import DriverSQL, Execute, Rows
from .tables import (
    change_counters,
    connections,
    field_chunks,
    field_values,
    fields,
    manifests,
    records,
    value_counts,
)

__all__ = [
    "VALUE_COLUMNS",
    "change_seq_top",
    "connection_ids",
    "connection_manifest",
    "connector_connections",
    "count_values",
    "delete_path_values",
    "delete_record_values",
    "delete_values",
    "insert_change_counter",
    "insert_values",
    "live_record_ids",
    "live_record_page",
    "lock_changes",
    "short_values",
    "stored_short_values",
    "take_change_seqs",
    "uncount_record_values",
    "uncount_values",
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


_COUNT_COLUMNS = ("connection_id", "stream", "path", "kind", "text", "num")
_POSITION = {name: number for number, name in enumerate(VALUE_COLUMNS)}


def count_values(rows: Sequence[Sequence[Any]]) -> Execute | None:
    """`value_counts` raised by the rows of `field_values` a write inserts (`insert_values`'
    tuples), Rule 5: their own values (`element` 0, not null) counted by key, one upsert per
    distinct key (a `DriverSQL` executemany); None when none counts."""
    at = _POSITION
    counted: dict[tuple[Any, ...], int] = {}
    for row in rows:
        kind = row[at["kind"]]
        if row[at["element"]] != 0 or kind == "null":
            continue
        number = kind == "number"
        key = (
            row[at["connection_id"]],
            row[at["stream"]],
            row[at["path"]],
            kind,
            "" if number else row[at["text"]],
            row[at["num"]] if number else 0,
        )
        counted[key] = counted.get(key, 0) + 1
    if not counted:
        return None
    return Execute(
        _count_values, rows=[(*key, n) for key, n in sorted(counted.items(), key=_by_key)]
    )


def _by_key(item: tuple[tuple[Any, ...], int]) -> tuple[Any, ...]:
    key = item[0]
    return (*key[:5], float(key[5]))


@cache
def _count_values(caps: Capabilities) -> DriverSQL:
    marker = caps.positional_marker
    columns = (*_COUNT_COLUMNS, "records")
    markers = ", ".join(exact_number(marker, caps) if name == "num" else marker for name in columns)
    return DriverSQL(
        f"INSERT INTO value_counts ({', '.join(columns)}) VALUES ({markers})"
        f" ON CONFLICT ({', '.join(_COUNT_COLUMNS)})"
        " DO UPDATE SET records = value_counts.records + excluded.records"
    )


def uncount_values(
    connection_id: str, stream: str, pairs: Sequence[tuple[str, str]]
) -> tuple[Execute, Execute]:
    """`value_counts` lowered by the `field_values` rows of the listed `(record_id, path)` pairs
    of a connection's stream, which the write is about to remove, then its keys at 0 removed
    (Rule 5): two statements whatever the number of pairs (bound as one JSON parameter)."""
    params = {
        "u_conn": connection_id,
        "u_stream": stream,
        "u_pairs": json.dumps([list(pair) for pair in pairs]),
    }
    return Execute(_uncount_pairs, params), spent_counts(connection_id)


def uncount_record_values(
    connection_id: str, stream: str, record_id: str
) -> tuple[Execute, Execute]:
    """`value_counts` lowered by every `field_values` row of one record (it is being deleted),
    then its keys at 0 removed (Rule 5)."""
    params = {"u_conn": connection_id, "u_stream": stream, "u_record": record_id}
    return Execute(_uncount_record, params), spent_counts(connection_id)


def spent_counts(connection_id: str) -> Execute:
    """The connection's `value_counts` keys at 0 removed (`ix_value_counts_spent`)."""
    return Execute(_spent_counts(), {"u_conn": connection_id})


@cache
def _spent_counts() -> Any:
    return delete(value_counts).where(
        value_counts.c.connection_id == bindparam("u_conn"),
        value_counts.c.records == literal_column("0"),
    )


def _own_counted(caps: Capabilities, *conditions: Any) -> Any:
    """`value_counts` lowered by the own values (`element` 0, not null) of the `field_values`
    rows meeting `conditions` in the bound connection's stream: their number by key, negated,
    added to the stored counts (`ON CONFLICT DO UPDATE`; the keys are there, as those rows
    were counted when written)."""
    text = func.coalesce(field_values.c.text, literal_column("''"))
    num = func.coalesce(field_values.c.num, literal_column("0"))
    key = (field_values.c.connection_id, field_values.c.stream, field_values.c.path)
    counted = (
        select(*key, field_values.c.kind, text, num, -func.count())
        .where(
            field_values.c.connection_id == bindparam("u_conn"),
            field_values.c.stream == bindparam("u_stream"),
            field_values.c.element == literal_column("0"),
            field_values.c.kind != literal_column("'null'"),
            *conditions,
        )
        .group_by(*key, field_values.c.kind, text, num)
    )
    return insert_adding(value_counts, caps, counted, "records")


@cache
def _uncount_pairs(caps: Capabilities) -> Any:
    pairs = bound_rows(caps, "u_pairs", (("record_id", True), ("path", True)))
    listed = and_(
        field_values.c.record_id == pairs.c.record_id, field_values.c.path == pairs.c.path
    )
    return _own_counted(caps, listed)


@cache
def _uncount_record(caps: Capabilities) -> Any:
    return _own_counted(caps, field_values.c.record_id == bindparam("u_record"))


def lock_changes(connection_id: str) -> Execute:
    """The connection's change counter locked until the write commits, not raised (Rule 5):
    a manifest's revaluing of stored records waits for the connection's writers, as they wait
    for each other."""
    return take_change_seqs(connection_id, 0)


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


def delete_path_values(
    connection_id: str, stream: str, paths: Sequence[str]
) -> tuple[Execute, Execute]:
    """Every comparable row of the listed fields in a connection's stream, and their counts
    (Rule 5)."""
    return tuple(  # type: ignore[return-value]
        Execute(
            delete(table).where(
                table.c.connection_id == connection_id,
                table.c.stream == stream,
                table.c.path.in_(list(paths)),
            )
        )
        for table in (field_values, value_counts)
    )
