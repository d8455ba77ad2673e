"""Grants (docs/contract.md §2, "Grants"): `Grant.from_dict` validation (pure, no database), then
enforcement through every read operation of the store, on every front.

Enforcement is checked from the outside: a record hidden by a grant term must read exactly like a
missing one (same code, status, param and message apart from the id), on every read path
(`read_record`, `describe_field`, offset / match / cursor windows, resource URIs), because each
path is its own SQL statement and each must carry the grant's terms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from _data import (
    MAILBOX,
    OTHER_MAILBOX,
    RECORD_TABLES,
    SqlLog,
    attachment,
    body,
    grant,
    manifest,
    ref_id,
    setup_mailbox,
)
from _fronts import StoreFront

from pdpp_store import (
    BadRequest,
    FieldWindowRef,
    Forbidden,
    Grant,
    RecordRef,
    StoreError,
    TimeConstraint,
)

BODIES = "message_bodies"
SECRET = "TOPSECRET-7f3a-body"
"""Content of the field a grant does not cover; it must never surface in an error."""


def _grant_dict(**terms: Any) -> dict[str, Any]:
    return {"grant_id": "g-1", "streams": [{"name": BODIES, **terms}]}


def _invalid(data: object) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        Grant.from_dict(data)
    assert caught.value.code == "invalid_grant"
    assert caught.value.http_status == 400
    return caught.value


# ================================================================ Grant.from_dict (pure)


@pytest.mark.parametrize(
    ("data", "param"),
    [
        ([], "grant"),
        ("g-1", "grant"),
        (None, "grant"),
        ({"streams": []}, "grant_id"),
        ({"grant_id": "", "streams": []}, "grant_id"),
        ({"grant_id": 7, "streams": []}, "grant_id"),
        ({"grant_id": "g-1"}, "streams"),
        ({"grant_id": "g-1", "streams": None}, "streams"),
        ({"grant_id": "g-1", "streams": {"name": BODIES}}, "streams"),
        ({"grant_id": "g-1", "streams": [BODIES]}, "streams[0]"),
        ({"grant_id": "g-1", "streams": [{}]}, "streams[0].name"),
        ({"grant_id": "g-1", "streams": [{"name": ""}]}, "streams[0].name"),
        ({"grant_id": "g-1", "streams": [{"name": 3}]}, "streams[0].name"),
        ({"grant_id": "g-1", "streams": [{"name": BODIES}, {"nom": "x"}]}, "streams[1].name"),
        (_grant_dict(instance_ids=MAILBOX), "streams[0].instance_ids"),
        (_grant_dict(instance_ids=[MAILBOX, 3]), "streams[0].instance_ids"),
        (_grant_dict(instance_ids=[""]), "streams[0].instance_ids"),
        (_grant_dict(instance_ids={"a": 1}), "streams[0].instance_ids"),
        (_grant_dict(fields="body_text"), "streams[0].fields"),
        (_grant_dict(fields=[None]), "streams[0].fields"),
        (_grant_dict(fields=[""]), "streams[0].fields"),
        (_grant_dict(fields=[["body_text"]]), "streams[0].fields"),
        (_grant_dict(resources="e1"), "streams[0].resources"),
        (_grant_dict(resources=[1]), "streams[0].resources"),
        (_grant_dict(resources=[""]), "streams[0].resources"),
        (_grant_dict(time_constraint="2026-03-01"), "streams[0].time_constraint"),
        (_grant_dict(time_constraint=[]), "streams[0].time_constraint"),
        (_grant_dict(time_constraint={}), "streams[0].time_constraint.field"),
        (_grant_dict(time_constraint={"field": ""}), "streams[0].time_constraint.field"),
        (_grant_dict(time_constraint={"field": 3}), "streams[0].time_constraint.field"),
        (
            _grant_dict(time_constraint={"field": "message_received_at", "since": "yesterday"}),
            "streams[0].time_constraint.since",
        ),
        (
            _grant_dict(time_constraint={"field": "message_received_at", "since": 1772359200}),
            "streams[0].time_constraint.since",
        ),
        (
            _grant_dict(time_constraint={"field": "message_received_at", "since": ""}),
            "streams[0].time_constraint.since",
        ),
        (
            _grant_dict(
                time_constraint={"field": "message_received_at", "until": "2026-02-30T00:00:00Z"}
            ),
            "streams[0].time_constraint.until",
        ),
        (
            _grant_dict(time_constraint={"field": "message_received_at", "until": True}),
            "streams[0].time_constraint.until",
        ),
        ({**_grant_dict(), "status": 3}, "status"),
        ({**_grant_dict(), "expires_at": "soon"}, "expires_at"),
        ({**_grant_dict(), "expires_at": 1772359200}, "expires_at"),
    ],
)
def test_malformed_grant_is_invalid_grant_naming_the_param(data: object, param: str) -> None:
    error = _invalid(data)
    assert error.param == param
    assert param in error.message
    assert error.to_dict()["error"]["param"] == param


def test_a_stream_granted_twice_is_invalid_grant() -> None:
    twice = {
        "grant_id": "g-1",
        "streams": [{"name": BODIES, "fields": ["id"]}, {"name": BODIES, "fields": ["body_text"]}],
    }
    error = _invalid(twice)
    assert error.param == "streams"
    assert BODIES in error.message


def test_fields_absent_or_null_means_all_and_empty_means_none() -> None:
    for terms in ({}, {"fields": None}):
        stream = Grant.from_dict(_grant_dict(**terms)).stream(BODIES)
        assert stream.fields is None
        assert stream.allows_field("body_text")
        assert stream.allows_field("any field at all")
    none = Grant.from_dict(_grant_dict(fields=[])).stream(BODIES)
    assert none.fields == frozenset()
    assert not none.allows_field("id")
    some = Grant.from_dict(_grant_dict(fields=["id", "Unicode 名", "id.with.dot"])).stream(BODIES)
    assert some.allows_field("Unicode 名")
    assert some.allows_field("id.with.dot")
    assert not some.allows_field("id.with")
    assert not some.allows_field("ID")


def test_absent_instance_ids_and_resources_mean_all() -> None:
    stream = Grant.from_dict(_grant_dict()).stream(BODIES)
    assert stream.instance_ids is None
    assert stream.resources is None
    assert stream.covers_connection("anything")
    empty = Grant.from_dict(_grant_dict(instance_ids=[], resources=[])).stream(BODIES)
    assert not empty.covers_connection(MAILBOX)
    assert empty.resources == frozenset()


def _bounds(**constraint: Any) -> TimeConstraint:
    data = _grant_dict(time_constraint={"field": "message_received_at", **constraint})
    found = Grant.from_dict(data).stream(BODIES).time_constraint
    assert found is not None
    return found


def _instant(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text)


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("2026-03-01T12:00:00+02:00", datetime(2026, 3, 1, 10, tzinfo=UTC)),
        ("2026-03-01T10:00:00Z", datetime(2026, 3, 1, 10, tzinfo=UTC)),
        ("2026-03-01T10:00:00.000000+00:00", datetime(2026, 3, 1, 10, tzinfo=UTC)),
        ("2026-03-01T05:30:00-04:30", datetime(2026, 3, 1, 10, tzinfo=UTC)),
        ("2026-03-01", datetime(2026, 3, 1, tzinfo=UTC)),
        ("2026-03-02T01:00:00+02:00", datetime(2026, 3, 1, 23, tzinfo=UTC)),
    ],
)
def test_time_bounds_are_normalised_to_utc_instants(given: str, meant: datetime) -> None:
    bounds = _bounds(since=given, until=given)
    assert _instant(bounds.since) == meant
    assert _instant(bounds.until) == meant
    assert _instant(bounds.since).utcoffset() == UTC.utcoffset(None)
    # Equal instants give equal bounds, whatever their spelling (one comparable form).
    canonical = meant.isoformat()
    assert bounds == _bounds(since=canonical, until=canonical)


def test_time_bounds_are_optional() -> None:
    assert _bounds().since is None
    assert _bounds().until is None
    assert _bounds(since=None, until=None) == _bounds()
    assert _bounds(until="2026-03-02").since is None


def test_grant_expiry_and_status() -> None:
    def refusal(**extra: Any) -> Forbidden:
        usable = Grant.from_dict({**_grant_dict(), **extra})  # well formed: refused on use
        with pytest.raises(Forbidden) as caught:
            usable.ensure_usable()
        assert caught.value.http_status == 403
        return caught.value

    assert refusal(expires_at="2020-01-01T00:00:00Z").code == "grant_expired"
    assert refusal(expires_at="2020-01-01").code == "grant_expired"
    assert refusal(expires_at="2026-01-01T00:00:00+14:00").code == "grant_expired"
    assert refusal(status="revoked").code == "grant_revoked"
    assert refusal(status="expired").code == "grant_expired"
    assert refusal(status="revoked", expires_at="2999-01-01T00:00:00Z").code == "grant_revoked"

    Grant.from_dict({**_grant_dict(), "expires_at": "2999-01-01T00:00:00+02:00"}).ensure_usable()
    Grant.from_dict({**_grant_dict(), "status": "active"}).ensure_usable()
    Grant.from_dict({**_grant_dict(), "expires_at": None, "status": None}).ensure_usable()


# ================================================================ enforcement through the store

Read = Callable[[StoreFront, Grant, str, str], object]

READS: dict[str, Read] = {
    "read_record": lambda store, g, rid, field: store.read_record(g, rid),
    "describe_field": lambda store, g, rid, field: store.describe_field(g, rid, field),
    "window_offset": lambda store, g, rid, field: store.read_field_window(
        g, rid, field, offset_chars=0, limit_chars=8
    ),
    "window_match": lambda store, g, rid, field: store.read_field_window(g, rid, field, q="hello"),
    "resource_record": lambda store, g, rid, field: store.read_resource(g, _ref(rid).uri),
    "resource_window": lambda store, g, rid, field: store.read_resource(
        g, FieldWindowRef(_ref(rid), field, 0, 8).uri
    ),
}
"""Every read path that names one record (the cursor path is checked where a cursor exists)."""


def _ref(rid: str) -> RecordRef:
    connection_id, rest = rid.split("/", 1)
    stream, record_id = rest.split(":", 1)
    return RecordRef(connection_id, stream, record_id)


def _error(call: Callable[[], object]) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call()
    return caught.value


def _outcomes(
    store: StoreFront,
    g: Grant,
    rid: str,
    field: str = "body_text",
    paths: Iterable[str] = READS,
) -> dict[str, str]:
    """Each read path's result: "ok" or the error's code."""
    found: dict[str, str] = {}
    for name in paths:
        try:
            READS[name](store, g, rid, field)
        except StoreError as exc:
            found[name] = exc.code
        else:
            found[name] = "ok"
    return found


def _all(code: str) -> dict[str, str]:
    return dict.fromkeys(READS, code)


def _envelope_without(error: StoreError, *names: str) -> dict[str, Any]:
    """The error's wire envelope with the given ids blanked out of its message."""
    envelope = error.to_dict()
    for name in names:
        envelope["error"]["message"] = envelope["error"]["message"].replace(name, "<ID>")
    return envelope


