"""Field windows by offset (docs/contract.md §3, "Field windows"), on every backend and front: the
envelope, the window arithmetic over stored chunks, the selector rules and errors, and binary-only
fields.

The oracle of every window is the Python slice `text[start : start + limit]` of the field's text
(a string, or the canonical JSON text of any other value), with offsets in code points.
"""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest
from _data import (
    ENVELOPE_KEYS,
    MAILBOX,
    WINDOW_KEYS,
    assert_store_error,
    assert_window,
    body,
    canonical,
    example_body,
    mixed_text,
    on_one_store,
    owner,
    ref_id,
    setup_mailbox,
    sha256_of,
    unicode_texts,
)
from _fronts import StoreFront
from hypothesis import assume, given
from hypothesis import strategies as st

from pdpp_store import Store, StoreError
from pdpp_store._core.values import CHUNK_CHARS, looks_like_base64

BODY = "body_text"
OWNER = owner()

# Offsets and limits around the chunk boundaries (CHUNK_CHARS = 1024 code points per chunk).
BOUNDARY_OFFSETS = (0, 1, 1023, 1024, 1025, 2047, 2048, 2049, 3071, 3072)
BOUNDARY_LIMITS = (1, 2, 1023, 1024, 1025, 2049, 3000, 4096)


def _boundary_text() -> str:
    """Mixed text of 3.5 chunks with astral characters and combining marks on both sides of
    each chunk boundary, so a window that split a code point or miscounted would show it."""
    chars = list(mixed_text(3 * CHUNK_CHARS + 500, seed=11))
    for boundary in (CHUNK_CHARS, 2 * CHUNK_CHARS, 3 * CHUNK_CHARS):
        # astral | e | combining acute (first of the chunk) | astral, ZWJ, astral
        chars[boundary - 2 : boundary + 4] = list("😀e\u0301\U0001f468\u200d🎉")
    return "".join(chars)


def _read(store: StoreFront, record_id: str, field: str = BODY, **args: Any) -> dict[str, Any]:
    envelope: dict[str, Any] = store.read_field_window(
        OWNER, ref_id(record_id), field, **args
    ).to_dict()
    return envelope


def _error(store: StoreFront, record_id: str, field: str = BODY, **args: Any) -> StoreError:
    with pytest.raises(StoreError) as caught:
        store.read_field_window(OWNER, ref_id(record_id), field, **args)
    return caught.value


# -- the envelope -------------------------------------------------------------------------------


def test_the_default_window_and_the_envelope(store: StoreFront) -> None:
    setup_mailbox(store)
    text = mixed_text(5000)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", text)])

    envelope = _read(store, "e1")

    assert set(envelope) == set(ENVELOPE_KEYS)
    assert envelope["object"] == "field_window"
    assert (envelope["stream"], envelope["record_id"], envelope["connection_id"]) == (
        "message_bodies",
        "e1",
        MAILBOX,
    )
    assert envelope["field"] == {
        "path": BODY,
        "type": "string",
        "text_like": True,
        "size_chars": 5000,
        "digest": sha256_of(text),
    }
    window = assert_window(envelope, text, 0, 4096)
    assert window["text"] == text[:4096]
    assert (window["start_chars"], window["end_chars"], window["limit_chars"]) == (0, 4096, 4096)
    assert (window["complete"], window["has_more"]) == (False, True)
    assert (window["next_offset_chars"], window["previous_offset_chars"]) == (4096, None)
    assert isinstance(window["next_cursor"], str)
    assert window["previous_cursor"] is None
    assert (window["match_start_chars"], window["match_end_chars"]) == (None, None)
    assert envelope["meta"] == {"warnings": []}
    # The next window, as a continuation: the library operation, its arguments, its resource.
    assert envelope["previous"] is None
    following = envelope["next"]
    assert following["operation"] == "read_field_window"
    assert following["arguments"] == {
        "record": ref_id("e1"),
        "field": BODY,
        "cursor": window["next_cursor"],
    }
    arguments = dict(following["arguments"])
    replayed = store.read_field_window(OWNER, arguments.pop("record"), **arguments)
    assert replayed.text == text[4096:]
    assert replayed.previous is not None
    assert store.read_resource(OWNER, following["resource_uri"]).to_dict() == replayed.to_dict()
    # Explicit defaults read the same window.
    assert _read(store, "e1", offset_chars=0, limit_chars=4096) == envelope

    # A small field is complete in one window, with no cursors.
    store.upsert_records(MAILBOX, "message_bodies", [body("e2", "Hello, Zoë 😀")])
    window = assert_window(_read(store, "e2"), "Hello, Zoë 😀", 0, 4096)
    assert window["text"] == "Hello, Zoë 😀"
    assert (window["complete"], window["has_more"], window["end_chars"]) == (True, False, 12)
    assert (window["next_cursor"], window["previous_cursor"]) == (None, None)


