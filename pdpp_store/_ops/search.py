"""Search (docs/contract.md §9), as an operation driven by `_runtime` (no I/O here); the grant's
schema is `discovery`'s.

Search, step by step:

1. Arguments: `q` parsed into terms (`_core.query`), `limit` 1..50, `streams` and
   `connection_id` filters; then the grant (usable, every named stream granted) and the page
   cursor (signed, bound to grant, query and filters).
2. What is searched, decided before any record is read: per granted stream and per connection
   the grant covers, the manifest's `query.search.lexical_fields` minus the fields the grant
   does not cover. Connections with the same searchable paths form one group.
3. The next `limit + 1` matching records in key order, every term required in some searchable
   field, under the grant's visibility (`_sql.search.hits`), in two phases (`_matching_keys`):
   a scan of the next `SCAN_RECORDS` records, then the search index's candidates after them, a
   bounded batch of keys at a time, each batch re-checked on the text by the same statement.
4. Evidence per hit and per searchable field: for the terms in query order, the first
   occurrence of the first one the field holds, with a bounded preview around it, for the whole
   page in two statements (`_page_evidence`: first occurrences in the first `SCAN_CHUNKS`
   chunks of each field, then the previews); a longer field where that scan did not settle it
   is asked with the match-window statement every `q` read uses. Both find occurrences as the
   match scan does, so the offsets are those the continuation's read returns. Fields where no
   term occurs are not matched fields.
5. Each hit's record card (docs/contract.md §13), the cards of the whole page in one statement
   (`cards.page_cards`): the declared-role fields the grant covers, as each hit's connection's
   manifest declares them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pdpp_store._core import relevance
from pdpp_store._core.cursor import Position, mint_position, open_position
from pdpp_store._core.errors import BadRequest, NotFound
from pdpp_store._core.filters import Filter, parse_filter
from pdpp_store._core.grants import Grant, StreamGrant, as_grant
from pdpp_store._core.identity import FieldWindowRef, RecordRef, validate_safe_name
from pdpp_store._core.layout import index_word, is_phrase
from pdpp_store._core.manifest import Manifest
from pdpp_store._core.query import (
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    SearchQuery,
    Term,
    page_binding,
    parse_query,
)
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._core.window import MAX_LIMIT_CHARS
from pdpp_store._core.words import is_word_term, score_error
from pdpp_store._sql import match as match_sql
from pdpp_store._sql import ranking as ranking_sql
from pdpp_store._sql import reads as read_sql
from pdpp_store._sql import search as search_sql
from pdpp_store._sql import words as words_sql
from pdpp_store._sql.index import MIN_INDEXED_NEEDLE, SCAN_CHUNKS
from pdpp_store._sql.requests import Op
from pdpp_store.evidence import (
    Continuation,
    FieldInfo,
    MatchExcerpt,
    SearchHit,
    SearchPage,
)

from .cards import page_cards
from .declared import declaring
from .reads import ReadContext

__all__ = ["READ_CONTEXT_CHARS", "search"]

PREVIEW_BEFORE = 80
PREVIEW_AFTER = 160
READ_CONTEXT_CHARS = 1024
"""`before_chars`/`after_chars` of an excerpt's `read` continuation."""
SCAN_RECORDS = 64
"""Records scanned in key order before the index is asked (`_matching_keys`): a term in at
least 1 of 6 records fills a first page here, where the index would name too many (on
100,000 email-sized records, a term in every second one took 130 ms on SQLite and 615 ms on
Postgres through the index), while a rare term pays for 64 records scanned, not 200 (a
200-record scan cost 44 ms on SQLite, 20 ms on Postgres)."""
CANDIDATE_BATCH = 256
"""Candidate keys taken from the index at a time, re-checked together."""
MAX_CANDIDATE_BATCH = 8192
"""When every hit is wanted (relevance order), each batch takes twice the last one's
candidates, up to this many: 10,000 hits took 40 batches of 256."""


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_SIZE:
        raise BadRequest(
            "invalid_request",
            f"limit must be an integer between 1 and {MAX_PAGE_SIZE}",
            param="limit",
        )
    return limit


def _stream_names(grant: Grant, streams: object) -> list[str]:
    if streams is None:
        return sorted(s.name for s in grant.streams)
    if isinstance(streams, str) or not isinstance(streams, Sequence) or not streams:
        raise BadRequest(
            "invalid_request", "streams must be a non-empty list of stream names", param="streams"
        )
    names: list[str] = []
    for name in streams:
        validate_safe_name(name, "streams")
        grant.stream(name)  # grant_stream_not_allowed
        if name not in names:
            names.append(name)
    return sorted(names)


