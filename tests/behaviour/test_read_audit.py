"""The read audit (docs/contract.md §14), on both databases and both fronts: every read under a
grant is recorded once, with who asked, what was asked and what was served (ids, counts, field
paths, outcome), never a field value; refusals are recorded with their code; entries are
written in the background and on close; the owner lists them by grant and time, pages through
them and prunes them; bad arguments are typed errors naming the argument.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from _data import MAILBOX, body, grant, ref_id, setup_mailbox
from _fronts import FRONTS, Front, StoreFront, open_front
from sqlalchemy import create_engine, select

from pdpp_store import AuditEntry, BadRequest, RecordRef, StoreError, audit_context
from pdpp_store._sql.tables import read_audit

STREAM = "message_bodies"
CANARY = "kakapocanary7731"
SECOND = "takahesecret5520"


def _grant(grant_id: str = "g-audit") -> object:
    return grant({"name": STREAM, "instance_ids": [MAILBOX]}, grant_id=grant_id)


def _filled(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(
        MAILBOX,
        STREAM,
        [
            body("e1", f"an invoice {CANARY} is overdue"),
            body("e2", f"the invoice was paid {SECOND}", "2026-03-02T10:00:00Z"),
        ],
    )


def _entries(store: StoreFront, **filters: object) -> list[AuditEntry]:
    return list(store.list_audit(**filters))  # type: ignore[arg-type]


def test_every_read_is_recorded_with_what_was_asked_and_served(store: StoreFront) -> None:
    _filled(store)
    g = _grant()
    store.read_record(g, ref_id("e1"))  # type: ignore[arg-type]
    store.read_field_window(g, ref_id("e1"), "body_text", limit_chars=10)  # type: ignore[arg-type]
    store.describe_field(g, ref_id("e2"), "body_text")  # type: ignore[arg-type]
    store.search(g, "invoice", filter={"message_id": "m-e1"})  # type: ignore[arg-type]
    page = store.query_records(g, STREAM, limit=1)  # type: ignore[arg-type]
    store.query_records(g, STREAM, limit=1, cursor=page.next_cursor)  # type: ignore[arg-type]
    store.aggregate(g, STREAM)  # type: ignore[arg-type]
    store.describe_grant(g)  # type: ignore[arg-type]
    store.read_resource(g, RecordRef(MAILBOX, STREAM, "e2").uri)  # type: ignore[arg-type]
    entries = _entries(store)
    by_op = [(e.operation, e.outcome) for e in entries]
    assert by_op == [
        ("read_record", "ok"),
        ("read_field_window", "ok"),
        ("describe_field", "ok"),
        ("search", "ok"),
        ("query_records", "ok"),
        ("query_records", "ok"),
        ("aggregate", "ok"),
        ("describe_grant", "ok"),
        ("read_resource", "ok"),
    ]
    record, window, described, search, first, second, aggregate, schema, resource = entries
    assert {e.grant_id for e in entries} == {"g-audit"}
    assert {e.surface for e in entries} == {"library"}
    assert record.record_ids == (f"{MAILBOX}/{STREAM}:e1",)
    assert record.record_count == 1
    assert record.stream == STREAM
    assert record.connection_id == MAILBOX
    assert "body_text" in record.fields
    assert window.record_ids == (f"{MAILBOX}/{STREAM}:e1",)
    assert window.fields == ("body_text",)
    assert window.terms == {"record": ref_id("e1"), "field": "body_text", "limit_chars": 10}
    assert described.record_ids == (f"{MAILBOX}/{STREAM}:e2",)
    assert described.fields == ("body_text",)
    assert search.terms == {"q": "invoice", "filter": {"message_id": "m-e1"}}
    assert search.record_count == len(search.record_ids) >= 1
    assert first.record_count == 1
    assert first.terms == {"stream": STREAM, "limit": 1}
    assert second.terms == {"stream": STREAM, "limit": 1, "cursor": "<given>"}
    assert first.record_ids != second.record_ids
    assert aggregate.record_count == 0
    assert aggregate.record_ids == ()
    assert schema.operation == "describe_grant"
    assert schema.record_ids == ()
    assert resource.record_ids == (f"{MAILBOX}/{STREAM}:e2",)
    assert entries == sorted(entries, key=lambda e: e.audit_id)
    assert all(e.at <= datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") for e in entries)
    text = json.dumps([e.to_dict() for e in entries])
    assert CANARY not in text
    assert SECOND not in text


def test_refusals_are_recorded_with_their_code(store: StoreFront) -> None:
    _filled(store)
    g = _grant()
    with pytest.raises(StoreError) as missing:
        store.read_record(g, ref_id("nope"))  # type: ignore[arg-type]
    with pytest.raises(StoreError) as undeclared:
        store.query_records(g, "no_such_stream")  # type: ignore[arg-type]
    with pytest.raises(StoreError) as bad:
        store.search(g, "invoice", limit=0)  # type: ignore[arg-type]
    entries = _entries(store)
    assert [(e.operation, e.outcome) for e in entries] == [
        ("read_record", missing.value.code),
        ("query_records", undeclared.value.code),
        ("search", bad.value.code),
    ]
    assert entries[0].record_ids == ()
    assert entries[0].record_count == 0
    assert entries[0].stream == STREAM
    assert entries[0].connection_id == MAILBOX
    assert entries[1].stream == "no_such_stream"
    assert entries[2].terms == {"q": "invoice", "limit": 0}


def test_the_surface_request_and_client_are_recorded(store: StoreFront) -> None:
    _filled(store)
    with audit_context("rest", request_id="req_abc", client="agent-1"):
        store.read_record(_grant(), ref_id("e1"))  # type: ignore[arg-type]
        with audit_context("mcp"):  # inherits the request and the client
            store.read_record(_grant(), ref_id("e2"))  # type: ignore[arg-type]
    store.read_record(_grant(), ref_id("e2"))  # type: ignore[arg-type]
    got = [(e.surface, e.request_id, e.client) for e in _entries(store)]
    assert got == [
        ("rest", "req_abc", "agent-1"),
        ("mcp", "req_abc", "agent-1"),
        ("library", None, None),
    ]


def test_filters_by_grant_and_time_and_paging(store: StoreFront) -> None:
    _filled(store)
    for grant_id in ("g-a", "g-b", "g-a"):
        store.read_record(_grant(grant_id), ref_id("e1"))  # type: ignore[arg-type]
    everything = _entries(store)
    assert [e.grant_id for e in everything] == ["g-a", "g-b", "g-a"]
    assert [e.grant_id for e in _entries(store, grant_id="g-a")] == ["g-a", "g-a"]
    assert _entries(store, grant_id="g-nobody") == []
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    past = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    assert _entries(store, since=future) == []
    assert len(_entries(store, since=past, until=future)) == 3
    assert _entries(store, until=past) == []
    first = _entries(store, limit=2)
    rest = _entries(store, after_id=first[-1].audit_id)
    assert [e.audit_id for e in first + rest] == [e.audit_id for e in everything]


def test_prune_deletes_only_entries_older_than_asked(store: StoreFront) -> None:
    _filled(store)
    store.read_record(_grant(), ref_id("e1"))  # type: ignore[arg-type]
    store.read_record(_grant(), ref_id("e2"))  # type: ignore[arg-type]
    assert len(_entries(store)) == 2
    assert store.prune_audit(3600) == 0
    assert len(_entries(store)) == 2
    time.sleep(0.01)
    assert store.prune_audit(timedelta(0)) == 2
    assert _entries(store) == []


@pytest.mark.parametrize(
    ("arguments", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"after_id": -1}, "after_id"),
        ({"since": "yesterday"}, "since"),
        ({"until": 17}, "until"),
        ({"grant_id": ""}, "grant_id"),
    ],
)
def test_bad_list_arguments_are_typed_errors(
    store: StoreFront, arguments: dict[str, object], param: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        store.list_audit(**arguments)  # type: ignore[arg-type]
    assert refused.value.param == param


@pytest.mark.parametrize("older_than", [-1, "a day", float("nan"), None])
def test_bad_prune_arguments_are_typed_errors(store: StoreFront, older_than: object) -> None:
    with pytest.raises(BadRequest) as refused:
        store.prune_audit(older_than)  # type: ignore[arg-type]
    assert refused.value.param == "older_than"


def test_a_bad_surface_is_a_typed_error() -> None:
    with pytest.raises(BadRequest) as refused, audit_context("email"):
        pass
    assert refused.value.param == "surface"


@pytest.mark.parametrize("front", FRONTS)
def test_entries_are_written_on_close(db_url: str, front: Front) -> None:
    reader = open_front(front, db_url)
    try:
        _filled(reader)
        for _ in range(30):
            reader.read_record(_grant(), ref_id("e1"))  # type: ignore[arg-type]
    finally:
        reader.close()  # well within the writer's second: close writes what waits
    owner = open_front(front, db_url)
    try:
        entries = _entries(owner)
    finally:
        owner.close()
    assert len(entries) == 30
    assert {e.record_ids for e in entries} == {(f"{MAILBOX}/{STREAM}:e1",)}


def _written(url: str) -> list[str]:
    """The operations of the entries in the table, read as another process would (a plain
    SELECT: it neither flushes anything nor waits for a writer)."""
    engine = create_engine(url.replace("sqlite+aiosqlite", "sqlite"))
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(select(read_audit.c.operation))]
    finally:
        engine.dispose()


@pytest.mark.parametrize("front", FRONTS)
def test_entries_are_written_in_the_background_within_the_bound(db_url: str, front: Front) -> None:
    reader = open_front(front, db_url)
    try:
        _filled(reader)
        reader.read_record(_grant(), ref_id("e1"))  # type: ignore[arg-type]
        assert _written(db_url) == []  # the read did not write its entry itself
        deadline = time.monotonic() + 10
        seen: list[str] = []
        while not seen and time.monotonic() < deadline:
            if front == "async":  # the async writer runs on the adapter's loop: give it turns
                reader.list_grants()
            time.sleep(0.1)
            seen = _written(db_url)
        assert seen == ["read_record"]
    finally:
        reader.close()


@pytest.mark.parametrize("front", FRONTS)
def test_a_store_opened_without_audit_records_nothing(db_url: str, front: Front) -> None:
    quiet = open_front(front, db_url, audit=False)
    try:
        _filled(quiet)
        quiet.read_record(_grant(), ref_id("e1"))  # type: ignore[arg-type]
        assert _entries(quiet) == []
    finally:
        quiet.close()
