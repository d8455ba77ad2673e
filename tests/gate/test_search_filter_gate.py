"""P0 gate for search filters (docs/contract.md §9 "Filters and counts", §11.1): a filter narrows
a grant's search exactly to what the grant sees, and nothing the grant cannot see moves a
filtered page, order, score, cursor or count.

The grant and dataset are the rank gate's (test_search_rank_gate.py): six visible records of one
connection, their granted fields `subject`, `snippet` (the searched ones), `received_at` (the
order field and the time constraint's), `thread_id` and `labels`. Its queries are asked with
filters on granted fields (an exact value, a range on the order field, a list, an array's
element with a range), every page of two hits, in relevance order without a count (the word
index ranks these, `_sql.words`) and in every order with `count="exact"`. Proofs, on both
databases and both fronts:

1. Exact, against an oracle computed in Python from the records the grant sees (their granted
   fields only): over all pages, the hits are the records holding every term in a searched
   field and satisfying the filter, each once; every page's count is their number; and the
   filtered walk is the unfiltered one (same mode) with the others left out: the same hits,
   scores and order, so a filter moves no score.
2. Non-interference: the rank gate's flood fills the store with the queries' terms wherever the
   grant cannot see (another connection, an ungranted stream, outside `resources`, outside the
   time constraint, deleted, ungranted fields of the visible records), its records holding the
   values the filters ask for (so only the grant keeps them out), and a visible record's
   ungranted field holding the value the exact filter asks of a granted one. Every page, hit,
   order, score, cursor and count is the same as before.
3. A filter naming an ungranted field (a searched one, `from_name`, and one no search reads,
   `from_email`) is refused with `field_not_granted` (403, param `filter`) naming the field,
   before any statement reads a record table, and no cell the database returns holds a value of
   that field.
4. The proofs bite: with the filter removed from the word index's statement, from the hit
   statement (the substring path: key order and its re-checks), or from the statement that
   counts the index's candidates, or with a count that ignores the filter, proof 1 fails; with
   the filter standing in for the grant's visibility in the hit statement, proof 2 fails;
   undone, each passes again.

Proofs 1 and 2 run as the dataset is (its records fit in the first phase's scan), and, on each
database, with that scan cut to one record (`search.SCAN_RECORDS`), so hits and counts come
from the search index's candidates, re-checked and counted by statements that hold the filter
(`search.hits`, `ranking.hit_counts`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import pytest
from _bites import breakable_monkeypatch, clear_statement_caches
from _fronts import StoreFront
from audit import BoundaryAudit
from test_search_rank_gate import FLOOD, ORDERS, VISIBLE, _flood, _load, _visible, rank_grant

from pdpp_store import Forbidden, Store
from pdpp_store._core.filters import Filter
from pdpp_store._ops import search as search_ops
from pdpp_store._sql import ranking as ranking_sql
from pdpp_store._sql import search as search_sql
from pdpp_store._sql import words as words_sql

GRANT = rank_grant()
GRANTED = ("id", "subject", "snippet", "received_at", "thread_id", "labels")
SEARCHED = ("subject", "snippet")
QUERIES = ("budget", "budget review", '"orchard budget"')
FILTERS: tuple[dict[str, Any], ...] = (
    {"thread_id": "T-A"},  # an exact value (strings compare case-folded)
    {"received_at": {"lt": "2026-03-03T00:00:00Z"}},  # a range on the order field
    {"thread_id": {"in": ["t-b", "t-c"]}},  # a list
    {"labels": {"has": "inbox"}, "received_at": {"gte": "2026-03-02T00:00:00Z"}},
)
MODES: tuple[dict[str, Any], ...] = (
    {"order": "relevance"},
    *({"order": order, "count": "exact"} for order in ORDERS),
)
"""Relevance pages without a count (the word index ranks them), and every order counted."""

Key = tuple[int | None, str, tuple[tuple[str, str], ...]]
"""A walk: the filter's number (None: unfiltered), the query, the mode's arguments."""


# ---------------------------------------------------------------- the oracle


def _seen() -> list[dict[str, Any]]:
    """The records the grant sees, as it sees them: its granted fields only."""
    return [{f: v for f, v in _visible(n).items() if f in GRANTED} for n in range(len(VISIBLE))]


def _squeezed(text: str) -> str:
    return " ".join(text.casefold().split())


def _holds(record: dict[str, Any], q: str) -> bool:
    """Every term of `q` (a word, or a quoted phrase whose layout is forgiven) occurs, case
    folded, in some searched field."""
    terms = [a or b for a, b in re.findall(r'"([^"]*)"|(\S+)', q)]
    texts = [_squeezed(record[path]) for path in SEARCHED if isinstance(record.get(path), str)]
    return all(any(_squeezed(term) in text for text in texts) for term in terms)


def _satisfies(value: Any, clause: Any) -> bool:
    """One clause of the filters above, on a stored value (strings compare case-folded,
    instants as the same-format UTC texts they are here)."""
    if isinstance(clause, str):
        return isinstance(value, str) and value.casefold() == clause.casefold()
    if "in" in clause:
        return isinstance(value, str) and value.casefold() in {v.casefold() for v in clause["in"]}
    if "has" in clause:
        return isinstance(value, list) and clause["has"] in value
    bounds = {"lt": str.__lt__, "lte": str.__le__, "gt": str.__gt__, "gte": str.__ge__}
    return isinstance(value, str) and all(bounds[op](value, b) for op, b in clause.items())


def _oracle(q: str, filter: dict[str, Any] | None) -> set[str]:
    """The ids of the hits the grant should get."""
    return {
        record["id"]
        for record in _seen()
        if _holds(record, q)
        and all(_satisfies(record.get(f), c) for f, c in (filter or {}).items())
    }


# ---------------------------------------------------------------- the walks


def _walk(store: StoreFront, q: str, filter: dict[str, Any] | None, **mode: str) -> list[Any]:
    args: dict[str, Any] = {**mode} if filter is None else {**mode, "filter": filter}
    pages, cursor = [], None
    while True:
        page = store.search(GRANT, q, limit=2, cursor=cursor, **args).to_dict()
        pages.append(page)
        if not page["has_more"]:
            return pages
        cursor = page["next_cursor"]


def _answers(store: StoreFront, modes: tuple[dict[str, Any], ...] = MODES) -> dict[Key, list[Any]]:
    """Every walk: each query, unfiltered and with each filter, in each of `modes`."""
    return {
        (number, q, tuple(sorted(mode.items()))): _walk(
            store, q, None if number is None else FILTERS[number], **mode
        )
        for number in (None, *range(len(FILTERS)))
        for q in QUERIES
        for mode in modes
    }


def _hits(pages: list[Any]) -> list[tuple[str, Any]]:
    return [(hit["record_key"], hit["score"]) for page in pages for hit in page["data"]]


def check_exact(answers: dict[Key, list[Any]]) -> None:
    """Proof 1, over every walk of `_answers`."""
    narrowed, modes = 0, {mode for _, _, mode in answers}
    for (number, q, mode), pages in answers.items():
        filter = None if number is None else FILTERS[number]
        hits = _hits(pages)
        ids = [key for key, _ in hits]
        assert len(ids) == len(set(ids)), f"a hit repeated filtering {filter} for {q!r} {mode}"
        wanted = _oracle(q, filter)
        assert set(ids) == wanted, (
            f"filtering {filter} for {q!r} {mode}: hits {sorted(ids)}, visible matches"
            f" {sorted(wanted)}"
        )
        if ("count", "exact") in mode:
            counts = [page["count"] for page in pages]
            assert counts == [{"kind": "exact", "value": len(wanted)}] * len(pages), (
                f"filtering {filter} for {q!r} {mode}: counts {counts}, {len(wanted)} hits"
            )
        if filter is not None:
            unfiltered = _hits(answers[None, q, mode])
            assert hits == [hit for hit in unfiltered if hit[0] in wanted], (
                f"filtering {filter} for {q!r} {mode} moved a hit or a score"
            )
            narrowed += 0 < len(wanted) < len(_oracle(q, None))
    assert narrowed >= len(FILTERS) * len(modes)  # every filter narrows some query's hits


# ---------------------------------------------------------------- the proofs


@pytest.fixture
def word_answers(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per relevance page asked without a count, whether the word index answered it
    (`search._word_ranked`; otherwise every hit is ranked)."""
    answered: list[bool] = []
    real = search_ops._word_ranked

    def recording(*args: Any) -> Any:
        chosen = yield from real(*args)
        answered.append(chosen is not None)
        return chosen

    monkeypatch.setattr(search_ops, "_word_ranked", recording)
    return answered