def _assert_reads_like_missing(
    store: StoreFront, g: Grant, hidden: str, missing: str, code: str = "not_found"
) -> None:
    """`hidden` (exists, but outside the grant) is refused exactly like `missing` on every path."""
    assert _outcomes(store, g, hidden) == _all(code)
    for name, read in READS.items():
        seen = _error(partial(read, store, g, hidden, "body_text"))
        absent = _error(partial(read, store, g, missing, "body_text"))
        assert type(seen) is type(absent), name
        assert seen.http_status == absent.http_status == 404, name
        assert _envelope_without(seen, hidden, _ref(hidden).connection_id) == _envelope_without(
            absent, missing, _ref(missing).connection_id
        ), name


def _mailbox(store: StoreFront, *records: dict[str, Any], connection_id: str = MAILBOX) -> None:
    store.upsert_records(connection_id, BODIES, list(records))


def test_field_outside_fields_is_refused_before_any_record_row_is_read(
    store: StoreFront,
) -> None:
    setup_mailbox(store)
    _mailbox(store, body("e1", f"hello {SECRET}"))
    g = grant({"name": BODIES, "instance_ids": [MAILBOX], "fields": ["id", "message_id"]})
    reads: dict[str, Read] = {
        "describe_field": READS["describe_field"],
        "window_offset": READS["window_offset"],
        "window_match": READS["window_match"],
        "resource_window": READS["resource_window"],
        "window_cursor": lambda store, g, rid, field: store.read_field_window(
            g, rid, field, cursor="AAAA"
        ),
    }
    for name, read in reads.items():
        envelopes = []
        for rid in (ref_id("e1"), ref_id("no-such-record")):
            with SqlLog(store) as log:
                error = _error(partial(read, store, g, rid, "body_text"))
            assert isinstance(error, Forbidden), name
            assert (error.code, error.http_status, error.param) == (
                "field_not_granted",
                403,
                "field",
            ), name
            assert "body_text" in error.message
            assert SECRET not in str(error.to_dict())
            assert log.touching(*RECORD_TABLES) == [], f"{name} read a record row first"
            envelopes.append(_envelope_without(error, "e1", "no-such-record"))
        # The same answer whether or not the record exists: no existence leak.
        assert envelopes[0] == envelopes[1], name
    # The log is not blind: a granted read of the same record is seen touching record tables.
    with SqlLog(store) as log:
        store.describe_field(g, ref_id("e1"), "id")
    assert log.touching(*RECORD_TABLES)


