"""Field and record reads: a field's metadata, a window of its text, a record's preview, and
the decoding of the field metadata every read (and search's evidence) selects.

Rules:
1. Every statement carries the grant's visibility condition (`visibility`), so an invisible
   record gives no row at all.
2. No statement returns more of a field than asked: window text is cut by `substr` on each
   chunk in SQL; a preview is the first `preview_chars` of the first chunk.
3. Every selected column has a label, and each statement's rows are decoded by the function
   below it (`field_info`, `window_text`, `preview_rows`), by label, never by position.
4. A window of at most `MAX_LIMIT_CHARS` and a budgeted projection are `bounded` while the
   grant's lists are small (`visibility.few_terms`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from operator import itemgetter
from typing import Any

from sqlalchemy import Integer, Select, and_, bindparam, func, select

from pdpp_store._core.fields import FieldKind
from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.identity import RecordRef
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store.evidence import FieldInfo

from . import visibility
from .dialects import greatest, least
from .requests import Execute, Row, Rows
from .tables import field_chunks, fields, records
from .visibility import (
    GrantShape,
    few_terms,
    grant_terms,
    in_ids,
    kind_in,
    record_is,
    record_params,
    same_record,
)

__all__ = [
    "FIELD_META",
    "PreviewRow",
    "field_info",
    "field_meta",
    "field_window",
    "preview_rows",
    "record_preview",
    "window_text",
]


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
"""The columns of a `FieldInfo`, labelled by their own names (decoded by `field_info`)."""


_KINDS = {kind.value: kind for kind in FieldKind}
"""`FieldKind(value)` for the values the store writes, without the enum's call."""


_FIELD_META = itemgetter(*(column.name for column in FIELD_META))
_INFOS: dict[tuple[Any, ...], FieldInfo] = {}
"""`FieldInfo`s decoded so far, by the values of their row (a pure function of them): a field read
again (every projection reads the same few fields again and again) gives back the card made the
first time, not a new one. At most `_INFOS_KEPT`, then it starts again."""
_INFOS_KEPT = 4096


def field_info(row: Row) -> FieldInfo | None:
    """The `FieldInfo` of a row holding `FIELD_META`; None for the NULLs of an outer join that
    found the record but not the field."""
    if row["path"] is None:
        return None
    meta = _FIELD_META(row)
    info = _INFOS.get(meta)
    if info is None:
        path, kind, json_type, size_chars, size_bytes, digest, mime_type, blob_id = meta
        info = FieldInfo(
            path,
            _KINDS[kind],
            json_type,
            int(size_chars),
            int(size_bytes),
            digest,
            mime_type,
            blob_id,
        )
        if len(_INFOS) >= _INFOS_KEPT:
            _INFOS.clear()
        _INFOS[meta] = info
    return info


def window_text(rows: Rows) -> str:
    """The window's text, from the chunk pieces of `field_window` or `match_window` rows."""
    return "".join(row["text"] for row in rows if row["text"] is not None)


def field_window(
    ref: RecordRef,
    path: str,
    grant: StreamGrant,
    *,
    start: int,
    limit: int,
    digest_prefix: str | None = None,
) -> Execute:
    """One statement: the field's metadata and the window [start, start+limit) cut from its
    chunks. Rows are ordered by chunk; a visible record without the field gives one row of
    NULLs; an invisible record gives none. With `digest_prefix`, chunks join only while the
    field's digest still starts with it, so text that changed never crosses into Python."""
    end = start + limit
    shape, terms = grant_terms(grant)
    params = {
        **record_params(ref, path),
        **terms,
        "w_first": start // CHUNK_CHARS,
        "w_last": (end - 1) // CHUNK_CHARS,
        "w_start": start,
        "w_end": end,
    }
    if digest_prefix is not None:
        params["w_prefix"] = digest_prefix
        params["w_prefix_len"] = len(digest_prefix)
    return Execute(
        _field_window(shape, digest_prefix is not None), params, bounded=few_terms(grant)
    )


