"""Cursors in the store (docs/contract.md §4, "Revisions and cursors"), on every backend and
front: paging with them, what they are bound to, staleness, and their keys (kept in the database,
configured, rotated).

The cursor codec itself (token layout, strict decoding) is tested without a database in
`test_cursor.py`.
"""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest
from _data import (
    MAILBOX,
    OTHER_MAILBOX,
    assert_store_error,
    assert_window,
    body,
    grant,
    mixed_text,
    owner,
    ref_id,
    setup_mailbox,
    sha256_of,
)
from _fronts import FRONTS, StoreFront, open_front

from pdpp_store import CursorCodec, CursorKey, Grant, StoreError
from pdpp_store._core.cursor import cursor_binding

BODY = "body_text"
OWNER = owner()
TEXT = mixed_text(10_000, seed=21)
"""Some ten chunks of text mixing ASCII, accents, CJK, combining marks and astral characters."""
URL_SAFE = re.compile(r"[A-Za-z0-9_-]+")
CLAMPED = {"code": "limit_clamped", "param": "limit_chars"}
SECRET_A = b"secret A, at least sixteen bytes"
SECRET_B = b"secret B, at least sixteen bytes"


def _read(
    store: StoreFront, record: str = "e1", field: str = BODY, g: Grant = OWNER, **args: Any
) -> dict[str, Any]:
    envelope: dict[str, Any] = store.read_field_window(g, _ref(record), field, **args).to_dict()
    return envelope


def _error(
    store: StoreFront, record: str = "e1", field: str = BODY, g: Grant = OWNER, **args: Any
) -> StoreError:
    with pytest.raises(StoreError) as caught:
        store.read_field_window(g, _ref(record), field, **args)
    return caught.value


def _ref(record: str) -> str:
    """`e1` in the mailbox, or a self-contained id as it is."""
    return record if "/" in record else ref_id(record)


def _with_text(store: StoreFront, text: str = TEXT) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", text)])


# -- paging -------------------------------------------------------------------------------------


