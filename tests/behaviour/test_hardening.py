"""Hardening behaviours that every backend and front must share (issue 10): cursors die with a
narrowed grant however it was built, a `None` field is a bad path, cursor keys can be retired
and forged key ids cost no reload, long inputs are served or refused with a typed limit."""

from __future__ import annotations

import base64
from datetime import timedelta
from typing import Any

import pytest
from _data import MAILBOX, SqlLog, body, ref_id, setup_mailbox
from _fronts import StoreFront, open_front

from pdpp_store import Grant, StoreError
from pdpp_store._core.grants import StreamGrant
from pdpp_store._ops import reads

REF = ref_id("e1")
TEXT = "0123456789" * 50


def _error(call: Any, *args: Any, **kwargs: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        call(*args, **kwargs)
    return caught.value


@pytest.fixture
def loaded(store: StoreFront) -> StoreFront:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", TEXT), body("e2", TEXT)])
    return store


WIDE_FIELDS = frozenset({"body_text", "message_id"})


def _constructed(fields: frozenset[str], resources: frozenset[str] | None = None) -> Grant:
    return Grant("g-same", (StreamGrant("message_bodies", (MAILBOX,), fields, None, resources),))


def _parsed(fields: frozenset[str], resources: frozenset[str] | None = None) -> Grant:
    stream: dict[str, Any] = {
        "name": "message_bodies",
        "instance_ids": [MAILBOX],
        "fields": sorted(fields),
    }
    if resources is not None:
        stream["resources"] = sorted(resources)
    return Grant.from_dict({"grant_id": "g-same", "streams": [stream]})


@pytest.mark.parametrize("narrowing", ["fields", "resources"])
@pytest.mark.parametrize("build", [_constructed, _parsed], ids=["constructor", "from_dict"])
def test_a_narrowed_grant_however_built_invalidates_cursors(
    loaded: StoreFront, build: Any, narrowing: str
) -> None:
    for mint in (_constructed, _parsed):
        window = loaded.read_field_window(
            mint(WIDE_FIELDS), REF, "body_text", offset_chars=0, limit_chars=10
        )
        assert window.next_cursor is not None
        # The same grant, built either way, accepts the cursor ...
        same = build(WIDE_FIELDS)
        assert loaded.read_field_window(same, REF, "body_text", cursor=window.next_cursor).text
        # ... a narrower one with the same id does not.
        narrow = (
            build(frozenset({"body_text"}))
            if narrowing == "fields"
            else build(WIDE_FIELDS, frozenset({"e1"}))
        )
        error = _error(
            loaded.read_field_window, narrow, REF, "body_text", cursor=window.next_cursor
        )
        assert error.code == "invalid_cursor"


@pytest.mark.parametrize("call", ["read_field_window", "describe_field"])
def test_a_missing_field_is_an_invalid_field_path(loaded: StoreFront, call: str) -> None:
    grant = _constructed(WIDE_FIELDS)
    error = _error(getattr(loaded, call), grant, REF, None)
    assert (error.code, error.http_status, error.param) == ("invalid_field_path", 400, "field")


def test_a_grant_given_as_json_is_read_and_anything_else_is_invalid_grant(
    loaded: StoreFront,
) -> None:
    as_json: Any = {"grant_id": "g", "streams": [{"name": "message_bodies"}]}
    assert loaded.read_record(as_json, REF).to_dict()["data"]["body_text"] == TEXT
    bad: Any
    for bad in ([], "g", 5, None, {"grant_id": "g"}):
        assert _error(loaded.read_record, bad, REF).code == "invalid_grant"


# ---------------------------------------------------------------- cursor key retirement


def _forged(cursor: str, key_id: int) -> str:
    data = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    data[1] = key_id
    return base64.urlsafe_b64encode(bytes(data)).rstrip(b"=").decode()


def test_retired_cursor_keys_refuse_their_cursors_after_the_grace_period(
    loaded: StoreFront,
) -> None:
    grant = _constructed(WIDE_FIELDS)
    old = loaded.read_field_window(grant, REF, "body_text", limit_chars=10).next_cursor
    assert old is not None
    loaded.rotate_cursor_key()
    new = loaded.read_field_window(grant, REF, "body_text", limit_chars=10).next_cursor
    assert new is not None
    assert new != old
    # Within the grace period nothing is retired and both keys open their cursors.
    assert loaded.retire_cursor_keys(timedelta(hours=1)) == 0
    assert loaded.read_field_window(grant, REF, "body_text", cursor=old).text
    # Past it, the superseded key goes: its cursors are refused, the active key's are not.
    assert loaded.retire_cursor_keys(timedelta(0)) == 1
    assert _error(loaded.read_field_window, grant, REF, "body_text", cursor=old).code == (
        "invalid_cursor"
    )
    assert loaded.read_field_window(grant, REF, "body_text", cursor=new).text
    assert loaded.retire_cursor_keys(0) == 0  # the active key is never retired
    for bad in (-1, "1 day", None, float("nan"), timedelta(days=-1)):
        assert _error(loaded.retire_cursor_keys, bad).code == "invalid_request"


def test_retirement_by_another_store_is_seen_within_the_key_ttl(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded = open_front("sync", db_url)
    setup_mailbox(loaded)
    loaded.upsert_records(MAILBOX, "message_bodies", [body("e1", TEXT)])
    grant = _constructed(WIDE_FIELDS)
    old = loaded.read_field_window(grant, REF, "body_text", limit_chars=10).next_cursor
    other = open_front("async", db_url)
    try:
        assert other.read_field_window(grant, REF, "body_text", cursor=old).text
        loaded.rotate_cursor_key()
        assert loaded.retire_cursor_keys(timedelta(0)) == 1
        monkeypatch.setattr(reads, "KEYS_TTL_S", 0.0)  # the TTL has passed
        error = _error(other.read_field_window, grant, REF, "body_text", cursor=old)
        assert error.code == "invalid_cursor"
    finally:
        other.close()
        loaded.close()


def test_forged_key_ids_do_not_reload_keys_each_time(loaded: StoreFront) -> None:
    grant = _constructed(WIDE_FIELDS)
    cursor = loaded.read_field_window(grant, REF, "body_text", limit_chars=10).next_cursor
    assert cursor is not None
    with SqlLog(loaded) as log:
        for key_id in range(100, 160):
            error = _error(
                loaded.read_field_window, grant, REF, "body_text", cursor=_forged(cursor, key_id)
            )
            assert error.code == "invalid_cursor"
    reloads = [statement for statement in log.statements if "cursor_keys" in statement]
    assert len(reloads) <= 1, reloads