def _groups(
    grant: Grant,
    names: list[str],
    catalogue: list[tuple[str, str, Manifest]],
    filter: object = None,
) -> tuple[list[StreamGrant], list[search_sql.SearchGroup]]:
    """The search's groups: connections of one stream grant with the same searchable granted
    paths and the same parsed `filter`. The filter is checked against every searched stream's
    manifest and grant (`parse_filter`: `field_not_granted`, `invalid_filter`) before any record
    is read, so a filter goes with the streams that declare its fields."""
    stream_grants = [grant.stream(name) for name in names]
    by_paths: dict[tuple[int, tuple[str, ...], Filter], list[str]] = {}
    for conn, stream, manifest in catalogue:
        index = names.index(stream)
        spec = manifest.spec(stream)
        if spec is None:
            continue
        parsed = parse_filter(filter, spec, stream_grants[index])
        paths = tuple(p for p in spec.lexical_fields if stream_grants[index].allows_field(p))
        if paths:
            by_paths.setdefault((index, paths, parsed), []).append(conn)
    groups = [
        search_sql.SearchGroup(index, tuple(conns), paths, parsed)
        for (index, paths, parsed), conns in sorted(
            by_paths.items(), key=lambda item: (item[0][0], item[0][1], item[0][2].canonical)
        )
    ]
    return stream_grants, groups


ORDERS = ("relevance", "desc", "asc")
COUNTS = ("none", "exact")
ALL_HITS = 2**31 - 1
"""`limit` of the statement that lists every hit: the order needs them all (an exact top)."""


def _check_count(count: object) -> str:
    if not isinstance(count, str) or count not in COUNTS:
        raise BadRequest("invalid_request", "count must be none or exact", param="count")
    return count


def _check_order(order: object) -> str:
    if not isinstance(order, str) or order not in ORDERS:
        raise BadRequest(
            "invalid_request", f"order must be one of {', '.join(ORDERS)}", param="order"
        )
    return order


def search(
    ctx: ReadContext,
    grant: Grant,
    q: object,
    *,
    streams: object = None,
    connection_id: object = None,
    filter: object = None,
    order: object = "relevance",
    limit: object = DEFAULT_PAGE_SIZE,
    cursor: object = None,
    count: object = "none",
) -> Op[SearchPage]:
    query = parse_query(q)
    ordering = _check_order(order)
    counting = _check_count(count) == "exact"
    size = _check_limit(limit)
    if connection_id is not None:
        validate_safe_name(connection_id, "connection_id")
    if cursor is not None and (not isinstance(cursor, str) or not cursor):
        raise BadRequest("invalid_cursor", "cursor must be a non-empty string", param="cursor")
    grant = as_grant(grant)
    grant.ensure_usable()
    names = _stream_names(grant, streams)
    conn = connection_id if isinstance(connection_id, str) else None
    if conn is not None and not any(grant.stream(n).covers_connection(conn) for n in names):
        raise NotFound(
            "connection_not_found", f"connection {conn!r} is not found", param="connection_id"
        )
    catalogue = yield from declaring(ctx, grant, names, conn)
    stream_grants, groups = _groups(grant, names, catalogue, filter)
    filters = sorted({group.filter.canonical for group in groups})
    binding = page_binding(grant, query, names, conn, f"order={ordering}", *filters)
    after: Position | None = None
    if cursor is not None:
        if ctx.stored_keys:
            yield from ctx.reload_keys()
        after = open_position(ctx.codec, cursor, binding)
    if not groups:
        return SearchPage((), count=0 if counting else None)
    paths_of = {
        (conn_id, stream_grants[g.grant_index].name): g.paths
        for g in groups
        for conn_id in g.connection_ids
    }
    order_paths = _order_paths(grant, catalogue)
    chosen_by_words = None
    if ordering == "relevance" and not counting and _word_terms(query):
        chosen_by_words = yield from _word_ranked(
            stream_grants, groups, query, paths_of, order_paths, after, size + 1
        )
    if chosen_by_words is not None:
        hits, chosen = 0, chosen_by_words
    else:
        hits, chosen = yield from _ranked(
            stream_grants, groups, query, paths_of, order_paths, ordering, after, size + 1
        )
    page_entries = chosen[:size]
    page_keys = [entry[2:] for entry in page_entries]
    scores = {entry[2:]: entry[0] for entry in page_entries}
    targets = [(*key, path) for key in page_keys for path in paths_of.get(key[:2], ())]
    excerpts = (yield from _page_evidence(stream_grants, targets, query)) if targets else {}
    proven: dict[search_sql.Key, tuple[MatchExcerpt, ...]] = {}
    for key in page_keys:
        ref = RecordRef(*key)
        mine: list[MatchExcerpt] = []
        for path in paths_of.get(key[:2], ()):
            excerpt = excerpts.get((*key, path))
            if excerpt is _ASK:
                excerpt = yield from _evidence(ref, path, grant.stream(ref.stream), query)
            if isinstance(excerpt, MatchExcerpt):
                mine.append(excerpt)
        if mine:
            proven[key] = tuple(mine)
    specs = {
        (conn_id, stream): spec
        for conn_id, stream, manifest in catalogue
        if (spec := manifest.spec(stream)) is not None
    }
    cards = yield from page_cards(
        {stream_grant.name: stream_grant for stream_grant in stream_grants}, specs, list(proven)
    )
    found = [SearchHit(*key, mine, scores[key], cards[key]) for key, mine in proven.items()]
    total = hits if counting else None
    if len(chosen) <= size:
        return SearchPage(tuple(found), count=total)
    next_cursor = mint_position(ctx.codec, binding, page_entries[-1])
    arguments: dict[str, Any] = {"q": q, "limit": size, "cursor": next_cursor}
    if ordering != "relevance":
        arguments["order"] = ordering
    if filter is not None:  # as an object, however it came (its JSON text parsed already)
        arguments["filter"] = json.loads(filter) if isinstance(filter, str) else filter
    if counting:
        arguments["count"] = "exact"
    if streams is not None:
        arguments["streams"] = names
    if conn is not None:
        arguments["connection_id"] = conn
    return SearchPage(tuple(found), next_cursor, Continuation("search", arguments), total)


