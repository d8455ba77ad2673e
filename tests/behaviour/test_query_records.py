"""`query_records` (docs/contract.md §11.2) against a Python oracle, on both databases and both
fronts.

For random records in several connections, random grants (connections, fields, `resources`,
a time constraint) and random filters: the union of all pages, walked with their cursors, is the
oracle's ordered list (no skip, no repeat), in both orders, in field order when the grant covers
the order field and in key order when it does not; `count="exact"` is its length; every row
shows granted fields only. A walk of changes from a bookmark reports every record inserted,
updated or deleted since, exactly once, in its latest state (tombstones for deletes).
Then the typed errors of bad input, and cursors used with anything else."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from _fronts import StoreFront
from _values import STREAM, VALUES_MANIFEST
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import create_engine, text

from pdpp_store import BadRequest, Forbidden, Grant, NotFound, Store, StoreError
from pdpp_store._core.errors import Gone
from pdpp_store._core.filters import comparable, matches, parse_filter
from pdpp_store._core.grants import normalize_instant
from pdpp_store._core.manifest import Manifest
from pdpp_store._ops import query as query_ops
from pdpp_store._runtime import sync_url

_RUN = itertools.count()
IDS = [f"r{n}" for n in range(6)]
CONNECTOR = VALUES_MANIFEST["connector_id"]
_SPEC = Manifest.from_dict(VALUES_MANIFEST).spec(STREAM)
assert _SPEC is not None
SPEC = _SPEC
WHENS = [
    "2026-03-01T10:00:00Z",
    "2026-03-01T11:00:00+01:00",  # the same instant as the first: ties go by key
    "2026-03-02",
    "2026-04-01T00:00:00Z",
    "2025-12-31T23:59:59Z",
    "not a date",
    "",
]
_record_values: dict[str, st.SearchStrategy[Any]] = {
    "when": st.sampled_from(WHENS),
    "title": st.sampled_from(["alice", "Alice", "bob", "x" * 700]),
    "n": st.sampled_from([1, 2, 2.5, 10]),
    "flag": st.booleans(),
    "tags": st.lists(st.sampled_from(["a", "b", 1]), max_size=3),
    "maybe": st.sampled_from([None, "m"]),
}


@st.composite
def _record(draw: st.DrawFn, record_id: str) -> dict[str, Any]:
    record: dict[str, Any] = {"id": record_id}
    for name, values in _record_values.items():
        if draw(st.booleans()):
            record[name] = draw(values)
    return record


_records = st.lists(st.sampled_from(IDS), unique=True, max_size=len(IDS)).flatmap(
    lambda ids: st.tuples(*(_record(i) for i in ids)).map(list)
)
_FIELDS = ["id", "when", "title", "n", "flag", "tags", "maybe"]
_FILTERS = st.sampled_from(
    [
        None,
        {"title": "ALICE"},
        {"n": {"gt": 1}},
        {"when": {"gte": "2026-03-01T10:00:00Z", "lt": "2026-04-01"}},
        {"tags": {"has": "a"}},
        {"flag": True, "n": {"lte": 2}},
        {"maybe": None},
        '{"title": {"in": ["bob", "alice"]}}',
    ]
)


@st.composite
def _grant(draw: st.DrawFn, connections: list[str]) -> dict[str, Any]:
    stream: dict[str, Any] = {
        "name": STREAM,
        "instance_ids": draw(st.lists(st.sampled_from(connections), min_size=1, unique=True)),
    }
    if draw(st.booleans()):
        stream["fields"] = draw(st.lists(st.sampled_from(_FIELDS), unique=True))
    if draw(st.booleans()):
        stream["resources"] = draw(st.lists(st.sampled_from(IDS), unique=True))
    if draw(st.booleans()):
        stream["time_constraint"] = {
            "field": "when",
            **draw(
                st.sampled_from([{"since": "2026-03-01T10:00:00Z"}, {"until": "2026-03-15"}, {}])
            ),
        }
    return {"grant_id": f"g{next(_RUN)}", "streams": [stream]}


class _Oracle:
    """What the grant sees of the stored records, in the order a page lists them."""

    def __init__(self, grant: dict[str, Any]) -> None:
        self.terms = grant["streams"][0]
        self.fields = self.terms.get("fields")

    def visible(self, connection_id: str, record: dict[str, Any]) -> bool:
        terms = self.terms
        if connection_id not in terms["instance_ids"]:
            return False
        if "resources" in terms and record["id"] not in terms["resources"]:
            return False
        constraint = terms.get("time_constraint")
        if constraint is not None:
            instant = normalize_instant(record.get("when"))
            since = normalize_instant(constraint.get("since"))
            until = normalize_instant(constraint.get("until"))
            if instant is None or (since and instant < since) or (until and instant >= until):
                return False
        return True

    def ordered(
        self, live: dict[tuple[str, str], dict[str, Any]], parsed: Any, direction: str
    ) -> tuple[list[str], str | None]:
        keys = [
            key
            for key, record in live.items()
            if self.visible(key[0], record) and matches(parsed, record)
        ]
        by_field = self.fields is None or "when" in self.fields
        reverse = direction == "desc"
        if not by_field:
            return [f"{c}/{STREAM}:{r}" for c, r in sorted(keys, reverse=reverse)], None

        def instant(key: tuple[str, str]) -> str | None:
            form = comparable(live[key].get("when")) if "when" in live[key] else None
            return None if form is None or form.kind != "string" else form.instant

        valued = sorted(
            (key for key in keys if instant(key) is not None),
            key=lambda key: (instant(key), key),
            reverse=reverse,
        )
        missing = sorted((key for key in keys if instant(key) is None), reverse=reverse)
        return [f"{c}/{STREAM}:{r}" for c, r in [*valued, *missing]], "when"


def _walk(store: StoreFront, grant: Grant, **arguments: Any) -> tuple[list[dict[str, Any]], Any]:
    """Every row of every page, following `next`; and the last page."""
    rows: list[dict[str, Any]] = []
    page = store.query_records(grant, STREAM, **arguments)
    for _ in range(100):
        shown = page.to_dict()
        rows += shown["data"]
        if not page.has_more:
            return rows, page
        assert shown["next"]["operation"] == "query_records"
        call = dict(shown["next"]["arguments"])
        assert call.pop("stream") == STREAM
        page = store.query_records(grant, STREAM, **call)
    raise AssertionError("more than 100 pages")


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


_REMOVE = object()
_op = st.one_of(
    st.tuples(st.just("upsert"), st.integers(0, 1), st.sampled_from(IDS).flatmap(_record)),
    st.tuples(
        st.just("patch"),
        st.integers(0, 1),
        st.sampled_from(IDS),
        st.sampled_from(sorted(_record_values)).flatmap(
            lambda name: st.tuples(st.just(name), st.one_of(st.just(_REMOVE), _record_values[name]))
        ),
    ),
    st.tuples(st.just("delete"), st.integers(0, 1), st.sampled_from(IDS)),
)
"""One write of one record: a whole record, one field changed or removed (on the live record,
or on a new one holding only its key), or a delete."""


class _History:
    """Per record, what the grant saw of it after each write since a bookmark (its view: None
    when not visible, else its granted fields), and the write that last changed that view."""

    def __init__(self, oracle: _Oracle, live: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.oracle = oracle
        self.live = live
        self.last_moved: dict[tuple[str, str], int] = {}
        self.writes = 0

    def view(self, key: tuple[str, str]) -> str | None:
        record = self.live.get(key)
        if record is None or not self.oracle.visible(key[0], record):
            return None
        granted = self.oracle.fields
        shown = {k: v for k, v in record.items() if granted is None or k in granted}
        return json.dumps(shown, sort_keys=True)

    def write(self, key: tuple[str, str], record: dict[str, Any] | None) -> None:
        before = self.view(key)
        if record is None:
            self.live.pop(key, None)
        else:
            self.live[key] = record
        self.writes += 1
        if self.view(key) != before:
            self.last_moved[key] = self.writes

    def expected(self, parsed: Any) -> list[tuple[str, bool]]:
        """The walk since the bookmark: (id, deleted) in change order (Rule 2 of
        `_sql.changes`): each record whose view moved, once, at its last move."""
        found = []
        for key, _ in sorted(self.last_moved.items(), key=lambda item: (item[0][0], item[1])):
            if self.view(key) is None:
                found.append((f"{key[0]}/{STREAM}:{key[1]}", True))
            elif matches(parsed, self.live[key]):
                found.append((f"{key[0]}/{STREAM}:{key[1]}", False))
        return found


def _apply(
    store: StoreFront, history: _History, connections: list[str], op: tuple[Any, ...]
) -> None:
    kind, index, *rest = op
    conn = connections[index]
    if kind == "upsert":
        record = rest[0]
        key = (conn, record["id"])
        store.upsert_records(conn, STREAM, [record])
        history.write(key, record)
    elif kind == "patch":
        record_id, (name, value) = rest
        key = (conn, record_id)
        record = dict(history.live.get(key, {"id": record_id}))
        if value is _REMOVE:
            record.pop(name, None)
        else:
            record[name] = value
        store.upsert_records(conn, STREAM, [record])
        history.write(key, record)
    else:
        key = (conn, rest[0])
        if key in history.live:
            store.delete_record(conn, STREAM, rest[0])
            history.write(key, None)


def test_pages_and_changes_agree_with_the_oracle(store: StoreFront) -> None:
    store.register_manifest(VALUES_MANIFEST)

    @settings(
        max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        data=st.data(),
        first=st.tuples(_records, _records),
        rounds=st.lists(st.lists(_op, max_size=10), min_size=1, max_size=2),
        raw_filter=_FILTERS,
        limit=st.integers(1, 4),
    )
    def run(
        data: st.DataObject,
        first: tuple[list[dict[str, Any]], ...],
        rounds: list[list[tuple[Any, ...]]],
        raw_filter: Any,
        limit: int,
    ) -> None:
        run_no = next(_RUN)
        connections = [f"q{run_no}a", f"q{run_no}b"]
        grant_json = data.draw(_grant(connections))
        grant = Grant.from_dict(grant_json)
        oracle = _Oracle(grant_json)
        live: dict[tuple[str, str], dict[str, Any]] = {}
        history = _History(oracle, live)
        for conn, records in zip(connections, first, strict=True):
            store.add_connection(conn, CONNECTOR)
            if records:
                store.upsert_records(conn, STREAM, records)
            for record in sorted(records, key=lambda r: str(r["id"])):  # a batch's change order
                history.write((conn, record["id"]), record)
        stream_grant = grant.stream(STREAM)
        try:
            parsed = parse_filter(raw_filter, SPEC, stream_grant)
        except Forbidden:
            with pytest.raises(Forbidden) as refused:
                store.query_records(grant, STREAM, filter=raw_filter)
            assert refused.value.code == "field_not_granted"
            raw_filter, parsed = None, parse_filter(None, SPEC, stream_grant)
        for direction in ("desc", "asc"):
            expected, field = oracle.ordered(live, parsed, direction)
            rows, last = _walk(
                store, grant, filter=raw_filter, order=direction, limit=limit, count="exact"
            )
            assert [row["id"] for row in rows] == expected
            shown = last.to_dict()
            assert shown["count"] == {"kind": "exact", "value": len(expected)}
            assert shown["order"]["field"] == field
            for row in rows:
                granted = set(_FIELDS) if oracle.fields is None else set(oracle.fields)
                assert set(row["data"]) | set(row["content_ladder"]) <= granted
        # a walk from the beginning, then from each bookmark after a round of writes: each
        # record whose view moved, once, in change order, in its latest state; a tombstone for
        # one visible since and not now, whatever the filter
        bookmark = "beginning"
        for writes in [[], *rounds]:
            for op in writes:
                _apply(store, history, connections, op)
            rows, last = _walk(store, grant, filter=raw_filter, changes_since=bookmark, limit=limit)
            assert [(row["id"], bool(row.get("deleted"))) for row in rows] == history.expected(
                parsed
            )
            for row in rows:
                if not row.get("deleted"):
                    key = (row["connection_id"], row["record_id"])
                    for path, value in row["data"].items():
                        if len(json.dumps(value)) < 100:
                            assert live[key][path] == value  # the latest state
            bookmark = last.next_changes_since
            assert bookmark is not None
            history.last_moved.clear()

    run()


def _setup(store: StoreFront) -> Grant:
    store.register_manifest(VALUES_MANIFEST)
    store.add_connection("c1", CONNECTOR)
    store.upsert_records(
        "c1",
        STREAM,
        [{"id": f"r{i}", "title": f"t{i}", "n": i, "when": f"2026-03-0{i + 1}"} for i in range(5)],
    )
    return Grant.from_dict(
        {"grant_id": "g", "streams": [{"name": STREAM, "fields": ["id", "title", "n", "when"]}]}
    )


@pytest.mark.parametrize(
    ("arguments", "code", "param"),
    [
        ({"filter": {"nope": 1}}, "field_not_granted", "filter"),
        ({"filter": {"flag": True}}, "field_not_granted", "filter"),
        ({"filter": {"title": {"gt": "a"}}}, "invalid_filter", "filter"),
        ({"filter": {"n": "one"}}, "invalid_filter", "filter"),
        ({"filter": {f"f{i}": 1 for i in range(17)}}, "invalid_filter", "filter"),
        ({"filter": {"title": {"in": [str(i) for i in range(101)]}}}, "invalid_filter", "filter"),
        ({"filter": '{"title": '}, "invalid_filter", "filter"),
        ({"fields": ["flag"]}, "field_not_granted", "fields"),
        ({"fields": "title"}, "invalid_request", "fields"),
        ({"limit": 0}, "invalid_request", "limit"),
        ({"limit": 101}, "invalid_request", "limit"),
        ({"order": "sideways"}, "invalid_request", "order"),
        ({"count": "roughly"}, "invalid_request", "count"),
        ({"cursor": "garbage"}, "invalid_cursor", "cursor"),
        ({"changes_since": "garbage"}, "invalid_cursor", "changes_since"),
        ({"connection_id": "nope"}, "connection_not_found", "connection_id"),
    ],
)
def test_bad_input_is_a_typed_error_naming_the_parameter(
    store: StoreFront, arguments: dict[str, Any], code: str, param: str
) -> None:
    grant = _setup(store)
    with pytest.raises(StoreError) as raised:
        store.query_records(grant, STREAM, **arguments)
    assert (raised.value.code, raised.value.param) == (code, param)
    assert 400 <= raised.value.http_status < 500


def test_an_ungranted_or_undeclared_stream_is_refused(store: StoreFront) -> None:
    grant = _setup(store)
    with pytest.raises(Forbidden) as raised:
        store.query_records(grant, "other", limit=1)
    assert raised.value.code == "grant_stream_not_allowed"
    wide = Grant.from_dict({"grant_id": "w", "streams": [{"name": "other"}]})
    with pytest.raises(NotFound) as missing:
        store.query_records(wide, "other")
    assert missing.value.code == "stream_not_declared"


def test_a_cursor_is_bound_to_everything_that_shaped_its_page(store: StoreFront) -> None:
    grant = _setup(store)
    page = store.query_records(grant, STREAM, limit=2, filter={"n": {"gt": 0}})
    assert page.next_cursor is not None
    again = store.query_records(
        grant, STREAM, limit=2, filter={"n": {"gt": 0}}, cursor=page.next_cursor
    )
    assert [row.ref.record_id for row in again.records] == ["r2", "r1"]
    other = Grant.from_dict({"grant_id": "g2", "streams": [{"name": STREAM}]})
    variations: list[tuple[Grant, dict[str, Any]]] = [
        (grant, {"filter": {"n": {"gt": 1}}}),
        (grant, {"filter": None}),
        (grant, {"filter": {"n": {"gt": 0}}, "order": "asc"}),
        (grant, {"filter": {"n": {"gt": 0}}, "fields": ["title"]}),
        (grant, {"filter": {"n": {"gt": 0}}, "connection_id": "c1"}),
        (grant, {"filter": {"n": {"gt": 0}}, "changes_since": "beginning"}),
        (other, {"filter": {"n": {"gt": 0}}}),
    ]
    for used, arguments in variations:
        with pytest.raises(BadRequest) as raised:
            store.query_records(used, STREAM, limit=2, cursor=page.next_cursor, **arguments)
        assert (raised.value.code, raised.value.param) == ("invalid_cursor", "cursor"), arguments


def test_a_bookmark_is_bound_to_grant_and_stream(store: StoreFront) -> None:
    grant = _setup(store)
    walked = store.query_records(grant, STREAM, changes_since="beginning", limit=100)
    bookmark = walked.next_changes_since
    assert bookmark is not None
    assert not walked.has_more
    assert [row.ref.record_id for row in walked.rows] == [f"r{i}" for i in range(5)]
    # another filter or projection may use it; another grant may not
    narrowed = store.query_records(grant, STREAM, changes_since=bookmark, fields=["title"])
    assert narrowed.rows == ()
    other = Grant.from_dict({"grant_id": "g2", "streams": [{"name": STREAM}]})
    with pytest.raises(BadRequest) as raised:
        store.query_records(other, STREAM, changes_since=bookmark)
    assert (raised.value.code, raised.value.param) == ("invalid_cursor", "changes_since")
    page = store.query_records(grant, STREAM, limit=1)
    with pytest.raises(BadRequest):  # a page cursor is no bookmark
        store.query_records(grant, STREAM, changes_since=page.next_cursor)


def test_key_order_when_the_order_field_is_not_granted(store: StoreFront) -> None:
    _setup(store)
    narrow = Grant.from_dict({"grant_id": "k", "streams": [{"name": STREAM, "fields": ["title"]}]})
    page = store.query_records(narrow, STREAM)
    shown = page.to_dict()
    assert shown["order"] == {"field": None, "direction": "desc", "by": "key"}
    assert [row["record_id"] for row in shown["data"]] == [f"r{i}" for i in range(4, -1, -1)]
    assert all(set(row["data"]) == {"title"} for row in shown["data"])
    with pytest.raises(Forbidden):  # a filter on the order field reads it: refused
        store.query_records(narrow, STREAM, filter={"when": {"gte": "2026-01-01"}})


def test_a_page_is_bounded_whatever_the_records_width(store: StoreFront) -> None:
    store.register_manifest(VALUES_MANIFEST)
    store.add_connection("wide", CONNECTOR)
    store.upsert_records(
        "wide",
        STREAM,
        [
            {"id": f"w{i:03}", "title": "x" * 5000, "maybe": "y" * 5000, "when": "2026-03-01"}
            for i in range(100)
        ],
    )
    grant = Grant.from_dict({"grant_id": "w", "streams": [{"name": STREAM}]})
    seen: list[str] = []
    page = store.query_records(grant, STREAM, limit=100)
    while True:
        shown = page.to_dict()
        text = sum(len(json.dumps(row["data"])) for row in shown["data"])
        assert text <= 40 * 1024
        seen += [row["id"] for row in shown["data"]]
        if not page.has_more:
            break
        assert len(shown["data"]) < 100
        page = store.query_records(grant, STREAM, limit=100, cursor=page.next_cursor)
    assert len(seen) == 100 == len(set(seen))
    row = store.query_records(grant, STREAM, limit=1).to_dict()["data"][0]
    assert row["content_ladder"]["title"]["preview_status"] == "truncated"
    assert row["content_ladder"]["title"]["read"]["operation"] == "read_field_window"


def test_a_bookmark_past_the_kept_history_is_cursor_expired(db_url: str) -> None:
    """A bookmark naming a change beyond its connection's current top (the database was
    restored from an older backup) is `cursor_expired` (410), never a silent gap."""
    with Store.open(db_url) as store:
        grant = _setup(store)
        bookmark = store.query_records(grant, STREAM, changes_since="beginning").next_changes_since
        engine = create_engine(sync_url(db_url))
        try:
            with engine.begin() as conn:
                conn.execute(text("UPDATE change_counters SET last_change_seq = 2"))
        finally:
            engine.dispose()
        with pytest.raises(Gone) as raised:
            store.query_records(grant, STREAM, changes_since=bookmark)
        assert (raised.value.code, raised.value.param, raised.value.http_status) == (
            "cursor_expired",
            "changes_since",
            410,
        )
        assert store.query_records(grant, STREAM, changes_since="beginning").rows


@pytest.mark.parametrize("cap", [0, 2000], ids=["walk-the-order-index", "lead-by-the-filter"])
def test_both_plans_of_an_equality_filter_list_the_same_pages(
    store: StoreFront, monkeypatch: pytest.MonkeyPatch, cap: int
) -> None:
    """An equality that few records match leads the page through its value index; one that
    many match is re-checked along the order field's index (`_ops.query.DRIVE_CAP`). Both give
    the oracle's pages, in both orders, across connections and pages."""
    monkeypatch.setattr(query_ops, "DRIVE_CAP", cap)
    store.register_manifest(VALUES_MANIFEST)
    live: dict[tuple[str, str], dict[str, Any]] = {}
    for conn in ("p1", "p2"):
        store.add_connection(conn, CONNECTOR)
        records: list[dict[str, Any]] = [
            {
                "id": f"r{n:02d}",
                "title": "Alice" if n % 3 else "bob",
                "tags": ["a", n % 2],
                **({"when": WHENS[n % len(WHENS)]} if n % 4 else {}),
            }
            for n in range(20)
        ]
        store.upsert_records(conn, STREAM, records)
        live.update({(conn, r["id"]): r for r in records})
    grant_json = {"grant_id": "both", "streams": [{"name": STREAM, "instance_ids": ["p1", "p2"]}]}
    grant = Grant.from_dict(grant_json)
    oracle = _Oracle(grant_json)
    for raw in ({"title": "ALICE"}, {"title": {"in": ["bob", "x"]}}, {"tags": {"has": 1}}):
        parsed = parse_filter(raw, SPEC, grant.stream(STREAM))
        for direction in ("desc", "asc"):
            rows, _ = _walk(store, grant, filter=raw, order=direction, limit=3)
            assert [row["id"] for row in rows] == oracle.ordered(live, parsed, direction)[0]
        one, _ = _walk(store, grant, filter=raw, connection_id="p2", limit=4)
        assert [row["id"] for row in one] == [
            name for name in oracle.ordered(live, parsed, "desc")[0] if name.startswith("p2/")
        ]


def test_an_unknown_field_under_a_grant_of_every_field_is_invalid_filter(store: StoreFront) -> None:
    _setup(store)
    every = Grant.from_dict({"grant_id": "all", "streams": [{"name": STREAM}]})
    for raw in ({"nope": 1}, {"raw": "QUJD"}, {"n": {"gte": 1}}):  # undeclared, binary, no gte
        with pytest.raises(BadRequest) as raised:
            store.query_records(every, STREAM, filter=raw)
        assert (raised.value.code, raised.value.param) == ("invalid_filter", "filter"), raw