def test_window_math_across_chunk_boundaries(store: StoreFront) -> None:
    setup_mailbox(store)
    text = _boundary_text()
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", text)])

    for offset, limit in itertools.product(BOUNDARY_OFFSETS, BOUNDARY_LIMITS):
        window = assert_window(
            _read(store, "e1", offset_chars=offset, limit_chars=limit), text, offset, limit
        )
        assert window["text"] == text[offset : offset + limit]

    # One window over parts of four chunks.
    window = assert_window(
        _read(store, "e1", offset_chars=1000, limit_chars=2500), text, 1000, 2500
    )
    assert window["text"] == text[1000:3500]
    assert (window["end_chars"], window["next_offset_chars"]) == (3500, 3500)
    assert window["previous_offset_chars"] == 0


def test_offset_past_the_end_is_an_empty_window_at_the_end(store: StoreFront) -> None:
    setup_mailbox(store)
    text = mixed_text(3000)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", text), body("empty", "")])

    for offset in (3000, 3001, 10**6, 2**31, 2**63 - 1, 2**64, 10**30):
        window = assert_window(
            _read(store, "e1", offset_chars=offset, limit_chars=100), text, offset, 100
        )
        assert (window["text"], window["start_chars"], window["end_chars"]) == ("", 3000, 3000)
        assert (window["complete"], window["has_more"]) == (False, False)
        assert window["previous_offset_chars"] == 2900
        assert isinstance(window["previous_cursor"], str)

    # The previous cursor of the empty window at the end reads the last full window.
    last = _read(store, "e1", offset_chars=10**6, limit_chars=100)["window"]
    assert_window(_read(store, "e1", cursor=last["previous_cursor"]), text, 2900, 100)

    # An empty field: the window at 0 is empty and complete; past the end it is the same.
    for offset in (0, 5):
        window = assert_window(_read(store, "empty", offset_chars=offset), "", offset, 4096)
        assert (window["text"], window["complete"], window["has_more"]) == ("", True, False)


def test_limit_above_16384_is_clamped_with_a_warning(store: StoreFront) -> None:
    setup_mailbox(store)
    text = mixed_text(20_000)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", text)])

    exact = _read(store, "e1", limit_chars=16384)
    assert_window(exact, text, 0, 16384)
    assert exact["meta"] == {"warnings": []}

    for limit in (16385, 20_000, 10**12):
        for offset in (0, 3000):
            envelope = _read(store, "e1", offset_chars=offset, limit_chars=limit)
            window = assert_window(envelope, text, offset, 16384)
            assert len(window["text"]) == 16384
            assert envelope["meta"] == {
                "warnings": [{"code": "limit_clamped", "param": "limit_chars"}]
            }


# -- selector errors ----------------------------------------------------------------------------

