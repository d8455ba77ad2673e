"""The record card at the head of `read_record` (docs/contract.md §13), on every front and both
databases: slots from the fields that declare a role and that the grant covers, each bounded,
whatever page of fields the projection shows; no slots for a stream that declares no role; and no
statement of its own once the stream is known, unless the page lacks a role field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _data import MAILBOX, body, grant, manifest, owner, ref_id, setup_mailbox
from _fronts import StoreFront
from audit import BoundaryAudit

LONG_TITLE = "Ünïcode 😀 " * 40  # 400 code points: cut to 200
MESSAGE = {
    "id": "m1",
    "thread_id": "t1",
    "subject": "Invoice März",
    "from_name": "Zoë Example",
    "received_at": "2026-03-01T10:00:00Z",
    "snippet": "the kumquat ledger is overdue",
    "size_bytes": 2048,
    "labels": [],
}


def _load(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "messages", [MESSAGE])
    store.upsert_records(MAILBOX, "message_bodies", [body("b1", LONG_TITLE)])


def _card(store: StoreFront, who: Any, record: str, **options: Any) -> dict[str, Any]:
    view = store.read_record(who, record, **options).to_dict()
    card: dict[str, Any] = view["card"]
    assert (card["object"], card["id"], card["uri"]) == ("record_card", view["id"], view["uri"])
    return card


def test_the_card_shows_the_declared_roles_the_grant_covers(store: StoreFront) -> None:
    _load(store)
    message = ref_id("m1", stream="messages")
    card = _card(store, owner("messages"), message)
    assert card["title"] == {"field": "subject", "value": "Invoice März", "complete": True}
    assert card["actor"] == {"field": "from_name", "value": "Zoë Example", "complete": True}
    assert card["time"]["value"] == "2026-03-01T10:00:00Z"
    assert card["secondary"]["value"] == "the kumquat ledger is overdue"
    narrow = grant({"name": "messages", "fields": ["id", "snippet"]})
    card = _card(store, narrow, message)
    assert "title" not in card  # never an ungranted field
    assert "actor" not in card
    assert card["secondary"]["field"] == "snippet"


def test_a_title_is_cut_to_its_bound_from_any_page(store: StoreFront) -> None:
    _load(store)
    record = ref_id("b1")
    cut = {"field": "body_text", "value": LONG_TITLE[:200], "complete": False}
    assert _card(store, owner(), record)["title"] == cut
    # pages that do not show the title field still carry it
    assert _card(store, owner(), record, fields=["charset"])["title"] == cut
    assert _card(store, owner(), record, after_field="body_text")["title"] == cut


def _without_roles(document: Any) -> Any:
    if isinstance(document, dict):
        return {k: _without_roles(v) for k, v in document.items() if k != "x_pdpp_role"}
    if isinstance(document, list):
        return [_without_roles(item) for item in document]
    return document


def test_no_slots_without_a_covered_role(store: StoreFront) -> None:
    _load(store)
    narrow = grant({"name": "message_bodies", "fields": ["id", "charset"]})
    identity = {"object", "id", "uri", "connection_id", "stream", "record_id"}
    assert set(_card(store, narrow, ref_id("b1"))) == identity
    plain = {**_without_roles(manifest("gmail")), "connector_id": "gmail-without-roles"}
    store.register_manifest(plain)
    store.add_connection("cin_plain", plain["connector_id"])
    store.upsert_records("cin_plain", "message_bodies", [body("p1", "no roles declared here")])
    card = _card(store, owner(connection_id="cin_plain"), ref_id("p1", connection_id="cin_plain"))
    assert set(card) == identity  # nothing guessed from a field's name


def _statements(store: StoreFront, read: Callable[[], object]) -> int:
    with BoundaryAudit(store.engine) as audit:
        read()
    return len(audit.statements)


def test_the_card_costs_a_statement_only_when_its_page_lacks_a_role_field(
    store: StoreFront,
) -> None:
    _load(store)
    record = ref_id("b1")
    store.read_record(owner(), record)  # the stream is known, its manifest parsed
    assert _statements(store, lambda: store.read_record(owner(), record)) == 1
    narrowed = _statements(store, lambda: store.read_record(owner(), record, fields=["charset"]))
    assert narrowed == 2