def _order_paths(
    grant: Grant, catalogue: list[tuple[str, str, Manifest]]
) -> dict[tuple[str, str], str]:
    """Per (connection, stream), the stream's order field (§11.2) where the grant covers it: an
    ungranted order field is never read, and its hits tie on time (key order decides)."""
    paths: dict[tuple[str, str], str] = {}
    for conn_id, stream, manifest in catalogue:
        spec = manifest.spec(stream)
        field = None if spec is None else spec.order_field
        if field is not None and grant.stream(stream).allows_field(field):
            paths[conn_id, stream] = field
    return paths


def _compare(left: Position, right: Position, ordering: str) -> int:
    """-1, 0 or 1 as `left` comes before, with or after `right` in `ordering`: relevance is
    score descending, then time newest first; `desc`/`asc` is time alone; then, always,
    records without a time last and the key ascending (byte order of the UTF-8 names, which
    is code-point order)."""
    if ordering == "relevance" and left[0] != right[0]:
        return -1 if left[0] > right[0] else 1
    if (left[1] is None) != (right[1] is None):
        return -1 if right[1] is None else 1
    if left[1] is not None and right[1] is not None and left[1] != right[1]:
        newer_first = ordering != "asc"
        return -1 if (left[1] > right[1]) == newer_first else 1
    if left[2:] != right[2:]:
        return -1 if left[2:] < right[2:] else 1
    return 0


def _after_position(ranked: list[Position], after: Position, ordering: str) -> int:
    """The index of the first entry strictly after `after` (a cursor's position): the page
    continues there even if the hit at `after` is gone."""
    return next(
        (n for n, entry in enumerate(ranked) if _compare(entry, after, ordering) > 0), len(ranked)
    )


def _in_order(entries: list[Position], ordering: str) -> list[Position]:
    """`entries` sorted in place as `_compare` orders them, by stable sorts on simple keys (the
    last sort decides first): key, then time (records without one last), then score."""
    entries.sort(key=lambda entry: entry[2:])
    if ordering == "asc":
        entries.sort(key=lambda entry: (entry[1] is None, entry[1] or ""))
    else:
        entries.sort(key=lambda entry: (entry[1] is not None, entry[1] or ""), reverse=True)
    if ordering == "relevance":
        entries.sort(key=lambda entry: entry[0], reverse=True)
    return entries


