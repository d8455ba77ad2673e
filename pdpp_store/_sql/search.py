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
    or_,
    select,
    tuple_,
)

from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.values import LOOKAHEAD_CHARS

from .dialects import strpos
from .requests import Execute, Rows
from .statements import GrantShape, _kind_in, _same_record, grant_params, visible_records
from .tables import connections, field_chunks, fields, manifests, records, streams

__all__ = [
    "DeclaringConnection",
    "SearchGroup",
    "declaring_connections",
    "hit_keys",
    "hits",
    "manifest_documents",
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


def hits(
    grants: Sequence[StreamGrant],
    groups: Sequence[SearchGroup],
    terms: Sequence[str],
    after: tuple[str, str, str] | None,
    limit: int,
) -> Execute:
    """The keys of the first `limit` matching records after `after`, in key order."""
    params: dict[str, Any] = {"h_limit": limit}
    for index, grant in enumerate(grants):
        params.update(grant_params(grant, f"g{index}"))
    for number, group in enumerate(groups):
        params[f"c{number}"] = list(group.connection_ids)
        for term in range(len(terms)):
            params[f"p{number}_{term}"] = list(group.paths)
    for term, needle in enumerate(terms):
        params[f"t{term}"] = needle
        params[f"t{term}_overlap"] = len(needle) - 1
    if after is not None:
        params["a_conn"], params["a_stream"], params["a_id"] = after
    shapes = tuple(GrantShape.of(grant) for grant in grants)
    layout = tuple(group.grant_index for group in groups)
    longs = tuple(len(needle) - 1 > LOOKAHEAD_CHARS for needle in terms)
    return Execute(_hits(shapes, layout, longs, after is not None), params)


@cache
def _hits(
    shapes: tuple[GrantShape, ...],
    layout: tuple[int, ...],
    longs: tuple[bool, ...],
    paged: bool,
) -> Select[Any]:
    key = (records.c.connection_id, records.c.stream, records.c.record_id)
    disjuncts = [
        and_(
            visible_records(shapes[grant_index], f"g{grant_index}"),
            records.c.connection_id.in_(bindparam(f"c{number}", expanding=True)),
            *(_term_occurs(number, term, long) for term, long in enumerate(longs)),
        )
        for number, grant_index in enumerate(layout)
    ]
    query = select(*key).where(or_(*disjuncts) if disjuncts else false())
    if paged:
        query = query.where(
            tuple_(*key) > tuple_(bindparam("a_conn"), bindparam("a_stream"), bindparam("a_id"))
        )
    return query.order_by(*key).limit(bindparam("h_limit", type_=Integer))


def hit_keys(rows: Rows) -> list[tuple[str, str, str]]:
    """`hits`' answer: the records' keys, in order."""
    return [(str(row["connection_id"]), str(row["stream"]), str(row["record_id"])) for row in rows]