def test_granted_fields_only(store: StoreFront) -> None:
    setup_mailbox(store)
    _mailbox(store, body("e1", "hello there"))
    rid = ref_id("e1")
    some = grant({"name": BODIES, "fields": ["id", "body_text"]})
    assert set(store.read_record(some, rid).to_dict()["data"]) == {"id", "body_text"}
    assert store.read_field_window(some, rid, "body_text").text == "hello there"
    assert _error(lambda: store.describe_field(some, rid, "charset")).code == "field_not_granted"

    nothing = grant({"name": BODIES, "fields": []})
    view = store.read_record(nothing, rid).to_dict()
    assert (view["data"], view["content_ladder"]) == ({}, {})
    for field in ("id", "body_text"):
        error = _error(partial(store.read_field_window, nothing, rid, field))
        assert error.code == "field_not_granted"

    for everything in (grant({"name": BODIES}), grant({"name": BODIES, "fields": None})):
        data = store.read_record(everything, rid).to_dict()["data"]
        assert set(data) == set(body("e1", "x"))
        assert store.describe_field(everything, rid, "charset").size_chars == len("utf-8")


def test_stream_outside_the_grant_is_refused(store: StoreFront) -> None:
    setup_mailbox(store)
    _mailbox(store, body("e1", "hello"))
    g = grant({"name": "messages", "instance_ids": [MAILBOX]})
    for rid in (ref_id("e1"), ref_id("no-such-record")):
        assert _outcomes(store, g, rid) == _all("grant_stream_not_allowed")
        error = _error(partial(store.read_record, g, rid))
        assert isinstance(error, Forbidden)
        assert (error.http_status, error.param) == (403, "stream")
        assert BODIES in error.message