@cache
def _field_window(shape: GrantShape, with_prefix: bool) -> Select[Any]:
    base = field_chunks.c.chunk_no * CHUNK_CHARS
    piece_start = greatest(bindparam("w_start", type_=Integer) - base, 0)
    piece_end = least(bindparam("w_end", type_=Integer) - base, CHUNK_CHARS)
    # The chunk range is given by parameters on the full primary key (not derived through the
    # join), so every planner probes exactly the window's chunks.
    chunk_join = and_(
        record_is(field_chunks),
        field_chunks.c.path == bindparam("f_path"),
        field_chunks.c.chunk_no.between(bindparam("w_first"), bindparam("w_last")),
        fields.c.path.is_not(None),
        kind_in(text_like=True),
    )
    if with_prefix:
        current = func.substr(fields.c.digest, 1, bindparam("w_prefix_len", type_=Integer))
        chunk_join = and_(chunk_join, current == bindparam("w_prefix"))
    field_join = and_(same_record(fields, records), fields.c.path == bindparam("f_path"))
    return (
        select(
            *FIELD_META,
            func.substr(field_chunks.c.text, piece_start + 1, piece_end - piece_start).label(
                "text"
            ),
        )
        .select_from(records.outerjoin(fields, field_join).outerjoin(field_chunks, chunk_join))
        .where(record_is(), visibility.visible_records(shape))
        .order_by(field_chunks.c.chunk_no)
    )


def field_meta(ref: RecordRef, path: str, grant: StreamGrant) -> Execute:
    shape, terms = grant_terms(grant)
    params = {**record_params(ref, path), **terms}
    return Execute(_field_meta(shape), params, bounded=few_terms(grant))


@cache
def _field_meta(shape: GrantShape) -> Select[Any]:
    field_join = and_(same_record(fields, records), fields.c.path == bindparam("f_path"))
    return (
        select(*FIELD_META)
        .select_from(records.outerjoin(fields, field_join))
        .where(record_is(), visibility.visible_records(shape))
    )


def record_preview(
    ref: RecordRef,
    grant: StreamGrant,
    preview_chars: int,
    *,
    after_field: str | None = None,
    only: Sequence[str] | None = None,
    max_fields: int,
) -> Execute:
    """The record's version and, per granted field in path order (those after `after_field`, at
    most `max_fields`), its metadata, item count and the first `preview_chars` (at most
    `CHUNK_CHARS`) code points of text-like fields (decoded by `preview_rows`). No row: the
    record is not visible; one row with no field: no granted field (after `after_field`)."""
    shape, terms = grant_terms(grant)
    params = {
        **record_params(ref),
        **terms,
        "p_chars": preview_chars,
        "p_limit": max_fields,
    }
    if grant.fields is not None:
        params["p_fields"] = sorted(grant.fields)
    if after_field is not None:
        params["p_after"] = after_field
    if only is not None:
        params["p_only"] = sorted(only)
    return Execute(
        _record_preview(shape, grant.fields is not None, after_field is not None, only is not None),
        params,
        # at most `max_fields` fields, each at most one chunk's head, under a small grant
        bounded=few_terms(grant, only),
    )


@cache
def _record_preview(shape: GrantShape, projected: bool, paged: bool, chosen: bool) -> Select[Any]:
    # The page (the record's fields in path order with their first chunks, `p_limit` of them) is
    # chosen in a subquery, then joined to the record: ordering the outer join instead made
    # Postgres join and sort every field of the record for each page, a cost that grew with the
    # record's width rather than the page's.
    chosen_fields = record_is(fields)
    if projected:
        chosen_fields = and_(chosen_fields, in_ids(fields.c.path, "p_fields"))
    if chosen:
        chosen_fields = and_(chosen_fields, in_ids(fields.c.path, "p_only"))
    if paged:
        chosen_fields = and_(chosen_fields, fields.c.path > bindparam("p_after"))
    first_chunk = and_(
        same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        field_chunks.c.chunk_no == 0,
        kind_in(text_like=True),
    )
    page = (
        select(
            *FIELD_META,
            fields.c.connection_id,
            fields.c.stream,
            fields.c.record_id,
            fields.c.item_count,
            func.substr(field_chunks.c.text, 1, bindparam("p_chars", type_=Integer)).label("head"),
        )
        .select_from(fields.outerjoin(field_chunks, first_chunk))
        .where(chosen_fields)
        .order_by(fields.c.path)
        .limit(bindparam("p_limit", type_=Integer))
        .subquery("page")
    )
    return (
        select(
            records.c.version,
            *(page.c[column.name] for column in FIELD_META),
            page.c.item_count,
            page.c.head,
        )
        .select_from(records.outerjoin(page, same_record(page, records)))
        .where(record_is(), visibility.visible_records(shape))
        .order_by(page.c.path)
    )


PreviewRow = tuple[FieldInfo, int | None, str | None]
"""One field of a `record_preview` answer: its info, its item count, and the first
`preview_chars` code points of a text-like field (a plain tuple: one per field of each
projection)."""


def preview_rows(rows: Rows) -> tuple[int, list[PreviewRow]]:
    """The record's version and its granted fields, from a non-empty `record_preview` answer."""
    fields_found = []
    for row in rows:
        info = field_info(row)
        if info is not None:
            fields_found.append((info, row["item_count"], row["head"]))
    return int(rows[0]["version"]), fields_found
