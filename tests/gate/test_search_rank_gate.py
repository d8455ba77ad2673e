"""P0 gate for search order (docs/contract.md §9, "Order"): nothing a grant does not cover moves
a grant's search pages, orders or scores.

A grant sees some records of one connection (its `resources`, its time constraint, some fields).
Its answers to several queries, in every order, every page of two hits, are recorded; then the
store fills with the queries' terms wherever the grant cannot see: records of another
connection, of an ungranted stream, outside `resources`, outside the time constraint, deleted
ones, and the grant's own records' ungranted fields (a searchable one, `from_name`, included).
Every page, hit, order, score and cursor must be the same as before. The grant also covers two
fields no search reads (`thread_id`, `labels`), which the filter gate
(test_search_filter_gate.py) filters on: the flooded records hold the values its filters ask
for, so there it is the filter that must keep them out, beside the grant.

The proof bites: a score whose length normalisation uses the store-wide average field length
(BM25's collection statistic, read from every stored field) fails it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
from _data import MAILBOX, OTHER_MAILBOX, grant, manifest
from _fronts import StoreFront
from sqlalchemy import text

from pdpp_store import Grant, Store
from pdpp_store._core import relevance

MS = "messages"
BODIES = "message_bodies"
QUERIES = ("budget", "budget review", '"orchard budget"', "view", "orchard")
ORDERS = ("relevance", "desc", "asc")
VISIBLE = [f"v{n}" for n in range(6)]
HIDDEN, OLD, GONE = ("v1-hidden", "v3-hidden"), ("v2-old", "v4-old"), ("v2-gone", "v5-gone")
"""Flooded records outside `resources`, outside the time constraint, and deleted: their keys
lie among the visible ones', so a scan or the index's candidates meet them between hits."""
FLOOD = "budget review orchard\r\nbudget " * 20
"""The queries' terms, the phrase across a line break (it forgives layout)."""


def _visible(n: int) -> dict[str, Any]:
    subjects = [
        "Budget review",
        "The orchard\n  budget",
        "Re: budget",
        "orchard budgeting review",
        "Preview of the orchard",
        "budget budget budget review of the orchard budget",
    ]
    return {
        "id": f"v{n}",
        "subject": subjects[n],
        "snippet": "orchard " * n,
        "from_name": "Ann",
        "received_at": f"2026-03-0{1 + n % 3}T10:00:00Z",
        "thread_id": "t-a" if n % 2 == 0 else "t-b",
        "labels": ["inbox", "work"] if n < 4 else ["archive"],
    }


def rank_grant() -> Grant:
    return grant(
        {
            "name": MS,
            "instance_ids": [MAILBOX],
            "fields": ["id", "subject", "snippet", "received_at", "thread_id", "labels"],
            "resources": [*VISIBLE, *OLD, *GONE],
            "time_constraint": {"field": "received_at", "since": "2026-01-01T00:00:00Z"},
        },
        grant_id="g-rank-gate",
    )


def _load(store: StoreFront) -> None:
    gmail = manifest("gmail")
    store.register_manifest(gmail)
    for connection in (MAILBOX, OTHER_MAILBOX):
        store.add_connection(connection, gmail["connector_id"])
    store.upsert_records(MAILBOX, MS, [_visible(n) for n in range(len(VISIBLE))])


def _flooded(record_id: str, variant: int) -> dict[str, Any]:
    """A record full of the queries' terms that the grant cannot see; its granted fields hold
    what the filter gate's filters ask for (variant 0: thread `t-a` on 2026-03-09, variant 1:
    thread `t-b` on 2026-03-01, both labelled `inbox`)."""
    return {
        "id": record_id,
        "received_at": "2026-03-09T10:00:00Z" if variant == 0 else "2026-03-01T09:00:00Z",
        "thread_id": "t-a" if variant == 0 else "t-b",
        "labels": ["inbox"],
        "subject": FLOOD,
        "snippet": FLOOD,
        "from_name": FLOOD,
    }


def _flood(store: StoreFront) -> None:
    """The queries' terms everywhere the grant cannot see."""
    old = "2020-01-01T00:00:00Z"
    store.upsert_records(
        MAILBOX,
        MS,
        [
            *(
                # Ungranted fields, one of them holding the value a filter asks of `thread_id`.
                {**_visible(n), "from_name": FLOOD, "x_note": FLOOD, "from_email": "t-a"}
                for n in range(len(VISIBLE))
            ),
            *(_flooded(record_id, variant) for variant, record_id in enumerate(HIDDEN)),
            *(
                {**_flooded(record_id, variant), "received_at": old}
                for variant, record_id in enumerate(OLD)
            ),
            *(_flooded(record_id, variant) for variant, record_id in enumerate(GONE)),
        ],
    )
    for record_id in GONE:
        store.delete_record(MAILBOX, MS, record_id)
    store.upsert_records(OTHER_MAILBOX, MS, [_flooded(f"o{n}", n % 2) for n in range(30)])
    store.upsert_records(
        MAILBOX,
        BODIES,
        [{"id": f"b{n}", "message_id": f"b{n}", "body_text": FLOOD * 5} for n in range(30)],
    )


def _pages(store: StoreFront, g: Grant, q: str, order: str) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        page = store.search(g, q, order=order, limit=2, cursor=cursor).to_dict()
        pages.append(page)
        if not page["has_more"]:
            return pages
        cursor = page["next_cursor"]


def _answers(store: StoreFront, g: Grant) -> dict[tuple[str, str], list[dict[str, Any]]]:
    return {(q, order): _pages(store, g, q, order) for q in QUERIES for order in ORDERS}


def _check(store: StoreFront) -> None:
    g = rank_grant()
    _load(store)
    before = _answers(store, g)
    hits = [hit for page in before["budget", "relevance"] for hit in page["data"]]
    assert len(hits) >= 4  # the proof has something to compare
    assert len({hit["score"] for hit in hits}) > 2  # and the scores differ
    _flood(store)
    after = _answers(store, g)
    for key, pages in before.items():
        assert after[key] == pages, key


def test_nothing_ungranted_moves_a_page_order_or_score(store: StoreFront) -> None:
    _check(store)


@pytest.fixture
def store_wide_average(each_database: Store) -> Iterator[Store]:
    """The bite: BM25's average length read from every stored field of the store."""
    real = relevance.score
    engine = each_database.engine

    def collection_score(needles: Any, fields: Any) -> float:
        with engine.connect() as conn:
            average = conn.execute(text("SELECT avg(size_chars) FROM fields")).scalar_one()
        original = relevance.AVERAGE_CHARS
        relevance.AVERAGE_CHARS = float(average or 1)  # type: ignore[assignment]
        try:
            return real(needles, fields)
        finally:
            relevance.AVERAGE_CHARS = original

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(relevance, "score", collection_score)
        yield each_database


def test_a_score_from_store_wide_statistics_fails_the_proof(store_wide_average: Store) -> None:
    store = store_wide_average
    with pytest.raises(AssertionError, match=r"relevance|desc|asc"):  # a page differed
        _check(cast(StoreFront, _Fresh(store)))


class _Fresh:
    """The each_database store (its mailbox already set up: registering again is a no-op for
    the manifest; connections are added only if missing)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def add_connection(self, connection_id: str, connector_id: str) -> None:
        if connection_id != MAILBOX:
            self._store.add_connection(connection_id, connector_id)
