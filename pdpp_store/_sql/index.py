"""The search index, in one place: its layout, the statements that fill it on writes, and the
two questions the reads ask of it (a field's candidate chunks for a match, candidate records for
a search).

Where it lives depends on the database (`Capabilities.search_index_is_side_table`, migrations
0005 and 0007): on SQLite, an FTS5 `trigram` table (`search_chunks`) with a side table of ids
(`search_fields`), both filled by the store's own writes and asked with `MATCH`; on Postgres, a
`pg_trgm` GIN expression index on `field_chunks` that the database maintains and that answers
`LIKE`. The SQL for the side table is SQLite's own and runs only where that capability holds.

Rules:
1. The index only ever narrows: every candidate it names is re-checked on the text, under the
   grant, by the statement that asked (`match`, `search`).
2. It holds, per field search may ask for, the folded text plus look-ahead, the very text a
   match scan reads: a field of at most `SCAN_CHUNKS` chunks as one row ("whole"), a longer one
   as a row per chunk (`INDEX_LONG_BASE`).
3. A write changes it in its own transaction, one statement per batch for each step; a field
   has an id in `search_fields` exactly while its text is in the index.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    case,
    column,
    func,
    literal_column,
    select,
    table,
    text,
    tuple_,
)
from sqlalchemy.sql.base import Executable

from pdpp_store._core.fields import FieldKind
from pdpp_store._core.values import LOOKAHEAD_CHARS

from .dialects import Capabilities
from .requests import Execute
from .tables import field_chunks
from .visibility import record_is

__all__ = [
    "INDEX_LONG_BASE",
    "INDEX_ROWID_SHIFT",
    "MIN_INDEXED_NEEDLE",
    "SCAN_CHUNKS",
    "fts_query",
    "index_above",
    "index_fields",
    "index_rows",
    "index_top",
    "late_hits",
    "like_pattern",
    "record_candidates",
    "register_backfill",
    "unindex_whole_fields",
    "unregister_index_fields",
]


SCAN_CHUNKS = 32
"""A match scan reads this many chunks (32 K code points) in order before it asks the search
index: early matches cost what a scan costs, late and absent ones what the index costs,
whatever the field's size."""

MIN_INDEXED_NEEDLE = 3
"""Needles shorter than a trigram cannot use the index: they are found by scanning alone."""

INDEX_ROWID_SHIFT = 1 << 22
INDEX_LONG_BASE = -(1 << 62)
"""SQLite's search index (migrations 0005, 0007) holds a field of at most `SCAN_CHUNKS` chunks
(indexed "whole") as one row whose rowid is its `search_id`: search asks the index for records,
and a match scan reads such a field's chunks itself. A longer field has a row per chunk, named
`INDEX_LONG_BASE + search_id * INDEX_ROWID_SHIFT + chunk_no` (negative: apart from the whole
rows, whose small, dense rowids keep the index small and its merges cheap). Such a rowid is
split again by integer division (`//`, never `/`, which SQLAlchemy 2 makes a true,
floating-point division and so a different, wrong `search_id`)."""

search_fields_table = table(
    "search_fields",
    column("search_id", Integer),
    column("connection_id", Text),
    column("stream", Text),
    column("record_id", Text),
    column("path", Text),
)
search_chunks_table = table(
    "search_chunks", column("rowid", Integer), column("search_chunks", Text)
)
"""SQLite's search index (migration 0005): not in the metadata, named here for statements."""


def like_pattern(needle: str) -> str:
    """A `LIKE` pattern (escape `\\`) for text containing `needle`."""
    escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def fts_query(needle: str) -> str:
    """The FTS5 query (trigram tokenizer, `detail=none`) whose rows are candidates for
    `needle`: every distinct trigram of its first `LOOKAHEAD_CHARS + 1` code points (what an
    indexed chunk is sure to hold of a match starting in it), all required."""
    head = needle[: LOOKAHEAD_CHARS + 1]
    grams = sorted({head[i : i + 3] for i in range(len(head) - 2)})
    return " AND ".join('"' + gram.replace('"', '""') + '"' for gram in grams)


