"""Discovery (docs/contract.md §11.3) on both databases and both fronts: per granted stream,
what may be asked (filter operators, the order field, aggregations, views) and the figures
(visible record count, the order field's oldest and newest values, the last write), each
counting only what the grant can see."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest
from _data import MAILBOX, OTHER_MAILBOX, grant, manifest, setup_mailbox
from _fronts import StoreFront

from pdpp_store import Grant, GrantSchema, StoreError

MS = "messages"


def message(record_id: str, received_at: Any, **more: Any) -> dict[str, Any]:
    return {
        "id": record_id,
        "thread_id": f"t-{record_id}",
        "subject": f"subject {record_id}",
        "from_name": "Alice",
        "from_email": "alice@example.com",
        "received_at": received_at,
        "labels": ["inbox"],
        "size_bytes": 100,
        **more,
    }


def load(store: StoreFront) -> None:
    setup_mailbox(store, MAILBOX, OTHER_MAILBOX)
    store.upsert_records(
        MAILBOX,
        MS,
        [
            message("m1", "2026-01-05T10:00:00Z"),
            message("m2", "2026-03-01T09:00:00+01:00"),  # 08:00Z
            message("m3", "2026-02-10T00:00:00Z"),
            message("m_bad", "yesterday"),  # no instant: no bound
            message("m_del", "2030-01-01T00:00:00Z"),  # deleted below: never counted
        ],
    )
    store.delete_record(MAILBOX, MS, "m_del")
    store.upsert_records(
        OTHER_MAILBOX, MS, [message("o1", "2019-06-01T00:00:00Z"), message("o2", "2031-01-01")]
    )


def streams_of(schema: GrantSchema) -> dict[str, dict[str, Any]]:
    data = schema.to_dict()
    jsonschema.validate(data, GrantSchema.JSON_SCHEMA)
    return {s["name"]: s for s in data["streams"]}


def _written(value: str | None) -> datetime:
    assert value is not None
    assert value.endswith("Z")
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_what_may_be_asked_under_the_grant(store: StoreFront) -> None:
    load(store)
    narrow = grant(
        {"name": MS, "instance_ids": [MAILBOX], "fields": ["id", "subject", "received_at", "to"]}
    )
    ms = streams_of(store.describe_grant(narrow))[MS]
    assert ms["object"] == "stream"
    assert ms["filters"] == {
        "id": ["eq", "in"],
        "received_at": ["eq", "in", "gt", "gte", "lt", "lte"],
        "subject": ["eq", "in"],
        "to": ["has"],
    }
    assert ms["order"]["field"] == "received_at"
    # aggregations and views name granted fields only; a view with none is left out
    assert ms["aggregations"] == {
        "count": True,
        "min": ["received_at"],
        "max": ["received_at"],
        "group_by_time": ["received_at"],
    }
    assert [v["id"] for v in ms["views"]] == ["envelope", "reconciliation", "full"]
    assert ms["views"][0]["fields"] == ["id", "subject", "to", "received_at"]
    roles = {f["path"]: f["role"] for f in ms["fields"]}
    assert roles == {
        "id": None,
        "received_at": "event-time",
        "subject": "primary-title",
        "to": None,
    }
    named = {
        *ms["filters"],
        *(f["path"] for f in ms["fields"]),
        *(name for names in ms["aggregations"].values() if names is not True for name in names),
        *(name for view in ms["views"] for name in view["fields"]),
    }
    assert named == {"id", "subject", "received_at", "to"}


def test_figures_count_only_visible_records(store: StoreFront) -> None:
    before = datetime.now(UTC)
    load(store)
    after = datetime.now(UTC)
    everything = streams_of(store.describe_grant(grant({"name": MS})))[MS]
    assert everything["record_count"] == 6  # m1 m2 m3 m_bad o1 o2; m_del deleted
    assert everything["order"] == {
        "field": "received_at",
        "oldest": "2019-06-01T00:00:00.000000Z",
        "newest": "2031-01-01T00:00:00.000000Z",
    }
    assert before <= _written(everything["last_written_at"]) <= after

    one = streams_of(store.describe_grant(grant({"name": MS, "instance_ids": [MAILBOX]})))[MS]
    assert one["record_count"] == 4
    assert one["order"]["oldest"] == "2026-01-05T10:00:00.000000Z"
    assert one["order"]["newest"] == "2026-03-01T08:00:00.000000Z"  # not the deleted 2030

    picked = grant({"name": MS, "instance_ids": [MAILBOX], "resources": ["m3", "m_del", "zz"]})
    assert streams_of(store.describe_grant(picked))[MS]["record_count"] == 1

    timed = grant(
        {
            "name": MS,
            "time_constraint": {
                "field": "received_at",
                "since": "2026-02-01T00:00:00Z",
                "until": "2026-12-31T00:00:00Z",
            },
        }
    )
    shown = streams_of(store.describe_grant(timed))[MS]
    assert shown["record_count"] == 2  # m2, m3
    assert (shown["order"]["oldest"], shown["order"]["newest"]) == (
        "2026-02-10T00:00:00.000000Z",
        "2026-03-01T08:00:00.000000Z",
    )

    # the order field not granted: no field named, no bounds; the count stands
    blind = grant({"name": MS, "fields": ["id", "subject"]})
    hidden = streams_of(store.describe_grant(blind))[MS]
    assert hidden["order"] == {"field": None, "oldest": None, "newest": None}
    assert hidden["record_count"] == 6
    # No order value anywhere else either (the write time is the store's clock: its microseconds
    # may spell any four digits, and it is not an order value, so it is left out of the search).
    described = str({key: value for key, value in hidden.items() if key != "last_written_at"})
    assert "2031" not in described
    assert "2019" not in described


def test_the_last_write_is_of_a_visible_record(store: StoreFront) -> None:
    setup_mailbox(store, MAILBOX)
    store.upsert_records(MAILBOX, MS, [message("seen", "2026-01-01T00:00:00Z")])
    only_seen = grant({"name": MS, "resources": ["seen"]})
    first = streams_of(store.describe_grant(only_seen))[MS]["last_written_at"]
    # later writes of records the grant cannot see, and a delete, date nothing
    store.upsert_records(MAILBOX, MS, [message("hidden", "2026-01-02T00:00:00Z")])
    store.upsert_records(MAILBOX, MS, [message("gone", "2026-01-03T00:00:00Z")])
    store.delete_record(MAILBOX, MS, "gone")
    assert streams_of(store.describe_grant(only_seen))[MS]["last_written_at"] == first
    everything = streams_of(store.describe_grant(grant({"name": MS})))[MS]
    assert _written(everything["last_written_at"]) > _written(first)


def test_numeric_order_fields_are_bounded_by_numbers(store: StoreFront) -> None:
    slack = manifest("slack")
    store.register_manifest(slack)
    store.add_connection("cin_slack", slack["connector_id"])
    channel = {"id": "C1", "name": "general", "created": 1700000000, "is_private": False}
    store.upsert_records(
        "cin_slack",
        "channels",
        [channel, {**channel, "id": "C2", "created": 1600000000}, {**channel, "id": "C3"}],
    )
    channels = streams_of(store.describe_grant(grant({"name": "channels"})))["channels"]
    assert channels["order"] == {"field": "created", "oldest": 1600000000, "newest": 1700000000}
    assert channels["record_count"] == 3


def test_one_stream_and_refusals(store: StoreFront) -> None:
    load(store)
    two = grant({"name": MS}, {"name": "attachments"})
    schema = store.describe_grant(two, stream=MS).to_dict()
    assert [s["name"] for s in schema["streams"]] == [MS]
    with pytest.raises(StoreError) as refused:
        store.describe_grant(two, stream="message_bodies")
    assert (refused.value.code, refused.value.http_status) == ("grant_stream_not_allowed", 403)
    with pytest.raises(StoreError) as bad:
        store.describe_grant(two, stream="../x")
    assert (bad.value.http_status, bad.value.param) == (400, "stream")


def test_a_stream_no_connection_declares_counts_nothing(store: StoreFront) -> None:
    load(store)
    ghost = streams_of(store.describe_grant(grant({"name": "no_such_stream"})))["no_such_stream"]
    assert ghost["record_count"] == 0
    assert ghost["last_written_at"] is None
    assert ghost["filters"] == {}
    assert ghost["views"] == []


def _walk(store: StoreFront, asked: Grant, **arguments: Any) -> list[dict[str, Any]]:
    """Every page of `describe_grant`, following each page's `next`."""
    pages: list[dict[str, Any]] = []
    while True:
        page = store.describe_grant(asked, **arguments).to_dict()
        jsonschema.validate(page, GrantSchema.JSON_SCHEMA)
        pages.append(page)
        if page["next"] is None:
            assert page["has_more"] is False
            return pages
        assert page["has_more"] is True
        assert page["next"]["operation"] == "describe_grant"
        arguments = dict(page["next"]["arguments"])
        assert len(pages) < 100