INVALID_WINDOWS: list[tuple[dict[str, Any], str]] = [
    # Exclusivity.
    ({"cursor": "c", "offset_chars": 0}, "offset_chars"),
    ({"cursor": "c", "offset_chars": 10}, "offset_chars"),
    ({"cursor": "c", "q": "x"}, "q"),
    ({"cursor": "c", "before_chars": 10}, "before_chars"),
    ({"cursor": "c", "after_chars": 10}, "after_chars"),
    ({"q": "x", "offset_chars": 0}, "offset_chars"),
    ({"q": "x", "offset_chars": 5}, "offset_chars"),
    ({"before_chars": 10}, "before_chars"),
    ({"after_chars": 10}, "after_chars"),
    ({"offset_chars": 5, "before_chars": 1}, "before_chars"),
    ({"offset_chars": 5, "after_chars": 1}, "after_chars"),
    # Offsets: int >= 0, never a bool.
    ({"offset_chars": -1}, "offset_chars"),
    ({"offset_chars": True}, "offset_chars"),
    ({"offset_chars": False}, "offset_chars"),
    ({"offset_chars": 1.0}, "offset_chars"),
    ({"offset_chars": "10"}, "offset_chars"),
    # Limits: int >= 1, never a bool, whatever the selector.
    ({"limit_chars": 0}, "limit_chars"),
    ({"limit_chars": -1}, "limit_chars"),
    ({"limit_chars": True}, "limit_chars"),
    ({"limit_chars": 10.0}, "limit_chars"),
    ({"limit_chars": "10"}, "limit_chars"),
    ({"offset_chars": 10, "limit_chars": 0}, "limit_chars"),
    ({"q": "x", "limit_chars": 0}, "limit_chars"),
    ({"q": "x", "limit_chars": False}, "limit_chars"),
    # Context: 0..8192, refused (not clamped) above.
    ({"q": "x", "before_chars": 8193}, "before_chars"),
    ({"q": "x", "after_chars": 8193}, "after_chars"),
    ({"q": "x", "before_chars": 10**9}, "before_chars"),
    ({"q": "x", "before_chars": -1}, "before_chars"),
    ({"q": "x", "after_chars": -1}, "after_chars"),
    ({"q": "x", "before_chars": True}, "before_chars"),
    ({"q": "x", "after_chars": 1.5}, "after_chars"),
    ({"q": "x", "after_chars": "5"}, "after_chars"),
    # The query: non-empty, at most 1024 code points, no NUL.
    ({"q": ""}, "q"),
    ({"q": "x" * 1025}, "q"),
    ({"q": "😀" * 1025}, "q"),
    ({"q": "a\x00b"}, "q"),
    ({"q": 5}, "q"),
    ({"q": b"x"}, "q"),
]


def test_invalid_windows_are_refused_naming_the_parameter(store: StoreFront) -> None:
    setup_mailbox(store)
    text = mixed_text(3000)
    store.upsert_records(MAILBOX, "message_bodies", [body("e1", text)])

    wrong = []
    for args, param in INVALID_WINDOWS:
        with pytest.raises(StoreError) as caught:
            store.read_field_window(OWNER, ref_id("e1"), BODY, **args)
        error = caught.value
        if (error.code, error.http_status, error.param) != ("invalid_window", 400, param):
            wrong.append((args, param, repr(error), error.param))
        elif param not in error.message:
            wrong.append((args, param, "message does not name the parameter", error.message))
    assert wrong == []

    # The boundary values themselves are accepted.
    assert_window(_read(store, "e1", limit_chars=1), text, 0, 1)
    assert_window(_read(store, "e1", offset_chars=0, limit_chars=16384), text, 0, 16384)
    q = text[2000:2010]
    for before, after in ((0, 0), (8192, 0), (0, 8192)):
        window = _read(store, "e1", q=q, before_chars=before, after_chars=after)["window"]
        assert window["match_start_chars"] is not None
    # Arguments given as None are absent.
    none_args: dict[str, Any] = {
        "offset_chars": None,
        "limit_chars": None,
        "q": None,
        "before_chars": None,
        "after_chars": None,
        "cursor": None,
    }
    assert _read(store, "e1", **none_args) == _read(store, "e1")


# -- code points --------------------------------------------------------------------------------