def test_connection_outside_instance_ids_reads_like_a_missing_connection(
    store: StoreFront,
) -> None:
    setup_mailbox(store, MAILBOX, OTHER_MAILBOX)
    _mailbox(store, body("e1", "hello mine"))
    _mailbox(store, body("e1", "hello theirs"), connection_id=OTHER_MAILBOX)
    g = grant({"name": BODIES, "instance_ids": [MAILBOX]})
    uncovered, missing = ref_id("e1", OTHER_MAILBOX), ref_id("e1", "cin_nowhere")
    _assert_reads_like_missing(store, g, uncovered, missing, "connection_not_found")
    error = _error(lambda: store.read_record(g, uncovered))
    assert (error.http_status, error.param) == (404, "connection_id")
    # The legacy form with an explicit connection is the same read.
    legacy = _error(lambda: store.read_record(g, "message_bodies:e1", connection_id=OTHER_MAILBOX))
    assert legacy.to_dict() == error.to_dict()

    assert store.read_field_window(g, ref_id("e1"), "body_text").text == "hello mine"
    everywhere = grant({"name": BODIES})
    assert store.read_field_window(everywhere, uncovered, "body_text").text == "hello theirs"
    nowhere = grant({"name": BODIES, "instance_ids": []})
    assert _outcomes(store, nowhere, ref_id("e1")) == _all("connection_not_found")


def test_connection_of_another_connector_outside_the_grant_reads_like_a_missing_one(
    store: StoreFront,
) -> None:
    """A connection outside `instance_ids` must not reveal that it exists, nor which connector
    it belongs to, even when its manifest does not declare the stream asked for."""
    setup_mailbox(store)
    slack = manifest("slack")
    store.register_manifest(slack)
    store.add_connection("cin_slack", slack["connector_id"])
    g = grant({"name": BODIES, "instance_ids": [MAILBOX]})
    uncovered, missing = ref_id("e1", "cin_slack"), ref_id("e1", "cin_nowhere")
    _assert_reads_like_missing(store, g, uncovered, missing, "connection_not_found")