def test_streams_come_a_page_at_a_time(store: StoreFront) -> None:
    """Without `stream`, a page of at most `limit` streams in name order, each described as
    in one answer of every stream; `next` lists those after it, to the last page."""
    load(store)
    names = [MS, "attachments", "message_bodies", *(f"ghost_{n:02d}" for n in range(30))]
    many = grant(*({"name": name} for name in names))
    every = sorted(names)
    whole = store.describe_grant(many, limit=100).to_dict()
    assert [s["name"] for s in whole["streams"]] == every
    assert (whole["has_more"], whole["next"]) == (False, None)
    pages = _walk(store, many, limit=7)
    assert [len(page["streams"]) for page in pages] == [7, 7, 7, 7, 5]
    assert [s for page in pages for s in page["streams"]] == whole["streams"]
    assert pages[0]["next"] == {
        "operation": "describe_grant",
        "arguments": {"after": every[6], "limit": 7},
        "resource_uri": None,
    }
    # the default page is 25 streams, and its `next` says no limit
    first = store.describe_grant(many).to_dict()
    assert [s["name"] for s in first["streams"]] == every[:25]
    assert first["next"]["arguments"] == {"after": every[24]}
    # `after` is a position among names, not one the grant must name
    assert [s.name for s in store.describe_grant(many, after="b").streams] == every[1:26]
    assert store.describe_grant(many, after="zzz").to_dict()["streams"] == []
    # `stream` is one stream, whatever the limit
    assert [s.name for s in store.describe_grant(many, stream=MS, limit=1).streams] == [MS]