def _ranked(  # noqa: PLR0917 - what the order reads
    stream_grants: list[StreamGrant],
    groups: list[search_sql.SearchGroup],
    query: SearchQuery,
    paths_of: dict[tuple[str, str], tuple[str, ...]],
    order_paths: dict[tuple[str, str], str],
    ordering: str,
    after: Position | None,
    wanted: int,
) -> Op[tuple[int, list[Position]]]:
    """The number of hits and the first `wanted` hits after `after` in `ordering`, scored
    (`_core.relevance`) and timed: the exact top of *all* hits, each hit's score bounded first
    and computed only where the bounds cannot place it.

    1. Every hit (`_matching_keys`, its two phases) and the instant of its granted order field.
    2. In relevance order, per hit, the occurrences of each needle in the scored prefix of its
       searchable granted fields, counted in the database (`ranking_sql.occurrence_counts`):
       no text leaves it. Weighing every occurrence 1 bounds the score from above, weighing
       every one `PART_WEIGHT` from below (`relevance.bound`).
    3. A hit whose lower bound already places it before `after` is dropped. The rest are taken
       in the order of their upper bounds, a batch at a time, and scored exactly from their
       texts, until `wanted` scored hits come after `after` and the next hit's upper bound
       places it after the last of them: a hit's exact place is never before its upper bound's
       place, so no hit left unscored can be among the first `wanted`.

    In `desc`/`asc` order the score does not decide the order: only the chosen hits are scored.
    """
    needles = [term.folded for term in query.terms]

    def targets_of(chosen: Sequence[search_sql.Key]) -> list[search_sql.Target]:
        return [(*key, path) for key in chosen for path in paths_of.get(key[:2], ())]

    if ordering == "relevance":
        keys, counts = yield from _counted_hits(stream_grants, groups, query, targets_of)
    else:
        keys = yield from _matching_keys(stream_grants, groups, query, None, ALL_HITS)
    if not keys:
        return 0, []
    timed = [(*key, order_paths[key[:2]]) for key in keys if key[:2] in order_paths]
    instants = (
        ranking_sql.time_values((yield ranking_sql.times(stream_grants, timed)) or [])
        if timed
        else {}
    )

    def compare(left: Position, right: Position) -> int:
        return _compare(left, right, ordering)

    if ordering != "relevance":
        placed = _in_order([(0.0, instants.get(key), *key) for key in keys], ordering)
        start = 0 if after is None else _after_position(placed, after, ordering)
        chosen = [entry[2:] for entry in placed[start : start + wanted]]
        scores = yield from _scores(stream_grants, targets_of(chosen), needles)
        return len(keys), [(scores.get(key, 0.0), instants.get(key), *key) for key in chosen]
    candidates: list[Position] = []
    for key in keys:
        fields = [counts[t] for t in targets_of([key]) if t in counts]
        if after is not None:
            low = (relevance.bound(fields, relevance.PART_WEIGHT), instants.get(key), *key)
            if compare(low, after) <= 0:
                continue  # before the cursor wherever its exact score lies
        candidates.append((relevance.bound(fields, 1.0), instants.get(key), *key))
    _in_order(candidates, ordering)
    scored: list[Position] = []
    taken = 0
    batch = max(SCORE_BATCH, wanted)
    while taken < len(candidates):
        if len(scored) >= wanted and compare(candidates[taken], scored[wanted - 1]) > 0:
            break
        chosen = [entry[2:] for entry in candidates[taken : taken + batch]]
        taken += len(chosen)
        batch *= 2
        scores = yield from _scores(stream_grants, targets_of(chosen), needles)
        for key in chosen:
            entry = (scores.get(key, 0.0), instants.get(key), *key)
            if after is None or compare(entry, after) > 0:
                scored.append(entry)
        _in_order(scored, ordering)
    return len(keys), scored[:wanted]


def _word_terms(query: SearchQuery) -> bool:
    """Every term is a word term (`_core.words`): the word index can score and rank it."""
    return all(is_word_term(term.folded) for term in query.terms)


WORD_CANDIDATES = 48
"""Records the word index's first statement asks for (`_word_ranked`); each further one asks
for four times as many, up to `MAX_WORD_CANDIDATES`."""
MAX_WORD_CANDIDATES = 3072
WORD_MARGIN = 1e-6
"""How far the word index's float score may lie from the exact one, by rounding alone (the
exact score is rounded to `relevance.DIGITS` places, and the float sums differ by at most
`words.score_error` of the parts count: `_word_ranked` declines when that passes half of
this, past tens of thousands of parts)."""


