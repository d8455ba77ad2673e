"""Record identity in the store (docs/contract.md §6, "Record identity"), on every backend and
front: every read takes every form of a record reference, the legacy form resolves through the
grant, unusual record ids round-trip, and field-window resources read the same window as a direct
read.

The pure parsing of references, handles and URIs is tested without a database in
`test_identity.py`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
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
    setup_mailbox,
)
from _fronts import StoreFront

from pdpp_store import (
    FieldWindow,
    FieldWindowRef,
    Grant,
    RecordRef,
    RecordView,
    StoreError,
    UnscopedRecordRef,
)
from pdpp_store._core.identity import record_handle

BODIES = "message_bodies"
BODY = "body_text"
OWNER = owner()
TEXT = mixed_text(3000, seed=4)
BOTH = grant({"name": BODIES, "instance_ids": [MAILBOX, OTHER_MAILBOX]}, grant_id="g-both")

# A read, given the store, a grant, a record reference and the optional `connection_id`, as JSON.
Read = Callable[[StoreFront, Grant, Any, "str | None"], dict[str, Any]]


def _window(store: StoreFront, g: Grant, record: Any, connection_id: str | None) -> dict[str, Any]:
    window: FieldWindow = store.read_field_window(
        g, record, BODY, connection_id=connection_id, offset_chars=1000, limit_chars=1500
    )
    return window.to_dict()


def _match(store: StoreFront, g: Grant, record: Any, connection_id: str | None) -> dict[str, Any]:
    window: FieldWindow = store.read_field_window(
        g, record, BODY, connection_id=connection_id, q=TEXT[2000:2010], before_chars=5
    )
    return window.to_dict()


def _record(store: StoreFront, g: Grant, record: Any, connection_id: str | None) -> dict[str, Any]:
    view: RecordView = store.read_record(g, record, connection_id=connection_id)
    return view.to_dict()


def _describe(
    store: StoreFront, g: Grant, record: Any, connection_id: str | None
) -> dict[str, Any]:
    described: dict[str, Any] = store.describe_field(
        g, record, BODY, connection_id=connection_id
    ).to_dict()
    return described


READS: dict[str, Read] = {
    "window": _window,
    "match": _match,
    "record": _record,
    "describe": _describe,
}


def _forms(record_id: str, connection_id: str = MAILBOX) -> dict[str, tuple[Any, str | None]]:
    """Every accepted form of one record's reference, with the `connection_id=` it goes with."""
    ref = RecordRef(connection_id, BODIES, record_id)
    return {
        "RecordRef": (ref, None),
        "RecordRef, same connection_id": (ref, connection_id),
        "self-contained id": (f"{connection_id}/{BODIES}:{record_id}", None),
        "self-contained id, same connection_id": (ref.id, connection_id),
        "record URI": (ref.uri, None),
        "record URI, same connection_id": (ref.uri, connection_id),
        "legacy id with connection_id": (f"{BODIES}:{record_id}", connection_id),
        "UnscopedRecordRef with connection_id": (
            UnscopedRecordRef(BODIES, record_id),
            connection_id,
        ),
    }


def _error(
    read: Read, store: StoreFront, g: Grant, record: Any, connection_id: str | None
) -> StoreError:
    with pytest.raises(StoreError) as caught:
        read(store, g, record, connection_id)
    return caught.value


# -- every read, every form ---------------------------------------------------------------------


def test_every_read_accepts_every_form_of_reference(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, BODIES, [body("e1", TEXT)])

    for name, read in READS.items():
        expected = read(store, OWNER, RecordRef(MAILBOX, BODIES, "e1"), None)
        for form, (record, connection_id) in _forms("e1").items():
            assert read(store, OWNER, record, connection_id) == expected, (name, form)

    window = _window(store, OWNER, RecordRef(MAILBOX, BODIES, "e1"), None)
    assert_window(window, TEXT, 1000, 1500)
    assert (window["connection_id"], window["stream"], window["record_id"]) == (
        MAILBOX,
        BODIES,
        "e1",
    )
    view = _record(store, OWNER, RecordRef(MAILBOX, BODIES, "e1"), None)
    assert (view["id"], view["uri"]) == (
        f"{MAILBOX}/{BODIES}:e1",
        RecordRef(MAILBOX, BODIES, "e1").uri,
    )
    # A record URI is also a resource.
    resource = store.read_resource(OWNER, RecordRef(MAILBOX, BODIES, "e1").uri)
    assert isinstance(resource, RecordView)
    assert resource.to_dict() == view