UNITS_TEXT = (
    "a😀b"  # astral
    "e\u0301"  # e + combining acute: two code points
    "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # a family: five code points
    "\U0001f1eb\U0001f1f7"  # a flag: two regional indicators
    "\u0915\u094d\u0937"  # Devanagari conjunct: three code points
    "名前\n\t\U00010348\U0010fffd"  # CJK, controls, Gothic, the last plane
    "Z\u0308\u0301\u0323end"  # stacked combining marks
)


def test_astral_characters_and_combining_marks_count_one_code_point_each(
    store: StoreFront,
) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [body("u", UNITS_TEXT)])
    assert _read(store, "u")["field"]["size_chars"] == len(UNITS_TEXT)

    for offset in range(len(UNITS_TEXT) + 1):
        for limit in (1, 2, 5):
            window = assert_window(
                _read(store, "u", offset_chars=offset, limit_chars=limit), UNITS_TEXT, offset, limit
            )
            assert window["text"] == UNITS_TEXT[offset : offset + limit]


# -- JSON fields --------------------------------------------------------------------------------

JSON_RECORD: dict[str, Any] = {
    "id": "j1",
    "message_received_at": "2026-03-01T10:00:00Z",
    # An object of more than three chunks, with keys out of order and nested values.
    "body_text": {
        "zeta": [mixed_text(1500, seed=3), {"n": 1.5, "ok": True, "none": None}],
        "alpha": "Zoë 😀 " * 300,
        "Mid": {"b": -2.5e-8, "a": [1, 2, 3]},
    },
    "body_html": [1, "two", None, True, {"k": 10**20}, "名前" * 800],
    "charset": 12345,
    "body_text_bytes": 1.25,
    "body_source": True,
    "content_languages": None,
}
JSON_TYPES = {
    "body_text": "object",
    "body_html": "array",
    "charset": "integer",
    "body_text_bytes": "number",
    "body_source": "boolean",
    "content_languages": "null",
}


def test_json_values_are_windowed_over_their_canonical_json_text(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, "message_bodies", [JSON_RECORD])

    for field, json_type in JSON_TYPES.items():
        text = canonical(JSON_RECORD[field])
        envelope = _read(store, "j1", field)
        assert envelope["field"] == {
            "path": field,
            "type": json_type,
            "text_like": True,
            "size_chars": len(text),
            "digest": sha256_of(text),
        }
        assert_window(envelope, text, 0, 4096)
        for offset, limit in itertools.product((0, 7, 1023, 1024, 1025, 2047), (1, 3, 2100)):
            window = assert_window(
                _read(store, "j1", field, offset_chars=offset, limit_chars=limit),
                text,
                offset,
                limit,
            )
            assert window["text"] == text[offset : offset + limit]

    assert _read(store, "j1", "charset")["window"]["text"] == "12345"
    assert _read(store, "j1", "body_source")["window"]["text"] == "true"
    assert _read(store, "j1", "content_languages")["window"]["text"] == "null"


# -- binary-only fields -------------------------------------------------------------------------

FILES_MANIFEST: dict[str, Any] = {
    "connector_id": "test_files",
    "streams": [
        {
            "name": "files",
            "primary_key": ["id"],
            "schema": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "content": {
                        "type": "string",
                        "contentEncoding": "base64",
                        "contentMediaType": "application/pdf",
                    },
                    "content_base64": {"type": "string"},
                },
            },
        }
    ],
}
PDF_BYTES = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj <<>> endobj\n"
UNMISTAKABLE_BASE64 = base64.b64encode(bytes(range(256)) * 2).decode("ascii")


def _assert_field_not_text(error: StoreError, expected: dict[str, Any]) -> None:
    assert_store_error(error, "field_not_text", 422, "field")
    field = error.details["field"]
    assert field["text_like"] is False
    assert {key: field[key] for key in expected} == expected
    assert error.to_dict()["error"]["field"] == field  # the metadata travels on the wire


