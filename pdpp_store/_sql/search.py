"""Search statements (§9): the catalogue of searchable fields, and the page of hits.

Rules:
1. The fields searched are decided before the query, in Python, from the manifests and the
   grant (`_ops.search`); they reach the SQL as bound lists of paths per group of connections,
   so a field outside those lists is never compared with a term, and its bytes never leave
   the database.
2. Every disjunct of the hit statement carries its stream grant's visibility condition
   (`statements.visible_records`): the same rules as every read, in the SQL itself.
3. A term matches a chunk when the folded needle occurs in the chunk's folded text extended by
   the next chunk's folded head: the stored 63-code-point look-ahead for terms of up to 64 code
   points, a probe of the next chunk for longer ones (terms are at most 256 code points, chunks
   1024, so a term crosses at most one boundary).
4. Hits come in key order `(connection_id, stream, record_id)` (byte order on both databases),
   strictly after the page cursor's key: keyset pages that never skip or repeat a hit.
5. As in `statements`: every selected column is labelled, and each statement's rows are decoded
   by label by the function below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    exists,
    false,
    func,
    literal_column,
    or_,
    select,
    tuple_,
    union,
)

from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.values import LOOKAHEAD_CHARS

from .dialects import Capabilities, strpos
from .requests import Execute, Rows
from .statements import (
    INDEX_ROWID_SHIFT,
    GrantShape,
    _kind_in,
    _same_record,
    fts_query,
    grant_params,
    like_pattern,
    search_chunks_table,
    search_fields_table,
    visible_records,
)
from .tables import connections, field_chunks, fields, manifests, records, streams

__all__ = [
    "DeclaringConnection",
    "Key",
    "SearchGroup",
    "candidates",
    "declaring_connections",
    "hit_keys",
    "hits",
    "manifest_documents",
    "nth_key",
    "stored_manifests",
    "stream_connections",
]


def stream_connections(names: Sequence[str], connection_id: str | None) -> Execute:
    """(connection_id, connector_id, stream, registered_at) of every connection whose
    manifest declares one of `names` (only `connection_id`'s when given)."""
    params: dict[str, Any] = {"s_names": list(names)}
    if connection_id is not None:
        params["s_conn"] = connection_id
    return Execute(_stream_connections(connection_id is not None), params)


@cache
def _stream_connections(one: bool) -> Select[Any]:
    query = (
        select(
            connections.c.connection_id,
            connections.c.connector_id,
            streams.c.stream,
            manifests.c.registered_at,
        )
        .select_from(
            connections.join(streams, streams.c.connector_id == connections.c.connector_id).join(
                manifests, manifests.c.connector_id == connections.c.connector_id
            )
        )
        .where(streams.c.stream.in_(bindparam("s_names", expanding=True)))
        .order_by(connections.c.connection_id, streams.c.stream)
    )
    if one:
        query = query.where(connections.c.connection_id == bindparam("s_conn"))
    return query


@dataclass(frozen=True, slots=True)
class DeclaringConnection:
    connection_id: str
    connector_id: str
    stream: str
    registered_at: Any
    """When the connector's manifest was registered: the stamp of a parsed manifest."""


def declaring_connections(rows: Rows) -> list[DeclaringConnection]:
    """`stream_connections`' answer."""
    return [
        DeclaringConnection(
            row["connection_id"], row["connector_id"], row["stream"], row["registered_at"]
        )
        for row in rows
    ]


def manifest_documents(connector_ids: Sequence[str]) -> Execute:
    return Execute(
        select(manifests.c.connector_id, manifests.c.registered_at, manifests.c.document).where(
            manifests.c.connector_id.in_(bindparam("s_connectors", expanding=True))
        ),
        {"s_connectors": list(connector_ids)},
    )


def stored_manifests(rows: Rows) -> list[tuple[str, Any, str]]:
    """`manifest_documents`' answer: (connector id, registration stamp, manifest JSON)."""
    return [(row["connector_id"], row["registered_at"], row["document"]) for row in rows]


@dataclass(frozen=True, slots=True)
class SearchGroup:
    """Connections of one stream grant whose searchable granted fields are the same paths."""

    grant_index: int
    connection_ids: tuple[str, ...]
    paths: tuple[str, ...]


def _haystack(long_term: bool, overlap: ColumnElement[int]) -> ColumnElement[str]:
    here: ColumnElement[str] = func.coalesce(field_chunks.c.folded, field_chunks.c.text)
    if not long_term:
        return here + func.coalesce(field_chunks.c.lookahead, "")
    nxt = field_chunks.alias("nxt")
    ahead = (
        select(func.substr(func.coalesce(nxt.c.folded, nxt.c.text), 1, overlap))
        .where(
            _same_record(nxt, field_chunks),
            nxt.c.path == field_chunks.c.path,
            nxt.c.chunk_no == field_chunks.c.chunk_no + 1,
        )
        .scalar_subquery()
    )
    return here + func.coalesce(ahead, "")


def _term_occurs(group: int, term: int, long_term: bool) -> ColumnElement[bool]:
    """Term `term` occurs in one of group `group`'s paths of the current record."""
    overlap = bindparam(f"t{term}_overlap", type_=Integer)
    needle = bindparam(f"t{term}", type_=Text())
    return exists().where(
        _same_record(fields, records),
        fields.c.path.in_(bindparam(f"p{group}_{term}", expanding=True)),
        _kind_in(text_like=True),
        _same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        strpos(_haystack(long_term, overlap), needle) > 0,
    )


Key = tuple[str, str, str]
"""A record's key: (connection_id, stream, record_id)."""


def _bucket(count: int) -> int:
    """Statements that take a list of keys are cached per bucket of list sizes (a power of two),
    the list padded with its last key: few shapes, each compiled once."""
    size = 1
    while size < count:
        size *= 2
    return size


def _key_params(keys: Sequence[Key], prefix: str) -> dict[str, Any]:
    padded = list(keys) + [keys[-1]] * (_bucket(len(keys)) - len(keys))
    return {
        f"{prefix}{n}_{part}": value
        for n, key in enumerate(padded)
        for part, value in zip(("c", "s", "r"), key, strict=True)
    }


def _keys_subquery(count: int, prefix: str) -> Any:
    """The keys bound by `_key_params` as a table (`connection_id`, `stream`, `record_id`),
    duplicates removed, to be joined by equality (which every planner turns into key lookups;
    a row-value `IN` list was seen to be scanned)."""
    rows = [
        select(
            bindparam(f"{prefix}{n}_c", type_=Text()).label("connection_id"),
            bindparam(f"{prefix}{n}_s", type_=Text()).label("stream"),
            bindparam(f"{prefix}{n}_r", type_=Text()).label("record_id"),
        )
        for n in range(count)
    ]
    return (union(*rows) if len(rows) > 1 else rows[0]).subquery(f"{prefix}keys")


def _scope_params(
    grants: Sequence[StreamGrant], groups: Sequence[SearchGroup], after: Key | None
) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for index, grant in enumerate(grants):
        params.update(grant_params(grant, f"g{index}"))
    for number, group in enumerate(groups):
        params[f"c{number}"] = list(group.connection_ids)
    if after is not None:
        params["a_conn"], params["a_stream"], params["a_id"] = after
    return params


def _layout(
    grants: Sequence[StreamGrant], groups: Sequence[SearchGroup]
) -> tuple[tuple[GrantShape, ...], tuple[int, ...]]:
    return tuple(GrantShape.of(grant) for grant in grants), tuple(g.grant_index for g in groups)


def _after() -> Any:
    return tuple_(bindparam("a_conn"), bindparam("a_stream"), bindparam("a_id"))


def _in_scope(
    shapes: tuple[GrantShape, ...], layout: tuple[int, ...], longs: tuple[bool, ...]
) -> ColumnElement[bool]:
    """A record the search may return (visible under its stream grant, in a searched connection)
    holding every term (none given: whatever it holds)."""
    disjuncts = [
        and_(
            visible_records(shapes[grant_index], f"g{grant_index}"),
            records.c.connection_id.in_(bindparam(f"c{number}", expanding=True)),
            *(_term_occurs(number, term, long) for term, long in enumerate(longs)),
        )
        for number, grant_index in enumerate(layout)
    ]
    return or_(*disjuncts) if disjuncts else false()


def nth_key(
    grants: Sequence[StreamGrant], groups: Sequence[SearchGroup], after: Key | None, n: int
) -> Execute:
    """The key of the `n`-th record after `after` that the search could return (visible, in a
    searched connection), whatever it holds: the end of the range the first phase scans.
    Decoded by `hit_keys` (none: fewer than `n` records remain)."""
    params = {**_scope_params(grants, groups, after), "h_offset": n - 1}
    shapes, layout = _layout(grants, groups)
    return Execute(_nth_key(shapes, layout, after is not None), params)


@cache
def _nth_key(shapes: tuple[GrantShape, ...], layout: tuple[int, ...], paged: bool) -> Select[Any]:
    key = (records.c.connection_id, records.c.stream, records.c.record_id)
    query = select(*key).where(_in_scope(shapes, layout, ()))
    if paged:
        query = query.where(tuple_(*key) > _after())
    return query.order_by(*key).limit(1).offset(bindparam("h_offset", type_=Integer))


def hits(
    grants: Sequence[StreamGrant],
    groups: Sequence[SearchGroup],
    terms: Sequence[str],
    after: Key | None,
    limit: int,
    *,
    upto: Key | None = None,
    among: Sequence[Key] | None = None,
) -> Execute:
    """The keys of the first `limit` matching records after `after` (and up to `upto`, or only
    `among` the given candidate keys), in key order."""
    params: dict[str, Any] = {**_scope_params(grants, groups, after), "h_limit": limit}
    for number, group in enumerate(groups):
        for term in range(len(terms)):
            params[f"p{number}_{term}"] = list(group.paths)
    for term, needle in enumerate(terms):
        params[f"t{term}"] = needle
        params[f"t{term}_overlap"] = len(needle) - 1
    if upto is not None:
        params["u_conn"], params["u_stream"], params["u_id"] = upto
    if among:
        params.update(_key_params(among, "h"))
    shapes, layout = _layout(grants, groups)
    longs = tuple(len(needle) - 1 > LOOKAHEAD_CHARS for needle in terms)
    statement = _hits(
        shapes,
        layout,
        longs,
        paged=after is not None,
        bounded=upto is not None,
        among=_bucket(len(among)) if among else 0,
    )
    return Execute(statement, params)


@cache
def _hits(
    shapes: tuple[GrantShape, ...],
    layout: tuple[int, ...],
    longs: tuple[bool, ...],
    *,
    paged: bool,
    bounded: bool,
    among: int,
) -> Select[Any]:
    key = (records.c.connection_id, records.c.stream, records.c.record_id)
    conditions: list[ColumnElement[bool]] = [_in_scope(shapes, layout, longs)]
    if paged:
        conditions.append(tuple_(*key) > _after())
    if bounded:
        upto = tuple_(bindparam("u_conn"), bindparam("u_stream"), bindparam("u_id"))
        conditions.append(tuple_(*key) <= upto)
    query = select(*key).where(*conditions)
    if among:
        keys = _keys_subquery(among, "h")
        joined = and_(
            records.c.connection_id == keys.c.connection_id,
            records.c.stream == keys.c.stream,
            records.c.record_id == keys.c.record_id,
        )
        query = query.select_from(keys.join(records, joined))
    return query.order_by(*key).limit(bindparam("h_limit", type_=Integer))


def candidates(
    groups: Sequence[SearchGroup], streams: Sequence[str], term: str, after: Key, limit: int
) -> Execute:
    """The next `limit` record keys after `after`, in key order, that the search index names as
    candidates for `term` in a searched path of a searched connection (decoded by `hit_keys`).
    One table only, no record data but keys: `hits(..., among=...)` re-checks every term on
    the text, under the grant."""
    params: dict[str, Any] = {
        "i_conns": sorted({c for group in groups for c in group.connection_ids}),
        "i_streams": sorted(set(streams)),
        "i_paths": sorted({path for group in groups for path in group.paths}),
        "i_fts": fts_query(term),
        "i_like": like_pattern(term[: LOOKAHEAD_CHARS + 1]),
        "i_limit": limit,
    }
    params["a_conn"], params["a_stream"], params["a_id"] = after
    return Execute(_candidates, params)


@cache
def _candidates(caps: Capabilities) -> Select[Any]:
    if caps.search_index_is_side_table:
        sf = search_fields_table
        key = (sf.c.connection_id, sf.c.stream, sf.c.record_id)
        # Integer division (`//`): `/` is a true division in SQLAlchemy 2, a float on SQLite,
        # and would pair a chunk with the wrong field (`INDEX_ROWID_SHIFT`).
        search_id = search_chunks_table.c.rowid // INDEX_ROWID_SHIFT
        return (
            select(*key)
            .distinct()
            .select_from(search_chunks_table.join(sf, sf.c.search_id == search_id))
            .where(
                literal_column("search_chunks").op("MATCH")(bindparam("i_fts", type_=Text())),
                sf.c.connection_id.in_(bindparam("i_conns", expanding=True)),
                sf.c.stream.in_(bindparam("i_streams", expanding=True)),
                sf.c.path.in_(bindparam("i_paths", expanding=True)),
                tuple_(*key) > _after(),
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
            tuple_(*posix) > _after(),
        )
        .order_by(*posix)
        .limit(bindparam("i_limit", type_=Integer))
    )


def hit_keys(rows: Rows) -> list[Key]:
    """`hits`', `nth_key`'s and `candidates`' answer: the records' keys, in order."""
    return [(str(row["connection_id"]), str(row["stream"]), str(row["record_id"])) for row in rows]