# -- the legacy form and the grant's connections ------------------------------------------------


def test_legacy_id_resolves_through_a_grant_covering_one_connection(store: StoreFront) -> None:
    setup_mailbox(store, MAILBOX, OTHER_MAILBOX)
    store.upsert_records(MAILBOX, BODIES, [body("e1", "in the mailbox")])
    store.upsert_records(OTHER_MAILBOX, BODIES, [body("e1", "in the other mailbox")])

    for connection_id, text in (
        (MAILBOX, "in the mailbox"),
        (OTHER_MAILBOX, "in the other mailbox"),
    ):
        for g in (
            owner(BODIES, connection_id),
            grant({"name": BODIES, "instance_ids": [connection_id]}, grant_id="g-one"),
        ):
            for legacy in (f"{BODIES}:e1", UnscopedRecordRef(BODIES, "e1")):
                window = _window(store, g, legacy, None)
                assert (window["connection_id"], window["window"]["text"]) == (connection_id, "")
                whole = store.read_field_window(g, legacy, BODY).to_dict()
                assert (whole["connection_id"], whole["window"]["text"]) == (connection_id, text)
                view = _record(store, g, legacy, None)
                assert (view["connection_id"], view["data"][BODY]) == (connection_id, text)
                assert _describe(store, g, legacy, None)["size_chars"] == len(text)


def test_ambiguous_and_conflicting_connections(store: StoreFront) -> None:
    setup_mailbox(store, MAILBOX, OTHER_MAILBOX)
    store.upsert_records(MAILBOX, BODIES, [body("e1", TEXT)])  # only one connection holds e1

    for name, read in READS.items():
        for legacy in (f"{BODIES}:e1", UnscopedRecordRef(BODIES, "e1")):
            error = _error(read, store, BOTH, legacy, None)
            assert_store_error(error, "ambiguous_connection", 409, "connection_id")
            assert error.to_dict()["error"]["code"] == "ambiguous_connection", name
        # Naming the connection settles it.
        assert read(store, BOTH, f"{BODIES}:e1", MAILBOX) == read(
            store, BOTH, RecordRef(MAILBOX, BODIES, "e1"), None
        )

    # A reference that embeds one connection and a connection_id that names another conflict.
    ref = RecordRef(MAILBOX, BODIES, "e1")
    for name, read in READS.items():
        for record in (ref, ref.id, ref.uri):
            error = _error(read, store, BOTH, record, OTHER_MAILBOX)
            assert_store_error(error, "conflicting_connection_id", 409, "connection_id")
            assert error.to_dict()["error"]["code"] == "conflicting_connection_id", name


# -- unusual record ids -------------------------------------------------------------------------

UNUSUAL_IDS = [
    "a:b:c",
    ":leading-colon",
    "trailing-colon:",
    "with space",
    " padded ",
    'say"when',
    "it's",
    "`backtick` ~ and ;",
    "名前😀",
    "e\u0301",
    "é",
    "%2F%2e%2e",
    "#?&=+",
    "a.b",
    ".x",  # ".." anywhere is unsafe, one dot is fine
    "tab\there",
    "new\nline",
    "🏳️‍🌈",
    "pdpp:record:x",
]