def _word_ranked(  # noqa: PLR0917 - what the order reads
    stream_grants: list[StreamGrant],
    groups: list[search_sql.SearchGroup],
    query: SearchQuery,
    paths_of: dict[tuple[str, str], tuple[str, ...]],
    order_paths: dict[tuple[str, str], str],
    after: Position | None,
    wanted: int,
) -> Op[list[Position] | None]:
    """The first `wanted` hits after `after` in relevance order, from the word index
    (`words_sql.ranked`), or None where it cannot tell them (then `_ranked` does).

    1. The best `n` records by their word-index score `w` (at most the cursor's score plus
       `WORD_MARGIN`, or bounded: `words_sql` Rule 3), every one with some term in some
       field's scored prefix: a positive exact score.
    2. Those where some term occurs in no prefix are re-checked on their whole text
       (`search_sql.hits`): a term may occur beyond the prefix (a hit) or nowhere.
    3. The hits among them are scored exactly from their texts (`_scores`, the formula
       itself) and timed, and ordered as `_compare` orders.
    4. A record not among the `n` has `w` at most the last one's, so its exact score is at
       most that plus `WORD_MARGIN`: when the `wanted`-th hit after the cursor scores more,
       the page is exact. When the statement returned fewer than `n` rows, every record with
       a positive score was seen: enough of them make the page; too few mean zero-score hits
       may belong to it, which only every hit tells (None; a record whose only rows are
       overlong ones may score 0, and is placed among zero-score hits only by them all).
       Fewer rows than `wanted` say so at once, before any is re-checked or scored.
       Otherwise `n` grows, up to `MAX_WORD_CANDIDATES` (then None)."""
    needles = [term.folded for term in query.terms]
    parts = len(needles) * max((len(paths) for paths in paths_of.values()), default=0)
    error = score_error(parts)
    if error > WORD_MARGIN / 2:
        return None

    def targets_of(chosen: Sequence[search_sql.Key]) -> list[search_sql.Target]:
        return [(*key, path) for key in chosen for path in paths_of.get(key[:2], ())]

    limit = max(WORD_CANDIDATES, wanted)
    cap = None if after is None else after[0] + WORD_MARGIN
    timed_groups = any(key in order_paths for key in paths_of)
    scores: dict[search_sql.Key, float] = {}
    instants: dict[search_sql.Key, str | None] = {}
    checked: dict[search_sql.Key, bool] = {}
    while True:
        request = words_sql.ranked(stream_grants, groups, needles, limit, cap)
        found = words_sql.ranked_records((yield request) or [])
        if len(found) < wanted:  # too few positive scores for the page: zero-score hits decide
            return None
        keys = yield from _hits_among(stream_grants, groups, needles, found, checked)
        fresh = [key for key in keys if key not in scores]
        if fresh:
            scores.update((yield from _scores(stream_grants, targets_of(fresh), needles)))
            timed = [(*key, order_paths[key[:2]]) for key in fresh if key[:2] in order_paths]
            if timed:
                rows = yield ranking_sql.times(stream_grants, timed)
                instants.update(ranking_sql.time_values(rows or []))
        entries = [(scores.get(key, 0.0), instants.get(key), *key) for key in keys]
        if after is not None:
            entries = [entry for entry in entries if _compare(entry, after, "relevance") > 0]
        _in_order(entries, "relevance")
        if len(found) < limit:  # every record with a positive score seen
            enough = len(entries) >= wanted and entries[wanted - 1][0] > 0
            return entries[:wanted] if enough else None
        floor = found[-1].score + WORD_MARGIN
        if len(entries) >= wanted and entries[wanted - 1][0] > floor:
            return entries[:wanted]
        if len(entries) >= wanted and not timed_groups:
            if _ties_come_after(found, entries[wanted - 1], error):
                return entries[:wanted]
            if after is None:
                tied = yield from _tie_band(
                    stream_grants, groups, needles, found, entries, wanted, checked, error
                )
                if tied is not None:
                    return tied
        if limit >= MAX_WORD_CANDIDATES:
            return None
        limit = min(limit * 4, MAX_WORD_CANDIDATES)


def _ties_come_after(found: list[words_sql.Ranked], last: Position, error: float) -> bool:
    """Whether every record the word index left out comes after `last`, the page's last hit
    (ties go by key; `words_sql` Rule 7): every record within 2e-9 of its word-index score
    `w` has the very same `w`, and `w` lies within half a unit of the 9th decimal (less
    `error`, `words.score_error` of the query's parts) of its exact score e. Then every
    record scoring e exactly has that same `w` (its sum rounds to e), and the statement gave
    those in key order; one scoring more has a `w` above them, and was read."""
    row = next((row for row in found if row.key == last[2:]), None)
    if row is None or not row.isolated or row.overlong:
        return False
    half = 0.5 * 10.0**-relevance.DIGITS
    return abs(row.score - last[0]) <= half - error


def _tie_band(  # noqa: PLR0917 - what the band reads
    stream_grants: list[StreamGrant],
    groups: list[search_sql.SearchGroup],
    needles: list[str],
    found: list[words_sql.Ranked],
    entries: list[Position],
    wanted: int,
    checked: dict[search_sql.Key, bool],
    error: float,
) -> Op[list[Position] | None]:
    """The first page when its last hit ties with records the word index left out (a first
    page, no order field granted: ties go by key), or None.

    The page's `wanted`-th hit scores e exactly: the formula's sum rounded to
    `relevance.DIGITS` places, so a record scores e exactly when its sum lies within half a
    unit of that place of e, and then its word-index score within `error` more
    (`words_sql.band`, the band, in key order). When the band's every score lies within half
    a unit less `error` of e, every record in it scores e, and any record scoring more
    has a word-index score above the band, so it was among `entries`' records: the page is
    those scoring more than e, then the band's hits in key order.

    Only when no record of `found` (the word index's rows, best first) is bounded
    (`words_sql` Rule 3): a bounded record's score `w` is no estimate of its exact score, so
    one above the band may score e (in neither the band nor above e: it was lost) and one
    scoring e may stand `wanted`-th with a `w` far above the band, leaving records of higher
    `w` than the band unread. With none bounded, the `wanted`-th hit's `w` lies within
    `error` of its sum, so every unread record's `w`, at most the last row's, lies at
    most at the band's top; a bounded record scoring e or more has a `w` no lower than the
    band's bottom (Rule 3), so it was read (none was) or lies in the band (then None)."""
    exact = entries[wanted - 1][0]
    half = 0.5 * 10.0**-relevance.DIGITS
    if exact <= half or any(row.overlong for row in found):
        return None
    request = words_sql.band(
        stream_grants,
        groups,
        needles,
        2 * wanted,
        exact - half - error,
        exact + half + error,
    )
    rows = (yield request) or []
    summary = words_sql.band_of(rows)
    if summary is None or summary.overlong:
        return None
    if summary.low < exact - half + error or summary.high > exact - error + half:
        return None  # a score in the band may round elsewhere
    band = words_sql.ranked_records(rows)
    keys = yield from _hits_among(stream_grants, groups, needles, band, checked)
    above = [entry for entry in entries if entry[0] > exact]
    tied = [(exact, None, *key) for key in keys]
    if len(above) + len(tied) < wanted and len(band) < summary.size:
        return None  # the band's first rows hold too few hits
    return (above + tied)[:wanted]


