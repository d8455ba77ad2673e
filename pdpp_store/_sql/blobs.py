"""Blob statements: whether a grant reaches a blob, its metadata and a byte range of it (reads),
and the content-addressed insert of a new one (writes).

Rules:
1. A blob is reached only through a record visible under the grant that references it from a
   binary-only field the grant covers (`blob_referenced`); blobs are shared across connections,
   so their own tables are read in a second statement, after that one (docs/scaling.md).
2. A byte range is cut by `substr` on each chunk in SQL: no statement returns more than asked.
3. Blob rows are inserted with `ON CONFLICT DO NOTHING` (`dialects.insert_ignoring`): concurrent
   writers of the same bytes all succeed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import cache, partial
from typing import Any

from sqlalchemy import (
    Integer,
    Select,
    and_,
    bindparam,
    false,
    func,
    or_,
    select,
    true,
)

from pdpp_store._core.grants import StreamGrant
from pdpp_store.evidence import BlobInfo

from . import visibility
from .dialects import greatest, insert_ignoring, least
from .requests import Execute, Rows
from .tables import BLOB_CHUNK_BYTES, blob_chunks, blobs, fields, records
from .visibility import GrantShape, grant_params, in_ids, kind_in, same_record

__all__ = [
    "BLOB_CHUNK_BYTES",
    "REACH_ROWS",
    "blob_bytes",
    "blob_exists",
    "blob_info",
    "blob_metadata",
    "blob_range",
    "blob_referenced",
    "insert_blob",
    "insert_blob_chunks",
]


REACH_ROWS = 100
"""At most this many (record, field) pairs through which a grant reaches a blob are named (the
read audit keeps the first 100 record ids of a read)."""


def blob_referenced(grants: list[StreamGrant], blob_id: str) -> Execute:
    """The records (`connection_id`, `stream`, `record_id`, and the field's `path`; at most
    `REACH_ROWS` rows, in key order) visible under one of `grants` that reference the blob from a
    binary-only field that grant covers (a blob reference, or base64 / NUL content): no row, no
    reach.

    Only record tables are read here: blobs are shared across connections and would be
    distributed by `blob_id`, not `connection_id` (docs/scaling.md), so their rows are read in a
    second statement, after this one has shown the grant reaches the blob."""
    params: dict[str, Any] = {"b_id": blob_id}
    shapes = []
    for number, grant in enumerate(grants):
        params.update(grant_params(grant, f"g{number}"))
        if grant.fields is not None:
            params[f"g{number}_fields"] = sorted(grant.fields)
        shapes.append((GrantShape.of(grant), grant.fields is not None))
    return Execute(_blob_referenced(tuple(shapes)), params)


@cache
def _blob_referenced(shapes: tuple[tuple[GrantShape, bool], ...]) -> Select[Any]:
    key = (records.c.connection_id, records.c.stream, records.c.record_id)
    reaches = [
        and_(
            in_ids(fields.c.path, f"g{number}_fields") if projected else true(),
            visibility.visible_records(shape, f"g{number}"),
        )
        for number, (shape, projected) in enumerate(shapes)
    ]
    return (
        select(*key, fields.c.path)
        .select_from(fields.join(records, same_record(records, fields)))
        .where(
            fields.c.blob_id == bindparam("b_id"),
            kind_in(text_like=False),
            or_(*reaches) if reaches else false(),
        )
        .distinct()
        .order_by(*key, fields.c.path)
        .limit(REACH_ROWS)
    )


def blob_metadata(blob_id: str) -> Execute:
    """A blob's metadata by id: blob tables only (see `blob_referenced`)."""
    return Execute(_blob_metadata(), {"b_id": blob_id}, bounded=True)


@cache
def _blob_metadata() -> Select[Any]:
    return select(blobs.c.blob_id, blobs.c.sha256, blobs.c.mime_type, blobs.c.size_bytes).where(
        blobs.c.blob_id == bindparam("b_id")
    )


def blob_info(rows: Rows) -> BlobInfo | None:
    """The blob of a `blob_metadata` (or `blob_exists`) row, or None."""
    if not rows:
        return None
    row = rows[0]
    return BlobInfo(row["blob_id"], row["sha256"], row["mime_type"], int(row["size_bytes"]))


def blob_range(blob_id: str, start: int, length: int) -> Execute:
    end = start + length
    params = {
        "b_id": blob_id,
        "w_first": start // BLOB_CHUNK_BYTES,
        "w_last": (end - 1) // BLOB_CHUNK_BYTES,
        "w_start": start,
        "w_end": end,
    }
    return Execute(_blob_range(), params)


@cache
def _blob_range() -> Select[Any]:
    base = blob_chunks.c.chunk_no * BLOB_CHUNK_BYTES
    piece_start = greatest(bindparam("w_start", type_=Integer) - base, 0)
    piece_end = least(bindparam("w_end", type_=Integer) - base, BLOB_CHUNK_BYTES)
    return (
        select(
            func.substr(blob_chunks.c.data, piece_start + 1, piece_end - piece_start).label("data")
        )
        .where(
            blob_chunks.c.blob_id == bindparam("b_id"),
            blob_chunks.c.chunk_no.between(bindparam("w_first"), bindparam("w_last")),
        )
        .order_by(blob_chunks.c.chunk_no)
    )


def blob_bytes(rows: Rows) -> bytes:
    """The bytes of a `blob_range` answer, in order."""
    return b"".join(bytes(row["data"]) for row in rows)


def blob_exists(blob_id: str) -> Execute:
    """The stored blob of this id, whatever grant (writes only: a blob is stored once)."""
    return Execute(
        select(blobs.c.blob_id, blobs.c.sha256, blobs.c.mime_type, blobs.c.size_bytes).where(
            blobs.c.blob_id == blob_id
        )
    )


def insert_blob(
    blob_id: str, sha256: str, mime_type: str, size_bytes: int, now: datetime
) -> Execute:
    """A blob's row, unless one of its id is already there."""
    params = {
        "blob_id": blob_id,
        "sha256": sha256,
        "mime_type": mime_type,
        "size_bytes": size_bytes,
        "created_at": now,
    }
    return Execute(partial(insert_ignoring, blobs), params)


def insert_blob_chunks(blob_id: str, data: memoryview, offsets: Sequence[int]) -> Execute:
    """The chunks of `data` starting at `offsets` (multiples of `BLOB_CHUNK_BYTES`), skipping
    those already there."""
    rows = [
        {
            "blob_id": blob_id,
            "chunk_no": start // BLOB_CHUNK_BYTES,
            "data": bytes(data[start : start + BLOB_CHUNK_BYTES]),
        }
        for start in offsets
    ]
    return Execute(partial(insert_ignoring, blob_chunks), rows)
