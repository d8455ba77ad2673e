"""Statement builders: SQLAlchemy Core statements, built here and executed elsewhere.

Rules:
1. Nothing here executes anything; `_ops` yields these statements to a driver.
2. Dialect spelling lives here alone, as constructs compiled per dialect (`strpos`, `greatest`,
   `least`), never as `if dialect == ...` in the operations.
3. Every statement that reads record data carries the grant's visibility condition
   (`visible_records`): connection, stream, not deleted, `resources`, time constraint. A hidden
   record therefore produces no row at all, exactly like a missing one.
4. No statement returns more of a field than asked: window text is cut by `substr` on each chunk
   in SQL; a match scan returns one chunk number and one position.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    ColumnElement,
    Delete,
    Insert,
    Integer,
    Select,
    Update,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import GenericFunction

from ._fields import FieldKind
from ._grants import StreamGrant
from ._identity import RecordRef
from ._schema import BLOB_CHUNK_BYTES, blob_chunks, blobs, connections, field_chunks, fields, records, streams
from ._values import CHUNK_CHARS

TEXT_LIKE_KINDS = (FieldKind.TEXT.value, FieldKind.JSON.value)


class strpos(GenericFunction[int]):  # noqa: N801 - SQL function name
    """1-based position of the second argument in the first, 0 when absent; code points."""

    type = Integer()
    inherit_cache = True


class greatest(GenericFunction[Any]):  # noqa: N801
    inherit_cache = True


class least(GenericFunction[Any]):  # noqa: N801
    inherit_cache = True


@compiles(strpos, "sqlite")
def _strpos_sqlite(element: strpos, compiler: SQLCompiler, **kw: Any) -> str:
    return f"instr({compiler.process(element.clauses, **kw)})"


@compiles(greatest, "sqlite")
def _greatest_sqlite(element: greatest, compiler: SQLCompiler, **kw: Any) -> str:
    return f"max({compiler.process(element.clauses, **kw)})"


@compiles(least, "sqlite")
def _least_sqlite(element: least, compiler: SQLCompiler, **kw: Any) -> str:
    return f"min({compiler.process(element.clauses, **kw)})"


# ---------------------------------------------------------------- catalogue


def stream_spec(connection_id: str, stream: str) -> Select[Any]:
    return (
        select(streams.c.primary_key, streams.c.consent_time_field, streams.c.hints)
        .select_from(connections.join(streams, streams.c.connector_id == connections.c.connector_id))
        .where(connections.c.connection_id == connection_id, streams.c.stream == stream)
    )


def connection_exists(connection_id: str) -> Select[Any]:
    return select(connections.c.connector_id).where(connections.c.connection_id == connection_id)


def stream_declared_anywhere(stream: str) -> Select[Any]:
    return select(literal(1)).where(streams.c.stream == stream).limit(1)


# ---------------------------------------------------------------- visibility


def _same_record(table: Any, other: Any) -> ColumnElement[bool]:
    return and_(
        table.c.connection_id == other.c.connection_id,
        table.c.stream == other.c.stream,
        table.c.record_id == other.c.record_id,
    )


def visible_records(grant: StreamGrant, connection_id: str | None = None) -> ColumnElement[bool]:
    """The grant's terms for one stream as a condition on `records` (Rule 3)."""
    conditions: list[ColumnElement[bool]] = [
        records.c.stream == grant.name,
        records.c.deleted == False,  # noqa: E712 - SQL comparison
    ]
    if connection_id is not None:
        conditions.append(records.c.connection_id == connection_id)
    if grant.instance_ids is not None:
        conditions.append(records.c.connection_id.in_(grant.instance_ids))
    if grant.resources is not None:
        conditions.append(records.c.record_id.in_(sorted(grant.resources)))
    constraint = grant.time_constraint
    if constraint is not None:
        timed = fields.alias("timed")
        bounds: list[ColumnElement[bool]] = [
            _same_record(timed, records),
            timed.c.path == constraint.field,
            timed.c.time_value.is_not(None),
        ]
        if constraint.since is not None:
            bounds.append(timed.c.time_value >= constraint.since)
        if constraint.until is not None:
            bounds.append(timed.c.time_value < constraint.until)
        conditions.append(exists().where(*bounds))
    return and_(*conditions)


