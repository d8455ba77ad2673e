"""P0 gate for `query_records` (docs/contract.md §11.2): what a grant does not cover never makes,
shapes, counts or leaks a page.

The dataset puts a canary (a unique token, mixed case) in every place the grant excludes: a
field the grant does not cover (`from_name`, a declared `actor`, so a card would show it; and
`from_email`), a soft-deleted record, a record of a connection the grant does not cover, a
record outside `resources`, a record outside the time constraint, and a record of a stream the
grant does not name (`threads`). Proofs, on every backend and front:

1. Every page (both orders, every limit, every projection, counts, a changes walk from the
   beginning with its tombstones) lists exactly the visible records, and a filter on a granted
   field whose value is a canary answers exactly what a filter matching nothing answers.
2. No cell the database returns during those calls holds a canary (`BoundaryAudit`), nor does
   any answer; and the audit did see the rows the pages were made of.
3. A filter, a projection or an order that would touch an ungranted field is refused before
   any statement reads a record table; a grant that does not cover the order field gets key
   order and no cell holding an order value.
4. The proofs bite: with the visibility condition removed from the list statements, or the
   grant's fields removed from the projection's statement, they fail.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from _bites import breakable_monkeypatch
from _data import MAILBOX, OTHER_MAILBOX, grant, manifest
from _fronts import StoreFront
from audit import BoundaryAudit

from pdpp_store import Forbidden, Grant, Store
from pdpp_store._core.folding import fold
from pdpp_store._core.grants import normalize_instant
from pdpp_store._sql import query as query_sql
from pdpp_store._sql import visibility as sql

MS = "messages"
CANARIES = {
    "ungranted": "cAnARy1042xT",
    "ungranted_email": "cAnARy1043eM",
    "deleted": "cAnARy1555dL",
    "other_connection": "cAnARy1616oC",
    "outside_resources": "cAnARy1727rS",
    "outside_time": "cAnARy1838tM",
    "other_stream": "cAnARy1949sT",
}
NOTHING = "zzNoSuchValueAnywherezz"
SINCE = "2026-01-01T00:00:00Z"
VISIBLE = [f"v{n}" for n in range(4)]
FIELDS = ["id", "subject", "snippet", "received_at", "labels", "size_bytes"]


def _message(record_id: str, n: int, **fields: Any) -> dict[str, Any]:
    return {
        "id": record_id,
        "thread_id": f"t-{record_id}",
        "subject": f"Quarterly report {n}",
        "from_name": f"Zoë {CANARIES['ungranted']}",
        "from_email": f"{CANARIES['ungranted_email']}@example.com",
        "snippet": "the numbers are in",
        "received_at": f"2026-03-0{n + 1}T10:00:00Z",
        "labels": ["inbox"],
        "size_bytes": 100 + n,
        **fields,
    }


def load(store: StoreFront) -> None:
    gmail = manifest("gmail")
    store.register_manifest(gmail)
    for connection in (MAILBOX, OTHER_MAILBOX):
        store.add_connection(connection, gmail["connector_id"])
    c = CANARIES
    records = [_message(record_id, n) for n, record_id in enumerate(VISIBLE)]
    for n in range(2):
        records += [
            _message(f"deleted{n}", n, subject=c["deleted"], labels=[c["deleted"]]),
            _message(
                f"outside{n}", n, subject=c["outside_resources"], labels=[c["outside_resources"]]
            ),
            _message(f"old{n}", n, subject=c["outside_time"], received_at="2020-01-01T00:00:00Z"),
        ]
    store.upsert_records(MAILBOX, MS, records)
    store.upsert_records(
        OTHER_MAILBOX,
        MS,
        [
            _message(f"o{n}", n, subject=c["other_connection"], labels=[c["other_connection"]])
            for n in range(2)
        ],
    )
    store.upsert_records(
        MAILBOX,
        "threads",
        [{"id": "th0", "subject": f"Thread {c['other_stream']}", "last_message_date": SINCE}],
    )
    for n in range(2):
        store.delete_record(MAILBOX, MS, f"deleted{n}")


def _grant(fields: list[str] = FIELDS) -> Grant:
    visible = [*VISIBLE, *(f"{kind}{n}" for kind in ("deleted", "old") for n in range(2))]
    return grant(
        {
            "name": MS,
            "instance_ids": [MAILBOX],
            "fields": fields,
            "resources": visible,
            "time_constraint": {"field": "received_at", "since": SINCE},
        },
        grant_id="g-query-gate",
    )


GRANT = _grant()


def _texts(audit: BoundaryAudit) -> list[str]:
    cells = [
        value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        for value in audit.values
    ]
    return [cell for cell in cells if isinstance(cell, str)]


def _leaked(audit: BoundaryAudit, answers: list[Any]) -> list[str]:
    texts = [fold(text) for text in _texts(audit)]
    shown = fold(json.dumps(answers, ensure_ascii=False))
    return [
        name
        for name, canary in CANARIES.items()
        if any(fold(canary) in t for t in texts) or fold(canary) in shown
    ]


def _walk(store: StoreFront, query_grant: Grant, **arguments: Any) -> list[dict[str, Any]]:
    pages = []
    page = store.query_records(query_grant, MS, **arguments)
    while True:
        pages.append(page.to_dict())
        if not page.has_more:
            return pages
        page = store.query_records(query_grant, MS, **arguments, cursor=page.next_cursor)


CALLS: list[dict[str, Any]] = [
    {},
    {"order": "asc"},
    {"limit": 1, "count": "exact"},
    {"fields": FIELDS, "limit": 2},
    {"filter": {"labels": {"has": "inbox"}}, "count": "exact"},
    {"filter": {"received_at": {"gte": SINCE}}, "order": "asc", "limit": 3},
    {"changes_since": "beginning", "limit": 2},
]


def check_query_gate(store: StoreFront) -> None:
    """Proofs 1-3 (the function the bite tests run against broken variants)."""
    engine = store.engine
    with BoundaryAudit(engine) as audit:
        answers = [_walk(store, GRANT, **call) for call in CALLS]
    leaked = _leaked(audit, answers)
    assert not leaked, f"canaries leaked into a page: {leaked}"
    for call, pages in zip(CALLS, answers, strict=True):
        ids = [row["record_id"] for page in pages for row in page["data"]]
        tombstones = ["deleted0", "deleted1"] if "changes_since" in call else []
        assert sorted(ids) == sorted([*VISIBLE, *tombstones]), f"the pages of {call} list {ids}"
        if call.get("count"):
            assert pages[-1]["count"]["value"] == len(VISIBLE), f"count of {call}"
    texts = _texts(audit)
    assert any("Quarterly report 0" in text for text in texts), "the audit saw no page row"
    for name, canary in CANARIES.items():
        for field, clause in (("subject", canary), ("labels", {"has": canary})):
            for extra in ({}, {"count": "exact"}, {"changes_since": "beginning"}):
                with BoundaryAudit(engine) as audit:
                    asked = _walk(store, GRANT, filter={field: clause}, **extra)
                nothing_clause = NOTHING if field == "subject" else {"has": NOTHING}
                reference = _walk(store, GRANT, filter={field: nothing_clause}, **extra)
                assert not _leaked(audit, []), f"canaries leaked filtering on {name}"
                strip = [{k: v for k, v in p.items() if k != "next_changes_since"} for p in asked]
                ref = [{k: v for k, v in p.items() if k != "next_changes_since"} for p in reference]
                assert strip == ref, (
                    f"the answer depends on content the grant does not cover ({name})"
                )


RECORD_TABLES = re.compile(r"\b(records|fields|field_values|field_chunks)\b", re.IGNORECASE)


def check_refused_before_any_row(store: StoreFront) -> None:
    """Proof 3: refusals read no record table; key order shows no order value."""
    refused: list[dict[str, Any]] = [
        {"filter": {"from_name": CANARIES["ungranted"]}},
        {"filter": json.dumps({"from_email": {"in": ["a", "b"]}})},
        {"fields": ["subject", "from_name"]},
    ]
    for arguments in refused:
        with BoundaryAudit(store.engine) as audit, pytest.raises(Forbidden) as raised:
            store.query_records(GRANT, MS, **arguments)
        assert raised.value.code == "field_not_granted"
        touched = [s for s in audit.statements if RECORD_TABLES.search(s)]
        assert not touched, f"{arguments} read a record table before refusing: {touched}"
    narrow = _grant(["id", "subject"])
    with BoundaryAudit(store.engine) as audit:
        pages = _walk(store, narrow, limit=2)
    assert all(page["order"] == {"field": None, "direction": "desc", "by": "key"} for page in pages)
    ids = [row["record_id"] for page in pages for row in page["data"]]
    assert ids == sorted(VISIBLE, reverse=True)
    instants = {normalize_instant(f"2026-03-0{n + 1}T10:00:00Z") for n in range(4)}
    assert not instants & set(_texts(audit)), "an ungranted order field's values left the database"
    assert not _leaked(audit, pages)


def test_query_records_never_answers_from_what_the_grant_does_not_cover(
    store: StoreFront,
) -> None:
    load(store)
    check_query_gate(store)
    check_refused_before_any_row(store)


# ---------------------------------------------------------------- the proofs bite


@pytest.fixture
def breakable(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield from breakable_monkeypatch(monkeypatch)


@pytest.fixture(params=["sqlite_store", pytest.param("pg_store", marks=pytest.mark.postgres)])
def loaded(request: pytest.FixtureRequest) -> Store:
    opened: Store = request.getfixturevalue(request.param)
    load(opened)
    check_query_gate(opened)  # the real library passes
    return opened


def test_visibility_removed_from_the_list_statements_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import true

    def everything_visible(shape: Any, prefix: str = "g", **_: Any) -> Any:
        return true()

    breakable.setattr(sql, "visible_records", everything_visible)
    with pytest.raises(AssertionError, match=r"leaked|list|count|depends on content"):
        check_query_gate(loaded)


def test_the_grant_s_fields_removed_from_the_projection_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The rows' statement reads every field of the page's records; the page shows only the
    projected ones, so only the audit can tell."""
    real = query_sql.row_fields

    def every_field(grant: Any, keys: Any, paths: Any, preview_chars: int) -> Any:
        return real(dataclasses.replace(grant, fields=None), keys, None, preview_chars)

    breakable.setattr(query_sql, "row_fields", every_field)
    with pytest.raises(AssertionError, match="leaked"):
        check_query_gate(loaded)


def test_visibility_removed_from_the_page_statement_alone_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """Only the statement that picks a page's keys (and counts them) loses the grant's terms:
    the rows' own statement still applies them, and the proofs still see the difference."""
    from sqlalchemy import and_

    from pdpp_store._sql.tables import records

    def stream_only(grant: Any, connection_id: str | None) -> Any:
        _, terms = sql.grant_terms(grant)
        condition = and_(
            records.c.stream == grant.name,
            records.c.deleted == False,  # noqa: E712 - SQL comparison
        )
        return condition, dict(terms)

    breakable.setattr(query_sql, "_scope", stream_only)
    with pytest.raises(AssertionError, match=r"leaked|list|count|depends on content"):
        check_query_gate(loaded)