def test_record_outside_resources_reads_like_a_missing_record(store: StoreFront) -> None:
    setup_mailbox(store)
    _mailbox(store, body("e1", "hello one"), body("e2", "hello two"), body("e:3", "hello three"))
    g = grant({"name": BODIES, "instance_ids": [MAILBOX], "resources": ["e1", "e:3"]})
    assert _outcomes(store, g, ref_id("e1")) == _all("ok")
    assert _outcomes(store, g, ref_id("e:3")) == _all("ok")
    _assert_reads_like_missing(store, g, ref_id("e2"), ref_id("e4"))
    error = _error(lambda: store.read_record(g, ref_id("e2")))
    assert (error.code, error.http_status, error.param) == ("not_found", 404, "record")
    nothing = grant({"name": BODIES, "resources": []})
    assert _outcomes(store, nothing, ref_id("e:3")) == _all("not_found")


# Records for the time-constraint tests: name -> message_received_at (the gmail bodies stream's
# consent_time_field); "<absent>" leaves the key out.
TIMES: dict[str, object] = {
    "at_since": "2026-03-01T10:00:00Z",
    "before_since": "2026-03-01T09:59:59.999999Z",
    "before_until": "2026-03-01T23:59:59.999999Z",
    "at_until": "2026-03-02T00:00:00Z",
    # With offsets: equal to since; before it yet "after" as a string; inside yet "after" until.
    "offset_at_since": "2026-03-01T12:00:00+02:00",
    "offset_before": "2026-03-01T11:00:00+02:00",
    "offset_inside": "2026-03-02T01:00:00+02:00",
    "offset_negative": "2026-03-01T19:00:00-05:00",
    "date_only": "2026-03-01",
    "absent": "<absent>",
    "null": None,
    "numeric": 1772359200,
    "numeric_float": 1772359200.5,
    "malformed": "yesterday",
    "impossible": "2026-02-30T12:00:00Z",
    "object": {"at": "2026-03-01T12:00:00Z"},
}

_UNTIMED = {"absent", "null", "numeric", "numeric_float", "malformed", "impossible", "object"}
"""Values that are not an ISO-8601 instant: outside every time constraint (fail closed)."""


def _timed_record(name: str, value: object) -> dict[str, Any]:
    record = body(name, f"hello from {name}")
    if value == "<absent>":
        del record["message_received_at"]
    else:
        record["message_received_at"] = value
    return record


def _time_grant(**bounds: str) -> Grant:
    return grant(
        {
            "name": BODIES,
            "instance_ids": [MAILBOX],
            "fields": ["id", "body_text"],  # the time field itself need not be granted
            "time_constraint": {"field": "message_received_at", **bounds},
        }
    )


TIME_CASES: list[tuple[dict[str, str], set[str]]] = [
    (
        {"since": "2026-03-01T10:00:00Z", "until": "2026-03-02T00:00:00Z"},
        {"at_since", "before_until", "offset_at_since", "offset_inside"},
    ),
    (
        # The same instants, spelled with an offset and as a date.
        {"since": "2026-03-01T12:00:00+02:00", "until": "2026-03-02"},
        {"at_since", "before_until", "offset_at_since", "offset_inside"},
    ),
    (
        {"since": "2026-03-01", "until": "2026-03-01T10:00:00Z"},
        {"before_since", "offset_before", "date_only"},
    ),
    (
        {"until": "2026-03-01T10:00:00.000001Z"},
        {"at_since", "before_since", "offset_at_since", "offset_before", "date_only"},
    ),
    (
        {"since": "2026-03-02T00:00:00Z"},
        {"at_until", "offset_negative"},
    ),
    (
        {},  # a constraint without bounds still needs a valid instant
        {name for name in TIMES if name not in _UNTIMED},
    ),
]
"""(bounds, the records of `TIMES` visible under them)."""


def test_time_constraint(store: StoreFront) -> None:
    """`since` inclusive, `until` exclusive, compared as instants (offsets normalised); values
    that are missing, null, numeric or not an instant fail closed; hidden reads like missing."""
    setup_mailbox(store)
    _mailbox(store, *(_timed_record(name, value) for name, value in TIMES.items()))
    for number, (bounds, visible) in enumerate(TIME_CASES):
        g = _time_grant(**bounds)
        # Every read path for the first case; two paths (the record preview statement, and the
        # field statement plus match scan) for the others.
        paths = READS if number == 0 else ("read_record", "window_match")
        for name in TIMES:
            expected = "ok" if name in visible else "not_found"
            found = _outcomes(store, g, ref_id(name), paths=paths)
            assert found == dict.fromkeys(paths, expected), (bounds, name)
    g = _time_grant(**TIME_CASES[0][0])
    for hidden in ("before_since", "absent"):
        _assert_reads_like_missing(store, g, ref_id(hidden), ref_id("no-such-record"))


