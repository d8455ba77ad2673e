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
5. Non-interference of changes walks: two connections live the same history of what a grant
   sees, one of them with writes the grant cannot see interleaved (ungranted fields changed,
   added and removed; records outside `resources`, outside the time window or in another
   stream written, moved around and deleted; a record that left the window moved around and
   deleted outside it; under a grant that does not cover the time field, that field moved
   within the window). Every changes page of the grant over one equals its page over the
   other, from the beginning and from bookmarks taken at the same point of the history, at
   every page size; and the proof bites when a change of any field counts as a change of the
   grant's view, or when the time window is left out of what counts.
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
from pdpp_store._sql import changes as changes_sql
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
    from sqlalchemy import and_, bindparam

    from pdpp_store._sql.tables import records

    def stream_only(shape: Any, scoped: bool) -> Any:
        return and_(
            records.c.stream == bindparam("g_stream"),
            records.c.deleted == False,  # noqa: E712 - SQL comparison
        )

    breakable.setattr(query_sql, "_scope", stream_only)
    with pytest.raises(AssertionError, match=r"leaked|list|count|depends on content"):
        check_query_gate(loaded)


# ---------------------------------------------------------------- non-interference of changes

IN_WINDOW = "2026-03-02T10:00:00Z"
OUT_OF_WINDOW = "2019-05-01T00:00:00Z"
WALK_RESOURCES = ["v0", "v1", "v2", "v3", "old0", "old1"]


def _walk_grant(connection: str, fields: list[str]) -> Grant:
    return grant(
        {
            "name": MS,
            "instance_ids": [connection],
            "fields": fields,
            "resources": WALK_RESOURCES,
            "time_constraint": {"field": "received_at", "since": SINCE},
        },
        grant_id=f"g-walk-{connection}",
    )


def _noise(store: StoreFront, connection: str, step: int, time_granted: bool) -> None:
    """Writes the walk grants cannot see (proof 5); `step` varies them."""
    for n in range(4):
        current = _stored[connection].get(f"v{n}")
        if current is None:
            continue
        changed = {**current, "from_name": f"noise {step} {n}", "thread_id": f"t{step}"}
        if step % 2:
            changed.pop("from_email", None)
        else:
            changed["extra_header"] = f"x{step}"
        if not time_granted and current["received_at"] >= SINCE:
            changed["received_at"] = f"2026-03-0{1 + (step + n) % 9}T0{step % 10}:00:00Z"
        _put(store, connection, changed)
    _put(store, connection, _message("outside0", step, subject=f"outside {step}"))
    _put(
        store, connection, _message("old1", step, received_at=f"2019-0{1 + step % 9}-01T00:00:00Z")
    )
    if step % 2:
        store.delete_record(connection, MS, "old1")
        _stored[connection].pop("old1")
        store.delete_record(connection, MS, "outside0")
        _stored[connection].pop("outside0")
    gone = _stored[connection].get("v2")
    if gone is not None and gone["received_at"] < SINCE:  # left the window: moved outside it
        _put(store, connection, {**gone, "received_at": f"2018-0{1 + step % 9}-02T00:00:00Z"})
        if step % 3 == 0:
            store.delete_record(connection, MS, "v2")
            _put(store, connection, _stored[connection]["v2"])
    store.upsert_records(connection, "threads", [{"id": f"th{step}", "subject": "t"}])


_stored: dict[str, dict[str, dict[str, Any]]] = {}


def _put(store: StoreFront, connection: str, record: dict[str, Any]) -> None:
    store.upsert_records(connection, MS, [record])
    _stored[connection][record["id"]] = record


def _put_each(store: StoreFront, connection: str, records: list[dict[str, Any]]) -> None:
    for record in records:
        _put(store, connection, record)