def _hits_among(
    stream_grants: list[StreamGrant],
    groups: list[search_sql.SearchGroup],
    needles: list[str],
    ranked: Sequence[words_sql.Ranked],
    checked: dict[search_sql.Key, bool],
) -> Op[list[search_sql.Key]]:
    """The keys of `ranked`'s records that are hits, in its order: a sure one is (every term
    in some field's scored prefix); the others are re-checked on their whole text
    (`search_sql.hits`), once each, the answers kept in `checked`."""
    unsure = [row.key for row in ranked if not row.sure and row.key not in checked]
    if unsure:
        rows = yield search_sql.hits(
            stream_grants, groups, needles, None, len(unsure), among=unsure
        )
        proven = set(search_sql.hit_keys(rows or []))
        checked.update((key, key in proven) for key in unsure)
    return [row.key for row in ranked if row.sure or checked[row.key]]


SCORE_CHUNKS = -(-relevance.SCORE_CHARS // CHUNK_CHARS)
"""The chunks that hold a field's scored prefix."""
Counts = dict[search_sql.Target, tuple[tuple[int, ...], int]]
"""Per searched field of a hit: its needles' occurrence counts in the scored prefix, and its
whole length (`ranking_sql.field_counts`)."""


def _counted_hits(
    stream_grants: list[StreamGrant],
    groups: list[search_sql.SearchGroup],
    query: SearchQuery,
    targets_of: Any,
) -> Op[tuple[list[search_sql.Key], Counts]]:
    """Every hit, in key order, with the occurrence counts of its searched fields: the same
    hits as `_matching_keys(..., ALL_HITS)`, found by counting instead of re-checking.

    The first phase's `SCAN_RECORDS` records are re-checked as `_matching_keys` does and its
    hits counted; the index's candidates for the longest term after them, batch by batch, are
    counted (`ranking_sql.hit_counts`) instead of re-checked and then counted: a record whose
    searched fields all lie within the counted prefix is a hit exactly when every needle is
    counted in one of them; a record where a needle is counted nowhere but a field runs past
    the prefix is re-checked on its whole text (`search_sql.hits`). With no term the index
    can serve, the rest of the records is scanned as `_matching_keys` scans it, and its hits
    counted after."""
    needles = [term.folded for term in query.terms]
    keys_of = search_sql.hit_keys
    scanned = keys_of((yield search_sql.next_keys(stream_grants, groups, None, SCAN_RECORDS)) or [])
    if not scanned:
        return [], {}
    longest = _index_word(needles)
    if len(scanned) == SCAN_RECORDS and len(longest) < MIN_INDEXED_NEEDLE:
        every = yield from _matching_keys(stream_grants, groups, query, None, ALL_HITS)
        request = ranking_sql.occurrence_counts(
            stream_grants, targets_of(every), needles, SCORE_CHUNKS
        )
        return every, ranking_sql.field_counts((yield request) or [], needles)
    keys: list[search_sql.Key] = []
    counts: Counts = {}

    def counted(among: list[search_sql.Key], *, checked: bool = False) -> Op[None]:
        if not among:
            return
        request = ranking_sql.hit_counts(
            stream_grants, groups, needles, SCORE_CHUNKS, targets_of(among)
        )
        found = ranking_sql.field_counts((yield request) or [], needles)
        if checked:  # hits already: only their counts are wanted
            keys.extend(among)
            counts.update(found)
            return
        hits, unsure = _decided(among, found, len(needles))
        if unsure:
            rows = yield search_sql.hits(
                stream_grants, groups, needles, None, len(unsure), among=unsure
            )
            hits |= set(keys_of(rows or []))
        keys.extend(key for key in among if key in hits)
        counts.update((target, value) for target, value in found.items() if target[:3] in hits)

    # The first phase's records are mostly not hits where the term is rare: re-checked
    # (stopping at a first occurrence), then only its hits counted.
    first = yield search_sql.hits(stream_grants, groups, needles, None, len(scanned), among=scanned)
    yield from counted(keys_of(first or []), checked=True)
    if len(scanned) < SCAN_RECORDS:
        return keys, counts
    names = [grant.name for grant in stream_grants]
    position = scanned[-1]
    size = CANDIDATE_BATCH
    while True:
        batch = keys_of((yield search_sql.candidates(groups, names, longest, position, size)) or [])
        if not batch:
            break
        yield from counted(batch)
        if len(batch) < size:
            break
        position = batch[-1]
        size = min(size * 2, MAX_CANDIDATE_BATCH)
    return keys, counts


def _index_word(needles: Sequence[str]) -> str:
    """What the index is asked for: the longest term, or word of a phrase (the index's
    trigrams hold no layout, `layout.index_word`)."""
    return max((index_word(needle) for needle in needles), key=len)


def _decided(
    among: list[search_sql.Key], found: Counts, needles: int
) -> tuple[set[search_sql.Key], list[search_sql.Key]]:
    """The records of `among` that `found`'s counts prove hits, and those they cannot decide
    (a needle counted in none of the record's fields while one of them is longer than the
    counted prefix), in `among`'s order."""
    fields: dict[search_sql.Key, list[tuple[tuple[int, ...], int]]] = {}
    for target, value in found.items():
        fields.setdefault(target[:3], []).append(value)
    hits: set[search_sql.Key] = set()
    unsure: list[search_sql.Key] = []
    for key in among:
        mine = fields.get(key)
        if not mine:
            continue
        long_field = any(size > relevance.SCORE_CHARS for _, size in mine)
        counted = all(any(counts[n] for counts, _ in mine) for n in range(needles))
        if counted:
            hits.add(key)
        elif long_field:
            unsure.append(key)
    return hits, unsure


SCORE_BATCH = 64
"""Hits scored exactly at a time, at first (`_ranked`; each further batch twice as many)."""


def _scores(
    stream_grants: list[StreamGrant], targets: list[search_sql.Target], needles: list[str]
) -> Op[dict[search_sql.Key, float]]:
    """The exact score of each hit of `targets` from the first chunks of its fields' texts."""
    if not targets:
        return {}
    chunks = -(-relevance.SCORE_CHARS // CHUNK_CHARS)
    texts = ranking_sql.field_texts(
        (yield ranking_sql.scored_texts(stream_grants, targets, chunks)) or []
    )
    fields: dict[search_sql.Key, list[tuple[str, int]]] = {}
    for target in targets:
        key = target[:3]
        fields.setdefault(key, [])
        if target in texts:
            fields[key].append(texts[target])
    return {key: relevance.score(needles, found) for key, found in fields.items()}


def _matching_keys(
    stream_grants: list[StreamGrant],
    groups: list[search_sql.SearchGroup],
    query: SearchQuery,
    after: search_sql.Key | None,
    wanted: int,
) -> Op[list[search_sql.Key]]:
    """The first `wanted` matching record keys after `after`, in key order, in two phases:

    1. a scan of the next `SCAN_RECORDS` records the search may return: enough for common terms,
       where the index would name too many candidates to be quick;
    2. if those hold fewer than `wanted` hits, the records after them that the index names as
       candidates for the longest term (at least `MIN_INDEXED_NEEDLE` code points; with only
       shorter terms the rest is scanned).

    The phases split the key range at the last scanned record, so together they return exactly
    the hits a full scan would, in the same order.
    """
    needles = [term.folded for term in query.terms]
    keys_of = search_sql.hit_keys
    scanned = keys_of(
        (yield search_sql.next_keys(stream_grants, groups, after, SCAN_RECORDS)) or []
    )
    if not scanned:
        return []
    found = keys_of(
        (yield search_sql.hits(stream_grants, groups, needles, after, wanted, among=scanned)) or []
    )
    if len(scanned) < SCAN_RECORDS or len(found) >= wanted:
        return found
    upto = scanned[-1]
    longest = _index_word(needles)
    if len(longest) < MIN_INDEXED_NEEDLE:  # no term the index can serve: scan the rest
        rest = yield search_sql.hits(stream_grants, groups, needles, upto, wanted - len(found))
        return found + keys_of(rest or [])
    names = [grant.name for grant in stream_grants]
    position = upto
    size = CANDIDATE_BATCH
    while len(found) < wanted:
        batch = keys_of((yield search_sql.candidates(groups, names, longest, position, size)) or [])
        if not batch:
            break
        rest = yield search_sql.hits(
            stream_grants, groups, needles, position, wanted - len(found), among=batch
        )
        found += keys_of(rest or [])
        if len(batch) < size:
            break
        position = batch[-1]
        if wanted == ALL_HITS:  # every hit is wanted: fewer, larger batches
            size = min(size * 2, MAX_CANDIDATE_BATCH)
    return found[:wanted]


_ASK = object()
"""A field whose evidence the page-wide statements could not settle (`_page_evidence`)."""


def _page_evidence(
    stream_grants: list[StreamGrant], targets: list[search_sql.Target], query: SearchQuery
) -> Op[dict[search_sql.Target, MatchExcerpt | object]]:
    """The evidence of a whole page in two statements: the first occurrence of each term in
    the first `SCAN_CHUNKS` chunks of every target field, then the previews around the chosen
    ones (cut while the field keeps the digest the offsets were found in).

    Per field, the first term (in query order) found is the evidence when the scan covered the
    whole field, or when it is the query's first term (an earlier term cannot occur later).
    Otherwise the field is `_ASK`: `_evidence` asks it term by term, with the index. A target
    missing from the answer (not visible, not text, or changed) has no evidence."""
    needles = [term.folded for term in query.terms]
    found = search_sql.occurrences(
        (yield search_sql.first_occurrences(stream_grants, targets, needles, SCAN_CHUNKS)) or [],
        len(needles),
    )
    answer: dict[search_sql.Target, MatchExcerpt | object] = {}
    chosen: dict[search_sql.Target, tuple[Term, int, search_sql.FieldOccurrences]] = {}
    for target, field in found.items():
        whole = field.info.size_chars <= SCAN_CHUNKS * CHUNK_CHARS
        first = next((n for n, at in enumerate(field.starts) if at is not None), None)
        if first is not None and is_phrase(query.terms[first].folded):
            # The statement says where a phrase occurs, not its exact span: asked again.
            answer[target] = _ASK
        elif first is not None and (whole or first == 0):
            match_start = field.starts[first]
            assert match_start is not None
            chosen[target] = (query.terms[first], match_start, field)
        elif not whole:
            answer[target] = _ASK
    if not chosen:
        return answer
    wanted = [
        (
            *target,
            field.info.digest,
            max(0, match_start - PREVIEW_BEFORE),
            match_start + len(term.folded) + PREVIEW_AFTER,
        )
        for target, (term, match_start, field) in chosen.items()
    ]
    texts = search_sql.preview_texts((yield search_sql.previews(stream_grants, wanted)) or [])
    for target, (term, match_start, field) in chosen.items():
        if target in texts:
            start = max(0, match_start - PREVIEW_BEFORE)
            answer[target] = _excerpt(
                RecordRef(*target[:3]),
                target[3],
                term,
                field.info,
                (match_start, match_start + len(term.folded)),
                start,
                texts[target],
            )
    return answer


def _evidence(
    ref: RecordRef, path: str, stream_grant: StreamGrant, query: SearchQuery
) -> Op[MatchExcerpt | None]:
    """The first occurrence of the first term (in query order) the field holds, with a
    preview cut around it from the same text (one match-window statement per term tried)."""
    for term in query.terms:
        found = yield from match_sql.find(
            ref,
            path,
            stream_grant,
            needle=term.folded,
            before=PREVIEW_BEFORE,
            after=PREVIEW_AFTER,
            limit=None,
        )
        if found is not None:
            bounds, rows = found
            info = read_sql.field_info(rows[0])
            assert info is not None  # a match window's rows always carry the field
            return _excerpt(
                ref,
                path,
                term,
                info,
                (bounds.match_start, bounds.match_end),
                bounds.start,
                read_sql.window_text(rows),
            )
    return None


def _excerpt(  # noqa: PLR0917 - the parts of one excerpt, named where it is built
    ref: RecordRef,
    path: str,
    term: Term,
    info: FieldInfo,
    match: tuple[int, int],
    start: int,
    text: str,
) -> MatchExcerpt:
    match_start, match_end = match
    window_start = max(0, match_start - READ_CONTEXT_CHARS)
    window_limit = min(match_end - window_start + READ_CONTEXT_CHARS, MAX_LIMIT_CHARS)
    read = Continuation(
        "read_field_window",
        {
            "record": ref.argument,
            "field": path,
            "q": term.text,
            "before_chars": READ_CONTEXT_CHARS,
            "after_chars": READ_CONTEXT_CHARS,
        },
        FieldWindowRef(ref, path, window_start, window_limit).uri,
    )
    return MatchExcerpt(
        field_path=path,
        term=term.text,
        match_start_chars=match_start,
        match_end_chars=match_end,
        preview_text=text,
        start_chars=start,
        total_chars=info.size_chars,
        digest=info.digest,
        read=read,
    )
