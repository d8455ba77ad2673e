"""Tests of `pdpp_store._core.identity`: safe names, record references, handles and URIs."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from pdpp_store._core.errors import BadRequest, Conflict, StoreError
from pdpp_store._core.identity import (
    FieldWindowRef,
    RecordRef,
    UnscopedRecordRef,
    parse_field_window_uri,
    parse_record_ref,
    parse_record_uri,
    record_handle,
    validate_field_path,
    validate_safe_name,
)

T = TypeVar("T")

# -- strategies -------------------------------------------------------------------------------

_chars = st.one_of(
    st.characters(blacklist_characters="/\\\x00", blacklist_categories=["Cs"]),
    st.sampled_from(":\"' .名🙂é"),
)


def _is_safe(text: str) -> bool:
    return bool(text) and text != "." and ".." not in text


safe_names = st.text(_chars, min_size=1, max_size=20).filter(_is_safe)
# The id string splits at the first ':', so it is lossless for streams without one.
streams_for_ids = safe_names.filter(lambda text: ":" not in text)
field_paths = st.text(
    st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]), min_size=1
)
record_refs = st.builds(RecordRef, safe_names, safe_names, safe_names)

_selector_args = st.fixed_dictionaries(
    {},
    optional={
        "offset_chars": st.integers(min_value=0, max_value=2**70),
        "limit_chars": st.integers(min_value=1, max_value=2**40),
        "cursor": st.text(min_size=1, alphabet=st.characters(blacklist_categories=["Cs"])),
    },
)


def _b64(data: bytes, *, pad: bool = False) -> str:
    text = base64.urlsafe_b64encode(data).decode("ascii")
    return text if pad else text.rstrip("=")


def _raw_handle(parts: object) -> str:
    return _b64(json.dumps(parts, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _outcome(parse: Callable[[Any], T], value: object) -> tuple[Any, StoreError | None]:
    """`(result, None)` or `(None, error)`; any exception other than `StoreError` propagates."""
    try:
        return parse(value), None
    except StoreError as exc:
        return None, exc


# -- safe names and field paths ---------------------------------------------------------------


@pytest.mark.parametrize("value", ["cin_a", "e1", "a:b", "with space", "名前", "a.b", ".hidden"])
def test_safe_names(value: str) -> None:
    assert validate_safe_name(value, "stream") == value


@pytest.mark.parametrize(
    "value", ["", ".", "..", "a/b", "a\\b", "a..b", "..a", "a\x00b", None, 3, b"ab"]
)
def test_unsafe_names(value: object) -> None:
    with pytest.raises(BadRequest) as info:
        validate_safe_name(value, "stream")
    assert info.value.code == "invalid_request"
    assert info.value.param == "stream"
    assert "stream" in info.value.message


@pytest.mark.parametrize("path", ["body", "Unicode 名", "id.with.dot", 'say"when', "a:b", "a/b"])
def test_field_paths_are_literal(path: str) -> None:
    assert validate_field_path(path) == path


@pytest.mark.parametrize("path", ["", "a\x00", None, 1])
def test_invalid_field_paths(path: object) -> None:
    with pytest.raises(BadRequest) as info:
        validate_field_path(path, "fields")
    assert (info.value.code, info.value.param) == ("invalid_field_path", "fields")


@given(safe_names, safe_names, st.sampled_from(["", "..", "a/b", "x\\", ".", "a\x00"]))
def test_record_ref_validates_every_part(conn: str, stream: str, bad: str) -> None:
    for args, param in (
        ((bad, stream, "r"), "connection_id"),
        ((conn, bad, "r"), "stream"),
        ((conn, stream, bad), "record_id"),
    ):
        with pytest.raises(BadRequest) as info:
            RecordRef(*args)
        assert (info.value.code, info.value.param) == ("invalid_request", param)


# -- round trips ------------------------------------------------------------------------------


def test_record_ref_forms() -> None:
    ref = RecordRef("cin_a", "emails", "e1:part")
    assert ref.id == "cin_a/emails:e1:part"
    assert ref.uri == "pdpp://record/" + record_handle(ref)
    assert ref.handle == _raw_handle(["cin_a", "emails", "e1:part"])
    assert "=" not in ref.uri


@given(safe_names, streams_for_ids, safe_names)
def test_id_round_trip(conn: str, stream: str, record_id: str) -> None:
    ref = RecordRef(conn, stream, record_id)
    assert parse_record_ref(ref.id) == ref
    assert parse_record_ref(ref.id, connection_id=conn) == ref


@given(record_refs)
def test_record_uri_round_trip(ref: RecordRef) -> None:
    assert parse_record_uri(ref.uri) == ref
    assert parse_record_ref(ref.uri) == ref
    assert parse_record_ref(ref.uri, connection_id=ref.connection_id) == ref
    assert parse_record_ref(ref) is ref
    assert set(ref.handle) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    )


@given(record_refs, field_paths, _selector_args)
def test_field_window_uri_round_trip(
    ref: RecordRef, field: str, selector: dict[str, object]
) -> None:
    window = FieldWindowRef(ref, field, **selector)  # type: ignore[arg-type]
    assert window.uri.startswith("pdpp://field-window/")
    assert window.selector() == selector
    assert parse_field_window_uri(window.uri) == window


def test_field_window_handle_layout() -> None:
    window = FieldWindowRef(RecordRef("c", "s", "r"), "a/b", limit_chars=10, offset_chars=5)
    assert window.handle == _raw_handle(
        ["c", "s", "r", "a/b", {"offset_chars": 5, "limit_chars": 10}]
    )
    bare = FieldWindowRef(RecordRef("c", "s", "r"), "body")
    assert parse_field_window_uri(bare.uri) == bare


# -- legacy and connection conflicts ----------------------------------------------------------


def test_legacy_form_with_and_without_connection() -> None:
    assert parse_record_ref("emails:e1:x") == UnscopedRecordRef("emails", "e1:x")
    assert parse_record_ref("emails:e1", connection_id="cin_a") == RecordRef(
        "cin_a", "emails", "e1"
    )
    unscoped = UnscopedRecordRef("emails", "e1")
    assert unscoped.id == "emails:e1"
    assert parse_record_ref(unscoped) is unscoped
    assert parse_record_ref(unscoped, connection_id="c") == RecordRef("c", "emails", "e1")


@pytest.mark.parametrize(
    "value",
    [
        "cin_a/emails:e1",
        RecordRef("cin_a", "emails", "e1"),
        RecordRef("cin_a", "emails", "e1").uri,
    ],
)
def test_conflicting_connection(value: RecordRef | str) -> None:
    assert parse_record_ref(value, connection_id="cin_a") == RecordRef("cin_a", "emails", "e1")
    with pytest.raises(Conflict) as info:
        parse_record_ref(value, connection_id="cin_b")
    assert info.value.code == "conflicting_connection_id"
    assert info.value.param == "connection_id"
    assert info.value.http_status == 409


def test_explicit_connection_must_be_safe() -> None:
    with pytest.raises(BadRequest) as info:
        parse_record_ref("emails:e1", connection_id="../x")
    assert info.value.param == "connection_id"


# -- invalid input: always a typed error ------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "",
        "emails",
        "cin_a/emails",
        "cin_a/emails:",
        "cin_a/:e1",
        "/emails:e1",
        "cin_a/emails:e1/x",
        "cin_a/../x:e1",
        "cin_a/emails:..",
        "a\\b:c",
        ":e1",
        "pdpp://record/",
        "pdpp://record/!!",
        "pdpp://field-window/" + _raw_handle(["c", "s", "r", "f", {}]),
        None,
        42,
        ["c", "s", "r"],
    ],
)
def test_malformed_record_refs(value: object) -> None:
    with pytest.raises(BadRequest) as info:
        parse_record_ref(value)  # type: ignore[arg-type]
    assert (info.value.code, info.value.param) == ("invalid_request", "record")


_bad_record_handles = [
    _raw_handle(["c", "s"]),
    _raw_handle(["c", "s", "r", "x"]),
    _raw_handle(["c", "s", 1]),
    _raw_handle({"c": "s"}),
    _raw_handle(["c", "s", ".."]),
    _raw_handle(["c", "s", "a/b"]),
    _b64(b'["c","s","r"]', pad=True),
    _b64(b'["c", "s", "r"]'),
    _b64(b'["c","s","\\u0072"]'),
    _b64(b'["c","s","\\ud800"]'),
    _b64(b'["c","s","\xff"]'),
    _b64(b"[" * 100_000),
    _raw_handle(["c", "s", "~~"]).replace("-", "+"),  # standard alphabet
    _raw_handle(["c", "s", "ÿ"]).replace("_", "/"),
    _b64(b"9" * 5000),
    _raw_handle(["c", "s", "r"])[:-1],
    _raw_handle(["c", "s", "r"]) + "A",
    _raw_handle(["c", "s", "r"]) + "\n",
]


@pytest.mark.parametrize("handle", _bad_record_handles)
def test_malformed_record_handles(handle: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_record_uri("pdpp://record/" + handle)
    assert (info.value.code, info.value.param) == ("invalid_request", "uri")


def test_non_canonical_base64_is_refused() -> None:
    handle = record_handle(RecordRef("c", "s", "r"))  # 13 bytes: the last character has spare bits
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    other = alphabet[alphabet.index(handle[-1]) + 1]
    assert base64.urlsafe_b64decode(handle[:-1] + other + "==") == base64.urlsafe_b64decode(
        handle + "=="
    )
    with pytest.raises(BadRequest):
        parse_record_uri("pdpp://record/" + handle[:-1] + other)


@pytest.mark.parametrize(
    "parts",
    [
        ["c", "s", "r", "f"],
        ["c", "s", "r", "f", []],
        ["c", "s", "r", "", {}],
        ["c", "s", "r", "f\x00", {}],
        ["c", "s", "r", 1, {}],
        ["c", "s", "r", "f", {"q": "x"}],
        ["c", "s", "r", "f", {"offset_chars": -1}],
        ["c", "s", "r", "f", {"offset_chars": True}],
        ["c", "s", "r", "f", {"offset_chars": 1.0}],
        ["c", "s", "r", "f", {"limit_chars": 0}],
        ["c", "s", "r", "f", {"cursor": ""}],
        ["c", "s", "r", "f", {"cursor": 5}],
        ["c", "s", "r", "f", {"limit_chars": 1, "offset_chars": 0}],
        ["c", "/", "r", "f", {}],
    ],
)
def test_malformed_field_window_handles(parts: object) -> None:
    with pytest.raises(BadRequest) as info:
        parse_field_window_uri("pdpp://field-window/" + _raw_handle(parts))
    assert (info.value.code, info.value.param) == ("invalid_request", "uri")


@given(st.text())
def test_random_text_as_record_ref_is_a_typed_error_or_a_ref(value: str) -> None:
    ref, error = _outcome(parse_record_ref, value)
    if error is not None:
        assert (error.code, error.param) == ("invalid_request", "record")
    else:
        assert isinstance(ref, (RecordRef, UnscopedRecordRef))
        if isinstance(ref, RecordRef) and not value.startswith("pdpp://"):
            assert ref.id == value


@given(
    st.one_of(
        st.text(), st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    )
)
def test_random_handles_are_typed_errors(handle: str) -> None:
    for parse, prefix in (
        (parse_record_uri, "pdpp://record/"),
        (parse_field_window_uri, "pdpp://field-window/"),
    ):
        parsed, error = _outcome(parse, prefix + handle)
        if error is not None:
            assert (error.code, error.param) == ("invalid_request", "uri")
        else:  # only a canonical handle can parse, and then it is the one we were given
            assert parsed.uri == prefix + handle


@given(st.binary())
def test_random_bytes_as_handles_are_typed_errors(data: bytes) -> None:
    ref, error = _outcome(parse_record_uri, "pdpp://record/" + _b64(data))
    if error is not None:
        assert error.code == "invalid_request"
    else:
        assert ref.handle == _b64(data)


@given(record_refs, st.data())
def test_truncated_and_extended_handles_are_refused(ref: RecordRef, data: st.DataObject) -> None:
    handle = ref.handle
    cut = data.draw(st.integers(min_value=0, max_value=len(handle) - 1))
    extra = data.draw(st.text("ABCxyz019-_=+/ \n", min_size=1, max_size=4))
    for mutant in (handle[:cut], handle + extra):
        assume(mutant != handle)
        with pytest.raises(BadRequest) as info:
            parse_record_uri("pdpp://record/" + mutant)
        assert info.value.code == "invalid_request"


@given(st.one_of(st.none(), st.integers(), st.binary(), st.text()))
def test_garbage_uris_are_typed_errors(uri: object) -> None:
    for parse in (parse_record_uri, parse_field_window_uri):
        _, error = _outcome(parse, uri)
        assert error is None or error.code == "invalid_request"


@given(st.sampled_from(["", ".", "..", "a/b", "a\\b", "x..y", "\x00"]), st.data())
def test_unsafe_names_in_parts_are_refused(bad: str, data: st.DataObject) -> None:
    position = data.draw(st.integers(min_value=0, max_value=2))
    parts = ["c", "s", "r"]
    parts[position] = bad
    with pytest.raises(BadRequest) as info:
        parse_record_uri("pdpp://record/" + _raw_handle(parts))
    assert info.value.code == "invalid_request"
    with pytest.raises(BadRequest):
        RecordRef(*parts)


def test_field_window_ref_validates() -> None:
    ref = RecordRef("c", "s", "r")
    with pytest.raises(BadRequest) as info:
        FieldWindowRef(ref, "")
    assert info.value.code == "invalid_field_path"
    with pytest.raises(BadRequest) as info:
        FieldWindowRef(ref, "f", offset_chars=-1)
    assert (info.value.code, info.value.param) == ("invalid_window", "offset_chars")
    with pytest.raises(BadRequest) as info:
        FieldWindowRef(ref, "f", limit_chars=False)
    assert (info.value.code, info.value.param) == ("invalid_window", "limit_chars")
    with pytest.raises(BadRequest) as info:
        FieldWindowRef(ref, "f", cursor="")
    assert (info.value.code, info.value.param) == ("invalid_window", "cursor")
    with pytest.raises(BadRequest) as info:
        FieldWindowRef(("c", "s", "r"), "f")  # type: ignore[arg-type]
    assert info.value.param == "record"


@given(record_refs, field_paths, _selector_args)
def test_handles_are_the_minified_json_of_their_parts(
    ref: RecordRef, field: str, selector: dict[str, object]
) -> None:
    """The handles the store makes are spelled by hand, string by string; they are exactly the
    general encoding (`json.dumps(..., ensure_ascii=False, separators=(",", ":"))`)."""
    from pdpp_store._core.identity import _encode

    window = FieldWindowRef(ref, field, **selector)  # type: ignore[arg-type]
    names = [ref.connection_id, ref.stream, ref.record_id]
    assert ref.handle == _encode(names)
    assert window.handle == _encode([*names, field, window.selector()])