def late_hits(
    caps: Capabilities,
    late: Any,
    late_found: ColumnElement[int],
    *,
    digest: Any,
    stop: ColumnElement[int],
    beyond: ColumnElement[bool],
    field_is_text: ColumnElement[bool],
    record_is_visible: ColumnElement[bool],
) -> Select[Any]:
    """The match scan's second branch (`match._match_scan`): the first of the chunks `late` of
    field `f_path` of record (`r_conn`, `r_stream`, `r_id`), numbered `stop` or more, that the
    index names as candidates for the needle (`m_fts` for the side table, `m_like` for the
    expression index) and in which `late_found`, the needle's position, is positive; with its
    chunk number, that position and `digest`. Asked only where `beyond` holds (the field has a
    chunk past the scanned ones), under the field and visibility checks."""
    if caps.search_index_is_side_table:
        # The FTS5 table names candidate chunks by rowid, within this field's rowid range.
        search_id = (
            select(search_fields_table.c.search_id)
            .where(
                search_fields_table.c.connection_id == bindparam("r_conn"),
                search_fields_table.c.stream == bindparam("r_stream"),
                search_fields_table.c.record_id == bindparam("r_id"),
                search_fields_table.c.path == bindparam("f_path"),
            )
            .scalar_subquery()
        )
        base = INDEX_LONG_BASE + search_id * INDEX_ROWID_SHIFT
        rowid = search_chunks_table.c.rowid
        return (
            select(late.c.chunk_no.label("chunk_no"), late_found.label("position"), digest)
            .select_from(
                search_chunks_table.join(
                    late,
                    and_(
                        record_is(late),
                        late.c.path == bindparam("f_path"),
                        late.c.chunk_no == rowid - base,
                    ),
                )
            )
            .where(
                literal_column("search_chunks").op("MATCH")(bindparam("m_fts", type_=Text())),
                rowid.between(base + stop, base + INDEX_ROWID_SHIFT - 1),
                beyond,
                field_is_text,
                record_is_visible,
                late_found > 0,
            )
            .order_by(rowid)
            .limit(1)
        )

    # The GIN index answers `LIKE` on the indexed expression. The key is compared under the
    # "POSIX" collation (the same byte order as the columns' "C", but another collation,
    # which the primary-key index cannot serve), so no ordered walk of every chunk of the
    # field can stand in for the index (planners were seen to choose one). The candidates
    # are re-checked in the same pass, materialised, then ordered.
    def opaque(value: ColumnElement[str]) -> ColumnElement[str]:
        return value.collate("POSIX")

    indexed_text = func.coalesce(late.c.folded, late.c.text) + func.coalesce(late.c.lookahead, "")
    candidates = (
        select(late.c.chunk_no.label("chunk_no"), late_found.label("position"))
        .where(
            opaque(late.c.connection_id) == bindparam("r_conn", type_=Text()),
            opaque(late.c.stream) == bindparam("r_stream", type_=Text()),
            opaque(late.c.record_id) == bindparam("r_id", type_=Text()),
            opaque(late.c.path) == bindparam("f_path", type_=Text()),
            late.c.chunk_no >= stop,
            indexed_text.like(bindparam("m_like", type_=Text()), escape="\\"),
            beyond,
        )
        .cte("candidates")
        .prefix_with("MATERIALIZED")
    )
    return (
        select(candidates.c.chunk_no, candidates.c.position, digest)
        .where(field_is_text, record_is_visible, candidates.c.position > 0)
        .order_by(candidates.c.chunk_no)
        .limit(1)
    )


