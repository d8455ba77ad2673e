"""Long valid inputs are served, and inputs past a documented limit get a typed 4xx, never a 503
(issue 10, item 3): a grant naming 70,001 `resources`, long ids at the limit and past it."""

from __future__ import annotations

from typing import Any

import pytest
from _data import MAILBOX, body, ref_id, setup_mailbox
from _fronts import StoreFront

from pdpp_store import Grant, StoreError
from pdpp_store._core.identity import MAX_FIELD_PATH_BYTES, MAX_RECORD_ID_BYTES

MANY = 70_001


def _error(call: Any, *args: Any, **kwargs: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call(*args, **kwargs)
    return caught.value


def test_a_grant_with_70001_resources_is_served(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", "hello"), body("e2", "hidden")])
    resources = [f"r{number}" for number in range(MANY - 1)] + ["e1"]
    grant = Grant.from_dict(
        {
            "grant_id": "g-many",
            "streams": [
                {
                    "name": "message_bodies",
                    "instance_ids": [MAILBOX],
                    "fields": ["body_text", *[f"f{n}" for n in range(MANY)]],
                    "resources": resources,
                }
            ],
        }
    )
    assert store.read_record(grant, ref_id("e1")).to_dict()["data"] == {"body_text": "hello"}
    window = store.read_field_window(grant, ref_id("e1"), "body_text", q="ell", before_chars=1)
    assert window.text == "hello"
    assert _error(store.read_record, grant, ref_id("e2")).code == "not_found"


def test_record_ids_up_to_the_limit_are_served_and_longer_are_refused(store: StoreFront) -> None:
    setup_mailbox(store)
    longest = "é" * (MAX_RECORD_ID_BYTES // 2)  # 1,024 bytes of UTF-8
    store.upsert_records(MAILBOX, "message_bodies", [body(longest, "long id")])
    view = store.read_record(Grant.owner(MAILBOX, "message_bodies"), ref_id(longest))
    assert view.to_dict()["data"]["body_text"] == "long id"
    too_long = "x" * 3000
    error = _error(store.upsert_records, MAILBOX, "message_bodies", [body(too_long, "x")])
    assert (error.code, error.http_status) == ("invalid_record", 400)
    error = _error(store.read_record, Grant.owner(MAILBOX, "message_bodies"), ref_id(too_long))
    assert (error.code, error.http_status) == ("invalid_request", 400)


def test_field_paths_up_to_the_limit_are_served_and_longer_are_refused(store: StoreFront) -> None:
    setup_mailbox(store)
    path = "p" * MAX_FIELD_PATH_BYTES
    record = {**body("e1", "x"), path: "at the limit"}
    store.upsert_records(MAILBOX, "message_bodies", [record])
    grant = Grant.owner(MAILBOX, "message_bodies")
    assert store.read_field_window(grant, ref_id("e1"), path).text == "at the limit"
    error = _error(
        store.upsert_records, MAILBOX, "message_bodies", [{**body("e2", "x"), path + "p": "x"}]
    )
    assert (error.code, error.http_status) == ("invalid_field_path", 400)
