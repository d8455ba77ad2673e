"""Search hits carry their record card (docs/contract.md §9 and §13), on every front and both
databases: the card `read_record` and `query_records` show for the same record under the same
grant, slots only from the declared-role fields the grant covers, each bounded; no slots for a
stream that declares no role; and the cards of a whole page read in one statement, so a page of
ten hits costs the statements a page of one does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from _data import MAILBOX, body, grant, manifest, owner, setup_mailbox
from _fronts import StoreFront
from audit import BoundaryAudit

from pdpp_store import Grant

MS, MB = "messages", "message_bodies"
LONG_TITLE = "Ünïcode 😀 kumquat " * 30  # 540 code points: its title slot is cut to 200


def _message(record_id: str, day: int, **fields: Any) -> dict[str, Any]:
    return {
        "id": record_id,
        "thread_id": f"t-{record_id}",
        "subject": f"Kumquat invoice {record_id}",
        "from_name": f"Zoë {record_id}",
        "received_at": f"2026-03-{day:02d}T10:00:00Z",
        "snippet": "the kumquat ledger is overdue",
        "size_bytes": 2048,
        "labels": [],
        **fields,
    }


def _load(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, MS, [_message(f"m{n}", n + 1) for n in range(10)])
    store.upsert_records(MAILBOX, MB, [body("b1", LONG_TITLE)])


def _hits(store: StoreFront, who: Grant, q: str, **options: Any) -> list[dict[str, Any]]:
    page = store.search(who, q, **options).to_dict()
    hits: list[dict[str, Any]] = page["data"]
    for hit in hits:
        card = hit["card"]
        assert (card["object"], card["id"]) == ("record_card", hit["id"])
        assert (card["connection_id"], card["stream"], card["record_id"]) == (
            hit["connection_id"],
            hit["stream"],
            hit["record_key"],
        )
    return hits


def test_a_hit_carries_the_card_read_record_and_query_records_show(store: StoreFront) -> None:
    _load(store)
    both = grant({"name": MS}, {"name": MB})
    hits = _hits(store, both, "kumquat", limit=50)
    assert len(hits) == 11
    rows = {row["id"]: row for row in store.query_records(both, MS, limit=50).to_dict()["data"]}
    for hit in hits:
        card = hit["card"]
        assert card == store.read_record(both, hit["id"]).to_dict()["card"]
        if hit["stream"] == MS:
            row = rows[hit["id"]]
            assert {slot: row[slot] for slot in card if slot in row} == card
            assert card["title"]["value"] == f"Kumquat invoice {hit['record_key']}"
            assert card["actor"]["field"] == "from_name"
            day = int(hit["record_key"][1:]) + 1
            assert card["time"] == {
                "field": "received_at",
                "value": f"2026-03-{day:02d}T10:00:00Z",
                "complete": True,
            }
            assert card["secondary"]["value"] == "the kumquat ledger is overdue"
        else:
            title = {"field": "body_text", "value": LONG_TITLE[:200], "complete": False}
            assert card["title"] == title


def test_a_card_shows_only_the_fields_the_grant_covers(store: StoreFront) -> None:
    _load(store)
    narrow = grant({"name": MS, "fields": ["id", "snippet"]})
    hits = _hits(store, narrow, "kumquat")
    assert hits
    for hit in hits:
        card = hit["card"]
        assert "title" not in card
        assert "actor" not in card
        assert "time" not in card  # received_at and date are not granted either
        assert card["secondary"]["field"] == "snippet"
    dated = grant({"name": MS, "fields": ["id", "snippet", "date"]})
    store.upsert_records(MAILBOX, MS, [_message("dated", 20, date="Fri, 20 Mar 2026")])
    hits = _hits(store, dated, "kumquat", limit=50)
    assert len(hits) == 11
    for hit in hits:
        slots = {slot["field"] for slot in hit["card"].values() if isinstance(slot, dict)}
        assert slots == ({"snippet", "date"} if hit["record_key"] == "dated" else {"snippet"})


def test_a_stream_declaring_no_role_gets_no_slots(store: StoreFront) -> None:
    _load(store)
    plain = {
        **_without_roles(manifest("gmail")),
        "connector_id": "gmail-without-roles",
    }
    store.register_manifest(plain)
    store.add_connection("cin_plain", plain["connector_id"])
    store.upsert_records("cin_plain", MB, [body("p1", "no roles declared, kumquat")])
    (hit,) = _hits(store, owner(MB, "cin_plain"), "kumquat")
    identity = {"object", "id", "uri", "connection_id", "stream", "record_id"}
    assert set(hit["card"]) == identity  # nothing guessed from a field's name


def _without_roles(document: Any) -> Any:
    if isinstance(document, dict):
        return {k: _without_roles(v) for k, v in document.items() if k != "x_pdpp_role"}
    if isinstance(document, list):
        return [_without_roles(item) for item in document]
    return document


def _statements(store: StoreFront, read: Callable[[], object]) -> int:
    with BoundaryAudit(store.engine) as audit:
        read()
    return len(audit.statements)


def test_a_page_s_cards_cost_one_statement_whatever_its_size(store: StoreFront) -> None:
    _load(store)
    messages = grant({"name": MS})
    store.search(messages, "kumquat")  # the catalogue, cached
    one = _statements(store, lambda: store.search(messages, "m3"))
    ten = _statements(store, lambda: store.search(messages, "kumquat", limit=10))
    assert len(_hits(store, messages, "m3")) == 1
    assert len(_hits(store, messages, "kumquat", limit=10)) == 10
    assert ten == one
    # the same page where the stream declares no role asks nothing for its cards
    plain = {**_without_roles(manifest("gmail")), "connector_id": "gmail-without-roles"}
    store.register_manifest(plain)
    store.add_connection("cin_plain", plain["connector_id"])
    store.upsert_records("cin_plain", MS, [_message(f"m{n}", n + 1) for n in range(10)])
    declared, bare = Grant.owner(MAILBOX, MS), Grant.owner("cin_plain", MS)
    store.search(bare, "kumquat")  # the catalogue, cached
    with_slots = _statements(store, lambda: store.search(declared, "kumquat"))
    without = _statements(store, lambda: store.search(bare, "kumquat"))
    assert without == with_slots - 1
