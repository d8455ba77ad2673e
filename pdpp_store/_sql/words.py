"""The word index's read (docs/read-path.md, "The word index"; `_core.words`): the records a
search of word terms may return, best first by their scores computed from their words.

Rules:
1. Only the searched groups' rows are read: the vocabulary and the postings of each group's
   stream, connections and searchable granted paths (bound per group), and a record is kept
   only under the search's own scope (`search._in_scope` without terms: its stream grant's
   visibility, a searched connection, its group's filter), as every search statement keeps
   it; the filter's fields and values are parameters, the statement cached per its shape
   (`search` Rule 6). Nothing but record keys and numbers computed from their granted fields
   leaves the database: the words that contain a term are found and weighed in the statement
   itself.
2. A word's weight for a term is `words.term_weight`: 1 for the term itself, else
   `PART_WEIGHT` times its occurrences in the word (`replace`, left to right without overlap,
   as `str.count`). A field's tf is the sum of its words' counts times their weights, and
   `score` sums `relevance.score`'s formula over the record's fields and terms: the same
   score up to float rounding (the caller scores the candidates exactly, in Python). The
   postings are summed per record in one aggregate, a column per term and field: a field is
   named by its path's position in its group (`_path_number`, on the weighed words), and
   its length and overlong row are read per field alongside.
3. A field with an overlong word (`words.OVERLONG`) counts `K1 + 1` for every term, a bound
   of any term's part of the formula: `score` never lies below a record's exact score by more
   than rounding, so the records left out of a page bounded by it cannot belong before it.
4. `sure` says every term occurs in some field's scored prefix (a hit for certain); `overlong`
   that some field's score is the bound of Rule 3. Rows come best first (then by key), at
   most `limit`, and with a `cap` only those whose score is at most the cap (or bounded).
5. Postings are read word by word, from the key of `search_words` (in word order since
   migration 0017), never by walking a connection's postings (which SQLite chose through the
   record-order key that table had before, probing the words: every posting of the
   connection read). So no condition on `search_words.connection_id` may be served by an
   index: it is compared, and carried out of the subquery, as `connection_id || ''`.
6. `band` asks the same scores for the records whose score lies in a narrow range, in key
   order, with the range's lowest and highest score and its size over the whole band (window
   aggregates over the band's records in scope, before the limit): the records that tie
   with a page's last hit.
7. Each row of `ranked` carries `below`: the score of the first record in scope, best first,
   among those scoring less than the last row (Rule 10's way: among the best `BELOW` of them
   first). With the rows' own scores it says, per row, whether any record scores within
   2e-9 of it without the very same score (`Ranked.isolated`): every record left out
   scores at most the last row, and those scoring less at most `below`. Where none does, no
   record left out ties with the row but those with the very same score, which come after
   it in key order.
8. The words that contain a term of at least `MIN_INDEXED_NEEDLE` code points are found
   through the vocabulary's trigram index (migration 0015; SQLite: `MATCH` on its FTS5 table
   for the rowids, Postgres: `LIKE` served by its `pg_trgm` index), which only narrows: each
   candidate is re-checked with `strpos` and kept to the searched groups in the statement.
   A shorter term has no trigram: its words are found by a scan of the searched paths'
   vocabulary.
9. Every word is weighed in its own connection, stream and path, and its postings are joined
   to it by all four: each join is connection-local (tables.py Rule 1), and an overlong
   field's row is joined through the searched cells (`w_cells`), bound as rows.
10. The scores are computed for every record holding a term in a searched field, and the
    scope (Rule 1) is asked only of the best: the best `PROBE` times `limit` records by score
    (a sort that keeps only them) are each looked up by key (Postgres stops once `limit` are
    in scope, its nested loop keeping their order; SQLite asks each of them, then sorts the
    few in scope), and the first `limit` in scope are kept; only where fewer are and more
    records scored, all of them are joined to their records as the planner chooses and
    sorted (a condition each database evaluates once, before that sort). So a common term's
    50,000 records cost one sort that keeps 192 and at most 192 lookups, not 50,000 lookups
    (0.3 s on Postgres) nor a sort of them all. Nothing leaves the database but the rows in
    scope and `below` (itself in scope).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Float,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    case,
    cast,
    column,
    exists,
    func,
    literal,
    literal_column,
    or_,
    select,
    table,
    true,
    union_all,
)

from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.relevance import AVERAGE_CHARS, DIGITS, K1, PART_WEIGHT, B
from pdpp_store._core.words import OVERLONG

from .dialects import Capabilities, bound_rows, strpos
from .filters import FilterShape
from .index import MIN_INDEXED_NEEDLE, fts_query, like_pattern
from .requests import Execute, Rows
from .search import Key, SearchGroup, _filters, _in_scope, _layout, _scope_params
from .shapes import per_shape
from .tables import records, search_vocabulary, search_words
from .visibility import GrantShape, same_record

__all__ = [
    "Band",
    "Ranked",
    "band",
    "band_of",
    "ranked",
    "ranked_records",
]

vocabulary_trigrams = table(
    "search_vocabulary_trigrams", column("rowid", Integer), column("word", Text)
)
"""SQLite's trigram index of the vocabulary (migration 0015): not in the metadata."""