def test_cursors_page_through_the_whole_field_and_back(store: StoreFront) -> None:
    _with_text(store)

    # Forward from the start, by next cursors, to the end: the pages are the text.
    pages = []
    window = assert_window(_read(store, limit_chars=999), TEXT, 0, 999)
    while True:
        pages.append(window["text"])
        cursor = window["next_cursor"]
        if cursor is None:
            break
        assert URL_SAFE.fullmatch(cursor)
        window = assert_window(_read(store, cursor=cursor), TEXT, window["end_chars"], 999)
    assert "".join(pages) == TEXT
    assert len(pages) == -(-len(TEXT) // 999)
    assert (window["end_chars"], window["has_more"], window["next_offset_chars"]) == (
        len(TEXT),
        False,
        None,
    )

    # Back from near the end, by previous cursors, to the start.
    window = assert_window(_read(store, offset_chars=9500, limit_chars=1000), TEXT, 9500, 1000)
    starts = [window["start_chars"]]
    while window["previous_cursor"] is not None:
        offset = window["previous_offset_chars"]
        window = assert_window(_read(store, cursor=window["previous_cursor"]), TEXT, offset, 1000)
        starts.append(window["start_chars"])
    assert starts == [9500, 8500, 7500, 6500, 5500, 4500, 3500, 2500, 1500, 500, 0]
    assert (window["previous_offset_chars"], window["text"]) == (None, TEXT[:1000])

    # Back from the second page, then forward again, is the second page.
    second = _read(store, offset_chars=700, limit_chars=700)["window"]
    first = assert_window(_read(store, cursor=second["previous_cursor"]), TEXT, 0, 700)
    assert _read(store, cursor=first["next_cursor"])["window"] == second


def test_cursors_carry_their_limit_unless_overridden(store: StoreFront) -> None:
    _with_text(store)
    cursor = _read(store, limit_chars=1000)["window"]["next_cursor"]

    window = assert_window(_read(store, cursor=cursor, limit_chars=300), TEXT, 1000, 300)
    # The override carries on into the cursors the window mints.
    assert_window(_read(store, cursor=window["next_cursor"]), TEXT, 1300, 300)
    assert_window(_read(store, cursor=window["previous_cursor"]), TEXT, 700, 300)
    # Without an override the cursor's own limit applies; above 16384 it is clamped.
    assert_window(_read(store, cursor=cursor), TEXT, 1000, 1000)
    clamped = _read(store, cursor=cursor, limit_chars=20_000)
    assert_window(clamped, TEXT, 1000, 16384)
    assert clamped["meta"] == {"warnings": [CLAMPED]}

    # The cursors of a match window carry on from it, with the default length (4096), not the
    # match window's; with the caller's limit_chars when one was given (issue 24).
    text = "x" * 3000 + "Needle" + "y" * 6000
    store.upsert_records(MAILBOX, "message_bodies", [body("m", text)])
    window = _read(store, "m", q="NEEDLE", before_chars=10, after_chars=20)["window"]
    assert (window["start_chars"], window["limit_chars"]) == (2990, 36)
    after = assert_window(_read(store, "m", cursor=window["next_cursor"]), text, 3026, 4096)
    assert (after["match_start_chars"], after["match_end_chars"]) == (None, None)
    assert_window(_read(store, "m", cursor=window["previous_cursor"]), text, 0, 4096)
    window = _read(store, "m", q="NEEDLE", before_chars=10, after_chars=20, limit_chars=30)
    assert (window["window"]["start_chars"], window["window"]["limit_chars"]) == (2990, 30)
    next_cursor = window["window"]["next_cursor"]
    assert_window(_read(store, "m", cursor=next_cursor), text, 3020, 30)
    assert_window(_read(store, "m", cursor=window["window"]["previous_cursor"]), text, 2960, 30)


# -- what a cursor may not be combined with -----------------------------------------------------


def test_a_cursor_is_a_string_that_excludes_the_other_selectors(store: StoreFront) -> None:
    _with_text(store)
    cursor = _read(store, limit_chars=100)["window"]["next_cursor"]

    for args, param in (
        ({"offset_chars": 0}, "offset_chars"),
        ({"offset_chars": 100}, "offset_chars"),
        ({"q": "a"}, "q"),
        ({"before_chars": 0}, "before_chars"),
        ({"after_chars": 10}, "after_chars"),
        ({"q": "a", "before_chars": 1}, "q"),
    ):
        assert_store_error(_error(store, cursor=cursor, **args), "invalid_window", 400, param)

    # An empty or non-string cursor is a bad request about the cursor.
    for token in ("", 12, b"AAAA"):
        error = _error(store, cursor=token)
        assert (error.http_status, error.param) == (400, "cursor"), repr(error)
        assert error.code in {"invalid_cursor", "invalid_window"}, repr(error)


# -- invalid cursors ----------------------------------------------------------------------------


def _tampered(cursor: str, index: int) -> str:
    replacement = "B" if cursor[index] == "A" else "A"
    chars = list(cursor)
    chars[index] = replacement
    return "".join(chars)


def test_garbage_truncated_tampered_and_foreign_cursors_are_invalid(store: StoreFront) -> None:
    _with_text(store)
    window = _read(store, limit_chars=100)["window"]
    cursor = window["next_cursor"]
    digest = sha256_of(TEXT)
    binding = cursor_binding(
        OWNER.fingerprint("message_bodies"), MAILBOX, "message_bodies", "e1", BODY
    )
    # Right binding and digest, wrong secret: under the store's key id (1) and another one.
    foreign = [
        CursorCodec(CursorKey(key_id, b"not the store's secret, 32 bytes")).mint(
            binding, digest, 100, 100
        )
        for key_id in (1, 7, 200)
    ]

    bad = [
        "garbage",
        "not a cursor!",
        "A",
        "AAAA",
        "A" * 51,
        "A" * 200,
        "💩",
        cursor[:-1],
        cursor[:-2],
        cursor[:-5],
        cursor[: len(cursor) // 2],
        cursor + "A",
        cursor + "AA",
        cursor + "=",
        cursor + "==",
        cursor[::-1],
        cursor.swapcase(),
        " " + cursor,
        cursor + "\n",
        base64.urlsafe_b64encode(bytes(range(40))).decode().rstrip("="),
        *(_tampered(cursor, index) for index in (0, 1, 2, 5, 20, len(cursor) // 2, -3, -1)),
        *foreign,
    ]
    wrong = []
    for token in bad:
        error = _error(store, cursor=token)
        if (error.code, error.http_status, error.param) != ("invalid_cursor", 400, "cursor"):
            wrong.append((token, repr(error)))
    assert wrong == []
    # The genuine cursor still reads.
    assert_window(_read(store, cursor=cursor), TEXT, 100, 100)


def test_a_cursor_is_bound_to_its_record_field_connection_and_grant(store: StoreFront) -> None:
    setup_mailbox(store, MAILBOX, OTHER_MAILBOX)
    both = [MAILBOX, OTHER_MAILBOX]
    record = {**body("e1", TEXT), "body_html": TEXT}  # two fields of the same text
    store.upsert_records(MAILBOX, "message_bodies", [record, body("e2", TEXT)])
    store.upsert_records(OTHER_MAILBOX, "message_bodies", [record])  # same id, same text
    terms = {"name": "message_bodies", "instance_ids": both}
    minted_under = grant(terms, grant_id="g1")
    cursor = _read(store, g=minted_under, limit_chars=100)["window"]["next_cursor"]

    # The same grant id and terms, built again (instance ids in another order): valid.
    for same in (
        grant(terms, grant_id="g1"),
        grant({"name": "message_bodies", "instance_ids": both[::-1]}, grant_id="g1"),
    ):
        assert_window(_read(store, g=same, cursor=cursor), TEXT, 100, 100)

    elsewhere: list[tuple[str, str, Grant]] = [
        ("e2", BODY, minted_under),  # another record
        (ref_id("e1", OTHER_MAILBOX), BODY, minted_under),  # the same id in another connection
        ("e1", "body_html", minted_under),  # another field
        ("e1", BODY, grant(terms, grant_id="g2")),  # another grant, the same terms
        ("e1", BODY, owner()),
        (  # the same grant id with other fields
            "e1",
            BODY,
            grant({**terms, "fields": [BODY, "id"]}, grant_id="g1"),
        ),
        (  # the same grant id over fewer connections
            "e1",
            BODY,
            grant({"name": "message_bodies", "instance_ids": [MAILBOX]}, grant_id="g1"),
        ),
        (  # the same grant id with a time constraint
            "e1",
            BODY,
            grant(
                {
                    **terms,
                    "time_constraint": {"field": "message_received_at", "since": "2020-01-01"},
                },
                grant_id="g1",
            ),
        ),
    ]
    wrong = []
    for record_id, field, other_grant in elsewhere:
        error = _error(store, record_id, field, other_grant, cursor=cursor)
        if (error.code, error.http_status, error.param) != ("invalid_cursor", 400, "cursor"):
            wrong.append((record_id, field, other_grant.grant_id, repr(error)))
    assert wrong == []


# -- staleness ----------------------------------------------------------------------------------


def test_a_cursor_is_stale_once_its_field_changes(store: StoreFront) -> None:
    _with_text(store)
    first = _read(store, limit_chars=1000)["window"]
    second = _read(store, cursor=first["next_cursor"])["window"]
    edited = TEXT[:1500] + "an edit" + TEXT[1500:]
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", edited)])

    for cursor in (first["next_cursor"], second["next_cursor"], second["previous_cursor"]):
        error = _error(store, cursor=cursor)
        assert_store_error(error, "stale_cursor", 409)
        assert error.details == {"digest": sha256_of(edited), "size_chars": len(edited)}
        wire = error.to_dict()["error"]
        assert (wire["code"], wire["digest"], wire["size_chars"]) == (
            "stale_cursor",
            sha256_of(edited),
            len(edited),
        )
    # The client restarts from an offset and reads the new text.
    assert_window(_read(store, offset_chars=1000, limit_chars=1000), edited, 1000, 1000)

    # The field back to the text the cursor was made for: the cursor names that text again.
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", TEXT)])
    assert _read(store, cursor=first["next_cursor"])["window"] == second

    # A cursor is a name: once its field or record is gone, it reads as they do.
    without_body = {key: value for key, value in body("e1", TEXT).items() if key != BODY}
    store.upsert_records(MAILBOX, "message_bodies", [without_body])
    assert_store_error(_error(store, cursor=first["next_cursor"]), "field_not_found", 404)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", TEXT)])
    store.delete_record(MAILBOX, "message_bodies", "e1")
    assert_store_error(_error(store, cursor=first["next_cursor"]), "not_found", 404)


def test_changing_another_field_does_not_stale_a_cursor(store: StoreFront) -> None:
    _with_text(store)
    version = store.read_record(OWNER, ref_id("e1")).version
    assert version is not None
    first = _read(store, limit_chars=1000)["window"]
    second = _read(store, cursor=first["next_cursor"])

    store.upsert_records(MAILBOX, "message_bodies", [{**body("e1", TEXT), "charset": "latin-1"}])

    assert (store.read_record(OWNER, ref_id("e1")).version or 0) > version
    assert _read(store, cursor=first["next_cursor"]) == second
    assert _read(store, "e1", "charset")["window"]["text"] == "latin-1"


# -- keys ---------------------------------------------------------------------------------------


def test_a_cursor_survives_reopening_the_store_on_any_front(db_url: str) -> None:
    expected: dict[str, Any] = {}
    for minting in FRONTS:
        with open_front(minting, db_url) as opened:
            _with_text(opened)
            cursor = _read(opened, limit_chars=700)["window"]["next_cursor"]
            expected[cursor] = _read(opened, cursor=cursor)
    assert len(expected) == 1  # both fronts use the key kept in the database

    for reading in FRONTS:
        with open_front(reading, db_url) as reopened:
            for cursor, envelope in expected.items():
                assert _read(reopened, cursor=cursor) == envelope
                assert_window(envelope, TEXT, 700, 700)


def test_a_configured_secret_signs_and_checks_cursors(db_url: str) -> None:
    for front in FRONTS:
        with open_front(front, db_url, cursor_secret=SECRET_A) as store_a:
            _with_text(store_a)
            by_a = _read(store_a, limit_chars=500)["window"]["next_cursor"]
            expected = _read(store_a, cursor=by_a)

        with open_front(front, db_url, cursor_secret=SECRET_B) as store_b:
            assert_store_error(_error(store_b, cursor=by_a), "invalid_cursor", 400, "cursor")
            by_b = _read(store_b, limit_chars=500)["window"]["next_cursor"]
        assert by_b != by_a

        with open_front(front, db_url) as unconfigured:  # the key kept in the database
            assert_store_error(_error(unconfigured, cursor=by_a), "invalid_cursor", 400)

        with open_front(front, db_url, cursor_secret=SECRET_A) as again_a:
            assert _read(again_a, cursor=by_a) == expected
            assert_store_error(_error(again_a, cursor=by_b), "invalid_cursor", 400)

        # Rotation by configuration: the new secret signs, the previous one still checks.
        with open_front(
            front, db_url, cursor_secret=SECRET_B, previous_cursor_secrets=[SECRET_A]
        ) as rotated:
            via_a, via_b = _read(rotated, cursor=by_a), _read(rotated, cursor=by_b)
            assert via_a == via_b  # the same window, whose cursors the new secret signs
            assert via_a["window"]["text"] == expected["window"]["text"]
            assert _read(rotated, limit_chars=500)["window"]["next_cursor"] == by_b


@pytest.mark.parametrize("secret", [b"", b"too short", "a str secret, not bytes at all"])
def test_a_bad_cursor_secret_is_a_typed_error(sqlite_db_url: str, secret: Any) -> None:
    for front in FRONTS:
        with pytest.raises(StoreError) as caught:
            open_front(front, sqlite_db_url, cursor_secret=secret).close()
        assert (caught.value.http_status, caught.value.param) == (400, "cursor_secret")


def test_key_rotation_keeps_old_cursors_valid_across_fronts_and_reopening(db_url: str) -> None:
    cursors = []
    for front in FRONTS:
        with open_front(front, db_url) as opened:
            _with_text(opened)
            old = _read(opened, limit_chars=500)["window"]["next_cursor"]
            expected = _read(opened, cursor=old)

            opened.rotate_cursor_key()

            after = _read(opened, cursor=old)
            assert after["window"]["text"] == expected["window"]["text"]
            assert after == _read(opened, offset_chars=500, limit_chars=500)  # new key signs
            new = _read(opened, limit_chars=500)["window"]["next_cursor"]
            assert new not in {None, old}
            cursors += [old, new]
    assert len(set(cursors)) == 3  # the second front's old cursor is the first's new one

    for front in FRONTS:
        with open_front(front, db_url) as reopened:
            for cursor in cursors:
                assert_window(_read(reopened, cursor=cursor), TEXT, 500, 500)


def test_key_rotation_with_a_configured_secret_keeps_old_cursors_valid(db_url: str) -> None:
    for front in FRONTS:
        with open_front(front, db_url, cursor_secret=SECRET_A) as configured:
            _with_text(configured)
            old = _read(configured, limit_chars=500)["window"]["next_cursor"]
            refusal: StoreError | None = None
            try:
                configured.rotate_cursor_key()
            except StoreError as refused:  # keys rotate by configuration here: refusing is fine
                refusal = refused
            assert refusal is None or refusal.http_status == 400
            assert_window(_read(configured, cursor=old), TEXT, 500, 500)
