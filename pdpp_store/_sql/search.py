"""Search statements (docs/contract.md §9): the page of hits, and the page's evidence (first
occurrences and
previews). The catalogue of searchable fields is `catalogue`'s; the index's candidates are
`index`'s question, asked here by `candidates`.

Rules:
1. The fields searched are decided before the query, in Python, from the manifests and the
   grant (`_ops.search`); they reach the SQL as bound lists of paths per group of connections,
   so a field outside those lists is never compared with a term, and its bytes never leave
   the database.
2. Every disjunct of the hit statement carries its stream grant's visibility condition
   (`visibility.visible_records`): the same rules as every read, in the SQL itself.
3. A term matches a chunk when the folded needle occurs in the chunk's folded text extended by
   the next chunk's folded head: the stored 63-code-point look-ahead for terms of up to 64 code
   points, a probe of the next chunk for longer ones (terms are at most 256 code points, chunks
   1024, so a term crosses at most one boundary). A phrase (a term holding whitespace) is
   looked for in the chunk and the whole next chunk, squeezed (`match.squeezed`), with its
   needle squeezed (`match.bound_needle`): docs/decisions.md, "Phrases that forgive layout".
4. Hits come in key order `(connection_id, stream, record_id)` (byte order on both databases),
   strictly after the page cursor's key: keyset pages that never skip or repeat a hit.
5. As everywhere in `_sql`: every selected column is labelled, and each statement's rows are decoded
   by label by the function below it.
6. A group's filter reaches the SQL as `shapes.py` Rule 1 has it: the statement is built for
   each group's filter's *shape* (`filters.filter_shape`: operators and value kinds), the
   filter's fields and values are bound parameters (group `n`'s: `q<n>_f<m>_*`, `_filters`),
   and every statement that holds a filter is cached per shape (`shapes.per_shape`). So no
   filter value is ever statement text, and one statement serves every value of a shape.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    or_,
    select,
    true,
    tuple_,
)

from pdpp_store._core.filters import Filter
from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.values import CHUNK_CHARS, LOOKAHEAD_CHARS
from pdpp_store.evidence import FieldInfo

from . import visibility
from .dialects import BoundColumns, Capabilities, bound_rows, greatest, least, strpos
from .filters import FilterShape, filter_shape, shaped_condition
from .index import fts_query, like_pattern, record_candidates
from .match import PHRASE, bound_needle, haystack_at, needle_mode, squeezed
from .reads import FIELD_META, field_info
from .requests import Execute, Rows
from .shapes import per_shape
from .tables import field_chunks, fields, records
from .visibility import GrantShape, grant_params, kind_in, same_record

__all__ = [
    "FieldOccurrences",
    "Key",
    "Preview",
    "SearchGroup",
    "Target",
    "candidates",
    "first_occurrences",
    "hit_keys",
    "hits",
    "next_keys",
    "occurrences",
    "preview_texts",
    "previews",
]


@dataclass(frozen=True, slots=True)
class SearchGroup:
    """Connections of one stream grant whose searchable granted fields are the same paths."""

    grant_index: int
    connection_ids: tuple[str, ...]
    paths: tuple[str, ...]
    filter: Filter = field(default_factory=Filter)
    """The search's `filter` (§11.1) as the group's manifest declares its fields."""


def _term_occurs(group: int, term: int, long_term: int) -> ColumnElement[bool]:
    """Term `term` occurs in one of group `group`'s paths of the current record (`long_term`
    is the term's `match.needle_mode`)."""
    overlap = bindparam(f"t{term}_overlap", type_=Integer)
    needle = bindparam(f"t{term}", type_=Text())
    return exists().where(
        same_record(fields, records),
        fields.c.path.in_(bindparam(f"p{group}_{term}", expanding=True)),
        kind_in(text_like=True),
        same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        strpos(haystack_at(field_chunks, long_term, overlap), needle) > 0,
    )


Key = tuple[str, str, str]
"""A record's key: (connection_id, stream, record_id)."""


KEY_COLUMNS = ("connection_id", "stream", "record_id")
"""The columns of a record key (`Key`) bound as a table by `dialects.bound_rows`."""


def _bound_json(rows: Sequence[tuple[Any, ...]]) -> str:
    """The parameter `dialects.bound_rows` reads: the rows as one JSON array of arrays."""
    return json.dumps([list(row) for row in rows], ensure_ascii=False)


def _keys_table(caps: Capabilities, name: str) -> Any:
    """Record keys bound by `_bound_json`, as a table."""
    return bound_rows(caps, name, tuple((column, True) for column in KEY_COLUMNS))


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


def _filter_prefix(group: int) -> str:
    """The prefix of group `group`'s filter parameters (Rule 6)."""
    return f"q{group}"