def ranked(
    grants: Sequence[StreamGrant],
    groups: Sequence[SearchGroup],
    terms: Sequence[str],
    limit: int,
    cap: float | None = None,
) -> Execute:
    """The best `limit` records for word `terms` (decoded by `ranked_records`)."""
    extra = {} if cap is None else {"w_cap": cap}
    return _statement(grants, groups, terms, limit, extra, capped=cap is not None)


def _statement(
    grants: Sequence[StreamGrant],
    groups: Sequence[SearchGroup],
    terms: Sequence[str],
    limit: int,
    extra: dict[str, Any],
    *,
    capped: bool = False,
    band: bool = False,
) -> Execute:
    """`_ranked`'s statement for this request, with its parameters and `extra`."""
    params, filters = _params(grants, groups, terms, limit)
    shapes, layout = _layout(grants, groups)
    shape = (shapes, layout, _widths(groups), filters, _indexed(terms))
    return Execute(partial(_ranked, *shape, capped=capped, band=band), {**params, **extra})


def _params(
    grants: Sequence[StreamGrant], groups: Sequence[SearchGroup], terms: Sequence[str], limit: int
) -> tuple[dict[str, Any], tuple[FilterShape, ...]]:
    """The statement's parameters, and its groups' filters' shapes (`search._filters`: their
    fields and values are among the parameters)."""
    filters, filter_params = _filters(groups)
    params: dict[str, Any] = {
        **_scope_params(grants, groups, None),
        **filter_params,
        "w_terms": json.dumps([[n, term] for n, term in enumerate(terms)], ensure_ascii=False),
        "w_limit": limit,
        "w_probe": PROBE * limit,
        "w_below": BELOW,
    }
    cells: set[tuple[str, str, str]] = set()
    for number, group in enumerate(groups):
        stream = grants[group.grant_index].name
        # `_path_number` names a field by its group's stream and connection: one group each.
        assert not any(cell[:2] == (c, stream) for c in group.connection_ids for cell in cells)
        params[f"w_s{number}"] = stream
        params[f"w_p{number}"] = list(group.paths)
        params.update((f"w_p{number}_{n}", path) for n, path in enumerate(group.paths))
        cells |= {(c, stream, p) for c in group.connection_ids for p in group.paths}
    params["w_cells"] = json.dumps(sorted(cells), ensure_ascii=False)
    for number, term in enumerate(terms):
        if len(term) >= MIN_INDEXED_NEEDLE:  # Rule 8
            params[f"w_fts{number}"] = fts_query(term)
            params[f"w_like{number}"] = like_pattern(term)
    return params, filters


