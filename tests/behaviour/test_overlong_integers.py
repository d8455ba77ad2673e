"""An integer too long for Python to print, given to the library (issue 26, item 6): a typed
client error naming the parameter, never the raw `ValueError` (or `OverflowError`) of printing
or converting it. On every database and both fronts."""

from __future__ import annotations

from typing import Any

import pytest
from _data import MAILBOX, body, owner, setup_mailbox
from _fronts import StoreFront

from pdpp_store import StoreError

HUGE = 10**5000
"""Past Python's 4,300-digit limit: `repr(HUGE)` raises `ValueError`."""


def _refusal(call: Any, *args: Any, **kwargs: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call(*args, **kwargs)
    assert 400 <= caught.value.http_status < 500, caught.value
    return caught.value


def test_a_record_whose_field_name_is_an_overlong_integer_is_invalid(store: StoreFront) -> None:
    setup_mailbox(store)
    for name in (HUGE, -HUGE):
        record: dict[Any, Any] = {**body("e1", "hello"), name: "x"}
        error = _refusal(store.upsert_records, MAILBOX, "message_bodies", [record])
        assert (error.code, error.param) == ("invalid_field_path", "field")
        assert "integer of about 5,001 digits" in error.message


def test_an_overlong_grace_period_is_invalid(store: StoreFront) -> None:
    for older_than in (HUGE, -HUGE, 2**1100):
        error = _refusal(store.retire_cursor_keys, older_than)
        assert (error.code, error.param) == ("invalid_request", "older_than")


def test_an_overlong_integer_as_a_blob_id_is_not_found(store: StoreFront) -> None:
    setup_mailbox(store)
    for call, args in (
        (store.blob_info, (owner(), HUGE)),
        (store.read_blob_range, (owner(), HUGE, 0, 1)),
    ):
        error = _refusal(call, *args)
        assert (error.code, error.param) == ("blob_not_found", "blob_id")