def _granted_history(store: StoreFront, connection: str, noisy: bool, time_granted: bool) -> Any:
    """The history the walk grants see, step by step; yields at the bookmark points."""
    _stored[connection] = {}
    steps: list[Any] = [
        lambda: _put_each(store, connection, [_message(f"v{n}", n) for n in range(4)]),
        lambda: _put(store, connection, _message("old0", 0, received_at=OUT_OF_WINDOW)),
        "bookmark",
        lambda: _put(store, connection, {**_stored[connection]["v1"], "subject": "Changed"}),
        lambda: _put(
            store, connection, {**_stored[connection]["v2"], "received_at": OUT_OF_WINDOW}
        ),
        lambda: _put(store, connection, {**_stored[connection]["old0"], "received_at": IN_WINDOW}),
        lambda: (store.delete_record(connection, MS, "v3"), _stored[connection].pop("v3")),
        "bookmark",
        lambda: _put(store, connection, {**_stored[connection]["v2"], "received_at": IN_WINDOW}),
        lambda: _put(store, connection, {**_stored[connection]["v0"], "labels": ["moved"]}),
        "bookmark",
    ]
    for number, step in enumerate(steps):
        if noisy:
            _noise(store, connection, number, time_granted)
        if step == "bookmark":
            yield
        else:
            step()


def _changes_pages(
    store: StoreFront, connection: str, walk_grant: Grant, since: str, limit: int
) -> Any:
    """Every page of a changes walk, its sealed and signed tokens shown by their length only
    (a bookmark's bytes are sealed, its length must not tell), with the connection named alike;
    and the bookmark at its end."""
    pages: list[str] = []
    page = store.query_records(walk_grant, MS, changes_since=since, limit=limit)
    while True:
        shown = page.to_dict()
        arguments = (shown.get("next") or {}).get("arguments", {})
        for holder, token in (
            (shown, "next_cursor"),
            (shown, "next_changes_since"),
            (arguments, "cursor"),
            (arguments, "changes_since"),
        ):
            if isinstance(holder.get(token), str):
                holder[token] = len(holder[token])
        text = json.dumps(_alike(shown), sort_keys=True)
        pages.append(text.replace(connection, "CONNECTION"))
        if not page.has_more:
            return pages, page.next_changes_since
        page = store.query_records(walk_grant, MS, changes_since=since, cursor=page.next_cursor)


def _alike(value: Any) -> Any:
    """`value` with its resource URIs (handles that encode the connection) left out."""
    if isinstance(value, dict):
        return {k: _alike(v) for k, v in value.items() if k not in ("resource_uri", "uri")}
    if isinstance(value, list):
        return [_alike(item) for item in value]
    return value


def _first_difference(seen: dict[str, list[str]]) -> str:
    one, other = ("\n".join(pages) for pages in seen.values())
    at = next((i for i, (a, b) in enumerate(zip(one, other, strict=False)) if a != b), 0)
    return f"{one[max(0, at - 150) : at + 150]}\n{other[max(0, at - 150) : at + 150]}"


def _walk_ids(pages: list[str]) -> list[tuple[str, bool]]:
    return [
        (row["record_id"], bool(row.get("deleted")))
        for text in pages
        for row in json.loads(text)["data"]
    ]