def _filters(groups: Sequence[SearchGroup]) -> tuple[tuple[FilterShape, ...], dict[str, Any]]:
    """Per group, its filter's shape, and the parameters of every group's filter (Rule 6); no
    shapes at all where no group has a filter (the statement of an unfiltered search)."""
    if not any(group.filter.clauses for group in groups):
        return (), {}
    shapes: list[FilterShape] = []
    params: dict[str, Any] = {}
    for number, group in enumerate(groups):
        shape, values = filter_shape(group.filter, _filter_prefix(number))
        shapes.append(shape)
        params.update(values)
    return tuple(shapes), params


def _after() -> Any:
    return tuple_(bindparam("a_conn"), bindparam("a_stream"), bindparam("a_id"))


def _in_scope(
    shapes: tuple[GrantShape, ...],
    layout: tuple[int, ...],
    longs: tuple[int, ...],
    filters: tuple[FilterShape, ...] = (),
) -> ColumnElement[bool]:
    """A record the search may return (visible under its stream grant, in a searched connection)
    holding every term (none given: whatever it holds) and, where `filters` are given (one
    shape per group, `_filters`), matching its group's filter."""
    disjuncts = [
        and_(
            visibility.visible_records(shapes[grant_index], f"g{grant_index}"),
            records.c.connection_id.in_(bindparam(f"c{number}", expanding=True)),
            *(_term_occurs(number, term, long) for term, long in enumerate(longs)),
            *(
                (shaped_condition(filters[number], records, prefix=_filter_prefix(number)),)
                if filters
                else ()
            ),
        )
        for number, grant_index in enumerate(layout)
    ]
    return or_(*disjuncts) if disjuncts else false()


def next_keys(
    grants: Sequence[StreamGrant], groups: Sequence[SearchGroup], after: Key | None, n: int
) -> Execute:
    """The keys of the next `n` records after `after` that the search could return (visible, in
    a searched connection), whatever they hold: the range the first phase scans, re-checked
    with `hits(..., among=...)`. Decoded by `hit_keys`."""
    params = {**_scope_params(grants, groups, after), "h_count": n}
    shapes, layout = _layout(grants, groups)
    return Execute(_next_keys(shapes, layout, after is not None), params)


@cache
def _next_keys(shapes: tuple[GrantShape, ...], layout: tuple[int, ...], paged: bool) -> Select[Any]:
    key = (records.c.connection_id, records.c.stream, records.c.record_id)
    query = select(*key).where(_in_scope(shapes, layout, ()))
    if paged:
        query = query.where(tuple_(*key) > _after())
    return query.order_by(*key).limit(bindparam("h_count", type_=Integer))


def hits(
    grants: Sequence[StreamGrant],
    groups: Sequence[SearchGroup],
    terms: Sequence[str],
    after: Key | None,
    limit: int,
    *,
    among: Sequence[Key] | None = None,
) -> Execute:
    """The keys of the first `limit` matching records after `after` (or only `among` the given
    keys: the first phase's range, or the index's candidates), in key order.

    Given keys are joined by equality (`_keys_table`), never bounded by a key range: SQLite
    walks the primary key on its leading equalities (connection, stream) and cannot stop at an
    upper bound on the whole key, so a bounded scan read every later record's key."""
    params: dict[str, Any] = {**_scope_params(grants, groups, after), "h_limit": limit}
    for number, group in enumerate(groups):
        for term in range(len(terms)):
            params[f"p{number}_{term}"] = list(group.paths)
    for term, needle in enumerate(terms):
        params[f"t{term}"] = bound_needle(needle)
        params[f"t{term}_overlap"] = len(needle) - 1
    if among:
        params["h_keys"] = _bound_json(among)
    shapes, layout = _layout(grants, groups)
    longs = tuple(needle_mode(needle) for needle in terms)
    # Given keys all lie after `after`: saying so again only misleads a planner (Postgres took
    # the range of every later record for one row and scanned it).
    paged = after is not None and not among
    filters, filter_params = _filters(groups)
    params.update(filter_params)
    return Execute(
        partial(_hits, shapes, layout, longs, filters, paged=paged, among=bool(among)), params
    )


@per_shape
def _hits(
    shapes: tuple[GrantShape, ...],
    layout: tuple[int, ...],
    longs: tuple[int, ...],
    filters: tuple[FilterShape, ...],
    caps: Capabilities,
    *,
    paged: bool,
    among: bool,
) -> Select[Any]:
    key = (records.c.connection_id, records.c.stream, records.c.record_id)
    conditions: list[ColumnElement[bool]] = [_in_scope(shapes, layout, longs, filters)]
    if paged:
        conditions.append(tuple_(*key) > _after())
    if among:
        # The given keys drive: each record is a key lookup in a correlated subquery, so no
        # planner can walk every record instead (SQLite did, to spare a sort, with the keys
        # joined; it cannot tell how many rows `json_each` holds).
        keys = _keys_table(caps, "h_keys")
        given = (keys.c.connection_id, keys.c.stream, keys.c.record_id)
        holds = exists().where(*(column == bound for column, bound in zip(key, given, strict=True)))
        query = select(*given).where(holds.where(*conditions)).order_by(*given)
    else:
        query = select(*key).where(*conditions).order_by(*key)
    return query.limit(bindparam("h_limit", type_=Integer))


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
    return record_candidates(caps, _after())