def _wide_manifest(fields: int) -> dict[str, Any]:
    properties = {f"f{n:04d}": {"type": "string"} for n in range(fields)}
    properties["id"] = {"type": "string"}
    return {
        "connector_id": "pdpp-test-wide",
        "streams": [
            {"name": name, "primary_key": ["id"], "schema": {"properties": properties}}
            for name in ("wide_a", "wide_b", "wide_c")
        ],
    }


def test_a_page_of_streams_is_bounded_in_size(store: StoreFront) -> None:
    """A page ends before the stream whose schema would take its JSON past the budget (at
    least one stream a page), so one answer stays bounded however wide the manifests are."""
    store.register_manifest(_wide_manifest(1000))
    store.add_connection("cin_wide", "pdpp-test-wide")
    wide = grant({"name": "wide_a"}, {"name": "wide_b"}, {"name": "wide_c"})
    pages = _walk(store, wide)
    assert [[s["name"] for s in page["streams"]] for page in pages] == [
        ["wide_a"],
        ["wide_b"],
        ["wide_c"],
    ]
    for page in pages:
        assert len(page["streams"][0]["fields"]) == 1001
    # narrower streams share a page
    narrow = grant(*({"name": name, "fields": ["id", "f0001"]} for name in ("wide_a", "wide_b")))
    assert [len(page["streams"]) for page in _walk(store, narrow)] == [2]


@pytest.mark.parametrize(
    ("arguments", "param"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 101}, "limit"),
        ({"limit": True}, "limit"),
        ({"limit": "5"}, "limit"),
        ({"limit": None}, "limit"),
        ({"after": ""}, "after"),
        ({"after": "../x"}, "after"),
        ({"after": 3}, "after"),
        ({"after": "a", "stream": MS}, "after"),
    ],
)
def test_bad_paging_arguments_are_typed_errors(
    store: StoreFront, arguments: dict[str, Any], param: str
) -> None:
    load(store)
    with pytest.raises(StoreError) as bad:
        store.describe_grant(grant({"name": MS}), **arguments)
    assert (bad.value.code, bad.value.http_status, bad.value.param) == (
        "invalid_request",
        400,
        param,
    )