def _widths(groups: Sequence[SearchGroup]) -> tuple[int, ...]:
    """Per group, how many paths it searches (the statement's shape: `_path_number`)."""
    return tuple(len(group.paths) for group in groups)


def _indexed(terms: Sequence[str]) -> tuple[bool, ...]:
    """Per term, whether its words are found through the vocabulary's trigrams (Rule 8)."""
    return tuple(len(term) >= MIN_INDEXED_NEEDLE for term in terms)


def _containing(
    terms: Any, number: int, widths: tuple[int, ...], caps: Capabilities, *, by_index: bool
) -> Select[Any]:
    """The searched groups' distinct words that contain term `number`, with its weight in
    each (Rule 2) and their path's number in its group (`_path_number`), found through the
    vocabulary's trigram index or by a scan (Rule 8)."""
    groups = len(widths)
    vocabulary = search_vocabulary
    held = func.length(vocabulary.c.word) - func.length(
        func.replace(vocabulary.c.word, terms.c.needle, "")
    )
    weight = case(
        (vocabulary.c.word == terms.c.needle, _float(1.0)),
        else_=_float(PART_WEIGHT) * cast(held / func.length(terms.c.needle), Float),
    )
    conditions = [
        terms.c.term_no == number,
        # Through the index, the connection is an expression: SQLite otherwise scanned the
        # path's vocabulary by its key and probed each row's rowid in the index's answer.
        _in_groups(vocabulary, groups, by_word=by_index and caps.name != "postgresql"),
        strpos(vocabulary.c.word, terms.c.needle) > 0,
    ]
    if by_index and caps.name == "postgresql":
        conditions.append(
            vocabulary.c.word.like(bindparam(f"w_like{number}", type_=Text()), escape="\\")
        )
    elif by_index:
        trigrams = (
            select(vocabulary_trigrams.c.rowid)
            .where(
                literal_column(vocabulary_trigrams.name).op("MATCH")(
                    bindparam(f"w_fts{number}", type_=Text())
                )
            )
            .scalar_subquery()
        )
        conditions.append(literal_column(f"{vocabulary.name}.rowid").in_(trigrams))
    return (
        select(
            _cell_connection(vocabulary, caps),
            vocabulary.c.stream,
            vocabulary.c.path,
            vocabulary.c.word,
            terms.c.term_no,
            weight.label("weight"),
            _path_number(vocabulary, widths).label("path_no"),
        )
        .select_from(vocabulary.join(terms, true()))
        .where(*conditions)
        .distinct()
    )


def _in_groups(table: Any, count: int, *, by_word: bool = False) -> Any:
    """The row belongs to a searched group's stream, connections and paths (Rule 1). With
    `by_word`, the connection is compared as an expression, which no index serves: the rows
    are found by word, or by rowid (Rules 5 and 8)."""
    return or_(
        *(
            and_(
                table.c.stream == bindparam(f"w_s{number}"),
                (table.c.connection_id + "" if by_word else table.c.connection_id).in_(
                    bindparam(f"c{number}", expanding=True)
                ),
                table.c.path.in_(bindparam(f"w_p{number}", expanding=True)),
            )
            for number in range(count)
        )
    )


def _path_number(table: Any, widths: tuple[int, ...]) -> Any:
    """The position of the row's path among its group's searched paths (`w_p<group>_<n>`):
    the field a word's postings count for (Rule 2)."""
    return case(
        *(
            (
                and_(
                    table.c.stream == bindparam(f"w_s{number}"),
                    table.c.connection_id.in_(bindparam(f"c{number}", expanding=True)),
                    table.c.path == bindparam(f"w_p{number}_{position}"),
                ),
                position,
            )
            for number, width in enumerate(widths)
            for position in range(width)
        )
    )


def _float(value: float) -> Any:
    return literal(value, Float)