def test_declared_base64_field_is_not_text_and_carries_its_metadata(store: StoreFront) -> None:
    store.register_manifest(FILES_MANIFEST)
    store.add_connection("cin_files", "test_files")
    encoded = base64.b64encode(PDF_BYTES).decode("ascii")
    assert not looks_like_base64(encoded)  # short: base64 only because the manifest says so
    store.upsert_records(
        "cin_files",
        "files",
        [{"id": "f1", "content": encoded, "content_base64": "plain words, not base64"}],
    )
    grant = owner("files", "cin_files")
    expected = {
        "path": "content",
        "type": "string",
        "size_chars": len(encoded),
        "size_bytes": len(PDF_BYTES),
        "digest": sha256_of(encoded),
        "mime_type": "application/pdf",
        "binary_kind": "base64",
    }

    for args in ({}, {"offset_chars": 0, "limit_chars": 10}, {"q": encoded[:4]}):
        with pytest.raises(StoreError) as caught:
            store.read_field_window(grant, "cin_files/files:f1", "content", **args)
        _assert_field_not_text(caught.value, expected)

    # A field is base64 by declaration or content, never by its name.
    window = store.read_field_window(grant, "cin_files/files:f1", "content_base64").to_dict()
    assert window["window"]["text"] == "plain words, not base64"


def test_unmistakable_base64_content_is_not_text(store: StoreFront) -> None:
    setup_mailbox(store)
    assert looks_like_base64(UNMISTAKABLE_BASE64)
    hex_digest = sha256_of("x").removeprefix("sha256:") * 4  # long, but only hex: text
    store.upsert_records(
        MAILBOX, "message_bodies", [body("b64", UNMISTAKABLE_BASE64), body("hex", hex_digest)]
    )
    expected = {
        "path": BODY,
        "type": "string",
        "size_chars": len(UNMISTAKABLE_BASE64),
        "size_bytes": 512,
        "digest": sha256_of(UNMISTAKABLE_BASE64),
        "binary_kind": "base64",
    }

    _assert_field_not_text(_error(store, "b64"), expected)
    _assert_field_not_text(_error(store, "b64", q="AAEC"), expected)
    assert _read(store, "hex")["window"]["text"] == hex_digest


def test_a_string_holding_nul_is_not_text(store: StoreFront) -> None:
    setup_mailbox(store)
    value = "before\x00after é"
    store.upsert_records(MAILBOX, "message_bodies", [body("nul", value)])
    expected = {
        "path": BODY,
        "type": "string",
        "size_chars": len(value),
        "size_bytes": len(value.encode("utf-8")),
        "digest": sha256_of(value),
        "binary_kind": "binary",
    }

    _assert_field_not_text(_error(store, "nul"), expected)
    _assert_field_not_text(_error(store, "nul", offset_chars=3, limit_chars=2), expected)
    _assert_field_not_text(_error(store, "nul", q="after"), expected)
    # The other fields of the record read as usual.
    assert _read(store, "nul", "charset")["window"]["text"] == "utf-8"


# -- property: every window is a slice ----------------------------------------------------------


@on_one_store()
@given(
    text=unicode_texts(),
    offset=st.integers(0, 3 * CHUNK_CHARS + 200),
    limit=st.one_of(st.integers(1, 3 * CHUNK_CHARS), st.integers(16_000, 17_000)),
)
def test_property_every_window_is_the_python_slice(
    each_database: Store, text: str, offset: int, limit: int
) -> None:
    assume(not looks_like_base64(text))  # stored as binary-only by design: not this property
    record_id = example_body(each_database, text)

    envelope = each_database.read_field_window(
        OWNER, ref_id(record_id), BODY, offset_chars=offset, limit_chars=limit
    ).to_dict()

    effective = min(limit, 16384)
    window = assert_window(envelope, text, offset, effective)
    assert set(window) == set(WINDOW_KEYS)
    assert envelope["field"]["size_chars"] == len(text)
    assert envelope["field"]["digest"] == sha256_of(text)
    clamped = [{"code": "limit_clamped", "param": "limit_chars"}] if limit > 16384 else []
    assert envelope["meta"]["warnings"] == clamped
    if window["next_cursor"] is not None:
        following = each_database.read_field_window(
            OWNER, ref_id(record_id), BODY, cursor=window["next_cursor"]
        ).to_dict()
        assert_window(following, text, window["end_chars"], effective)
