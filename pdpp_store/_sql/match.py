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
    literal,
    select,
    union_all,
)

from pdpp_store._core.folding import fold
from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.identity import RecordRef
from pdpp_store._core.layout import (
    WHITESPACE,
    first_span,
    first_word,
    is_phrase,
    squeeze,
    squeeze_passes,
)
from pdpp_store._core.values import CHUNK_CHARS, LOOKAHEAD_CHARS
from pdpp_store._core.window import MAX_LIMIT_CHARS, match_window_limit, match_window_start

from . import visibility
from .dialects import Capabilities, greatest, least, strpos
from .index import MIN_INDEXED_NEEDLE, SCAN_CHUNKS, fts_query, late_hits, like_pattern
from .reads import FIELD_META, field_info, field_window
from .requests import Execute, Op, Row, Rows
from .tables import field_chunks, fields
from .visibility import GrantShape, grant_params, kind_in, record_is, record_params, same_record

__all__ = [
    "LONG",
    "PHRASE",
    "SHORT",
    "MatchBounds",
    "find",
    "haystack_at",
    "match_bounds",
    "match_window",
    "needle_mode",
    "squeezed",
]

SHORT, LONG, PHRASE = 0, 1, 2
"""How a needle is looked for in a chunk (`needle_mode`): in the chunk and its stored
look-ahead; in the chunk and the next chunk's head; as a phrase, in the chunk and the whole
next chunk with layout squeezed (`squeezed`)."""

_LAYOUT_CHARS = tuple(char for char in WHITESPACE if char != " ")
PHRASE_CHARS = 2 * CHUNK_CHARS
"""A phrase's haystack: a chunk and the whole next chunk."""


def needle_mode(needle: str) -> int:
    """`SHORT`, `LONG` or `PHRASE` for a folded needle."""
    if is_phrase(needle):
        return PHRASE
    return LONG if len(needle) - 1 > LOOKAHEAD_CHARS else SHORT


def bound_needle(needle: str) -> str:
    """What the statements compare with a folded needle: a phrase squeezed
    (`layout.squeeze`), as its haystack is (`squeezed`)."""
    return squeeze(needle) if is_phrase(needle) else needle


def squeezed(text: ColumnElement[str], chars: int = PHRASE_CHARS) -> ColumnElement[str]:
    """`text` (of at most `chars` code points) with every run of layout as one space, as
    `layout.squeeze` gives it: each layout character replaced by a space (lengths kept), then
    `replace('  ', ' ')` as often as a run of `chars` spaces needs (`layout.squeeze_passes`).
    Plain `replace`, the same on both databases and with nothing registered in SQLite."""
    for char in _LAYOUT_CHARS:
        text = func.replace(text, literal(char, Text()), literal(" ", Text()))
    for _ in range(squeeze_passes(chars)):
        text = func.replace(text, literal("  ", Text()), literal(" ", Text()))
    return text


def _next_text(chunks: Any, overlap: ColumnElement[int] | None) -> ColumnElement[str]:
    """The next chunk's folded text (its first `overlap` code points, when given): a probe on
    the full primary key."""
    nxt = field_chunks.alias("nxt")
    text: ColumnElement[str] = func.coalesce(nxt.c.folded, nxt.c.text)
    return (
        select(text if overlap is None else func.substr(text, 1, overlap))
        .where(
            same_record(nxt, chunks),
            nxt.c.path == chunks.c.path,
            nxt.c.chunk_no == chunks.c.chunk_no + 1,
        )
        .scalar_subquery()
    )


_OVERLAP = bindparam("m_overlap", type_=Integer)


def haystack_at(
    chunks: Any, long_needle: int, overlap: ColumnElement[int] = _OVERLAP
) -> ColumnElement[str]:
    """What a needle is looked for in, per chunk (`needle_mode`): the chunk's folded text
    followed by the stored look-ahead (`SHORT`: needles of up to `LOOKAHEAD_CHARS + 1` code
    points), by the next chunk's first `overlap` code points (`LONG`: the needle's length less
    one), or (`PHRASE`) by the whole next chunk, squeezed (`squeezed`; the needle bound is
    squeezed too, `bound_needle`)."""
    here: ColumnElement[str] = func.coalesce(chunks.c.folded, chunks.c.text)
    if long_needle == PHRASE:
        return squeezed(here + func.coalesce(_next_text(chunks, None), ""))
    if not long_needle:
        return here + func.coalesce(chunks.c.lookahead, "")
    return here + func.coalesce(_next_text(chunks, overlap), "")