def _postings(weighed: Any, groups: int, caps: Capabilities) -> tuple[Any, Any, list[Any]]:
    """The postings of the weighed words in the searched groups, joined to their weights:
    (the join, the postings' columns, its conditions), read word by word (Rule 5). SQLite
    looks each word up through `IN (SELECT word ...)`; Postgres, which estimated the words by
    the vocabulary's size and sorted every posting of the stream to merge them, through a
    `LATERAL` lookup per word (SQLite has no `LATERAL`)."""
    word = search_words
    if caps.name == "postgresql":
        postings = (
            select(*word.c)
            .where(_same_cell(word, weighed, caps), _in_groups(word, groups))
            .offset(0)  # not pulled up into the join: looked up per word
            .lateral("postings")
        )
        return weighed.join(postings, true()), postings, []
    conditions = [
        _in_groups(word, groups, by_word=True),
        word.c.word.in_(select(weighed.c.word)),
    ]
    return word.join(weighed, _same_cell(word, weighed, caps)), word, conditions


def _cell_connection(table: Any, caps: Capabilities) -> Any:
    """`table`'s connection, as an expression on SQLite, which no index serves (Rule 5), and as
    the column on Postgres, where every join on it is connection-local (tables.py Rule 1)."""
    if caps.name == "postgresql":
        return table.c.connection_id
    return (table.c.connection_id + "").label("connection_id")


def _same_cell(word: Any, weighed: Any, caps: Capabilities) -> Any:
    """The posting is of a weighed word of its own connection, stream and path (Rule 9)."""
    connection = word.c.connection_id if caps.name == "postgresql" else word.c.connection_id + ""
    return and_(
        connection == weighed.c.connection_id,
        word.c.stream == weighed.c.stream,
        word.c.path == weighed.c.path,
        word.c.word == weighed.c.word,
    )