def _check(store: StoreFront, word_answers: list[bool]) -> None:
    """Proofs 1 and 2: exact before the flood, and every walk the same after it."""
    _load(store)
    before = _answers(store)
    check_exact(before)
    assert any(word_answers), "the word index answered no page: its filter went unproved"
    _flood(store)
    check_unmoved(before, _answers(store))


def check_unmoved(before: dict[Key, list[Any]], after: dict[Key, list[Any]]) -> None:
    """Proof 2: every walk after the flood is the walk before it."""
    for key, pages in before.items():
        assert after[key] == pages, f"the flood moved a filtered page: {key}"


def test_filters_are_exact_and_nothing_ungranted_moves_a_filtered_page(
    store: StoreFront, word_answers: list[bool]
) -> None:
    _check(store, word_answers)


@pytest.fixture(params=["sqlite_store", pytest.param("pg_store", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Store:
    """The sync store on each database (the fronts share every statement: proved above)."""
    opened: Store = request.getfixturevalue(request.param)
    return opened


def test_filters_are_exact_from_the_index_candidates_too(
    database: Store, monkeypatch: pytest.MonkeyPatch, word_answers: list[bool]
) -> None:
    """The first phase's scan cut to one record: the search index's candidates make the hits,
    re-checked (`search.hits`) or counted (`ranking.hit_counts`) under the filter."""
    monkeypatch.setattr(search_ops, "SCAN_RECORDS", 1)
    _check(database, word_answers)


RECORD_TABLES = re.compile(r"\b(records|fields|field_values|field_chunks)\b", re.IGNORECASE)


def test_a_filter_on_an_ungranted_field_is_refused_before_any_row(store: StoreFront) -> None:
    """Proof 3, on the flooded store: `from_name` holds the flood, `from_email` the value the
    exact filter asks of `thread_id`."""
    _load(store)
    _flood(store)
    refused: list[tuple[str, dict[str, Any]]] = [
        ("from_name", {"from_name": FLOOD[:40]}),
        ("from_name", {"from_name": {"in": ["budget", "orchard"]}, "thread_id": "t-a"}),
        ("from_email", {"from_email": "t-a"}),
    ]
    for field, filter in refused:
        for mode in MODES:
            with BoundaryAudit(store.engine) as audit, pytest.raises(Forbidden) as raised:
                store.search(GRANT, "budget", filter=filter, **mode)
            error = raised.value
            assert (error.code, error.http_status, error.param) == (
                "field_not_granted",
                403,
                "filter",
            )
            assert repr(field) in error.message, error.message
            touched = [s for s in audit.statements if RECORD_TABLES.search(s)]
            assert not touched, f"filtering {filter} read a record table: {touched}"
            assert audit.statements, "the audit saw no statement: its silence means nothing"
            cells = [str(v) for v in audit.values if isinstance(v, str | bytes)]
            crossed = [c for c in cells if FLOOD[:21] in c or c in {"t-a", "Ann"}]
            assert not crossed, f"filtering {filter}: a record's value left the database"


# ---------------------------------------------------------------- the proofs bite


@pytest.fixture
def breakable(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield from breakable_monkeypatch(monkeypatch)


@pytest.fixture
def loaded(database: Store) -> Store:
    """The dataset and its flood (`_fails_then_passes` shows the real library passes)."""
    _load(database)
    _flood(database)
    return database


COUNTED = MODES[1:]
DESC: tuple[dict[str, Any], ...] = ({"order": "desc", "count": "exact"},)


def _fails_then_passes(
    store: Store, breakable: pytest.MonkeyPatch, modes: tuple[dict[str, Any], ...], match: str
) -> None:
    """Proof 1, over the walks of `modes`, fails against the broken variant, and passes again
    once it is undone."""
    with pytest.raises(AssertionError, match=match):
        check_exact(_answers(store, modes))
    breakable.undo()
    clear_statement_caches()
    check_exact(_answers(store, modes))


def _without_filters(real: Any) -> Any:
    """`search._in_scope` with every group's filter dropped (visibility and terms stay)."""

    def unfiltered(shapes: Any, layout: Any, longs: Any, filters: Any = ()) -> Any:
        return real(shapes, layout, longs)

    return unfiltered


def test_the_filter_removed_from_the_word_index_statement_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The word index's statement ranks every visible record holding a term: its best come
    back as relevance pages' hits, unfiltered (a record every term of which lies in a scored
    prefix is a hit without a re-check)."""
    breakable.setattr(words_sql, "_in_scope", _without_filters(search_sql._in_scope))
    _fails_then_passes(loaded, breakable, MODES[:1], r"filtering .* hits \[")


def test_the_filter_removed_from_the_hit_statement_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The hit statement (`search.hits`: key order's hits, and the re-checks of the first
    phase's records) keeps a visible record holding every term whatever its filter says."""
    breakable.setattr(search_sql, "_in_scope", _without_filters(search_sql._in_scope))
    _fails_then_passes(loaded, breakable, COUNTED, r"filtering .* hits \[")


def test_a_count_that_ignores_the_filter_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The count is the number of every hit of the search without its filter, while the pages
    stay the filtered ones: only the counts can tell."""
    real = search_ops._ranked

    def counted_unfiltered(stream_grants: Any, groups: Any, *rest: Any) -> Any:
        _, chosen = yield from real(stream_grants, groups, *rest)
        every = [dataclasses.replace(group, filter=Filter()) for group in groups]
        total, _ = yield from real(stream_grants, every, *rest)
        return total, chosen

    breakable.setattr(search_ops, "_ranked", counted_unfiltered)
    _fails_then_passes(loaded, breakable, COUNTED, r"filtering .* counts \[")


def test_the_filter_removed_from_the_counting_statement_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The statement that counts the search index's candidates' occurrences
    (`ranking.hit_counts`, relevance pages with a count, past the first phase's scan) decides
    hits without the filter."""
    breakable.setattr(search_ops, "SCAN_RECORDS", 1)
    breakable.setattr(ranking_sql, "_filters", lambda groups: ((), {}))
    _fails_then_passes(loaded, breakable, COUNTED[:1], r"filtering .* hits \[")


def test_a_filter_standing_in_for_visibility_fails_the_proofs(
    database: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The hit statement keeps a filtered search's records by connection, terms and filter
    alone, without the grant's visibility (as if the filter narrowed enough): past the first
    phase's scan, the flooded records the index names between the visible ones satisfy the
    filters and hold the terms, so they are hits (the page's evidence, under visibility, drops
    them, but not from the order or the count)."""
    from sqlalchemy import and_, bindparam, or_

    from pdpp_store._sql.filters import shaped_condition
    from pdpp_store._sql.tables import records

    real = search_sql._in_scope

    def filter_for_visibility(shapes: Any, layout: Any, longs: Any, filters: Any = ()) -> Any:
        if not filters:
            return real(shapes, layout, longs)
        prefix = search_sql._filter_prefix
        return or_(
            *(
                and_(
                    records.c.connection_id.in_(bindparam(f"c{number}", expanding=True)),
                    *(
                        search_sql._term_occurs(number, term, long)
                        for term, long in enumerate(longs)
                    ),
                    shaped_condition(filters[number], records, prefix=prefix(number)),
                )
                for number in range(len(layout))
            )
        )

    breakable.setattr(search_ops, "SCAN_RECORDS", 1)
    _load(database)  # key order, counted: the order and the count are the hit statement's
    before = _answers(database, DESC)
    breakable.setattr(search_sql, "_in_scope", filter_for_visibility)
    clear_statement_caches()
    check_exact(_answers(database, DESC))  # nothing to see yet but what the grant sees
    _flood(database)
    with pytest.raises(AssertionError, match="the flood moved a filtered page"):
        check_unmoved(before, _answers(database, DESC))
    breakable.undo()
    clear_statement_caches()
    breakable.setattr(search_ops, "SCAN_RECORDS", 1)
    check_unmoved(before, _answers(database, DESC))
