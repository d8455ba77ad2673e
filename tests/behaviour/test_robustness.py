"""Bad input everywhere is a typed error; threads, rotation and manifests changed by another
process behave. Every test runs on every backend (and front where the front matters)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from _data import MAILBOX, body, owner, setup_mailbox
from _fronts import StoreFront, open_front

from pdpp_store import Grant, Store, StoreError

REF = f"{MAILBOX}/message_bodies:e1"
SURROGATE = "\ud800"


def _error(call: Any, *args: Any, **kwargs: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_invalid_unicode_is_a_typed_error_on_every_input(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello")])
    grant = owner()
    calls: dict[str, Any] = {
        "field": lambda: store.read_field_window(grant, REF, "body" + SURROGATE),
        "q": lambda: store.read_field_window(grant, REF, "body_text", q=SURROGATE),
        "record": lambda: store.read_record(grant, f"{MAILBOX}/message_bodies:e{SURROGATE}"),
        "grant": lambda: Grant.from_dict({"grant_id": SURROGATE, "streams": []}),
        "grant fields": lambda: Grant.from_dict(
            {"grant_id": "g", "streams": [{"name": "s", "fields": [SURROGATE]}]}
        ),
        "grant resources": lambda: Grant.from_dict(
            {"grant_id": "g", "streams": [{"name": "s", "resources": ["a\x00"]}]}
        ),
        "connection": lambda: store.add_connection(SURROGATE, "x"),
        "delete": lambda: store.delete_record(MAILBOX, "message_bodies", SURROGATE),
        "blob": lambda: store.blob_info(grant, "blob_sha256_" + SURROGATE),
        "mime": lambda: store.put_blob(b"x", "text/" + SURROGATE),
    }
    for name, call in calls.items():
        error = _error(call)
        assert error.http_status in (400, 404), name


@pytest.mark.parametrize(
    "record",
    [{"id": float("nan")}, {"id": "e1", "deep": [[[[]]]]}, {"id": 1.5e400}],
)
def test_keys_and_values_json_cannot_hold_are_invalid_records(
    store: StoreFront, record: dict[str, Any]
) -> None:
    setup_mailbox(store)
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    if "deep" in record:
        record = {"id": "e1", "deep": deep}
    assert _error(store.upsert_records, MAILBOX, "message_bodies", [record]).code == (
        "invalid_record"
    )


def test_an_in_memory_sqlite_url_is_refused() -> None:
    for url in ("sqlite://", "sqlite:///:memory:"):
        assert _error(Store.open, url).param == "url"


def test_many_threads_do_not_exhaust_the_pool(db_url: str) -> None:
    with Store.open(db_url) as store:
        setup_mailbox(store)
        store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello")])
        errors: list[BaseException] = []

        def read() -> None:
            try:
                store.read_field_window(owner(), REF, "body_text")
            except BaseException as exc:  # collected, asserted below
                errors.append(exc)

        for _ in range(40):  # more threads than the pool has connections, one after another
            thread = threading.Thread(target=read)
            thread.start()
            thread.join()
        crowd = [threading.Thread(target=read) for _ in range(12)]
        for thread in crowd:
            thread.start()
        for thread in crowd:
            thread.join()
        assert errors == []
        assert store.upsert_records(MAILBOX, "message_bodies", [body("e2", "x")]).inserted == 1


def test_cursor_keys_rotated_by_another_store_are_picked_up(db_url: str) -> None:
    first = open_front("sync", db_url)
    second = open_front("sync", db_url)
    try:
        setup_mailbox(first)
        first.upsert_records(MAILBOX, "message_bodies", [body("e1", "x" * 5000)])
        first.rotate_cursor_key()
        window = first.read_field_window(owner(), REF, "body_text", limit_chars=100)
        assert window.next_cursor is not None
        follow = second.read_field_window(owner(), REF, "body_text", cursor=window.next_cursor)
        assert follow.start_chars == 100
    finally:
        first.close()
        second.close()


def test_a_legacy_id_checks_the_resolved_connections_manifest(store: StoreFront) -> None:
    setup_mailbox(store)
    store.register_manifest(
        {"connector_id": "chat", "streams": [{"name": "chats", "primary_key": ["id"]}]}
    )
    store.add_connection("cin_chat", "chat")
    grant = Grant.from_dict(
        {"grant_id": "g", "streams": [{"name": "message_bodies", "instance_ids": ["cin_chat"]}]}
    )
    explicit = _error(store.read_record, grant, "cin_chat/message_bodies:e1")
    legacy = _error(store.read_record, grant, "message_bodies:e1")
    assert explicit.code == legacy.code == "stream_not_declared"
    nobody = Grant.from_dict(
        {"grant_id": "g", "streams": [{"name": "message_bodies", "instance_ids": []}]}
    )
    assert _error(store.read_record, nobody, "message_bodies:e1").code == "connection_not_found"


def test_a_narrow_grant_sees_no_change_to_what_it_does_not_cover(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello")])
    narrow = Grant.from_dict(
        {"grant_id": "g", "streams": [{"name": "message_bodies", "fields": ["id", "charset"]}]}
    )
    before = store.read_record(narrow, REF).to_dict()
    assert "version" not in before
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", "changed, but not granted")])
    assert store.read_record(narrow, REF).to_dict() == before
    store.upsert_records(
        MAILBOX, "message_bodies", [{**body("e1", "changed, but not granted"), "charset": "x"}]
    )
    after = store.read_record(narrow, REF).to_dict()
    assert after["revision"] != before["revision"]
    assert store.read_record(owner(), REF).to_dict()["version"] == 3