def test_time_constraint_follows_the_record_as_it_changes(store: StoreFront) -> None:
    setup_mailbox(store)
    _mailbox(store, body("e1", "hello", "2026-03-01T10:00:00Z"))
    g = _time_grant(since="2026-03-01T00:00:00Z", until="2026-03-02T00:00:00Z")
    assert _outcomes(store, g, ref_id("e1")) == _all("ok")
    window = store.read_field_window(g, ref_id("e1"), "body_text", limit_chars=2)
    assert window.next_cursor is not None
    _mailbox(store, body("e1", "hello", "2026-04-01T10:00:00Z"))
    assert _outcomes(store, g, ref_id("e1")) == _all("not_found")
    # A cursor minted while the record was visible is no way around the constraint.
    by_cursor = _error(
        partial(store.read_field_window, g, ref_id("e1"), "body_text", cursor=window.next_cursor)
    )
    assert by_cursor.code == "not_found"
    _mailbox(store, _timed_record("e1", None))
    assert _outcomes(store, g, ref_id("e1")) == _all("not_found")
    _mailbox(store, body("e1", "hello", "2026-03-01T23:00:00-01:00"))  # 2026-03-02T00:00Z
    assert _outcomes(store, g, ref_id("e1")) == _all("not_found")
    _mailbox(store, body("e1", "hello", "2026-03-01T23:00:00+01:00"))
    assert _outcomes(store, g, ref_id("e1")) == _all("ok")


def test_soft_deleted_record_reads_as_not_found(store: StoreFront) -> None:
    setup_mailbox(store)
    _mailbox(store, body("e1", "hello"), body("e2", "hello too"))
    owner_like = grant({"name": BODIES, "instance_ids": [MAILBOX]})
    window = store.read_field_window(owner_like, ref_id("e1"), "body_text", limit_chars=2)
    store.delete_record(MAILBOX, BODIES, "e1")
    _assert_reads_like_missing(store, owner_like, ref_id("e1"), ref_id("e9"))
    by_cursor = _error(
        partial(
            store.read_field_window,
            owner_like,
            ref_id("e1"),
            "body_text",
            cursor=window.next_cursor,
        )
    )
    assert by_cursor.code == "not_found"
    assert _outcomes(store, owner_like, ref_id("e2")) == _all("ok")
    _mailbox(store, body("e1", "hello again"))  # re-ingesting brings it back
    assert store.read_field_window(owner_like, ref_id("e1"), "body_text").text == "hello again"


UNUSABLE: list[tuple[dict[str, str], str]] = [
    ({"expires_at": "2020-01-01T00:00:00Z"}, "grant_expired"),
    ({"status": "expired"}, "grant_expired"),
    ({"status": "revoked"}, "grant_revoked"),
]


def test_unusable_grant_is_refused_on_every_read(store: StoreFront) -> None:
    setup_mailbox(store)
    blob = store.put_blob(b"attachment bytes", "application/pdf")
    store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])
    _mailbox(store, body("e1", "hello"))
    live = grant({"name": BODIES}, {"name": "attachments"})
    assert store.blob_info(live, blob.blob_id) == blob
    assert _outcomes(store, live, ref_id("e1")) == _all("ok")
    window = store.read_field_window(live, ref_id("e1"), "body_text", limit_chars=1)
    assert window.next_cursor is not None

    for terms, code in UNUSABLE:
        dead = grant({"name": BODIES}, {"name": "attachments"}, **terms)
        for rid in (ref_id("e1"), ref_id("no-such-record")):
            assert _outcomes(store, dead, rid) == _all(code), terms
        calls: dict[str, Callable[[], object]] = {
            "cursor": partial(
                store.read_field_window, dead, ref_id("e1"), "body_text", cursor=window.next_cursor
            ),
            "blob_info": partial(store.blob_info, dead, blob.blob_id),
            "read_blob_range": partial(store.read_blob_range, dead, blob.blob_id, 0, 4),
        }
        for name, call in calls.items():
            error = _error(call)
            assert isinstance(error, Forbidden), (terms, name)
            assert (error.code, error.http_status) == (code, 403), (terms, name)
