"""Relevance order scores exactly only the hits its bounds cannot place (`search._ranked`):
the same oracle property as `test_search_property`, run with one hit scored in the first
batch (then 2, 4, ...), so the stopping rule, the cursor's lower-bound cut and the batches
decide pages of every drawn size; and the bounds themselves (`relevance.bound`) against the
score over drawn texts.
"""

from __future__ import annotations

import importlib
from typing import Any
from unittest import mock

import pytest
from _data import on_one_store
from hypothesis import example, given
from hypothesis import strategies as st

from pdpp_store import Store, fold
from pdpp_store._core import relevance
from pdpp_store._core.layout import squeeze
from pdpp_store._ops import search as search_ops
from pdpp_store._sql import words as words_sql

prop: Any = importlib.import_module("test_search_property")  # its scenarios and oracle test


@on_one_store()
@given(scenario=prop.scenarios())
def test_bounded_scoring_equals_the_oracle(each_database: Store, scenario: dict[str, Any]) -> None:
    with mock.patch.object(search_ops, "SCORE_BATCH", 1):
        prop.test_search_equals_the_oracle.hypothesis.inner_test(each_database, scenario)


_PHRASE_ACROSS_CHUNKS = {
    "records": [
        {
            "id": "r00",
            "received_at": "2026-01-01T00:00:00Z",
            "subject": ". " * 2045 + ".AAA\U0001f600  ",
        },
        *({"id": f"r0{n}", "received_at": "2026-01-01T00:00:00Z"} for n in range(1, 5)),
    ],
    "granted": None,
    "terms": ["\U0001f600 "],
    "limit": 1,
    "order": "relevance",
    "since_day": None,
    "scan": 1,
    "count": "none",
}
"""A phrase ending with a run of layout that crosses a chunk boundary (code points 4095 and
4096), found from the chunk before the one it starts in: its evidence must end at 4097, after
the whole run. (Regression: `phrase_hit` read two chunks, and the span ended at 4096.)"""


@on_one_store()
@given(scenario=prop.scenarios())
@example(scenario=_PHRASE_ACROSS_CHUNKS)
def test_word_ranking_in_small_steps_equals_the_oracle(
    each_database: Store, scenario: dict[str, Any]
) -> None:
    """The word index's path (`search._word_ranked`) asking for as few records as a page
    needs, four times as many each time: its stopping rule decides pages of every size."""
    scenario = {**scenario, "count": "none", "order": "relevance"}
    with mock.patch.object(search_ops, "WORD_CANDIDATES", 1):
        prop.test_search_equals_the_oracle.hypothesis.inner_test(each_database, scenario)


_HIDDEN_FIRST = {
    "records": [
        {
            "id": f"r{n:02d}",
            "received_at": f"2026-01-0{1 if n < 2 else 2}T00:00:00Z",
            "subject": "ab",
        }
        for n in range(6)
    ],
    "granted": None,
    "terms": ["ab"],
    "limit": 2,
    "order": "relevance",
    "since_day": 2,
    "scan": 1000,
}
"""Six records of one score; the filter hides the first two in key order, which are the best
two by score then key: the best three hold one record in scope."""


def _tied(subject: str, from_name: str, from_email: str, number: int) -> dict[str, Any]:
    return {
        "id": f"r{number}",
        "received_at": "2026-01-01T00:00:00Z",
        "subject": subject,
        "from_name": from_name,
        "from_email": from_email,
    }


_TIED_BELOW_BY_A_UNIT = {
    "records": [
        _tied("ab x", "ab x x x x x x", "ab", 0),
        _tied("ab", "ab x", "ab x x x x x x", 1),
        _tied("ab", "ab x", "ab x x x x x x", 2),
    ],
    "granted": {"subject", "from_name", "from_email", "snippet"},
    "terms": ["ab"],
    "limit": 1,
    "order": "relevance",
    "since_day": None,
    "scan": 1000,
}
"""Three records of one exact score, r0's float score a unit in the last place below the
others' (its fields' parts summed in another order), no order field granted: the page is r0
(ties go by key), which only `below` (Rule 7) tells the word path."""

_HIDDEN_BELOW = {
    "records": [
        {"id": f"r{n}", "received_at": f"2026-01-0{1 if n == 2 else 2}T00:00:00Z", "subject": s}
        for n, s in enumerate(["ab ab ab", "ab ab", "ab", "ab x", "ab x x x"])
    ],
    "granted": None,
    "terms": ["ab"],
    "limit": 1,
    "order": "relevance",
    "since_day": 2,
    "scan": 1000,
}
"""Five records of falling scores; the filter hides the third, the first below a page of two:
`below` is the fourth's, found by the second look when the first looks at one record."""


