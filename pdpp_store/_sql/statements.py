"""Statement builders: SQLAlchemy Core statements, built here and executed elsewhere.

Rules:
1. Nothing here executes anything: builders return `Execute(statement, params)` values that the
   operations yield to a driver.
2. Statements are templates with bound parameters, built once per shape (which optional grant
   terms are present, and the dialect's capabilities where they matter) and cached, so a read
   costs one cached compile, not an expression build.
3. Dialect differences are `_sql.dialects`' alone: constructs compiled per dialect (`strpos`,
   `greatest`, `least`) and capabilities passed to the builders that need them, never
   `if dialect == ...` here or in the operations.
4. Every statement that reads record data carries the grant's visibility condition
   (`visible_records`): connection, stream, not deleted, `resources`, time constraint. A hidden
   record therefore produces no row at all, exactly like a missing one.
5. No statement returns more of a field than asked: window text is cut by `substr` on each chunk
   in SQL; a match scan returns one chunk number, one position and the field's digest.
6. Every selected column has a label, and each statement's rows are decoded by the function
   below it (`field_info`, `window_text`, `match_bounds`, ...), by label, never by position.
7. A statement whose cost is bounded by a small constant whatever the data (catalogue and
   metadata lookups, a window of at most `MAX_LIMIT_CHARS`, a budgeted projection) is built
   `bounded=True` (`Execute.bounded`: an async SQLite read runs it on the event loop); one that
   may scan (a match, a search, a blob range, a blob's reach) is not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from operator import itemgetter
from types import MappingProxyType
from typing import Any, NamedTuple

from sqlalchemy import (
    ColumnElement,
    Delete,
    Insert,
    Integer,
    Select,
    Text,
    Update,
    and_,
    bindparam,
    column,
    delete,
    exists,
    false,
    func,
    insert,
    literal,
    literal_column,
    or_,
    select,
    table,
    text,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.base import Executable
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import GenericFunction
from sqlalchemy.types import TypeDecorator, TypeEngine

from pdpp_store._core.fields import FieldKind
from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.identity import RecordRef
from pdpp_store._core.manifest import FieldHint, StreamSpec
from pdpp_store._core.values import CHUNK_CHARS, LOOKAHEAD_CHARS
from pdpp_store._core.window import MAX_LIMIT_CHARS
from pdpp_store.evidence import BlobInfo, FieldInfo

from .dialects import Capabilities, greatest, least, strpos
from .requests import Builder, DriverSQL, Execute, Row, Rows
from .tables import (
    BLOB_CHUNK_BYTES,
    blob_chunks,
    blobs,
    connections,
    field_chunks,
    fields,
    manifests,
    records,
    streams,
)


class IdList(TypeDecorator[list[str]]):
    """A list of names bound as one parameter, whatever its length: a text array on Postgres, a
    JSON array on SQLite. (An expanding IN list binds one parameter per name, and a grant's
    `resources` may name more than a database accepts: 65,535 on Postgres, 32,766 on SQLite.)"""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(ARRAY(Text()))
        return dialect.type_descriptor(Text())

    def process_bind_param(self, value: list[str] | None, dialect: Dialect) -> Any:
        if value is None or dialect.name == "postgresql":
            return value
        return _json_list(tuple(value))


@lru_cache(maxsize=1024)
def _json_list(names: tuple[str, ...]) -> str:
    """A grant's list as JSON, once per distinct list (a grant's lists come back on each read)."""
    return json.dumps(names)


class id_set(GenericFunction[str]):
    """The names of an `IdList` parameter as a one-column subquery, for `column IN (...)`."""

    type = Text()
    inherit_cache = True


@compiles(id_set, "sqlite")
def _id_set_sqlite(element: id_set, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(SELECT value FROM json_each({compiler.process(element.clauses, **kw)}))"


@compiles(id_set, "postgresql")
def _id_set_postgresql(element: id_set, compiler: SQLCompiler, **kw: Any) -> str:
    return f"(SELECT unnest({compiler.process(element.clauses, **kw)}))"


def in_ids(column: ColumnElement[str], name: str) -> ColumnElement[bool]:
    """`column` is one of the names bound to parameter `name` (an `IdList`: one parameter)."""
    return column.op("IN")(id_set(bindparam(name, type_=IdList())))


def _kind_in(text_like: bool) -> ColumnElement[bool]:
    """`fields.kind` is one of the text-like (or binary-only) kinds, with the kinds as SQL
    literals: an IN list of bound values would be re-rendered on every execution."""
    kinds: list[ColumnElement[str]] = [
        literal_column(f"'{kind.value}'") for kind in FieldKind if kind.text_like is text_like
    ]
    return fields.c.kind.in_(kinds)


# ---------------------------------------------------------------- catalogue


def stream_spec(connection_id: str, stream: str) -> Execute:
    return Execute(_stream_spec(), {"r_conn": connection_id, "r_stream": stream}, bounded=True)


@cache
def _stream_spec() -> Select[Any]:
    return (
        select(streams.c.primary_key, streams.c.consent_time_field, streams.c.hints)
        .select_from(
            connections.join(streams, streams.c.connector_id == connections.c.connector_id)
        )
        .where(
            connections.c.connection_id == bindparam("r_conn"),
            streams.c.stream == bindparam("r_stream"),
        )
    )


def stream_spec_of(stream: str, rows: Rows) -> StreamSpec | None:
    """The spec of `stream_spec`'s row, or None when the connection does not declare it."""
    if not rows:
        return None
    row = rows[0]
    hints = json.loads(row["hints"])
    return StreamSpec(
        stream,
        tuple(json.loads(row["primary_key"])),
        row["consent_time_field"],
        {name: FieldHint.from_json(hint) for name, hint in hints.items()},
    )


