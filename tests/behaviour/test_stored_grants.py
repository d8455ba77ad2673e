"""Grants kept in the store (docs/contract.md §14): add, list, revoke, and the refusal of a
revoked or expired stored grant (a `Grant` obtained from the store) by every read operation on
the very next call, on both databases and both fronts, and from another process's store as well
(no restart, no cache). A grant the caller builds is judged by its own terms alone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from _data import MAILBOX, body, ref_id, setup_mailbox
from _fronts import StoreFront, open_front

from pdpp_store import (
    CATALOGUE,
    BadRequest,
    Conflict,
    Forbidden,
    Grant,
    NotFound,
    Store,
    StoredGrant,
)

STREAM = "message_bodies"


def _grant(grant_id: str = "g-stored", **extra: Any) -> Grant:
    return Grant.from_dict(
        {"grant_id": grant_id, "streams": [{"name": STREAM, "instance_ids": [MAILBOX]}], **extra}
    )


def _filled(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, STREAM, [body("e1", "an invoice is overdue")])


def test_a_grant_added_is_listed_and_reads_until_revoked(store: StoreFront) -> None:
    _filled(store)
    kept = store.add_grant(_grant())
    assert isinstance(kept, StoredGrant)
    assert kept.status == "active"
    assert kept.revoked_at is None
    assert kept.to_dict()["grant"] == _grant().to_dict()
    assert [g.grant_id for g in store.list_grants()] == ["g-stored"]
    assert [g.grant_id for g in store.list_grants("g-stored")] == ["g-stored"]
    assert store.list_grants("g-nobody") == []

    stored = kept.grant
    assert stored.stored
    assert store.read_record(stored, ref_id("e1")).to_dict()["record_id"] == "e1"
    revoked = store.revoke_grant("g-stored")
    assert revoked.status == "revoked"
    assert revoked.revoked_at is not None
    with pytest.raises(Forbidden) as refused:
        store.read_record(stored, ref_id("e1"))
    assert refused.value.code == "grant_revoked"
    with pytest.raises(Forbidden):  # as listed, too
        store.read_record(store.list_grants("g-stored")[0].grant, ref_id("e1"))
    # A grant the caller builds is its own: its terms, not the store, govern it.
    assert store.read_record(_grant(), ref_id("e1")).to_dict()["record_id"] == "e1"
    assert refused.value.http_status == 403
    (listed,) = store.list_grants()
    assert listed.status == "revoked"
    assert listed.revoked_at == revoked.revoked_at
    # Revoking again changes nothing.
    assert store.revoke_grant("g-stored").revoked_at == revoked.revoked_at


def test_the_grant_as_json_is_kept_too(store: StoreFront) -> None:
    kept = store.add_grant(_grant("g-json").to_dict())
    assert kept.grant == _grant("g-json")


def test_adding_the_same_terms_again_is_idempotent_and_other_terms_conflict(
    store: StoreFront,
) -> None:
    first = store.add_grant(_grant())
    assert store.add_grant(_grant()).created_at == first.created_at
    wider = Grant.from_dict({"grant_id": "g-stored", "streams": [{"name": STREAM}]})
    with pytest.raises(Conflict) as clash:
        store.add_grant(wider)
    assert clash.value.code == "grant_exists"
    assert clash.value.param == "grant_id"
    store.revoke_grant("g-stored")
    with pytest.raises(Conflict):  # a revoked id is never reused, not even for the same terms
        store.add_grant(_grant())
    assert len(store.list_grants()) == 1


def test_bad_arguments_are_typed_errors(store: StoreFront) -> None:
    with pytest.raises(NotFound) as unknown:
        store.revoke_grant("g-nobody")
    assert unknown.value.code == "grant_not_found"
    assert unknown.value.param == "grant_id"
    for bad in ("", None, 7, "a\x00b"):
        with pytest.raises(BadRequest) as refused:
            store.revoke_grant(bad)  # type: ignore[arg-type]
        assert refused.value.param == "grant_id"
    for bad_grant in ({"grant_id": "x"}, "g", None, {"grant_id": "", "streams": []}):
        with pytest.raises(BadRequest) as invalid:
            store.add_grant(bad_grant)  # type: ignore[arg-type]
        assert invalid.value.code == "invalid_grant"
    assert store.list_grants() == []


def test_an_expired_stored_grant_is_refused_and_listed_expired(store: StoreFront) -> None:
    _filled(store)
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    store.add_grant(_grant("g-old", expires_at=past))
    (listed,) = store.list_grants()
    assert listed.status == "expired"
    with pytest.raises(Forbidden) as refused:
        store.search(listed.grant, "invoice")
    assert refused.value.code == "grant_expired"


def test_a_grant_the_store_does_not_hold_reads_by_its_own_terms(store: StoreFront) -> None:
    _filled(store)
    store.add_grant(_grant("g-other"))
    store.revoke_grant("g-other")
    assert store.search(_grant("g-inline"), "invoice").to_dict()["data"]


def _arguments(name: str, grant: Grant) -> list[Any]:
    samples = {
        "grant": grant,
        "record": ref_id("e1"),
        "field": "body_text",
        "string": "x",
        "integer": 1,
        "strings": [STREAM],
        "object": {},
    }
    return [samples[a.type] for a in CATALOGUE[name].arguments if a.required]


GRANTED_READS = sorted(
    name
    for name, op in CATALOGUE.items()
    if op.kind == "read" and any(a.type == "grant" for a in op.arguments)
)


def test_every_read_under_a_grant_refuses_a_revoked_stored_grant(store: StoreFront) -> None:
    """Every catalogued read that takes a grant: a new read operation that forgot the check
    fails here."""
    _filled(store)
    stored = store.add_grant(_grant()).grant
    store.revoke_grant("g-stored")
    assert len(GRANTED_READS) >= 8
    for name in GRANTED_READS:
        with pytest.raises(Forbidden) as refused:
            getattr(store, name)(*_arguments(name, stored))
        assert refused.value.code == "grant_revoked", name


@pytest.mark.parametrize("front", ["sync", "async"])
def test_revocation_by_another_store_is_seen_on_the_next_call(db_url: str, front: str) -> None:
    """A server's store and the owner's (another process, another connection): the serving
    store refuses on its very next read, with no reopening."""
    serving = open_front(front, db_url)  # type: ignore[arg-type]
    try:
        _filled(serving)
        with Store.open(db_url) as owner:
            owner.add_grant(_grant())
        stored = serving.list_grants("g-stored")[0].grant
        for _ in range(3):  # connections kept between reads see it too
            serving.read_field_window(stored, ref_id("e1"), "body_text", limit_chars=10)
        with Store.open(db_url) as owner:
            owner.revoke_grant("g-stored")
        with pytest.raises(Forbidden) as refused:
            serving.read_field_window(stored, ref_id("e1"), "body_text", limit_chars=10)
        assert refused.value.code == "grant_revoked"
    finally:
        serving.close()


def test_grant_json_round_trips() -> None:
    full = Grant.from_dict(
        {
            "grant_id": "g-full",
            "expires_at": "2030-01-01T00:00:00+02:00",
            "status": "active",
            "streams": [
                {
                    "name": STREAM,
                    "instance_ids": [MAILBOX, "cin_b"],
                    "fields": ["body_text", "id"],
                    "resources": ["e2", "e1"],
                    "time_constraint": {"field": "received_at", "since": "2026-01-01"},
                },
                {"name": "attachments"},
            ],
        }
    )
    assert Grant.from_dict(full.to_dict()) == full
    assert full.to_dict()["expires_at"] == "2029-12-31T22:00:00.000000Z"