def hit_keys(rows: Rows) -> list[Key]:
    """`hits`', `next_keys`' and `candidates`' answer: the records' keys, in order."""
    return [(str(row["connection_id"]), str(row["stream"]), str(row["record_id"])) for row in rows]


# ---------------------------------------------------------------- the page's evidence

Target = tuple[str, str, str, str]
"""A searchable field of a hit: (connection_id, stream, record_id, path)."""
_TARGET_COLUMNS: BoundColumns = tuple((name, True) for name in (*KEY_COLUMNS, "path"))


def _page_params(grants: Sequence[StreamGrant]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for index, grant in enumerate(grants):
        params.update(grant_params(grant, f"g{index}"))
    return params


def _page_fields(shapes: tuple[GrantShape, ...], targets: Any) -> tuple[Any, ColumnElement[bool]]:
    """The bound `targets` joined to their records and text-like fields, and the condition that
    keeps those visible under their stream's grant. Record tables are joined to each other by
    key (not only to the bound targets): Citus co-locates by `connection_id`
    (tests/_distribution.py, rule 3)."""
    joined = targets.join(records, same_record(records, targets)).join(
        fields, and_(same_record(fields, records), fields.c.path == targets.c.path)
    )
    visible = or_(*(visibility.visible_records(shape, f"g{n}") for n, shape in enumerate(shapes)))
    return joined, and_(visible, kind_in(text_like=True))


def first_occurrences(
    grants: Sequence[StreamGrant], targets: Sequence[Target], terms: Sequence[str], chunks: int
) -> Execute:
    """The first step of a page's evidence, one statement for the whole page: for each target
    field (text-like, of a record visible under its stream's grant) and each term, the offset
    of the term's first occurrence in the field's first `chunks` chunks, or NULL (decoded by
    `occurrences`).

    Bounded by `chunks` per field, so a page costs the same whatever its fields' sizes; in a
    longer field an absent term may still occur later (the caller asks `match_window`, which
    has the index). Occurrences are found as the match scan finds them
    (`match._match_scan`): in the folded chunk followed by the next chunk's folded head,
    so a term straddling a boundary is found in the chunk it starts in, and the smallest offset
    over the chunks is the first occurrence."""
    params = {**_page_params(grants), "e_targets": _bound_json(targets), "e_chunks": chunks}
    modes = [needle_mode(needle) for needle in terms]
    phrases = PHRASE in modes
    params["e_terms"] = _bound_json(
        [
            (n, bound_needle(needle), len(needle), *((int(mode == PHRASE),) if phrases else ()))
            for n, (needle, mode) in enumerate(zip(terms, modes, strict=True))
        ]
    )
    shapes = tuple(GrantShape.of(grant) for grant in grants)
    long_terms = any(len(needle) - 1 > LOOKAHEAD_CHARS for needle in terms)
    return Execute(partial(_first_occurrences, shapes, long_terms, phrases), params)


_TERM_COLUMNS: BoundColumns = (("term_no", False), ("needle", True), ("q_len", False))
_PHRASE_TERM_COLUMNS: BoundColumns = (*_TERM_COLUMNS, ("phrase", False))
"""With a phrase among the terms: which terms are phrases."""


def _same_field(table: Any, other: Any) -> ColumnElement[bool]:
    return and_(same_record(table, other), table.c.path == other.c.path)


@cache
def _first_occurrences(
    shapes: tuple[GrantShape, ...], long_terms: bool, phrases: bool, caps: Capabilities
) -> Select[Any]:
    targets = bound_rows(caps, "e_targets", _TARGET_COLUMNS)
    terms = bound_rows(caps, "e_terms", _PHRASE_TERM_COLUMNS if phrases else _TERM_COLUMNS)
    chunk = field_chunks
    ahead: ColumnElement[str] = chunk.c.lookahead
    if long_terms:
        nxt = field_chunks.alias("nxt")
        ahead = (
            select(func.substr(func.coalesce(nxt.c.folded, nxt.c.text), 1, terms.c.q_len - 1))
            .where(_same_field(nxt, chunk), nxt.c.chunk_no == chunk.c.chunk_no + 1)
            .scalar_subquery()
        )
    here = func.coalesce(chunk.c.folded, chunk.c.text)
    position: ColumnElement[int] = strpos(here + func.coalesce(ahead, ""), terms.c.needle)
    if phrases:
        # A phrase is looked for as the hits statement looks for it (squeezed, in the chunk
        # and the whole next one); its offset is not taken from squeezed text: the position
        # given is the chunk's start, and the caller asks `match.find` for the exact one.
        nxt = field_chunks.alias("phrase_nxt")
        following = (
            select(func.coalesce(nxt.c.folded, nxt.c.text))
            .where(_same_field(nxt, chunk), nxt.c.chunk_no == chunk.c.chunk_no + 1)
            .scalar_subquery()
        )
        in_phrase = strpos(squeezed(here + func.coalesce(following, "")), terms.c.needle)
        position = case((terms.c.phrase == 1, case((in_phrase > 0, 1), else_=0)), else_=position)
    page, conditions = _page_fields(shapes, targets)
    occurs = and_(
        _same_field(chunk, fields),
        chunk.c.chunk_no < bindparam("e_chunks", type_=Integer),
        position > 0,
    )
    grouped = (*FIELD_META, fields.c.connection_id, fields.c.stream, fields.c.record_id)
    return (
        select(
            *grouped,
            terms.c.term_no,
            func.min(chunk.c.chunk_no * CHUNK_CHARS + position - 1).label("match_start"),
        )
        .select_from(page.join(terms, true()).outerjoin(chunk, occurs))
        .where(conditions)
        .group_by(*grouped, terms.c.term_no)
    )


@dataclass(frozen=True, slots=True)
class FieldOccurrences:
    """What `first_occurrences` found in one target field."""

    info: FieldInfo
    starts: tuple[int | None, ...]
    """Per term (in query order), the offset of its first occurrence in the chunks scanned."""


def occurrences(rows: Rows, term_count: int) -> dict[Target, FieldOccurrences]:
    """`first_occurrences`' answer, by target: the visible text-like fields only."""
    starts: dict[Target, list[int | None]] = {}
    infos: dict[Target, FieldInfo] = {}
    for row in rows:
        info = field_info(row)
        assert info is not None  # joined, never outer-joined
        target = (row["connection_id"], row["stream"], row["record_id"], info.path)
        infos[target] = info
        found = row["match_start"]
        starts.setdefault(target, [None] * term_count)[int(row["term_no"])] = (
            None if found is None else int(found)
        )
    return {target: FieldOccurrences(infos[target], tuple(starts[target])) for target in infos}


Preview = tuple[str, str, str, str, str, int, int]
"""A preview to cut: the target field, the digest its offsets hold for, and the range
`[start, end)` in code points."""
_PREVIEW_COLUMNS: BoundColumns = (
    *_TARGET_COLUMNS,
    ("digest", True),
    ("start_chars", False),
    ("end_chars", False),
)


def previews(grants: Sequence[StreamGrant], wanted: Sequence[Preview]) -> Execute:
    """The second step of a page's evidence, one statement for the whole page: the text of
    each wanted range, cut from the chunks of the field while it still has the digest the
    offsets were found in, and still visible (decoded by `preview_texts`)."""
    params = {**_page_params(grants), "v_wanted": _bound_json(wanted)}
    shapes = tuple(GrantShape.of(grant) for grant in grants)
    return Execute(partial(_previews, shapes), params)


@cache
def _previews(shapes: tuple[GrantShape, ...], caps: Capabilities) -> Select[Any]:
    wanted = bound_rows(caps, "v_wanted", _PREVIEW_COLUMNS)
    page, conditions = _page_fields(shapes, wanted)
    piece = field_chunks
    start, end = wanted.c.start_chars, wanted.c.end_chars
    base = piece.c.chunk_no * CHUNK_CHARS
    piece_start = greatest(start - base, 0)
    piece_end = least(end - base, CHUNK_CHARS)
    in_range = piece.c.chunk_no.between(start // CHUNK_CHARS, (end - 1) // CHUNK_CHARS)
    return (
        select(
            fields.c.connection_id,
            fields.c.stream,
            fields.c.record_id,
            fields.c.path,
            func.substr(piece.c.text, piece_start + 1, piece_end - piece_start).label("text"),
        )
        .select_from(page.join(piece, and_(_same_field(piece, fields), in_range)))
        .where(conditions, fields.c.digest == wanted.c.digest)
        .order_by(
            fields.c.connection_id,
            fields.c.stream,
            fields.c.record_id,
            fields.c.path,
            piece.c.chunk_no,
        )
    )


def preview_texts(rows: Rows) -> dict[Target, str]:
    """`previews`' answer: the text of each range whose field still has its digest."""
    texts: dict[Target, str] = {}
    for row in rows:
        target = (row["connection_id"], row["stream"], row["record_id"], row["path"])
        texts[target] = texts.get(target, "") + row["text"]
    return texts