def connection_exists(connection_id: str) -> Execute:
    return Execute(_connection_exists(), {"r_conn": connection_id}, bounded=True)


@cache
def _connection_exists() -> Select[Any]:
    return select(connections.c.connector_id).where(
        connections.c.connection_id == bindparam("r_conn")
    )


def connector_of(rows: Rows) -> str | None:
    """The connector of `connection_exists`'s row, or None when there is no such connection."""
    return str(rows[0]["connector_id"]) if rows else None


def stream_declared_anywhere(stream: str) -> Execute:
    # Not bounded: `streams` is keyed by (connector_id, stream), so this scans every declared
    # stream (the catalogue's size), for a caller-chosen name on an error path.
    return Execute(_stream_declared_anywhere(), {"r_stream": stream})


@cache
def _stream_declared_anywhere() -> Select[Any]:
    return (
        select(literal(1).label("declared"))
        .where(streams.c.stream == bindparam("r_stream"))
        .limit(1)
    )


# ---------------------------------------------------------------- visibility


def _same_record(table: Any, other: Any) -> ColumnElement[bool]:
    return and_(
        table.c.connection_id == other.c.connection_id,
        table.c.stream == other.c.stream,
        table.c.record_id == other.c.record_id,
    )


class GrantShape(NamedTuple):
    """Which of a stream grant's optional terms are present: the key of a cached statement (a
    named tuple: it is hashed on every read, by the statement caches)."""

    instances: bool
    resources: bool
    time_field: bool
    since: bool
    until: bool

    @classmethod
    def of(cls, grant: StreamGrant) -> GrantShape:
        return _grant_terms(grant)[0]


BOUNDED_GRANT_TERMS = 64
"""A statement bound to a grant is `Execute.bounded` only while the grant's lists (connections,
resources, fields) hold at most this many names in all: each list is matched as one parameter
(`in_ids`), which the database reads whole on every statement, so a read under a grant naming
thousands of connections costs in proportion to it (and an async SQLite read then runs in a
reader thread, not on the event loop)."""


def _small(grant: StreamGrant, *more: Sequence[str] | None) -> bool:
    """Whether `grant`'s lists and `more` (other bound lists) name at most
    `BOUNDED_GRANT_TERMS` values in all."""
    total = sum(
        len(names) for names in (grant.instance_ids, grant.resources, grant.fields, *more) if names
    )
    return total <= BOUNDED_GRANT_TERMS


@lru_cache(maxsize=1024)
def _grant_terms(grant: StreamGrant) -> tuple[GrantShape, Mapping[str, Any]]:
    """A stream grant's shape and its parameters (`grant_params` with the default prefix), once
    per distinct stream grant: a server reads under the same grants again and again. Callers
    copy the parameters into their own (they are never changed in place)."""
    time = grant.time_constraint
    shape = GrantShape(
        grant.instance_ids is not None,
        grant.resources is not None,
        time is not None,
        time is not None and time.since is not None,
        time is not None and time.until is not None,
    )
    return shape, MappingProxyType(_grant_params(grant, "g"))


