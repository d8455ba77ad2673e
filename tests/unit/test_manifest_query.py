"""What a manifest says may be asked of a stream (§11, §12, §13): cursor and order field, range
filters, aggregations, views and roles, read from the real manifests and from malformed ones
(a malformed optional declaration is ignored, never an error), and kept through storage."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pdpp_store._core.errors import BadRequest
from pdpp_store._core.manifest import Aggregations, Manifest, StreamSpec, View

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"


def _manifest(name: str) -> Manifest:
    return Manifest.from_dict(json.loads((MANIFESTS / f"{name}.json").read_text()))


def _spec(manifest: str, stream: str) -> StreamSpec:
    spec = _manifest(manifest).spec(stream)
    assert spec is not None
    return spec


def _stream(**extra: Any) -> StreamSpec:
    """A small stream with a few typed properties and whatever `extra` declares."""
    data: dict[str, Any] = {
        "name": "items",
        "primary_key": ["id"],
        "schema": {
            "properties": {
                "id": {"type": "string"},
                "at": {"type": ["string", "null"], "format": "date-time"},
                "n": {"type": "integer"},
                "ok": {"type": "boolean"},
                "tags": {"type": "array"},
                "file": {"type": "object", "properties": {"blob_id": {"type": "string"}}},
            }
        },
    }
    data.update(extra)
    return StreamSpec.from_dict(data, "streams[0]")


def test_gmail_messages_declares_what_may_be_asked() -> None:
    spec = _spec("gmail", "messages")
    assert spec.cursor_field == "received_at"
    assert spec.order_field == "received_at"
    assert spec.range_filters == {
        "received_at": ("gt", "gte", "lt", "lte"),
        "date": ("gt", "gte", "lt", "lte"),
        "size_bytes": ("gt", "gte", "lt", "lte"),
    }
    assert spec.aggregations == Aggregations(
        count=True,
        sum=("size_bytes",),
        min=("received_at", "date", "size_bytes"),
        max=("received_at", "date", "size_bytes"),
        group_by=("has_attachments", "is_seen", "is_flagged", "is_answered", "is_draft"),
        group_by_time=("received_at", "date"),
    )
    assert [view.id for view in spec.views] == ["envelope", "reconciliation", "full"]
    assert spec.views[0].label == "Envelope only (no snippet)"
    assert "snippet" not in spec.views[0].fields
    assert spec.declared["subject"].role == "primary-title"
    assert spec.declared["date"].format == "date-time"
    assert spec.fields_with_role("event-time") == ("date", "received_at")
    assert spec.fields_with_role("actor") == ("from_name",)
    assert spec.declared["id"].role is None
    assert spec.declares_roles


def test_the_order_field_falls_back_from_cursor_to_consent_to_event_time() -> None:
    # chatgpt messages: a cursor field and no event-time role.
    assert _spec("chatgpt", "messages").order_field == "create_time"
    # gmail message_bodies: no cursor field, a consent time field.
    assert _spec("gmail", "message_bodies").order_field == "message_received_at"
    # slack channel_memberships: neither, one field declares event-time.
    assert _spec("slack", "channel_memberships").order_field == "fetched_at"
    # gmail labels: nothing at all.
    labels = _spec("gmail", "labels")
    assert labels.order_field is None
    assert labels.range_filters == {}
    assert labels.aggregations == Aggregations()
    assert _stream(cursor_field="n", consent_time_field="at").order_field == "n"
    assert _stream(consent_time_field="at").order_field == "at"
    first = _stream(
        schema={
            "properties": {
                "b": {"type": "string", "x_pdpp_role": "event-time"},
                "a": {"type": "string", "x_pdpp_role": "event-time"},
            }
        }
    )
    assert first.order_field == "a"  # by name: a stored manifest has its keys sorted


def test_every_real_declaration_names_declared_properties() -> None:
    for name in ("gmail", "slack", "chatgpt"):
        for spec in _manifest(name).streams:
            named = [
                *spec.range_filters,
                *(f for view in spec.views for f in view.fields),
                *(
                    f
                    for key in ("sum", "min", "max", "group_by", "group_by_time")
                    for f in spec.aggregations.fields_for(key)
                ),
            ]
            assert set(named) <= set(spec.declared), (name, spec.name)
            if spec.cursor_field is not None:
                assert spec.cursor_field in spec.declared


@pytest.mark.parametrize(
    "extra",
    [
        {"cursor_field": 3},
        {"cursor_field": "missing"},
        {"cursor_field": "file"},  # a blob reference orders nothing
        {"query": "all"},
        {"query": {"range_filters": ["n"]}},
        {"query": {"range_filters": {"n": "gte"}}},
        {"query": {"range_filters": {"n": ["between"]}}},
        {"query": {"range_filters": {"missing": ["gte"]}}},
        {"query": {"range_filters": {"ok": ["gte"]}}},  # a boolean has no range
        {"query": {"range_filters": {"tags": ["gte"]}}},
        {"query": {"range_filters": {"file": ["gte"]}}},
        {"query": {"aggregations": {"count": "yes", "sum": "n", "min": [1, "missing"]}}},
        {"query": {"aggregations": []}},
        {"views": {"id": "v"}},
        {"views": [{"id": 1, "fields": ["n"]}, {"fields": ["n"]}, {"id": "v", "fields": "n"}]},
    ],
)
def test_a_malformed_declaration_declares_nothing(extra: dict[str, Any]) -> None:
    spec = _stream(**extra)
    assert spec.cursor_field is None
    assert spec.range_filters == {}
    assert spec.aggregations == Aggregations()
    assert spec.views == ()


def test_a_declaration_keeps_what_is_well_formed() -> None:
    spec = _stream(
        cursor_field="at",
        query={
            "range_filters": {"n": ["lte", "between", "gt", "gt"], "missing": ["gte"]},
            "aggregations": {"count": True, "sum": ["n", "missing", "n"], "group_by": ["ok", 2]},
        },
        views=[
            {"id": "v", "label": 7, "fields": ["n", "missing", "file"]},
            {"id": "v", "fields": ["at"]},
            "junk",
        ],
    )
    assert spec.cursor_field == "at"
    assert spec.range_filters == {"n": ("gt", "lte")}
    assert spec.aggregations == Aggregations(count=True, sum=("n",), group_by=("ok",))
    assert spec.aggregations.to_json() == {"count": True, "sum": ["n"], "group_by": ["ok"]}
    assert spec.views == (View("v", None, ("n", "file")),)


def test_a_view_keeps_binary_fields_and_questions_do_not() -> None:
    spec = _stream(
        views=[{"id": "v", "fields": ["id", "file"]}],
        query={"aggregations": {"count_distinct": ["file", "n"]}},
    )
    assert spec.views == (View("v", None, ("id", "file")),)
    assert spec.aggregations.count_distinct == ("n",)


def test_an_unknown_role_is_no_role() -> None:
    spec = _stream(
        schema={
            "properties": {
                "a": {"type": "string", "x_pdpp_role": "headline"},
                "b": {"type": "string", "x_pdpp_role": ["actor"]},
                "c": {"type": "string", "x_pdpp_role": "actor"},
            }
        }
    )
    assert [spec.declared[n].role for n in "abc"] == [None, None, "actor"]


def test_the_declarations_round_trip_through_the_stored_document() -> None:
    for name in ("gmail", "slack", "chatgpt"):
        manifest = _manifest(name)
        again = Manifest.from_json(manifest.document)
        assert again == manifest
        assert again.streams == manifest.streams


def test_a_spec_from_its_stored_row_alone_declares_nothing_to_ask() -> None:
    spec = StreamSpec("items", ("id",), "at", {})
    assert spec.cursor_field is None
    assert spec.order_field == "at"
    assert spec.range_filters == {}
    assert spec.aggregations == Aggregations()
    assert spec.views == ()
    assert not spec.declares_roles


def test_a_document_stored_before_these_declarations_still_loads() -> None:
    old = {
        "connector_id": "https://example.com/c",
        "streams": [{"name": "s", "primary_key": ["id"]}],
    }
    spec = Manifest.from_json(json.dumps(old)).streams[0]
    assert spec.order_field is None
    assert spec.range_filters == {}
    assert spec.views == ()


@pytest.mark.parametrize(
    "changes",
    [{"cursor_field": ""}, {"range_filters": {"n": ("between",)}}, {"views": ("v",)}],
)
def test_a_spec_built_directly_checks_its_declarations(changes: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"name": "s", "primary_key": ("id",), "consent_time_field": None}
    with pytest.raises(BadRequest) as raised:
        StreamSpec(**fields, hints={}, **changes)
    assert raised.value.code == "invalid_manifest"