def _record_is(ref: RecordRef) -> ColumnElement[bool]:
    return and_(
        records.c.connection_id == ref.connection_id,
        records.c.stream == ref.stream,
        records.c.record_id == ref.record_id,
    )


FIELD_META = (
    fields.c.path,
    fields.c.kind,
    fields.c.json_type,
    fields.c.size_chars,
    fields.c.size_bytes,
    fields.c.digest,
    fields.c.mime_type,
    fields.c.blob_id,
)
"""The columns `_ops.field_info` turns into a `FieldInfo`, in this order."""


# ---------------------------------------------------------------- field reads


def field_window(
    ref: RecordRef,
    path: str,
    grant: StreamGrant,
    start: int,
    limit: int,
    digest_prefix: str | None = None,
) -> Select[Any]:
    """One statement: the field's metadata and the window [start, start+limit) cut from its
    chunks. Rows are ordered by chunk; a visible record without the field gives one row of
    NULLs; an invisible record gives none. With `digest_prefix`, chunks join only while the
    field's digest still starts with it, so text that changed never crosses into Python."""
    end = start + limit
    first, last = start // CHUNK_CHARS, (end - 1) // CHUNK_CHARS
    base = field_chunks.c.chunk_no * CHUNK_CHARS
    piece_start = greatest(start - base, 0)
    piece_end = least(end - base, CHUNK_CHARS)
    chunk_join = and_(
        _same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        field_chunks.c.chunk_no.between(first, last),
        fields.c.kind.in_(TEXT_LIKE_KINDS),
    )
    if digest_prefix is not None:
        current = func.substr(fields.c.digest, 1, len(digest_prefix))
        chunk_join = and_(chunk_join, current == digest_prefix)
    return (
        select(
            *FIELD_META,
            func.substr(field_chunks.c.text, piece_start + 1, piece_end - piece_start),
        )
        .select_from(
            records.outerjoin(fields, and_(_same_record(fields, records), fields.c.path == path))
            .outerjoin(field_chunks, chunk_join)
        )
        .where(_record_is(ref), visible_records(grant))
        .order_by(field_chunks.c.chunk_no)
    )


def field_meta(ref: RecordRef, path: str, grant: StreamGrant) -> Select[Any]:
    return field_window(ref, path, grant, 0, 1).with_only_columns(*FIELD_META).limit(1)


def match_scan(
    ref: RecordRef, path: str, grant: StreamGrant, digest: str, needle: str
) -> Select[Any]:
    """The first chunk whose folded text, extended by the next chunk's first `len(needle) - 1`
    code points, contains the folded needle; and the 1-based position there. Scans in chunk
    order and stops at the first hit."""
    nxt = field_chunks.alias("nxt")
    here = func.coalesce(field_chunks.c.folded, field_chunks.c.text)
    overlap = len(needle) - 1
    haystack: ColumnElement[str] = here
    source = field_chunks
    if overlap:
        ahead = func.substr(func.coalesce(nxt.c.folded, nxt.c.text), 1, overlap)
        haystack = here + func.coalesce(ahead, "")
        source = field_chunks.outerjoin(
            nxt,
            and_(
                _same_record(nxt, field_chunks),
                nxt.c.path == field_chunks.c.path,
                nxt.c.chunk_no == field_chunks.c.chunk_no + 1,
            ),
        )
    position = strpos(haystack, needle)
    field_is_current = exists().where(
        _same_record(fields, field_chunks),
        fields.c.path == path,
        fields.c.digest == digest,
    )
    record_is_visible = exists().where(
        _same_record(records, field_chunks), visible_records(grant)
    )
    return (
        select(field_chunks.c.chunk_no, position)
        .select_from(source)
        .where(
            field_chunks.c.connection_id == ref.connection_id,
            field_chunks.c.stream == ref.stream,
            field_chunks.c.record_id == ref.record_id,
            field_chunks.c.path == path,
            field_is_current,
            record_is_visible,
            position > 0,
        )
        .order_by(field_chunks.c.chunk_no)
        .limit(1)
    )


