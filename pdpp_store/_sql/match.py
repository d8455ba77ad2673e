"""The match window: the first occurrence of a needle in a field at or after an offset, and
the window around it, in one statement.

Rules:
1. The scan is linear in the chunks before the hit and stops at it; past the first
   `SCAN_CHUNKS` chunks the search index (`index.late_hits`) names the candidate chunks, and
   the text re-checks each: the index only ever narrows.
2. The window is cut from the chunks of the very text the needle was found in (joined by
   digest), and its bounds are computed in the statement (`MatchBounds`), the only place they
   are.
3. Every statement carries the grant's visibility condition (`visibility`). A match may scan,
   so it is never `bounded`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, partial
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    Text,
    and_,
    bindparam,
    exists,
    func,
    select,
    union_all,
)

from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.identity import RecordRef
from pdpp_store._core.values import CHUNK_CHARS, LOOKAHEAD_CHARS
from pdpp_store._core.window import MAX_LIMIT_CHARS

from . import visibility
from .dialects import Capabilities, greatest, least, strpos
from .index import MIN_INDEXED_NEEDLE, SCAN_CHUNKS, fts_query, late_hits, like_pattern
from .reads import FIELD_META
from .requests import Execute, Row
from .tables import field_chunks, fields
from .visibility import GrantShape, grant_params, kind_in, record_is, record_params, same_record

__all__ = ["MatchBounds", "haystack_at", "match_bounds", "match_window"]


def _next_head(chunks: Any, overlap: ColumnElement[int]) -> ColumnElement[str]:
    """The next chunk's first `overlap` folded code points: a probe on the full primary key."""
    nxt = field_chunks.alias("nxt")
    return (
        select(func.substr(func.coalesce(nxt.c.folded, nxt.c.text), 1, overlap))
        .where(
            same_record(nxt, chunks),
            nxt.c.path == chunks.c.path,
            nxt.c.chunk_no == chunks.c.chunk_no + 1,
        )
        .scalar_subquery()
    )


_OVERLAP = bindparam("m_overlap", type_=Integer)


def haystack_at(
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
    the_field = and_(record_is(fields), fields.c.path == bindparam("f_path"))
    field_checks = [the_field, kind_in(text_like=True)]
    if bound:
        current = func.substr(fields.c.digest, 1, bindparam("m_prefix_len", type_=Integer))
        field_checks.append(current == bindparam("m_prefix", type_=Text()))
    field_is_text = exists().where(*field_checks)
    record_is_visible = exists().where(record_is(), visibility.visible_records(shape))
    digest = select(fields.c.digest).where(the_field).scalar_subquery().label("digest")
    checks = (
        record_is(field_chunks),
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
        found = strpos(func.substr(haystack_at(field_chunks, long_needle), skip + 1), needle)
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
        record_is(past), past.c.path == bindparam("f_path"), past.c.chunk_no == stop
    )
    late = field_chunks.alias("late")
    late_found = strpos(haystack_at(late, long_needle), needle)
    index_branch = late_hits(
        caps,
        late,
        late_found,
        digest=digest,
        stop=stop,
        beyond=beyond,
        field_is_text=field_is_text,
        record_is_visible=record_is_visible,
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
        **record_params(ref, path),
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
                and_(same_record(field_chunks, fields), field_chunks.c.path == fields.c.path),
            )
        )
        .where(
            record_is(fields),
            fields.c.path == bindparam("f_path"),
            fields.c.digest == once(hit.c.digest),
            record_is(field_chunks),
            field_chunks.c.path == bindparam("f_path"),
            field_chunks.c.chunk_no.between(
                window_start // CHUNK_CHARS, (window_end - 1) // CHUNK_CHARS
            ),
        )
        .order_by(field_chunks.c.chunk_no)
    )