@per_shape
def _ranked(  # noqa: PLR0917 - the statement's shape
    shapes: tuple[GrantShape, ...],
    layout: tuple[int, ...],
    widths: tuple[int, ...],
    filters: tuple[FilterShape, ...],
    indexed: tuple[bool, ...],
    caps: Capabilities,
    *,
    capped: bool,
    band: bool = False,
) -> Select[Any]:
    term_count, path_count = len(indexed), max(widths)
    terms = bound_rows(caps, "w_terms", (("term_no", False), ("needle", True)))
    weighed_words = [
        _containing(terms, n, widths, caps, by_index=by_index) for n, by_index in enumerate(indexed)
    ]
    cells = bound_rows(caps, "w_cells", (("connection_id", True), ("stream", True), ("path", True)))
    overlong = select(
        cells.c.connection_id,
        cells.c.stream,
        cells.c.path,
        literal(OVERLONG).label("word"),
        terms.c.term_no,
        _float(0.0).label("weight"),
        _path_number(cells, widths).label("path_no"),
    ).select_from(cells.join(terms, true()))
    weighed = union_all(*weighed_words, overlong).cte("weighed")
    source, word, where = _postings(weighed, len(layout), caps)

    def in_field(number: int, value: Any, *also: Any) -> Any:
        return case((and_(weighed.c.path_no == number, *also), value))

    # Rule 2: per record, each field's tf of each term, its length and whether it is bounded.
    per_record = (
        select(
            # An expression, not the column: SQLite carried the scope's connection condition
            # over the join into this subquery, where the primary key served it (Rule 5).
            _cell_connection(word, caps),
            word.c.stream,
            word.c.record_id,
            *(
                func.sum(
                    in_field(i, word.c.occurrences * weighed.c.weight, weighed.c.term_no == n)
                ).label(f"tf{n}_{i}")
                for n in range(term_count)
                for i in range(path_count)
            ),
            *(func.max(in_field(i, word.c.size_chars)).label(f"n{i}") for i in range(path_count)),
            *(
                func.max(in_field(i, literal(1), word.c.word == OVERLONG)).label(f"o{i}")
                for i in range(path_count)
            ),
        )
        .select_from(source)
        .where(*where)
        # The record's id first: it differs where the others are equal (SQLite sorts 5% faster).
        .group_by(word.c.record_id, word.c.connection_id, word.c.stream)
        .subquery("per_record")
    )
    parts: list[ColumnElement[Any]] = []
    for i in range(path_count):
        size = cast(per_record.c[f"n{i}"], Float)
        norm = _float(1 - B) + _float(B) * size / _float(AVERAGE_CHARS)
        for n in range(term_count):
            tf = per_record.c[f"tf{n}_{i}"]
            parts.append(
                case(
                    (per_record.c[f"o{i}"] == 1, _float(K1 + 1)),
                    (tf > 0, tf * _float(K1 + 1) / (tf + _float(K1) * norm)),
                    else_=_float(0.0),
                )
            )
    score: ColumnElement[Any] = parts[0]
    for part in parts[1:]:
        score = score + part
    sure: Any = and_(
        *(
            or_(*(per_record.c[f"tf{n}_{i}"] > 0 for i in range(path_count)))
            for n in range(term_count)
        )
    )
    holds = [per_record.c[f"o{i}"] == 1 for i in range(path_count)]
    record_key = (per_record.c.connection_id, per_record.c.stream, per_record.c.record_id)
    scored = (
        select(
            *record_key,
            score.label("score"),
            case((sure, 1), else_=0).label("sure"),
            case((or_(*holds), 1), else_=0).label("overlong"),
        )
        .select_from(per_record)
        .cte("scored")
    )
    in_scope = _in_scope(shapes, layout, (), filters)
    if band:  # Rule 6
        low, high = bindparam("w_low", type_=Float), bindparam("w_high", type_=Float)
        in_range = select(scored).where(scored.c.score >= low, scored.c.score <= high).subquery()
        rows = _in_scope_rows(in_range, in_scope, caps).subquery("band")
        return (
            select(
                *rows.c,
                func.min(rows.c.score).over().label("band_low"),
                func.max(rows.c.score).over().label("band_high"),
                func.count().over().label("band_size"),
                func.max(rows.c.overlong).over().label("band_overlong"),
            )
            .order_by(rows.c.connection_id, rows.c.stream, rows.c.record_id)
            .limit(bindparam("w_limit", type_=Integer))
        )
    every: Any = scored
    if capped:
        every = (
            select(scored)
            .where(or_(scored.c.score <= bindparam("w_cap", type_=Float), scored.c.overlong == 1))
            .cte("kept")
        )
    limit = bindparam("w_limit", type_=Integer)
    best = _first_in_scope(every, in_scope, limit, bindparam("w_probe", type_=BigInteger), caps)
    best = best.cte("best")
    # Rule 7: the score of the first record in scope below the page's last row.
    lowest = select(func.min(best.c.score)).scalar_subquery()
    full = select(func.count()).select_from(best).scalar_subquery() >= limit  # else unused
    beneath = select(every).where(every.c.score < lowest, full).cte("beneath")
    below = _first_in_scope(
        beneath, in_scope, 1, bindparam("w_below", type_=Integer), caps
    ).subquery("below")
    return select(best, select(below.c.score).scalar_subquery().label("below")).order_by(
        *_best_first(best)
    )


PROBE = 4
"""`ranked` looks first among the best `PROBE` times `w_limit` records for those in scope
(Rule 10)."""
BELOW = 8
"""How many records below a page's last row `ranked` looks through first for one in scope
(Rule 7)."""


def _best_first(rows: Any) -> tuple[Any, ...]:
    return (rows.c.score.desc(), rows.c.connection_id, rows.c.stream, rows.c.record_id)


def _scoped(rows: Any, in_scope: Any) -> Any:
    """The record of a row of `rows` is in the search's scope (Rule 1): looked up by key."""
    return exists().where(same_record(records, rows), in_scope)