@on_one_store()
@given(scenario=prop.scenarios())
@example(scenario=_HIDDEN_FIRST)
@example(scenario=_TIED_BELOW_BY_A_UNIT)
@example(scenario=_HIDDEN_BELOW)
def test_the_word_statement_looking_up_few_records_answers_as_if_it_looked_up_all(
    each_database: Store, scenario: dict[str, Any]
) -> None:
    """The word index's statement (`words_sql` Rules 7 and 10) asking the scope of only as
    many of the best records as it returns, and of one record below its last row, answers
    what it answers when it asks the scope of every record at once: where the grant's filter
    hides some of the best, its second look, through all of them, finds the rest. Every page
    also equals the oracle's."""
    scenario = {**scenario, "count": "none", "order": "relevance"}
    real = words_sql.ranked_records
    answers: dict[int, list[list[tuple[Any, ...]]]] = {}
    for looked_up in (1, 10**6):
        calls: list[list[tuple[Any, ...]]] = []

        def recording(rows: Any, calls: list[list[tuple[Any, ...]]] = calls) -> Any:
            found = real(rows)
            below = rows[0].get("below") if rows else None
            calls.append([(row.key[1:], row.score, row.sure, row.isolated, below) for row in found])
            return found

        with (
            mock.patch.object(search_ops, "WORD_CANDIDATES", 1),
            mock.patch.object(words_sql, "PROBE", looked_up),
            mock.patch.object(words_sql, "BELOW", looked_up),
            mock.patch.object(words_sql, "ranked_records", recording),
        ):
            prop.test_search_equals_the_oracle.hypothesis.inner_test(each_database, scenario)
        answers[looked_up] = calls
    assert answers[1] == answers[10**6]


@pytest.mark.parametrize("limit", [1, 2])
def test_a_hit_ranked_low_by_its_bound_still_leads(each_database: Store, limit: int) -> None:
    """Upper bounds in the order X (4 parts), Y (2 parts), Z (1 whole word); exact scores in
    the order Z, X, Y: a first page decided by the bounds, or by the first hits scored, would
    not start with Z."""
    records = [
        {"id": "r00", "received_at": "2026-01-01T00:00:00Z", "subject": "ab ab ab ab"},
        {"id": "r01", "received_at": "2026-01-02T00:00:00Z", "subject": "ab ab"},
        {"id": "r02", "received_at": "2026-01-01T00:00:00Z", "subject": "a"},
    ]
    scenario = {
        "records": records,
        "granted": None,
        "terms": ["a"],
        "limit": limit,
        "order": "relevance",
        "since_day": None,
        "scan": 1000,
    }
    with mock.patch.object(search_ops, "SCORE_BATCH", 1):
        prop.test_search_equals_the_oracle.hypothesis.inner_test(each_database, scenario)


def _count(text: str, needle: str) -> int:
    """Occurrences found left to right without overlap (as SQL's replace removes them; a
    phrase, a needle holding whitespace, in the squeezed text: every run of whitespace one
    space, as `_sql.match.squeezed` makes it)."""
    if any(char in needle for char in " \t\n\x0b\x0c\r"):
        return squeeze(text).count(squeeze(needle))
    return text.count(needle)


@given(
    texts=st.lists(st.text(prop.ALPHABET, max_size=40), min_size=1, max_size=3),
    needles=st.lists(st.text(prop.ALPHABET, min_size=1, max_size=3), min_size=1, max_size=3),
)
def test_bounds_hold_the_score(texts: list[str], needles: list[str]) -> None:
    folded = [fold(needle) for needle in needles]
    fields = [(text, len(text)) for text in texts]
    counts = [
        (tuple(_count(fold(text[: relevance.SCORE_CHARS]), n) for n in folded), size)
        for text, size in fields
    ]
    exact = relevance.score(folded, fields)
    assert relevance.bound(counts, relevance.PART_WEIGHT) <= exact <= relevance.bound(counts, 1.0)
    every_whole = all(
        relevance.occurrence_weight(fold(text), n) == _count(fold(text), n)
        for text, _ in fields
        for n in folded
    )
    if every_whole:
        assert relevance.bound(counts, 1.0) == exact


