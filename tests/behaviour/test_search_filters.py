"""Search with `filter` (§11.1) and `count` (docs/contract.md §9, "Filters and counts"), on both
databases and both fronts: the filter narrows the hits in the search's own statement, under the
grant; `count="exact"` is the number of visible hits on every page; a page says when it is
complete."""

from __future__ import annotations

from typing import Any

import pytest
from _data import MAILBOX, assert_store_error, grant, setup_mailbox
from _fronts import StoreFront

from pdpp_store import StoreError

MS = "messages"


def _message(n: int, sender: str, day: int) -> dict[str, Any]:
    return {
        "id": f"m{n:02d}",
        "subject": f"budget note {n}",
        "from_email": sender,
        "received_at": f"2026-03-{day:02d}T10:00:00Z",
    }


def _load(store: StoreFront) -> list[dict[str, Any]]:
    setup_mailbox(store)
    records = [
        _message(n, "ann@example.org" if n % 3 else "bob@example.org", 1 + n % 7) for n in range(12)
    ]
    store.upsert_records(MAILBOX, MS, [*records, {"id": "x", "subject": "unrelated"}])
    return records


def _walk(store: StoreFront, g: Any, q: str, **args: Any) -> list[dict[str, Any]]:
    pages, cursor = [], None
    while True:
        page = store.search(g, q, streams=[MS], limit=4, cursor=cursor, **args).to_dict()
        pages.append(page)
        assert page["complete"] is (not page["has_more"])
        if not page["has_more"]:
            return pages
        cursor = page["next_cursor"]


OWNER = grant({"name": MS, "instance_ids": [MAILBOX]})


def test_a_filter_narrows_the_hits(store: StoreFront) -> None:
    records = _load(store)
    wanted = {r["id"] for r in records if r["from_email"] == "bob@example.org"}
    pages = _walk(store, OWNER, "budget", filter={"from_email": "BOB@example.org"})
    got = [hit["record_key"] for page in pages for hit in page["data"]]
    assert sorted(got) == sorted(wanted)
    assert len(got) == len(set(got))
    since = "2026-03-04T00:00:00Z"
    ranged = _walk(store, OWNER, "budget", filter={"received_at": {"gte": since}}, order="asc")
    got = [hit["record_key"] for page in ranged for hit in page["data"]]
    expected = sorted(
        (r for r in records if r["received_at"] >= since),
        key=lambda r: (r["received_at"], r["id"]),
    )
    assert got == [r["id"] for r in expected]


def test_an_exact_count_on_every_page(store: StoreFront) -> None:
    records = _load(store)
    pages = _walk(store, OWNER, "budget", count="exact")
    assert len(pages) == 3
    for page in pages:
        assert page["count"] == {"kind": "exact", "value": len(records)}
    assert sum(len(page["data"]) for page in pages) == len(records)
    narrowed = _walk(
        store, OWNER, "budget", count="exact", filter={"from_email": "ann@example.org"}
    )
    assert narrowed[0]["count"]["value"] == sum(
        r["from_email"] == "ann@example.org" for r in records
    )
    assert "count" not in _walk(store, OWNER, "budget")[0]
    nothing = store.search(OWNER, "zzzz", count="exact").to_dict()
    assert nothing["count"] == {"kind": "exact", "value": 0}
    assert nothing["complete"] is True


def test_a_count_counts_only_what_the_grant_sees(store: StoreFront) -> None:
    records = _load(store)
    picked = grant({"name": MS, "instance_ids": [MAILBOX], "resources": ["m01", "m02", "x"]})
    page = store.search(picked, "budget", count="exact").to_dict()
    assert page["count"]["value"] == 2
    assert len(records) > 2


@pytest.mark.parametrize(
    ("args", "status", "code", "param"),
    [
        ({"filter": {"to": "a"}}, 400, "invalid_filter", "filter"),
        ({"filter": {"no_such_field": "a"}}, 400, "invalid_filter", "filter"),
        ({"filter": "not json"}, 400, "invalid_filter", "filter"),
        ({"count": "some"}, 400, "invalid_request", "count"),
        ({"order": "newest"}, 400, "invalid_request", "order"),
    ],
)
def test_bad_filters_counts_and_orders_are_typed_errors(
    store: StoreFront, args: dict[str, Any], status: int, code: str, param: str
) -> None:
    _load(store)
    with pytest.raises(StoreError) as raised:
        store.search(OWNER, "budget", streams=[MS], **args)
    assert_store_error(raised.value, code, status, param)


def test_a_filter_on_an_ungranted_field_is_refused(store: StoreFront) -> None:
    _load(store)
    narrow = grant({"name": MS, "instance_ids": [MAILBOX], "fields": ["id", "subject"]})
    with pytest.raises(StoreError) as raised:
        store.search(narrow, "budget", filter={"from_email": "bob@example.org"})
    assert_store_error(raised.value, "field_not_granted", 403, "filter")