def _first_in_scope(rows: Any, in_scope: Any, n: Any, probe: Any, caps: Capabilities) -> Any:
    """The first `n` rows of `rows` (a `WITH` table) best first whose records are in the
    search's scope (Rule 10): among the best `probe` rows (a sort that keeps only them), each
    looked up by key; only where those hold fewer than `n` and `rows` holds more than
    `probe`, among all of `rows`, joined to their records as the planner chooses (a condition
    the databases evaluate once, before that branch runs). Each branch states its order: no
    answer rests on the order a database happens to scan in."""
    probed = select(rows).order_by(*_best_first(rows)).limit(probe).subquery()
    best = (
        _in_scope_rows(probed, in_scope, caps)
        .order_by(*_best_first(probed))
        .limit(n)
        .cte(f"{rows.name}_probed")
    )
    more = and_(
        select(func.count()).select_from(best).scalar_subquery() < n,
        select(func.count()).select_from(rows).scalar_subquery() > probe,
    )
    rest = (
        select(rows)
        .select_from(rows.join(records, and_(same_record(records, rows), in_scope)))
        .where(more)
        .order_by(*_best_first(rows))
        .limit(n)
        .subquery()
    )
    return union_all(select(best).where(~more), select(rest))


def _in_scope_rows(rows: Any, in_scope: Any, caps: Capabilities) -> Select[Any]:
    """The rows of `rows` whose records are in the search's scope, each looked up by key:
    SQLite asks an `EXISTS` of each row; Postgres looks each up (`LATERAL`) in a nested loop
    over the rows, which keeps their order (so an order it is told again costs no sort)."""
    if caps.name != "postgresql":
        return select(rows).where(_scoped(rows, in_scope))
    look_up = (
        select(literal(1).label("found"))
        .where(same_record(records, rows), in_scope)
        .offset(0)  # not pulled up into the join: looked up per row
        .lateral()
    )
    return select(rows).select_from(rows.join(look_up, true()))


def band(  # noqa: PLR0917 - the band and its statement
    grants: Sequence[StreamGrant],
    groups: Sequence[SearchGroup],
    terms: Sequence[str],
    limit: int,
    low: float,
    high: float,
) -> Execute:
    """The first `limit` records in key order whose score lies in `[low, high]`, with the
    band's lowest and highest score, size and whether any is bounded (Rule 6; decoded by
    `ranked_records` and `band_of`)."""
    return _statement(grants, groups, terms, limit, {"w_low": low, "w_high": high}, band=True)


@dataclass(frozen=True, slots=True)
class Band:
    """What `band` says of the whole band, beyond its first rows."""

    low: float
    high: float
    size: int
    overlong: bool


def band_of(rows: Rows) -> Band | None:
    """`band`'s summary (None for an empty band)."""
    if not rows:
        return None
    row = rows[0]
    return Band(
        float(row["band_low"]),
        float(row["band_high"]),
        int(row["band_size"]),
        bool(row["band_overlong"]),
    )


@dataclass(frozen=True, slots=True)
class Ranked:
    """A row of `ranked`."""

    key: Key
    score: float
    sure: bool
    overlong: bool
    isolated: bool | None = None
    """No record scores within 2e-9 of this one's score but that very score (Rule 7; None
    for a row of `band`)."""


def ranked_records(rows: Rows) -> list[Ranked]:
    """`ranked`'s answer, best first (or `band`'s, in key order)."""
    scores = [float(row["score"]) for row in rows]
    others = set(scores)
    if rows and "below" in rows[0] and rows[0]["below"] is not None:
        others.add(float(rows[0]["below"]))
    return [
        Ranked(
            (str(row["connection_id"]), str(row["stream"]), str(row["record_id"])),
            score,
            bool(row["sure"]),
            bool(row["overlong"]),
            _isolated(score, others) if "below" in row else None,
        )
        for row, score in zip(rows, scores, strict=True)
    ]


def _isolated(score: float, others: set[float]) -> bool:
    """Rule 7: no score of `others` but `score` itself lies within 2 units of the 9th decimal
    of it (the distance measured as the statement's window measured it before)."""
    scaled = score * 10.0**DIGITS
    return not any(other != score and abs(other * 10.0**DIGITS - scaled) <= 2 for other in others)