@pytest.mark.parametrize("count", ["exact", "none"])
@pytest.mark.parametrize("scan", [1, 1000])
def test_hits_past_the_counted_prefix_are_still_found(
    each_database: Store, scan: int, count: str
) -> None:
    """Relevance order counts the index's candidates in each field's first 4,096 code points
    (`search._counted_hits`): a term that occurs only later (r00), or across the prefix's end
    (r01), is counted nowhere, so those records are re-checked on their whole text and stay
    hits (scored 0 from that field), ranked as the oracle ranks them; a short field without
    the term (r03) is decided by its counts alone. Without a count the word index ranks: r02
    is its only record with a positive score, so the page of two needs the zero-score hits
    and every hit is found as above."""
    cut = relevance.SCORE_CHARS
    records = [
        {"id": "r00", "received_at": "2026-01-01T00:00:00Z", "subject": "x " * 2300 + "abc"},
        {"id": "r01", "received_at": "2026-01-02T00:00:00Z", "subject": "y" * (cut - 1) + "abc"},
        {"id": "r02", "received_at": "2026-01-03T00:00:00Z", "subject": "the abc here"},
        {"id": "r03", "received_at": "2026-01-04T00:00:00Z", "subject": "nothing here"},
    ]
    scenario = {
        "records": records,
        "granted": None,
        "terms": ["abc"],
        "limit": 2,
        "order": "relevance",
        "since_day": None,
        "scan": scan,
        "count": count,
    }
    prop.test_search_equals_the_oracle.hypothesis.inner_test(each_database, scenario)


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_terms_beyond_the_prefix_are_placed_by_the_word_index(
    each_database: Store, limit: int
) -> None:
    """Two word terms, one of them only beyond the scored prefix in some records: the word
    index sees a positive score but not every term (r00, r02), so those records are re-checked
    on their whole text: r00 is a hit (placed by its score from "abc"), r02 is not; r01 holds
    both in its prefix (a hit for certain); r03 holds "xyz" only."""
    far = "." * relevance.SCORE_CHARS
    records = [
        {
            "id": "r00",
            "received_at": "2026-01-03T00:00:00Z",
            "subject": "abc abc",
            "snippet": far + " xyz",
        },
        {"id": "r01", "received_at": "2026-01-01T00:00:00Z", "subject": "abc xyz"},
        {"id": "r02", "received_at": "2026-01-02T00:00:00Z", "subject": "abc abc abc"},
        {"id": "r03", "received_at": "2026-01-02T00:00:00Z", "subject": "xyz"},
        {
            "id": "r04",
            "received_at": "2026-01-02T00:00:00Z",
            "subject": "abcabc",
            "snippet": far + "xyz",
        },
    ]
    scenario = {
        "records": records,
        "granted": None,
        "terms": ["abc", "xyz"],
        "limit": limit,
        "order": "relevance",
        "since_day": None,
        "scan": 1000,
        "count": "none",
    }
    with mock.patch.object(search_ops, "WORD_CANDIDATES", 1):
        prop.test_search_equals_the_oracle.hypothesis.inner_test(each_database, scenario)


@pytest.mark.parametrize("granted", [None, {"subject", "snippet"}])
@pytest.mark.parametrize("limit", [1, 2])
def test_ties_beyond_the_word_index_rows_are_placed_by_time(
    each_database: Store, limit: int, granted: set[str] | None
) -> None:
    """Equal scores: the word index's statement orders them by key, the page newest first.
    Asked for as few rows as the page needs, its last row ties with records it left out, so it
    must ask again: after r04 (nine occurrences) the ties come newest first, r03 then r02,
    where the first statement's rows were r04, r00 (and r01 for a page of two). Without the
    order field granted, ties go by key: the band of equal scores (`search._tie_band`) is
    asked for in key order; r00 has no "abc" (a band row that is no hit), r03 holds it only
    beyond the prefix (a hit, scored 0)."""
    records = [
        {"id": f"r{n:02d}", "received_at": f"2026-01-0{n + 1}T00:00:00Z", "subject": "abc def"}
        for n in range(4)
    ]
    records.append({"id": "r04", "received_at": "2026-01-09T00:00:00Z", "subject": "abc " * 9})
    records.append({"id": "r05", "received_at": "2026-01-01T00:00:00Z", "subject": "xabc def"})
    records.append({"id": "r06", "received_at": "2026-01-01T00:00:00Z", "subject": "abc d_f"})
    scenario = {
        "records": records,
        "granted": granted,
        "terms": ["abc"],
        "limit": limit,
        "order": "relevance",
        "since_day": None,
        "scan": 1000,
        "count": "none",
    }
    with mock.patch.object(search_ops, "WORD_CANDIDATES", 1):
        prop.test_search_equals_the_oracle.hypothesis.inner_test(each_database, scenario)


def test_a_tied_first_page_keeps_a_hit_with_an_overlong_word(each_database: Store) -> None:
    """Sixty records scoring the same, ties by key (no order field granted). r03's snippet
    holds an overlong word, so its word-index score is the bound `K1 + 1` per term, above the
    band of equal scores (`search._tie_band`): its exact score ties with the band's, and the
    first page must still place it by key. (Regression: r03 was in neither the hits scoring
    more nor the band, and no page returned it.)"""
    records = []
    for n in range(60):
        subject, snippet = "alpha.", "alpha " + ". " * 147
        if n == 3:
            snippet = "alpha " + "x" * 294
        if n % 2 == 0:
            subject, snippet = snippet, subject
        received = f"2026-01-0{n % 9 + 1}T00:00:00Z"
        records.append(
            {
                "id": f"r{n:02d}",
                "received_at": received,
                "subject": subject,
                "from_name": "alpha....",
                "snippet": snippet,
            }
        )
    scenario = {
        "records": records,
        "granted": {"subject", "from_name", "snippet"},
        "terms": ["alpha"],
        "limit": 10,
        "order": "relevance",
        "since_day": None,
        "scan": 1000,
        "count": "none",
    }
    prop.test_search_equals_the_oracle.hypothesis.inner_test(each_database, scenario)