def record_preview(ref: RecordRef, grant: StreamGrant, preview_chars: int) -> Select[Any]:
    """The record's version and, per granted field, its metadata, item count and the first
    `preview_chars + 1` code points of text-like fields (one more than shown, to know whether
    the preview is complete without reading the size)."""
    field_join = _same_record(fields, records)
    if grant.fields is not None:
        field_join = and_(field_join, fields.c.path.in_(sorted(grant.fields)))
    first_chunk = and_(
        _same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        field_chunks.c.chunk_no == 0,
        fields.c.kind.in_(TEXT_LIKE_KINDS),
    )
    return (
        select(
            records.c.version,
            *FIELD_META,
            fields.c.item_count,
            func.substr(field_chunks.c.text, 1, preview_chars + 1),
        )
        .select_from(records.outerjoin(fields, field_join).outerjoin(field_chunks, first_chunk))
        .where(_record_is(ref), visible_records(grant))
        .order_by(fields.c.path)
    )


# ---------------------------------------------------------------- blobs


def blob_visible(grants: list[StreamGrant], blob_id: str) -> Select[Any]:
    """Blob metadata, only if some record visible under one of `grants` references the blob from
    a field that grant covers."""
    referenced = [
        exists().where(
            fields.c.blob_id == blob_id,
            fields.c.kind == FieldKind.BLOB_REF.value,
            fields.c.path.in_(sorted(g.fields)) if g.fields is not None else true(),
            _same_record(records, fields),
            visible_records(g),
        )
        for g in grants
    ]
    return select(blobs.c.blob_id, blobs.c.sha256, blobs.c.mime_type, blobs.c.size_bytes).where(
        blobs.c.blob_id == blob_id, or_(*referenced) if referenced else literal(False)
    )


def blob_range(blob_id: str, start: int, length: int) -> Select[Any]:
    end = start + length
    first, last = start // BLOB_CHUNK_BYTES, (end - 1) // BLOB_CHUNK_BYTES
    base = blob_chunks.c.chunk_no * BLOB_CHUNK_BYTES
    piece_start = greatest(start - base, 0)
    piece_end = least(end - base, BLOB_CHUNK_BYTES)
    return (
        select(func.substr(blob_chunks.c.data, piece_start + 1, piece_end - piece_start))
        .where(blob_chunks.c.blob_id == blob_id, blob_chunks.c.chunk_no.between(first, last))
        .order_by(blob_chunks.c.chunk_no)
    )


def blob_exists(blob_id: str) -> Select[Any]:
    return select(blobs.c.blob_id, blobs.c.mime_type, blobs.c.size_bytes).where(
        blobs.c.blob_id == blob_id
    )


# ---------------------------------------------------------------- writes


def existing_records(connection_id: str, stream: str, record_ids: list[str]) -> Select[Any]:
    return select(
        records.c.record_id, records.c.version, records.c.digest, records.c.deleted
    ).where(
        records.c.connection_id == connection_id,
        records.c.stream == stream,
        records.c.record_id.in_(record_ids),
    )


def existing_fields(connection_id: str, stream: str, record_ids: list[str]) -> Select[Any]:
    return select(fields.c.record_id, fields.c.path, fields.c.kind, fields.c.digest).where(
        fields.c.connection_id == connection_id,
        fields.c.stream == stream,
        fields.c.record_id.in_(record_ids),
    )


def insert_records() -> Insert:
    return insert(records)


def update_record() -> Update:
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
        )
    )


def insert_fields() -> Insert:
    return insert(fields)


def insert_chunks() -> Insert:
    return insert(field_chunks)


def delete_fields(table: Any) -> Delete:
    """Rows of `table` (fields or field_chunks) for one record's listed paths."""
    return delete(table).where(
        table.c.connection_id == bindparam("k_connection_id"),
        table.c.stream == bindparam("k_stream"),
        table.c.record_id == bindparam("k_record_id"),
        table.c.path == bindparam("k_path"),
    )