@cache
def _match_scan(
    shape: GrantShape, mode: int, indexed: bool, bound: bool, caps: Capabilities
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
    `len(q) - 1` code points of the next chunk, a phrase (`PHRASE`) the whole next chunk, both
    texts squeezed (`squeezed`): its position is then one in the squeezed text, and only the
    chunk counts (`find` takes the offsets from the chunks' texts). In the scan, where window
    functions stream (`caps.streams_window_functions`): `lead()` over the chunks in key order
    (the window aggregate streams behind the index scan, so the scan still stops at the first
    hit). Elsewhere, and in the index branch, the next chunk's text is a correlated scalar
    subquery on the full primary key: one index probe per chunk read.
    """
    long_needle = mode != SHORT
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

    def look(haystack: ColumnElement[str]) -> ColumnElement[int]:
        rest = func.substr(haystack, skip + 1)
        return strpos(squeezed(rest) if mode == PHRASE else rest, needle)

    # The scan's range: with the index, the chunks before `m_stop`; a streamed `lead()` also
    # reads chunk `m_stop` itself, for the head of the text after the last scanned chunk.
    scanned = (field_chunks.c.chunk_no < stop,) if indexed else ()
    if long_needle and caps.streams_window_functions:
        following = func.lead(here).over(order_by=field_chunks.c.chunk_no)
        ahead = following if mode == PHRASE else func.substr(following, 1, _OVERLAP)
        found = look(here + func.coalesce(ahead, ""))
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
        unsqueezed = haystack_at(field_chunks, LONG if long_needle else SHORT)
        if mode == PHRASE:
            unsqueezed = here + func.coalesce(_next_text(field_chunks, None), "")
        found = look(unsqueezed)
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
    late_found = strpos(haystack_at(late, mode), needle)
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


def _scan_params(  # noqa: PLR0917 - a match's arguments, as `match_window` takes them
    ref: RecordRef,
    path: str,
    grant: StreamGrant,
    needle: str,
    from_chars: int,
    digest_prefix: str | None,
    use_index: bool,
) -> tuple[dict[str, Any], tuple[GrantShape, int, bool, bool]]:
    """`_match_scan`'s parameters and the key of its statement."""
    first = from_chars // CHUNK_CHARS
    mode = needle_mode(needle)
    bound_text = bound_needle(needle)
    params = {
        **record_params(ref, path),
        **grant_params(grant),
        "m_needle": bound_text,
        "m_overlap": len(needle) - 1,
        "m_from": from_chars,
        "m_first": first,
    }
    if digest_prefix is not None:
        params["m_prefix"] = digest_prefix
        params["m_prefix_len"] = len(digest_prefix)
    # The index names the chunks that hold the head of what it is asked for; a phrase's
    # first word starts in the chunk the phrase starts in (one that starts with layout is
    # scanned for alone).
    asked = first_word(needle) if mode == PHRASE else needle
    indexed = use_index and len(asked) >= MIN_INDEXED_NEEDLE
    if indexed:
        params["m_stop"] = first + SCAN_CHUNKS
        params["m_fts"] = fts_query(asked)
        params["m_like"] = like_pattern(asked[: LOOKAHEAD_CHARS + 1])
    return params, (GrantShape.of(grant), mode, indexed, digest_prefix is not None)


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
    (the benchmarks' baseline). Not for a phrase (`find` takes its offsets in Python)."""
    if is_phrase(needle):
        raise ValueError("a phrase's window is found by `find`")
    params, key = _scan_params(ref, path, grant, needle, from_chars, digest_prefix, use_index)
    params.update({"m_before": before, "m_after": after, "m_q_len": len(needle), "m_limit": limit})
    return Execute(partial(_match_window, *key), params)


def phrase_hit(
    ref: RecordRef,
    path: str,
    grant: StreamGrant,
    *,
    needle: str,
    from_chars: int = 0,
    digest_prefix: str | None = None,
    use_index: bool = True,
) -> Execute:
    """The first chunk whose haystack (it and the next chunk, squeezed) holds a phrase's first
    occurrence at or after `from_chars` (found as `_match_scan` finds it), the field's digest,
    and the texts of that chunk and the two after it (three chunks of a field the caller may
    read, for `phrase_span`), as rows (`hit_chunk`, `chunk_no`, `digest`, `text`) in chunk
    order. No row: nothing matched.

    The occurrence starts in that chunk or, when it lies wholly in the next one, in the next;
    its span then may end in the third: a run of layout that ends the phrase takes the
    text's whole run, across the chunk boundary. (Two chunks cut such a span at the second's
    end: a phrase ending with a space, found from the chunk before, ended early.)"""
    params, key = _scan_params(ref, path, grant, needle, from_chars, digest_prefix, use_index)
    return Execute(partial(_phrase_hit, *key), params)


@cache
def _phrase_hit(
    shape: GrantShape, mode: int, indexed: bool, bound: bool, caps: Capabilities
) -> Select[Any]:
    hit = _match_scan(shape, mode, indexed, bound, caps).cte("hit").prefix_with("MATERIALIZED")
    at = select(hit.c.chunk_no).scalar_subquery()
    return (
        select(
            at.label("hit_chunk"),
            select(hit.c.digest).scalar_subquery().label("digest"),
            field_chunks.c.chunk_no.label("chunk_no"),
            field_chunks.c.text.label("text"),
        )
        .where(
            record_is(field_chunks),
            field_chunks.c.path == bindparam("f_path"),
            field_chunks.c.chunk_no.between(at, at + 2),
        )
        .order_by(field_chunks.c.chunk_no)
    )


def phrase_span(rows: Rows, needle: str, from_chars: int) -> tuple[int, int, str] | None:
    """`phrase_hit`'s answer: the phrase's exact `[start, end)` in the field (found with
    `layout.first_span` in the three chunks' folded text) and the digest; None if no row."""
    if not rows:
        return None
    hit = int(rows[0]["hit_chunk"])
    text = "".join(str(row["text"]) for row in rows)
    base = hit * CHUNK_CHARS
    span = first_span(fold(text), needle, max(from_chars - base, 0))
    if span is None:  # the statement and the oracle disagree: never found, never guessed
        return None
    return base + span[0], base + span[1], str(rows[0]["digest"])


_PHRASE_TRIES = 3
"""A phrase's window is a second statement, bound to the digest the first saw: if the field
changed in between, the phrase is looked for again (reads are a snapshot per statement)."""


def find(
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
) -> Op[tuple[MatchBounds, Rows] | None]:
    """The window around the first occurrence of a folded needle at or after `from_chars`
    (docs/contract.md §7 `q`): its bounds and its rows (`field_window`'s columns; the first
    row carries the field's metadata), or None when nothing matched. A plain needle is one
    statement (`match_window`); a phrase two: `phrase_hit`, whose chunks give the exact span
    in Python (`layout`), then the window cut from the text with the digest the phrase was
    found in. The window's length is the matched span's, not the needle's."""
    if not is_phrase(needle):
        rows = yield match_window(
            ref,
            path,
            grant,
            needle=needle,
            before=before,
            after=after,
            limit=limit,
            from_chars=from_chars,
            digest_prefix=digest_prefix,
            use_index=use_index,
        )
        if not rows:
            return None
        return match_bounds(rows[0], len(needle)), rows
    for _ in range(_PHRASE_TRIES):
        hit = phrase_span(
            (
                yield phrase_hit(
                    ref,
                    path,
                    grant,
                    needle=needle,
                    from_chars=from_chars,
                    digest_prefix=digest_prefix,
                    use_index=use_index,
                )
            )
            or [],
            needle,
            from_chars,
        )
        if hit is None:
            return None
        match_start, match_end, digest = hit
        start = match_window_start(match_start, before)
        window, clamped = match_window_limit(
            match_start, start, match_end - match_start, after, limit
        )
        rows = (
            yield field_window(ref, path, grant, start=start, limit=window, digest_prefix=digest)
        ) or []
        info = field_info(rows[0]) if rows else None
        if info is not None and info.digest == digest:
            return MatchBounds(match_start, start, window, clamped, match_end), rows
    return None


@dataclass(frozen=True, slots=True)
class MatchBounds:
    """Where a match window lies, as its statement computed it (the only place it is computed:
    `_core.window.match_window_start`/`match_window_limit` are its definition for the tests)."""

    match_start: int
    start: int
    limit: int
    clamped: bool
    """The limit the arguments asked for was above `MAX_LIMIT_CHARS` and was cut to it."""
    match_end: int
    """The matched span's end: the start plus the needle's length, or a phrase's last
    character + 1 (its runs of layout matched as they are in the text)."""


def match_bounds(row: Row, needle_chars: int) -> MatchBounds:
    start = int(row["match_start"])
    return MatchBounds(
        start,
        int(row["window_start"]),
        int(row["window_limit"]),
        bool(row["limit_clamped"]),
        start + needle_chars,
    )


@cache
def _match_window(
    shape: GrantShape, mode: int, indexed: bool, bound: bool, caps: Capabilities
) -> Select[Any]:
    # The hit is materialised and every value taken from it is an uncorrelated scalar subquery,
    # so each is computed once and the window's chunk range reaches the primary-key index as a
    # bound, exactly as in `field_window`. (Joined instead, a planner without statistics was
    # seen to walk all the chunks and test the range on each.)
    hit = _match_scan(shape, mode, indexed, bound, caps).cte("hit").prefix_with("MATERIALIZED")
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