def check_changes_non_interference(store: StoreFront, time_granted: bool) -> None:
    """Proof 5, for a grant that covers the time field or one that does not."""
    gmail = manifest("gmail")
    store.register_manifest(gmail)
    fields = [*FIELDS] if time_granted else [f for f in FIELDS if f != "received_at"]
    tag = "t" if time_granted else "u"
    quiet, noisy = f"ni-{tag}-quiet", f"ni-{tag}-noisy"
    for connection in (quiet, noisy):
        store.add_connection(connection, gmail["connector_id"])
    grants = {quiet: _walk_grant(quiet, fields), noisy: _walk_grant(noisy, fields)}
    histories = {c: _granted_history(store, c, c == noisy, time_granted) for c in grants}
    marks: dict[str, list[str]] = {quiet: ["beginning"], noisy: ["beginning"]}
    walked: dict[tuple[int, int, int], list[str]] = {}
    for point in range(3):
        for connection in (quiet, noisy):  # the two connections' histories, step by step
            next(histories[connection])
        for since_no in range(point + 1):
            for limit in (1, 2, 25):
                seen = {}
                for connection, walk_grant in grants.items():
                    pages, _ = _changes_pages(
                        store, connection, walk_grant, marks[connection][since_no], limit
                    )
                    seen[connection] = pages
                assert seen[quiet] == seen[noisy], (
                    f"a changes walk from bookmark {since_no} at point {point} (limit {limit}) "
                    f"depends on writes the grant cannot see:\n{_first_difference(seen)}"
                )
                walked[point, since_no, limit] = seen[quiet]
        for connection, walk_grant in grants.items():
            _, mark = _changes_pages(store, connection, walk_grant, marks[connection][-1], 25)
            assert mark is not None
            marks[connection].append(mark)
    # the proof is not vacuous: the walks report what the granted history did
    first = [("v0", False), ("v1", False), ("v2", False), ("v3", False)]
    assert _walk_ids(walked[0, 0, 1]) == first
    assert _walk_ids(walked[1, 1, 2]) == [
        ("v1", False),
        ("v2", True),
        ("old0", False),
        ("v3", True),
    ]
    back = [("v2", False), ("v0", False)]
    assert _walk_ids(walked[2, 2, 25]) == back
    assert _walk_ids(walked[2, 0, 25]) == [("v1", False), ("old0", False), ("v3", True), *back]


@pytest.mark.parametrize("time_granted", [True, False], ids=["time-granted", "time-ungranted"])
def test_a_changes_walk_depends_only_on_what_the_grant_sees(
    store: StoreFront, time_granted: bool
) -> None:
    check_changes_non_interference(store, time_granted)


@pytest.fixture(params=["sqlite_store", pytest.param("pg_store", marks=pytest.mark.postgres)])
def fresh(request: pytest.FixtureRequest) -> Store:
    opened: Store = request.getfixturevalue(request.param)
    return opened


def test_every_field_counted_as_granted_fails_the_non_interference_proof(
    fresh: Store, breakable: pytest.MonkeyPatch
) -> None:
    """A change of an ungranted field counted as a change of the grant's view: the noisy
    connection's walk lists records again."""

    def any_field(self: Any, row: Any) -> Any:
        return row.c.path != ""

    breakable.setattr(changes_sql._Relevance, "granted", any_field)
    with pytest.raises(AssertionError, match="depends on writes the grant cannot see"):
        check_changes_non_interference(fresh, time_granted=True)


def test_the_window_left_out_of_the_relevance_fails_the_non_interference_proof(
    fresh: Store, breakable: pytest.MonkeyPatch
) -> None:
    """Records outside the window counted as visible: their moves and deletes show."""
    from sqlalchemy import true

    def anywhere(self: Any, instant: Any) -> Any:
        return true()

    breakable.setattr(changes_sql._Relevance, "_in_window", anywhere)
    with pytest.raises(AssertionError, match="depends on writes the grant cannot see"):
        check_changes_non_interference(fresh, time_granted=False)


def test_a_readable_bookmark_fails_the_non_interference_proof(
    fresh: Store, breakable: pytest.MonkeyPatch
) -> None:
    """A bookmark whose change values are written in the clear (signed, not sealed): its length
    grows with the changes the grant cannot see, and the proof tells the two walks apart."""
    from pdpp_store._core import cursor as cursor_core
    from pdpp_store._ops import query as query_ops

    def readable(codec: Any, binding: bytes, positions: dict[str, int]) -> str:
        return cursor_core._mint_json(codec, cursor_core.BOOKMARK_VERSION, binding, positions)

    def read(codec: Any, token: object, binding: bytes, *, param: str = "") -> Any:
        return cursor_core._open_json(codec, token, cursor_core.BOOKMARK_VERSION, binding, "")

    breakable.setattr(query_ops, "mint_bookmark", readable)
    breakable.setattr(query_ops, "open_bookmark", read)
    with pytest.raises(AssertionError, match="depends on writes the grant cannot see"):
        check_changes_non_interference(fresh, time_granted=True)