def test_unusual_record_ids_round_trip_through_ingestion_and_reads(store: StoreFront) -> None:
    setup_mailbox(store)
    texts = {record_id: f"body of {record_id!r} " + TEXT for record_id in UNUSUAL_IDS}
    store.upsert_records(
        MAILBOX, BODIES, [body(record_id, text) for record_id, text in texts.items()]
    )

    for record_id, text in texts.items():
        ref = RecordRef(MAILBOX, BODIES, record_id)
        for form, (record, connection_id) in _forms(record_id).items():
            window = store.read_field_window(
                OWNER, record, BODY, connection_id=connection_id, limit_chars=50
            ).to_dict()
            assert window["record_id"] == record_id, (record_id, form)
            assert window["window"]["text"] == text[:50], (record_id, form)
            view = store.read_record(OWNER, record, connection_id=connection_id).to_dict()
            assert (view["id"], view["uri"], view["record_id"]) == (ref.id, ref.uri, record_id)
        found = store.read_field_window(OWNER, ref.uri, BODY, q=f"of {record_id!r}").to_dict()
        assert found["window"]["match_start_chars"] == len("body ")

    # A numeric primary key is the canonical string of its value.
    store.upsert_records(MAILBOX, BODIES, [{**body("x", "forty-two"), "id": 42}])
    window = store.read_field_window(OWNER, f"{MAILBOX}/{BODIES}:42", BODY).to_dict()
    assert (window["record_id"], window["window"]["text"]) == ("42", "forty-two")


# -- field-window resources ---------------------------------------------------------------------


def test_a_field_window_resource_reads_the_same_window(store: StoreFront) -> None:
    setup_mailbox(store)
    odd = 'a:b "c" 名😀'
    store.upsert_records(MAILBOX, BODIES, [body("e1", TEXT), body(odd, TEXT)])

    for record_id in ("e1", odd):
        ref = RecordRef(MAILBOX, BODIES, record_id)
        cursor = store.read_field_window(OWNER, ref, BODY, limit_chars=700).next_cursor
        assert cursor is not None
        for selector in (
            {},
            {"offset_chars": 1023},
            {"limit_chars": 10},
            {"offset_chars": 1000, "limit_chars": 1500},
            {"offset_chars": 5000},
            {"limit_chars": 20_000},
            {"cursor": cursor},
            {"cursor": cursor, "limit_chars": 100},
        ):
            uri = FieldWindowRef(ref, BODY, **selector).uri
            assert uri.startswith("pdpp://field-window/")
            resource = store.read_resource(OWNER, uri)
            assert isinstance(resource, FieldWindow)
            direct = store.read_field_window(OWNER, ref, BODY, **selector)
            assert resource.to_dict() == direct.to_dict(), (record_id, selector)

    # A resource is a name, not a grant: the grant is checked as for a direct read.
    narrow = grant({"name": BODIES, "fields": ["id"]}, grant_id="g-narrow")
    uri = FieldWindowRef(RecordRef(MAILBOX, BODIES, "e1"), BODY).uri
    with pytest.raises(StoreError) as caught:
        store.read_resource(narrow, uri)
    assert_store_error(caught.value, "field_not_granted", 403)


# -- unsafe ids ---------------------------------------------------------------------------------