def grant_params(grant: StreamGrant, prefix: str = "g") -> dict[str, Any]:
    if prefix == "g":
        return dict(_grant_terms(grant)[1])
    return _grant_params(grant, prefix)


def _grant_params(grant: StreamGrant, prefix: str) -> dict[str, Any]:
    params: dict[str, Any] = {f"{prefix}_stream": grant.name}
    if grant.instance_ids is not None:
        params[f"{prefix}_instances"] = list(grant.instance_ids)
    if grant.resources is not None:
        params[f"{prefix}_resources"] = sorted(grant.resources)
    time = grant.time_constraint
    if time is not None:
        params[f"{prefix}_time_field"] = time.field
        params[f"{prefix}_since"] = time.since
        params[f"{prefix}_until"] = time.until
    return params


def visible_records(shape: GrantShape, prefix: str = "g") -> ColumnElement[bool]:
    """A stream grant's terms as a condition on `records` (Rule 4), parameters named by
    `grant_params` with the same prefix."""
    conditions: list[ColumnElement[bool]] = [
        records.c.stream == bindparam(f"{prefix}_stream"),
        records.c.deleted == False,  # noqa: E712 - SQL comparison
    ]
    if shape.instances:
        conditions.append(in_ids(records.c.connection_id, f"{prefix}_instances"))
    if shape.resources:
        conditions.append(in_ids(records.c.record_id, f"{prefix}_resources"))
    if shape.time_field:
        timed = fields.alias(f"{prefix}_timed")
        bounds: list[ColumnElement[bool]] = [
            _same_record(timed, records),
            timed.c.path == bindparam(f"{prefix}_time_field"),
            timed.c.time_value.is_not(None),
        ]
        if shape.since:
            bounds.append(timed.c.time_value >= bindparam(f"{prefix}_since"))
        if shape.until:
            bounds.append(timed.c.time_value < bindparam(f"{prefix}_until"))
        conditions.append(exists().where(*bounds))
    return and_(*conditions)


def _record_params(ref: RecordRef, path: str | None = None) -> dict[str, Any]:
    params = {"r_conn": ref.connection_id, "r_stream": ref.stream, "r_id": ref.record_id}
    if path is not None:
        params["f_path"] = path
    return params