def record_candidates(caps: Capabilities, after: Any) -> Select[Any]:
    """The search index's question for `search.candidates`: the keys of the records whose
    searched fields the index names as candidates for parameter `i_fts` (the side table) or
    `i_like` (the expression index), in the searched connections, streams and paths (`i_conns`,
    `i_streams`, `i_paths`), after the key `after`, at most `i_limit`, in key order."""
    if caps.search_index_is_side_table:
        sf = search_fields_table
        key = (sf.c.connection_id, sf.c.stream, sf.c.record_id)
        # A field indexed whole is the row named by its id; a long field's chunk rows name it
        # below `INDEX_LONG_BASE`'s offset. Integer division (`//`): `/` is a true division in
        # SQLAlchemy 2, a float on SQLite, and would pair a chunk with the wrong field.
        rowid = search_chunks_table.c.rowid
        search_id = case((rowid > 0, rowid), else_=(rowid - INDEX_LONG_BASE) // INDEX_ROWID_SHIFT)
        return (
            select(*key)
            .distinct()
            .select_from(search_chunks_table.join(sf, sf.c.search_id == search_id))
            .where(
                literal_column("search_chunks").op("MATCH")(bindparam("i_fts", type_=Text())),
                sf.c.connection_id.in_(bindparam("i_conns", expanding=True)),
                sf.c.stream.in_(bindparam("i_streams", expanding=True)),
                sf.c.path.in_(bindparam("i_paths", expanding=True)),
                tuple_(*key) > after,
            )
            .order_by(*key)
            .limit(bindparam("i_limit", type_=Integer))
        )
    # Keys compared and ordered under "POSIX" (byte order, like the columns' "C"), which the
    # primary key cannot serve: the GIN index answers, then the few candidates are sorted (an
    # ordered walk of the primary key, filtered by LIKE, would read every chunk).
    fc = field_chunks.alias("indexed")
    posix = tuple(c.collate("POSIX") for c in (fc.c.connection_id, fc.c.stream, fc.c.record_id))
    indexed_text = func.coalesce(fc.c.folded, fc.c.text) + func.coalesce(fc.c.lookahead, "")
    return (
        select(
            fc.c.connection_id.label("connection_id"),
            fc.c.stream.label("stream"),
            fc.c.record_id.label("record_id"),
            *(k.label(f"order_{n}") for n, k in enumerate(posix)),
        )
        .distinct()
        .where(
            indexed_text.like(bindparam("i_like", type_=Text()), escape="\\"),
            posix[0].in_(bindparam("i_conns", expanding=True, type_=Text())),
            posix[1].in_(bindparam("i_streams", expanding=True, type_=Text())),
            fc.c.path.in_(bindparam("i_paths", expanding=True)),
            tuple_(*posix) > after,
        )
        .order_by(*posix)
        .limit(bindparam("i_limit", type_=Integer))
    )


def _fills_side_index(caps: Capabilities) -> bool:
    return caps.search_index_is_side_table


def _batch_keys(connection_id: str, stream: str, keys: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The parameters of the batch statements below: one batch's fields as one JSON array of
    `[record_id, path]` pairs (one statement per batch, not one per field)."""
    return {"k_conn": connection_id, "k_stream": stream, "k_keys": json.dumps(list(keys))}


def unindex_whole_fields(
    connection_id: str, stream: str, keys: Sequence[tuple[str, str]]
) -> tuple[Execute, Execute]:
    """Where the search index is a side table (SQLite): remove the row of each field of `keys`
    (`(record_id, path)` pairs) indexed whole (`INDEX_LONG_BASE`) and forget its id, run before
    its chunks are deleted (the row is deleted with the text it was given, which its chunks
    still hold). Its chunks' delete trigger then finds no id and leaves the index alone."""
    params = _batch_keys(connection_id, stream, keys)
    return (
        Execute(_unindex_whole_fields(), params, when=_fills_side_index),
        Execute(_unregister_index_fields(whole=True), params, when=_fills_side_index),
    )


def unregister_index_fields(
    connection_id: str, stream: str, keys: Sequence[tuple[str, str]]
) -> Execute:
    """Where the search index is a side table (SQLite): forget the ids of the fields of `keys`,
    run right after their chunks were deleted (whose index entries the delete trigger removed).
    A field has an id in `search_fields` exactly while its text is in the index: the trigger
    removes the entries of a deleted chunk only where its field has an id, and FTS5 must never
    be asked to delete an entry it was not given."""
    params = _batch_keys(connection_id, stream, keys)
    return Execute(_unregister_index_fields(whole=False), params, when=_fills_side_index)


def index_fields(
    connection_id: str, stream: str, keys: Sequence[tuple[str, str]]
) -> tuple[Execute, Execute, Execute]:
    """Where the search index is a side table (SQLite): give each field of `keys` (newly
    written, text-like, and searchable: see `_ops.writes`) an id in `search_fields`, in the
    write's own transaction, right after its chunks are inserted, saying whether it is indexed
    whole (at most `SCAN_CHUNKS` chunks: no chunk numbered `SCAN_CHUNKS`). Then index those
    fields: the chunks of a long field one row each, then each field indexed whole as one row
    (`INDEX_LONG_BASE`), in rowid order. The text is folded text plus look-ahead, the very text
    a match scan searches. (Where the index is the database's own, it maintains itself; on
    SQLite, triggers doing this were measured 4x slower than these statements, and a statement
    per field 3x slower than one per batch.)"""
    params = _batch_keys(connection_id, stream, keys)
    return (
        Execute(_register_index_fields(), params, when=_fills_side_index),
        Execute(_index_chunks(whole=False), params, when=_fills_side_index),
        Execute(_index_chunks(whole=True), params, when=_fills_side_index),
    )


_BATCH_KEYS = (
    "SELECT json_extract(value, '$[0]') AS record_id, json_extract(value, '$[1]') AS path "
    "FROM json_each(:k_keys)"
)
_OF_BATCH = "sf.connection_id = :k_conn AND sf.stream = :k_stream "
_IN_BATCH = f"{_OF_BATCH}AND (sf.record_id, sf.path) IN ({_BATCH_KEYS})"


@cache
def _unregister_index_fields(whole: bool) -> Executable:
    only_whole = " AND sf.whole = 1" if whole else ""
    return text(f"DELETE FROM search_fields AS sf WHERE {_IN_BATCH}{only_whole}")


@cache
def _unindex_whole_fields() -> Executable:
    return text(
        "INSERT INTO search_chunks (search_chunks, rowid, body) "
        f"SELECT 'delete', sf.search_id, {INDEX_WHOLE_TEXT} FROM search_fields sf "
        f"WHERE {_IN_BATCH} AND sf.whole = 1 AND {_HAS_TEXT} ORDER BY sf.search_id"
    )


def _is_whole(conn: str, stream: str, record_id: str, path: str) -> str:
    """SQL: the field these SQL expressions name has at most `SCAN_CHUNKS` chunks."""
    return (
        "NOT EXISTS (SELECT 1 FROM field_chunks w WHERE w.connection_id = "
        f"{conn} AND w.stream = {stream} AND w.record_id = {record_id} AND w.path = {path} "
        f"AND w.chunk_no = {SCAN_CHUNKS})"
    )


@cache
def _register_index_fields() -> Executable:
    return text(
        "INSERT OR IGNORE INTO search_fields (connection_id, stream, record_id, path, whole) "
        "SELECT :k_conn, :k_stream, k.record_id, k.path, "
        f"{_is_whole(':k_conn', ':k_stream', 'k.record_id', 'k.path')} FROM ({_BATCH_KEYS}) AS k"
    )


INDEX_SEPARATOR = "char(31, 31)"
"""SQL: what parts of a field indexed whole are joined with. Two code points, around every
part: a trigram that spans it holds text of one part only, so the row's trigrams are the same
whatever order the parts come in (what a delete must give again)."""
INDEX_CHUNK_TEXT = "coalesce(fc.folded, fc.text) || coalesce(fc.lookahead, '')"
"""SQL: the indexed text of chunk `fc`: folded text plus look-ahead (what a match scan reads)."""
_SAME_FIELD = (
    "fc.connection_id = sf.connection_id AND fc.stream = sf.stream "
    "AND fc.record_id = sf.record_id AND fc.path = sf.path"
)
INDEX_WHOLE_TEXT = (
    f"(SELECT {INDEX_SEPARATOR} || group_concat({INDEX_CHUNK_TEXT}, {INDEX_SEPARATOR}) "
    f"|| {INDEX_SEPARATOR} FROM field_chunks fc WHERE {_SAME_FIELD})"
)
"""SQL: the indexed text of the field `sf` indexed whole: its chunks' indexed texts, each
between separators (`INDEX_SEPARATOR`); NULL without chunks."""
_HAS_TEXT = f"EXISTS (SELECT 1 FROM field_chunks fc WHERE {_SAME_FIELD})"
"""SQL: the field `sf` has a chunk (an empty string has none, and no row in the index). Any
chunk, not chunk 0: a whole field's row is made of the chunks there are, as the triggers of
migration 0007 remake it after a chunk is deleted."""


def index_rows(tables: str, condition: str, whole: bool) -> str:
    """SQL: the index rows of the `search_fields` rows (`sf` in `tables`) where `condition`
    holds: the chunk rows of long fields, or the rows of the fields indexed whole, in rowid
    order (also the benchmarks' bulk copies)."""
    if whole:
        return (
            f"INSERT INTO search_chunks (rowid, body) SELECT sf.search_id, {INDEX_WHOLE_TEXT} "
            f"FROM {tables} WHERE {condition} AND sf.whole = 1 AND {_HAS_TEXT} "
            "ORDER BY sf.search_id"
        )
    return (
        "INSERT INTO search_chunks (rowid, body) "
        f"SELECT {INDEX_LONG_BASE} + sf.search_id * {INDEX_ROWID_SHIFT} + fc.chunk_no, "
        f"{INDEX_CHUNK_TEXT} FROM {tables} JOIN field_chunks fc ON {_SAME_FIELD} "
        f"WHERE {condition} AND sf.whole = 0 ORDER BY sf.search_id, fc.chunk_no"
    )


@cache
def _index_chunks(whole: bool) -> Executable:
    batch = (
        f"({_BATCH_KEYS}) AS k JOIN search_fields sf ON {_OF_BATCH}"
        "AND sf.record_id = k.record_id AND sf.path = k.path"
    )
    return text(index_rows(batch, "1", whole))


def index_top() -> Execute:
    """The highest id in `search_fields` (SQLite), before a backfill adds fields after it."""
    return Execute(
        text("SELECT coalesce(max(search_id), 0) AS top FROM search_fields"),
        when=_fills_side_index,
    )


def register_backfill(connector_id: str, stream: str, paths: Sequence[str]) -> Execute:
    """Where the search index is a side table (SQLite): give an id to the stored text-like
    `paths` of `stream`, in every connection of `connector_id`, that have none yet (a manifest
    newly declares them searchable). Then `index_above(top)`, with `top` taken by `index_top`
    before: writers are serialised, so the ids above it are exactly these fields'."""
    params = {"b_connector": connector_id, "b_stream": stream, "b_paths": json.dumps(list(paths))}
    return Execute(_backfill_register(), params, when=_fills_side_index)


def index_above(top: int) -> tuple[Execute, Execute]:
    """Index every `search_fields` entry with an id above `top` (SQLite): long fields' chunks,
    then the fields indexed whole."""
    return (
        Execute(_index_above(whole=False), {"b_top": top}, when=_fills_side_index),
        Execute(_index_above(whole=True), {"b_top": top}, when=_fills_side_index),
    )


@cache
def _backfill_register() -> Executable:
    text_like = ", ".join(f"'{kind.value}'" for kind in FieldKind if kind.text_like)
    return text(
        "INSERT OR IGNORE INTO search_fields (connection_id, stream, record_id, path, whole) "
        "SELECT f.connection_id, f.stream, f.record_id, f.path, "
        f"{_is_whole('f.connection_id', 'f.stream', 'f.record_id', 'f.path')} FROM fields f "
        "WHERE f.connection_id IN "
        "(SELECT connection_id FROM connections WHERE connector_id = :b_connector) "
        "AND f.stream = :b_stream AND f.path IN (SELECT value FROM json_each(:b_paths)) "
        f"AND f.kind IN ({text_like}) "
        "ORDER BY f.connection_id, f.stream, f.record_id, f.path"
    )


@cache
def _index_above(whole: bool) -> Executable:
    return text(index_rows("search_fields sf", "sf.search_id > :b_top", whole))