def _handle(parts: list[Any]) -> str:
    """A handle as `_identity` encodes one, for parts it would refuse to build."""
    data = json.dumps(parts, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


UNSAFE_RECORDS: list[Any] = [
    "",
    "e1",  # no stream
    f"{MAILBOX}/{BODIES}",  # no record id
    f"{MAILBOX}/{BODIES}:",
    f"{MAILBOX}/{BODIES}:.",
    f"{MAILBOX}/{BODIES}:..",
    f"{MAILBOX}/{BODIES}:a..b",
    f"{MAILBOX}/{BODIES}:../../etc/passwd",
    f"{MAILBOX}/{BODIES}:a\\b",
    f"{MAILBOX}/{BODIES}:a\x00b",
    f"../{BODIES}:e1",
    f"./{BODIES}:e1",
    f"/{BODIES}:e1",
    f"{MAILBOX}/..:e1",
    f"{MAILBOX}/:e1",
    "pdpp://record/",
    "pdpp://record/!!not-a-handle!!",
    "pdpp://record/" + record_handle(RecordRef(MAILBOX, BODIES, "e1")) + "=",
    "pdpp://record/" + _handle(["a", "b"]),  # two parts
    "pdpp://record/" + _handle([MAILBOX, BODIES, ".."]),  # an unsafe record id
    "pdpp://record/" + _handle([MAILBOX, BODIES, 1]),
    "pdpp://field-window/" + record_handle(RecordRef(MAILBOX, BODIES, "e1")),
    "pdpp://blob/x",
    "http://example.com/record/e1",
    42,
    None,
    b"cin_mail/message_bodies:e1",
    ("cin_mail", "message_bodies", "e1"),
]


def test_unsafe_references_are_typed_bad_requests(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, BODIES, [body("e1", TEXT)])

    wrong = []
    for name, read in READS.items():
        for record in UNSAFE_RECORDS:
            for connection_id in (None, MAILBOX):
                try:
                    read(store, OWNER, record, connection_id)
                except StoreError as refused:
                    if (refused.http_status, refused.param) != (400, "record"):
                        wrong.append((name, record, connection_id, repr(refused), refused.param))
                except Exception as crash:  # anything but a typed error is a bug
                    wrong.append((name, record, connection_id, "untyped", repr(crash)))
                else:
                    wrong.append((name, record, connection_id, "no error", None))
    assert wrong == []

    # So are resource URIs that do not name a record or a window of one.
    uris: list[Any] = [
        "",
        "e1",
        "http://example.com/x",
        "pdpp://record/!!",
        "pdpp://field-window/",
        "pdpp://field-window/!!",
        "pdpp://field-window/" + _handle([MAILBOX, BODIES, "..", BODY, {}]),
        "pdpp://field-window/" + _handle([MAILBOX, BODIES, "e1", BODY, {"q": "x"}]),
        "pdpp://field-window/" + _handle([MAILBOX, BODIES, "e1", BODY, {"offset_chars": -1}]),
        "pdpp://field-window/" + _handle([MAILBOX, BODIES, "e1", "", {}]),
        42,
    ]
    for uri in uris:
        with pytest.raises(StoreError) as caught:
            store.read_resource(OWNER, uri)
        assert (caught.value.http_status, caught.value.param) == (400, "uri"), (uri, caught.value)

    # An explicit connection id is checked as safely.
    for connection_id in ("", ".", "..", "a/b", "a\\b", "x..y", "a\x00b"):
        for record in (f"{BODIES}:e1", UnscopedRecordRef(BODIES, "e1")):
            assert_store_error(
                _error(_window, store, OWNER, record, connection_id),
                "invalid_request",
                400,
                "connection_id",
            )


def test_unsafe_values_cannot_build_a_record_ref() -> None:
    for parts in (
        ("", BODIES, "e1"),
        ("..", BODIES, "e1"),
        (MAILBOX, "a/b", "e1"),
        (MAILBOX, BODIES, ""),
        (MAILBOX, BODIES, "a/b"),
        (MAILBOX, BODIES, "x..y"),
        (MAILBOX, BODIES, "."),
        (MAILBOX, BODIES, "a\\b"),
    ):
        with pytest.raises(StoreError) as caught:
            RecordRef(*parts)
        assert caught.value.http_status == 400


def test_unsafe_record_ids_are_refused_at_ingestion(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, BODIES, [body("kept", "already here")])

    for unsafe in ("a/b", "..", ".", "x..y", "a\\b", ""):
        with pytest.raises(StoreError) as caught:
            store.upsert_records(MAILBOX, BODIES, [body("good", "fine"), body(unsafe, "bad")])
        assert_store_error(caught.value, "invalid_record", 400, "id")
        assert "#1" in caught.value.message  # names the record by its place in the batch
        # Nothing of the batch was written.
        with pytest.raises(StoreError) as missing:
            store.read_field_window(OWNER, f"{MAILBOX}/{BODIES}:good", BODY)
        assert_store_error(missing.value, "not_found", 404)
    assert store.read_field_window(OWNER, f"{MAILBOX}/{BODIES}:kept", BODY).text == "already here"
