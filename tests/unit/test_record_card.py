"""Record cards (§13): slots come only from fields that declare a role and that the grant
covers, never from a field's or a stream's name; every slot is bounded; the wire shape matches
the card's published schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.identity import RecordRef
from pdpp_store._core.manifest import Manifest, StreamSpec
from pdpp_store.evidence import CARDS, CardSlot, RecordCard
from pdpp_store.evidence.card import SLOT_BOUNDS, SLOT_ROLES

MANIFESTS = Path(__file__).resolve().parents[1] / "fixtures" / "manifests"
GMAIL = Manifest.from_dict(json.loads((MANIFESTS / "gmail.json").read_text()))
MESSAGES = GMAIL.spec("messages")
assert MESSAGES is not None
REF = RecordRef("cin_a", "messages", "m:1")
ALL = StreamGrant("messages")
VALIDATOR = Draft202012Validator(RecordCard.JSON_SCHEMA)

EMAIL = {
    "id": "m:1",
    "subject": "Lunch on Friday?",
    "from_name": "Alice",
    "from_email": "alice@example.com",
    "date": "2024-03-01T09:00:00Z",
    "received_at": "2024-03-01T09:00:05Z",
    "snippet": "Are you free",
    "size_bytes": 1234,
}


def _card(fields: dict[str, Any], scope: Any = ALL, spec: StreamSpec = MESSAGES) -> RecordCard:
    card = RecordCard.build(REF, spec, scope, fields)
    VALIDATOR.validate(card.to_dict())
    return card


def test_a_gmail_message_card() -> None:
    card = _card(EMAIL)
    assert card.to_dict() == {
        "object": "record_card",
        "id": "cin_a/messages:m:1",
        "uri": REF.uri,
        "connection_id": "cin_a",
        "stream": "messages",
        "record_id": "m:1",
        "title": {"field": "subject", "value": "Lunch on Friday?", "complete": True},
        # the order field first among the event-time fields (`date` comes first by name)
        "time": {"field": "received_at", "value": "2024-03-01T09:00:05Z", "complete": True},
        "actor": {"field": "from_name", "value": "Alice", "complete": True},
        "secondary": {"field": "snippet", "value": "Are you free", "complete": True},
    }
    assert RecordCard in CARDS


def test_an_ungranted_field_fills_no_slot_and_the_next_declared_one_may() -> None:
    narrow = StreamGrant("messages", fields=frozenset({"id", "date", "snippet"}))
    card = _card(EMAIL, narrow)
    assert set(card.slots) == {"time", "secondary"}
    assert card.time == CardSlot("date", "2024-03-01T09:00:00Z")
    assert "Lunch" not in json.dumps(card.to_dict())


def test_a_null_or_unshowable_value_leaves_the_slot_to_the_next_field() -> None:
    card = _card(EMAIL | {"received_at": None, "subject": {"x": 1}, "from_name": ["Alice"]})
    assert card.time == CardSlot("date", "2024-03-01T09:00:00Z")
    assert card.title is None
    assert card.actor is None


def test_a_binary_field_fills_no_slot() -> None:
    spec = StreamSpec.from_dict(
        {
            "name": "files",
            "primary_key": ["id"],
            "schema": {
                "properties": {
                    "id": {"type": "string"},
                    "raw": {
                        "type": "string",
                        "contentEncoding": "base64",
                        "x_pdpp_role": "primary-title",
                    },
                    "name": {"type": "string", "x_pdpp_role": "primary-title"},
                }
            },
        },
        "streams[0]",
    )
    card = _card({"id": "f", "raw": "aGVsbG8=", "name": "notes.txt"}, spec=spec)
    assert card.title == CardSlot("name", "notes.txt")
    assert _card({"id": "f", "raw": "aGVsbG8="}, spec=spec).slots == {}


def test_a_stream_without_roles_gets_no_slots_whatever_its_field_names() -> None:
    spec = StreamSpec.from_dict(
        {
            "name": "messages",
            "primary_key": ["id"],
            "cursor_field": "time",
            "schema": {
                "properties": {
                    n: {"type": "string"} for n in ("id", "title", "time", "actor", "amount")
                }
            },
        },
        "streams[0]",
    )
    fields = {"id": "m:1", "title": "T", "time": "2024-01-01", "actor": "A", "amount": "9"}
    card = _card(fields, spec=spec)
    assert card.slots == {}
    assert set(card.to_dict()) == {"object", "id", "uri", "connection_id", "stream", "record_id"}


def test_amounts_and_booleans_show_whole_and_long_text_is_cut() -> None:
    spec = StreamSpec.from_dict(
        {
            "name": "payments",
            "primary_key": ["id"],
            "schema": {
                "properties": {
                    "id": {"type": "string"},
                    "memo": {"type": "string", "x_pdpp_role": "primary-title"},
                    "total": {"type": "number", "x_pdpp_role": "amount"},
                    "paid": {"type": "boolean", "x_pdpp_role": "secondary"},
                }
            },
        },
        "streams[0]",
    )
    card = _card({"id": "p", "memo": "é" * 250, "total": 12.5, "paid": False}, spec=spec)
    assert card.title == CardSlot("memo", "é" * 200, complete=False)
    assert card.amount == CardSlot("total", 12.5)
    assert card.secondary == CardSlot("paid", False)
    assert _card({"id": "p", "total": float("nan")}, spec=spec).amount is None


ROLE_NAMES = ["primary-title", "event-time", "actor", "secondary", "amount", "media", None]
FIELD_NAMES = [f"f{i}" for i in range(6)]
VALUES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=400)
    | st.lists(st.integers(), max_size=2)
)


@given(
    roles=st.fixed_dictionaries({n: st.sampled_from(ROLE_NAMES) for n in FIELD_NAMES}),
    granted=st.sets(st.sampled_from(FIELD_NAMES)) | st.none(),
    fields=st.dictionaries(st.sampled_from(FIELD_NAMES), VALUES),
)
@settings(max_examples=300)
def test_slots_never_show_an_ungranted_or_roleless_field_and_stay_bounded(
    roles: dict[str, str | None], granted: set[str] | None, fields: dict[str, Any]
) -> None:
    properties: dict[str, Any] = {n: {"x_pdpp_role": r} if r else {} for n, r in roles.items()}
    spec = StreamSpec.from_dict(
        {"name": "s", "primary_key": ["f0"], "schema": {"properties": properties}}, "streams[0]"
    )
    scope = StreamGrant("s", fields=None if granted is None else frozenset(granted))
    card = _card(fields, scope, spec)
    for name, slot in card.slots.items():
        assert roles[slot.field] == SLOT_ROLES[name]
        assert granted is None or slot.field in granted
        if isinstance(slot.value, str):
            assert len(slot.value) <= SLOT_BOUNDS[name]
            assert slot.complete == (slot.value == fields[slot.field])
        else:
            assert slot.value == fields[slot.field]
            assert slot.complete
    # A slot is empty only when no granted field of its role has a showable value.
    for name, role in SLOT_ROLES.items():
        if getattr(card, name) is None:
            for path in FIELD_NAMES:
                if roles[path] == role and (granted is None or path in granted):
                    value = fields.get(path)
                    assert value is None or isinstance(value, list)