def _record_is(table: Any = records) -> ColumnElement[bool]:
    return and_(
        table.c.connection_id == bindparam("r_conn"),
        table.c.stream == bindparam("r_stream"),
        table.c.record_id == bindparam("r_id"),
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


# ---------------------------------------------------------------- field reads


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
    shape, terms = _grant_terms(grant)
    params = {
        **_record_params(ref, path),
        **terms,
        "w_first": start // CHUNK_CHARS,
        "w_last": (end - 1) // CHUNK_CHARS,
        "w_start": start,
        "w_end": end,
    }
    if digest_prefix is not None:
        params["w_prefix"] = digest_prefix
        params["w_prefix_len"] = len(digest_prefix)
    return Execute(_field_window(shape, digest_prefix is not None), params, bounded=_small(grant))


@cache
def _field_window(shape: GrantShape, with_prefix: bool) -> Select[Any]:
    base = field_chunks.c.chunk_no * CHUNK_CHARS
    piece_start = greatest(bindparam("w_start", type_=Integer) - base, 0)
    piece_end = least(bindparam("w_end", type_=Integer) - base, CHUNK_CHARS)
    # The chunk range is given by parameters on the full primary key (not derived through the
    # join), so every planner probes exactly the window's chunks.
    chunk_join = and_(
        _record_is(field_chunks),
        field_chunks.c.path == bindparam("f_path"),
        field_chunks.c.chunk_no.between(bindparam("w_first"), bindparam("w_last")),
        fields.c.path.is_not(None),
        _kind_in(text_like=True),
    )
    if with_prefix:
        current = func.substr(fields.c.digest, 1, bindparam("w_prefix_len", type_=Integer))
        chunk_join = and_(chunk_join, current == bindparam("w_prefix"))
    field_join = and_(_same_record(fields, records), fields.c.path == bindparam("f_path"))
    return (
        select(
            *FIELD_META,
            func.substr(field_chunks.c.text, piece_start + 1, piece_end - piece_start).label(
                "text"
            ),
        )
        .select_from(records.outerjoin(fields, field_join).outerjoin(field_chunks, chunk_join))
        .where(_record_is(), visible_records(shape))
        .order_by(field_chunks.c.chunk_no)
    )


def field_meta(ref: RecordRef, path: str, grant: StreamGrant) -> Execute:
    shape, terms = _grant_terms(grant)
    params = {**_record_params(ref, path), **terms}
    return Execute(_field_meta(shape), params, bounded=_small(grant))


@cache
def _field_meta(shape: GrantShape) -> Select[Any]:
    field_join = and_(_same_record(fields, records), fields.c.path == bindparam("f_path"))
    return (
        select(*FIELD_META)
        .select_from(records.outerjoin(fields, field_join))
        .where(_record_is(), visible_records(shape))
    )


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


def _next_head(chunks: Any, overlap: ColumnElement[int]) -> ColumnElement[str]:
    """The next chunk's first `overlap` folded code points: a probe on the full primary key."""
    nxt = field_chunks.alias("nxt")
    return (
        select(func.substr(func.coalesce(nxt.c.folded, nxt.c.text), 1, overlap))
        .where(
            _same_record(nxt, chunks),
            nxt.c.path == chunks.c.path,
            nxt.c.chunk_no == chunks.c.chunk_no + 1,
        )
        .scalar_subquery()
    )


_OVERLAP = bindparam("m_overlap", type_=Integer)


def _haystack_at(
    chunks: Any, long_needle: bool, overlap: ColumnElement[int] = _OVERLAP
) -> ColumnElement[str]:
    """A chunk's folded text followed by the next chunk's folded head: the stored look-ahead
    for needles of up to `LOOKAHEAD_CHARS + 1` code points, else a probe of the next chunk's
    first `overlap` code points (the needle's length less one)."""
    here: ColumnElement[str] = func.coalesce(chunks.c.folded, chunks.c.text)
    if not long_needle:
        return here + func.coalesce(chunks.c.lookahead, "")
    return here + func.coalesce(_next_head(chunks, overlap), "")


@cache
def _match_scan(
    shape: GrantShape, long_needle: bool, indexed: bool, bound: bool, caps: Capabilities
) -> Select[Any]:
    """The first occurrence of the folded needle at or after code point `m_from` (in chunk
    `m_first`): the chunk whose folded text, extended by the next chunk's first `len(q) - 1`
    code points, holds it; the 1-based position there; and the field's digest. With `bound`, the
    field must still have the digest `m_prefix` starts (a match cursor's, or an earlier hop's),
    so changed text is never searched, let alone returned.
    The field and grant checks are uncorrelated, so they run once per statement, not once per
    chunk. Two branches tried in order, the second only when the first found nothing:

    1. a scan of the chunks in order that stops at the first hit and is linear in the chunks
       before it, whatever the planner's statistics: the first `SCAN_CHUNKS` when `indexed`,
       else all of them;
    2. (`indexed`) the chunks after those that the search index names as candidates (every
       trigram of the needle's head present), in order, each re-checked with `instr`/`strpos`
       on the same folded text: the index only ever narrows, the text decides. It runs only
       when the field has a chunk past the scanned ones (an uncorrelated check, done once).

    A needle of up to `LOOKAHEAD_CHARS + 1` code points is searched in each chunk's folded text
    followed by its stored look-ahead: one row read per chunk. A longer one needs up to
    `len(q) - 1` code points of the next chunk. In the scan, where window functions stream
    (`caps.streams_window_functions`): `lead()` over the chunks in key order (the window
    aggregate streams behind the index scan, so the scan still stops at the first hit).
    Elsewhere, and in the index branch, the next chunk's head is a correlated scalar subquery on
    the full primary key: one index probe per chunk read.
    """
    the_field = and_(_record_is(fields), fields.c.path == bindparam("f_path"))
    field_checks = [the_field, _kind_in(text_like=True)]
    if bound:
        current = func.substr(fields.c.digest, 1, bindparam("m_prefix_len", type_=Integer))
        field_checks.append(current == bindparam("m_prefix", type_=Text()))
    field_is_text = exists().where(*field_checks)
    record_is_visible = exists().where(_record_is(), visible_records(shape))
    digest = select(fields.c.digest).where(the_field).scalar_subquery().label("digest")
    checks = (
        _record_is(field_chunks),
        field_chunks.c.path == bindparam("f_path"),
        field_is_text,
        record_is_visible,
    )
    chunk_no = field_chunks.c.chunk_no.label("chunk_no")
    here: ColumnElement[str] = func.coalesce(field_chunks.c.folded, field_chunks.c.text)
    needle = bindparam("m_needle", type_=Text())
    stop = bindparam("m_stop", type_=Integer)
    # Within `m_from`'s chunk, only what starts at or after it (`skip` is 0 in later chunks).
    skip = greatest(bindparam("m_from", type_=Integer) - field_chunks.c.chunk_no * CHUNK_CHARS, 0)
    first = field_chunks.c.chunk_no >= bindparam("m_first", type_=Integer)
    # The scan's range: with the index, the chunks before `m_stop`; a streamed `lead()` also
    # reads chunk `m_stop` itself, for the head of the text after the last scanned chunk.
    scanned = (field_chunks.c.chunk_no < stop,) if indexed else ()
    if long_needle and caps.streams_window_functions:
        following = func.lead(here).over(order_by=field_chunks.c.chunk_no)
        ahead = func.substr(following, 1, _OVERLAP)
        found = strpos(func.substr(here + func.coalesce(ahead, ""), skip + 1), needle)
        read = (field_chunks.c.chunk_no <= stop,) if indexed else ()
        hits = (
            select(chunk_no, found.label("found"), (skip + found).label("position"))
            .where(*checks, first, *read)
            .subquery("hits")
        )
        scan = (
            select(hits.c.chunk_no, hits.c.position, digest)
            .where(hits.c.found > 0, *((hits.c.chunk_no < stop,) if indexed else ()))
            .order_by(hits.c.chunk_no)
            .limit(1)
        )
    else:
        found = strpos(func.substr(_haystack_at(field_chunks, long_needle), skip + 1), needle)
        scan = (
            select(chunk_no, (skip + found).label("position"), digest)
            .where(*checks, first, *scanned, found > 0)
            .order_by(field_chunks.c.chunk_no)
            .limit(1)
        )
    if not indexed:
        return scan

    past = field_chunks.alias("past")
    beyond = exists().where(
        _record_is(past), past.c.path == bindparam("f_path"), past.c.chunk_no == stop
    )
    late = field_chunks.alias("late")
    late_found = strpos(_haystack_at(late, long_needle), needle)
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
        index_branch = (
            select(late.c.chunk_no.label("chunk_no"), late_found.label("position"), digest)
            .select_from(
                search_chunks_table.join(
                    late,
                    and_(
                        _record_is(late),
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
    else:
        # The GIN index answers `LIKE` on the indexed expression. The key is compared under the
        # "POSIX" collation (the same byte order as the columns' "C", but another collation,
        # which the primary-key index cannot serve), so no ordered walk of every chunk of the
        # field can stand in for the index (planners were seen to choose one). The candidates
        # are re-checked in the same pass, materialised, then ordered.
        def opaque(value: ColumnElement[str]) -> ColumnElement[str]:
            return value.collate("POSIX")

        indexed_text = func.coalesce(late.c.folded, late.c.text) + func.coalesce(
            late.c.lookahead, ""
        )
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
        index_branch = (
            select(candidates.c.chunk_no, candidates.c.position, digest)
            .where(field_is_text, record_is_visible, candidates.c.position > 0)
            .order_by(candidates.c.chunk_no)
            .limit(1)
        )
    # Branch order is the answer's order: a hit in the scanned chunks comes first and the
    # `LIMIT 1` stops there, before the index is asked.
    branches = union_all(scan.subquery().select(), index_branch.subquery().select())
    return select(branches.subquery("hit_branches")).limit(1)


def match_window(
    ref: RecordRef,
    path: str,
    grant: StreamGrant,
    *,
    needle: str,
    before: int,
    after: int,
    limit: int | None,
    from_chars: int = 0,
    digest_prefix: str | None = None,
    use_index: bool = True,
) -> Execute:
    """A match window in one statement: the scan (`_match_scan`), then the window around its hit
    cut from the chunks of the very text it was found in (joined by digest). Each row carries
    the window's bounds (decoded by `match_bounds`), then the columns of `field_window`'s rows.
    No row: nothing matched, or the record, field or kind does not allow a match (`field_meta`
    tells which). The occurrence found is the first at or after `from_chars`, in a field whose
    digest still starts with `digest_prefix` when given. `use_index=False` scans every chunk
    (the benchmarks' baseline)."""
    first = from_chars // CHUNK_CHARS
    params = {
        **_record_params(ref, path),
        **grant_params(grant),
        "m_needle": needle,
        "m_overlap": len(needle) - 1,
        "m_before": before,
        "m_after": after,
        "m_q_len": len(needle),
        "m_limit": limit,
        "m_from": from_chars,
        "m_first": first,
    }
    if digest_prefix is not None:
        params["m_prefix"] = digest_prefix
        params["m_prefix_len"] = len(digest_prefix)
    indexed = use_index and len(needle) >= MIN_INDEXED_NEEDLE
    if indexed:
        params["m_stop"] = first + SCAN_CHUNKS
        params["m_fts"] = fts_query(needle)
        params["m_like"] = like_pattern(needle[: LOOKAHEAD_CHARS + 1])
    shape, long_needle = GrantShape.of(grant), len(needle) - 1 > LOOKAHEAD_CHARS
    bound = digest_prefix is not None
    return Execute(partial(_match_window, shape, long_needle, indexed, bound), params)


@dataclass(frozen=True, slots=True)
class MatchBounds:
    """Where a match window lies, as its statement computed it (the only place it is computed:
    `_core.window.match_window_start`/`match_window_limit` are its definition for the tests)."""

    match_start: int
    start: int
    limit: int
    clamped: bool
    """The limit the arguments asked for was above `MAX_LIMIT_CHARS` and was cut to it."""


def match_bounds(row: Row) -> MatchBounds:
    return MatchBounds(
        int(row["match_start"]),
        int(row["window_start"]),
        int(row["window_limit"]),
        bool(row["limit_clamped"]),
    )


@cache
def _match_window(
    shape: GrantShape, long_needle: bool, indexed: bool, bound: bool, caps: Capabilities
) -> Select[Any]:
    # The hit is materialised and every value taken from it is an uncorrelated scalar subquery,
    # so each is computed once and the window's chunk range reaches the primary-key index as a
    # bound, exactly as in `field_window`. (Joined instead, a planner without statistics was
    # seen to walk all the chunks and test the range on each.)
    hit = (
        _match_scan(shape, long_needle, indexed, bound, caps).cte("hit").prefix_with("MATERIALIZED")
    )
    match_start = hit.c.chunk_no * CHUNK_CHARS + hit.c.position - 1
    start = greatest(match_start - bindparam("m_before", type_=Integer), 0)
    wanted = func.coalesce(
        bindparam("m_limit", type_=Integer),
        match_start
        - start
        + bindparam("m_q_len", type_=Integer)
        + bindparam("m_after", type_=Integer),
    )

    def once(value: ColumnElement[Any]) -> ColumnElement[Any]:
        return select(value).select_from(hit).scalar_subquery()

    window_start = once(start)
    window_limit = once(least(wanted, MAX_LIMIT_CHARS))
    window_end = once(start + least(wanted, MAX_LIMIT_CHARS))
    base = field_chunks.c.chunk_no * CHUNK_CHARS
    piece_start = greatest(window_start - base, 0)
    piece_end = least(window_end - base, CHUNK_CHARS)
    return (
        select(
            once(match_start).label("match_start"),
            window_start.label("window_start"),
            window_limit.label("window_limit"),
            once(wanted > MAX_LIMIT_CHARS).label("limit_clamped"),
            *FIELD_META,
            func.substr(field_chunks.c.text, piece_start + 1, piece_end - piece_start).label(
                "text"
            ),
        )
        .select_from(
            fields.join(
                field_chunks,
                and_(_same_record(field_chunks, fields), field_chunks.c.path == fields.c.path),
            )
        )
        .where(
            _record_is(fields),
            fields.c.path == bindparam("f_path"),
            fields.c.digest == once(hit.c.digest),
            _record_is(field_chunks),
            field_chunks.c.path == bindparam("f_path"),
            field_chunks.c.chunk_no.between(
                window_start // CHUNK_CHARS, (window_end - 1) // CHUNK_CHARS
            ),
        )
        .order_by(field_chunks.c.chunk_no)
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
    shape, terms = _grant_terms(grant)
    params = {
        **_record_params(ref),
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
        bounded=_small(grant, only),
    )


@cache
def _record_preview(shape: GrantShape, projected: bool, paged: bool, chosen: bool) -> Select[Any]:
    # The page (the record's fields in path order with their first chunks, `p_limit` of them) is
    # chosen in a subquery, then joined to the record: ordering the outer join instead made
    # Postgres join and sort every field of the record for each page, a cost that grew with the
    # record's width rather than the page's.
    chosen_fields = _record_is(fields)
    if projected:
        chosen_fields = and_(chosen_fields, in_ids(fields.c.path, "p_fields"))
    if chosen:
        chosen_fields = and_(chosen_fields, in_ids(fields.c.path, "p_only"))
    if paged:
        chosen_fields = and_(chosen_fields, fields.c.path > bindparam("p_after"))
    first_chunk = and_(
        _same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        field_chunks.c.chunk_no == 0,
        _kind_in(text_like=True),
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
        .select_from(records.outerjoin(page, _same_record(page, records)))
        .where(_record_is(), visible_records(shape))
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


# ---------------------------------------------------------------- blobs


def blob_referenced(grants: list[StreamGrant], blob_id: str) -> Execute:
    """One row if some record visible under one of `grants` references the blob from a
    binary-only field that grant covers (a blob reference, or base64 / NUL content).

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
    referenced = [
        exists().where(
            fields.c.blob_id == bindparam("b_id"),
            _kind_in(text_like=False),
            in_ids(fields.c.path, f"g{number}_fields") if projected else true(),
            _same_record(records, fields),
            visible_records(shape, f"g{number}"),
        )
        for number, (shape, projected) in enumerate(shapes)
    ]
    return select(literal(1).label("referenced")).where(or_(*referenced) if referenced else false())


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


# ---------------------------------------------------------------- writes


# The record tables whose statistics the store keeps current on Postgres (see `stale_tables`).
RECORD_TABLES = ("records", "fields", "field_chunks")


def stale_tables(pending: Mapping[str, int]) -> Execute:
    """The record tables whose planner statistics lag behind their contents (Postgres).

    Batch writes look records up by key; a planner without statistics takes the
    `(connection_id, stream)` prefix of the key for one row and filters the rest, which scans a
    whole stream per batch and makes ingestion quadratic. Autovacuum keeps statistics current
    where it runs; where it is off (or has not come round yet) the store does the same itself,
    with autovacuum's own rule: analyse once the rows changed since the last analysis exceed
    50 + 10 % of the table. Where the planner needs no statistics for keyed lookups (SQLite,
    `Capabilities.plans_by_statistics`) nothing is sent and the reply is None. `pending` counts
    rows the caller wrote that the database's counts may not show yet. Decoded by
    `stale_table_names`."""
    params = {f"n_{name}": pending.get(name, 0) for name in RECORD_TABLES}
    return Execute(_stale_tables(), params, when=_plans_by_statistics)


def _plans_by_statistics(caps: Capabilities) -> bool:
    return caps.plans_by_statistics


@cache
def _stale_tables() -> Executable:
    return text(
        "SELECT s.relname AS relname"
        " FROM pg_stat_user_tables AS s JOIN pg_class AS c ON c.oid = s.relid"
        " WHERE s.schemaname = current_schema()"
        " AND s.relname IN ('records', 'fields', 'field_chunks')"
        " AND s.n_mod_since_analyze + CASE s.relname WHEN 'records' THEN :n_records"
        " WHEN 'fields' THEN :n_fields ELSE :n_field_chunks END"
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
        select(fields.c.record_id, fields.c.path, fields.c.kind, fields.c.digest).where(
            fields.c.connection_id == connection_id,
            fields.c.stream == stream,
            fields.c.record_id.in_(record_ids),
        )
    )


def stored_fields(rows: Rows) -> dict[str, dict[str, tuple[str, str]]]:
    """`existing_fields`' answer: per record id, per path, the stored (kind, digest)."""
    found: dict[str, dict[str, tuple[str, str]]] = {}
    for row in rows:
        found.setdefault(row["record_id"], {})[row["path"]] = (row["kind"], row["digest"])
    return found


def insert_ignoring(table: Any) -> Builder:
    """An INSERT that skips rows whose key is already there (`ON CONFLICT DO NOTHING`): for
    content-addressed rows, which concurrent writers may all insert with identical content."""
    return partial(_insert_ignoring, table)


@cache
def _insert_ignoring(table: Any, caps: Capabilities) -> Executable:
    if caps.name == "postgresql":
        return postgresql_insert(table).on_conflict_do_nothing()
    return sqlite_insert(table).on_conflict_do_nothing()


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


FIELD_COLUMNS = tuple(column.name for column in fields.columns)
CHUNK_COLUMNS = tuple(column.name for column in field_chunks.columns)
"""The column order of the rows `insert_fields` and `insert_chunks` take (tuples)."""


def insert_fields(caps: Capabilities) -> DriverSQL:
    """Rows of `fields`, as tuples in `FIELD_COLUMNS` order (a `DriverSQL` executemany)."""
    return _insert_rows("fields", FIELD_COLUMNS, caps)


def insert_chunks(caps: Capabilities) -> DriverSQL:
    """Rows of `field_chunks`, as tuples in `CHUNK_COLUMNS` order."""
    return _insert_rows("field_chunks", CHUNK_COLUMNS, caps)


@cache
def _insert_rows(table_name: str, columns: tuple[str, ...], caps: Capabilities) -> DriverSQL:
    markers = ", ".join(caps.positional_marker for _ in columns)
    return DriverSQL(f"INSERT INTO {table_name} ({', '.join(columns)}) VALUES ({markers})")


def delete_fields(table: Any) -> Delete:
    """Rows of `table` (fields or field_chunks) for one record's listed paths."""
    return delete(table).where(
        table.c.connection_id == bindparam("k_connection_id"),
        table.c.stream == bindparam("k_stream"),
        table.c.record_id == bindparam("k_record_id"),
        table.c.path == bindparam("k_path"),
    )


# ---------------------------------------------------------------- the search index, on writes


def _fills_side_index(caps: Capabilities) -> bool:
    return caps.search_index_is_side_table


def index_keys(connection_id: str, stream: str, keys: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """The parameters of the index statements below: one batch's fields as one JSON array of
    `[record_id, path]` pairs (one statement per batch, not one per field)."""
    return {"k_conn": connection_id, "k_stream": stream, "k_keys": json.dumps(list(keys))}


def unindex_whole_fields() -> tuple[Execute, Execute]:
    """Where the search index is a side table (SQLite): remove the row of each `k_keys` field
    indexed whole (`INDEX_LONG_BASE`) and forget its id, run before its chunks are deleted (the
    row is deleted with the text it was given, which its chunks still hold). Its chunks' delete
    trigger then finds no id and leaves the index alone."""
    return (
        Execute(_unindex_whole_fields(), when=_fills_side_index),
        Execute(_unregister_index_fields(whole=True), when=_fills_side_index),
    )


def unregister_index_fields() -> Execute:
    """Where the search index is a side table (SQLite): forget the `k_keys` fields' ids, run
    right after their chunks were deleted (whose index entries the delete trigger removed).
    A field has an id in `search_fields` exactly while its text is in the index: the trigger
    removes the entries of a deleted chunk only where its field has an id, and FTS5 must never
    be asked to delete an entry it was not given."""
    return Execute(_unregister_index_fields(whole=False), when=_fills_side_index)


def register_index_fields() -> Execute:
    """Where the search index is a side table (SQLite): give each `k_keys` field (newly written,
    text-like, and searchable: see `_ops.writes`) an id in `search_fields`, in the write's own
    transaction, right after its chunks are inserted, and say whether it is indexed whole (at
    most `SCAN_CHUNKS` chunks: no chunk numbered `SCAN_CHUNKS`)."""
    return Execute(_register_index_fields(), when=_fills_side_index)


def index_fields() -> tuple[Execute, Execute]:
    """Then index those fields: the chunks of a long field one row each, then each field
    indexed whole as one row (`INDEX_LONG_BASE`), in rowid order. The text is folded text plus
    look-ahead, the very text a match scan searches. (Where the index is the database's own, it
    maintains itself; on SQLite, triggers doing this were measured 4x slower than these
    statements, and a statement per field 3x slower than one per batch.)"""
    return (
        Execute(_index_chunks(whole=False), when=_fills_side_index),
        Execute(_index_chunks(whole=True), when=_fills_side_index),
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


def manifest_of_connection(connection_id: str) -> Execute:
    """The stored manifest document of a connection's connector (decoded by
    `Manifest.from_json`): what a write that fills the search index itself (SQLite) needs to
    know which fields are searchable. Elsewhere nothing is sent and the reply is None."""
    return Execute(_manifest_of_connection(), {"r_conn": connection_id}, when=_fills_side_index)


@cache
def _manifest_of_connection() -> Select[Any]:
    return (
        select(manifests.c.document)
        .select_from(
            connections.join(manifests, manifests.c.connector_id == connections.c.connector_id)
        )
        .where(connections.c.connection_id == bindparam("r_conn"))
    )


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
