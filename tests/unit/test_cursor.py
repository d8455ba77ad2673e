"""Tests of `pdpp_store._core.cursor`: signed, digest-bound cursors."""

from __future__ import annotations

import base64
import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdpp_store._core.cursor import (
    MAX_CURSOR_OFFSET,
    CursorCodec,
    CursorKey,
    CursorState,
    _mac,
    bookmark_binding,
    cursor_binding,
    mint_bookmark,
    mint_list_page,
    open_bookmark,
)
from pdpp_store._core.errors import BadRequest

KEY = CursorKey(1, b"k" * 32)
OLD_KEY = CursorKey(0, b"o" * 16)
CODEC = CursorCodec(KEY, [OLD_KEY])
DIGEST = "sha256:" + hashlib.sha256(b"body text").hexdigest()
OTHER_DIGEST = "sha256:" + hashlib.sha256(b"edited text").hexdigest()
GRANT = b"grant-fingerprint"
BINDING = cursor_binding(GRANT, "cin_a", "emails", "e1", "body")


def _decode(token: str) -> bytes | None:
    """Lenient decoding (any alphabet, padding optional), or None."""
    try:
        padded = token + "=" * (-len(token) % 4)
        return base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except ValueError:
        return None


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _assert_invalid(token: object, binding: bytes = BINDING, codec: CursorCodec = CODEC) -> None:
    with pytest.raises(BadRequest) as info:
        codec.open(token, binding)
    assert (info.value.code, info.value.param) == ("invalid_cursor", "cursor")


# -- round trips ------------------------------------------------------------------------------


@given(
    st.integers(min_value=0, max_value=MAX_CURSOR_OFFSET),
    st.integers(min_value=1, max_value=16384),
    st.binary(),
)
def test_round_trip(offset: int, limit: int, content: bytes) -> None:
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    token = CODEC.mint(BINDING, digest, offset, limit)
    state = CODEC.open(token, BINDING)
    assert (state.offset_chars, state.limit_chars) == (offset, limit)
    assert digest.startswith(state.digest_start)
    assert 48 <= len(token) <= 62
    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def test_documented_length() -> None:
    assert len(CODEC.mint(BINDING, DIGEST, 4096, 4096)) == 51
    assert len(CODEC.mint(BINDING, DIGEST, 0, 1)) == 48
    assert len(CODEC.mint(BINDING, DIGEST, MAX_CURSOR_OFFSET, 16384)) == 62


def test_stale_digest_is_detected_not_rejected() -> None:
    state = CODEC.open(CODEC.mint(BINDING, DIGEST, 10, 20), BINDING)
    assert not OTHER_DIGEST.startswith(state.digest_start)
    assert not DIGEST.upper().startswith(state.digest_start)
    assert state.digest_start == DIGEST[: len("sha256:") + 32]
    assert state.digest_prefix == bytes.fromhex(DIGEST[7:])[:16]


@pytest.mark.parametrize(
    ("offset", "limit", "digest", "binding"),
    [
        (-1, 1, DIGEST, BINDING),
        (MAX_CURSOR_OFFSET + 1, 1, DIGEST, BINDING),
        (0, 0, DIGEST, BINDING),
        (0, 16385, DIGEST, BINDING),
        (0, 1, "md5:abc", BINDING),
        (0, 1, DIGEST, b"short"),
    ],
)
def test_mint_refuses_bad_arguments(offset: int, limit: int, digest: str, binding: bytes) -> None:
    with pytest.raises(ValueError, match=r"must|range"):
        CODEC.mint(binding, digest, offset, limit)


def test_keys_validate() -> None:
    with pytest.raises(ValueError, match="key_id"):
        CursorKey(256, b"s" * 16)
    with pytest.raises(ValueError, match="secret"):
        CursorKey(0, b"s" * 15)
    with pytest.raises(TypeError):
        CursorKey(True, b"s" * 16)
    assert "kkkk" not in repr(KEY)


# -- binding ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "other",
    [
        cursor_binding(b"other-grant", "cin_a", "emails", "e1", "body"),
        cursor_binding(GRANT, "cin_b", "emails", "e1", "body"),
        cursor_binding(GRANT, "cin_a", "chats", "e1", "body"),
        cursor_binding(GRANT, "cin_a", "emails", "e2", "body"),
        cursor_binding(GRANT, "cin_a", "emails", "e1", "subject"),
    ],
)
def test_cursor_for_another_record_field_or_grant_fails(other: bytes) -> None:
    assert other != BINDING
    _assert_invalid(CODEC.mint(BINDING, DIGEST, 0, 10), other)


def test_binding_parts_are_unambiguous() -> None:
    assert cursor_binding(b"g", "ab", "c", "r", "f") != cursor_binding(b"g", "a", "bc", "r", "f")
    assert cursor_binding(b"g", "a", "b", "c:d", "f") != cursor_binding(b"g", "a", "b:c", "d", "f")
    assert len(BINDING) == 16


# -- rotation ---------------------------------------------------------------------------------


def test_rotation() -> None:
    old_token = CursorCodec(OLD_KEY).mint(BINDING, DIGEST, 5, 6)
    assert CursorCodec(KEY, [OLD_KEY]).open(old_token, BINDING).offset_chars == 5
    _assert_invalid(old_token, codec=CursorCodec(KEY))
    # Two keys may share an id during a botched rotation: each is tried.
    twin = CursorKey(0, b"t" * 16)
    assert CursorCodec(twin, [OLD_KEY]).open(old_token, BINDING).limit_chars == 6
    _assert_invalid(old_token, codec=CursorCodec(twin))


# -- rejection --------------------------------------------------------------------------------


def _forge(body: bytes, binding: bytes = BINDING, key: CursorKey = KEY) -> str:
    """A correctly signed token around an arbitrary body (what a key holder could mint)."""
    header = bytes((1, key.key_id))
    return _encode(header + body + _mac(key, header, binding, body))


PREFIX = bytes.fromhex(DIGEST[7:])[:16]


@pytest.mark.parametrize(
    "token",
    [
        None,
        b"abc",
        42,
        "",
        "A",
        "====",
        "x" * 65,
        CODEC.mint(BINDING, DIGEST, 0, 10) + "=",
        CODEC.mint(BINDING, DIGEST, 0, 10) + " ",
        " " + CODEC.mint(BINDING, DIGEST, 0, 10),
        _forge(PREFIX + b"\x00\x00"),  # limit 0
        _forge(PREFIX + b"\x00\x81\x80\x01"),  # limit 16385
        _forge(PREFIX + b"\x80\x00\x0a"),  # offset 0 spelled in two bytes
        _forge(PREFIX + b"\x00\x8a\x00"),  # limit 10 spelled in two bytes
        _forge(PREFIX + b"\x80" * 9 + b"\x01\x0a"),  # offset too long
        _forge(PREFIX + b"\x00\x80\x80\x80\x01"),  # limit too long
        _forge(PREFIX + b"\x00\x0a\x00"),  # trailing byte inside the MAC
        _forge(PREFIX + b"\x00"),  # no limit
        _forge(PREFIX[:8]),
    ],
)
def test_invalid_tokens(token: object) -> None:
    _assert_invalid(token)


def test_version_and_key_id_are_checked() -> None:
    data = bytearray(_decode(CODEC.mint(BINDING, DIGEST, 0, 10)) or b"")
    for index, value in ((0, 2), (0, 0), (1, 7)):
        mutant = bytearray(data)
        mutant[index] = value
        _assert_invalid(_encode(bytes(mutant)))


def test_spliced_cursors_fail() -> None:
    first = _decode(CODEC.mint(BINDING, DIGEST, 100, 10)) or b""
    second = _decode(CODEC.mint(BINDING, OTHER_DIGEST, 200, 20)) or b""
    for cut in range(min(len(first), len(second))):
        for spliced in (first[:cut] + second[cut:], second[:cut] + first[cut:]):
            if spliced not in (first, second):  # a cut inside the shared header is no splice
                _assert_invalid(_encode(spliced))


_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/= \n"


@st.composite
def mutants(draw: st.DrawFn, token: str) -> tuple[str, bytes | None]:
    """A mutant of `token`, and the other valid token's bytes it may legitimately equal."""
    data = bytearray(_decode(token) or b"")
    kind = draw(
        st.sampled_from(
            ["flip", "drop", "insert", "swap", "truncate", "pad", "standard", "char", "splice"]
        )
    )
    index = draw(st.integers(min_value=0, max_value=len(data) - 1))
    if kind == "flip":
        data[index] ^= 1 << draw(st.integers(min_value=0, max_value=7))
    elif kind == "drop":
        del data[index]
    elif kind == "insert":
        data.insert(index, draw(st.integers(min_value=0, max_value=255)))
    elif kind == "swap":
        second = draw(st.integers(min_value=0, max_value=len(data) - 1))
        data[index], data[second] = data[second], data[index]
    elif kind == "truncate":
        del data[index:]
    elif kind == "pad":
        padding = draw(st.sampled_from(["", "=", "=="]))
        return base64.urlsafe_b64encode(bytes(data)).decode("ascii") + padding, None
    elif kind == "standard":
        return base64.b64encode(bytes(data)).decode("ascii").rstrip("="), None
    elif kind == "char":
        position = draw(st.integers(min_value=0, max_value=len(token) - 1))
        char = draw(st.sampled_from(_ALPHABET))
        return token[:position] + char + token[position + 1 :], None
    else:  # splice with another valid cursor
        digest = draw(st.sampled_from([DIGEST, OTHER_DIGEST]))
        offset = draw(st.integers(min_value=0, max_value=10**6))
        limit = draw(st.integers(min_value=1, max_value=16384))
        other = _decode(CODEC.mint(BINDING, digest, offset, limit)) or b""
        cut = draw(st.integers(min_value=0, max_value=len(other)))
        return _encode(bytes(data[:cut] + other[cut:])), other
    return _encode(bytes(data)), None


@given(
    st.integers(min_value=0, max_value=10**9),
    st.integers(min_value=1, max_value=16384),
    st.data(),
)
def test_mutants_are_rejected_or_identical(offset: int, limit: int, data: st.DataObject) -> None:
    token = CODEC.mint(BINDING, DIGEST, offset, limit)
    original = CODEC.open(token, BINDING)
    mutant, spliced_with = data.draw(mutants(token))
    try:
        state = CODEC.open(mutant, BINDING)
    except BadRequest as exc:
        error: BadRequest | None = exc
    else:
        error = None
    if error is not None:
        assert (error.code, error.param) == ("invalid_cursor", "cursor")
    else:
        if spliced_with is not None and _decode(mutant) == spliced_with:
            return  # the splice kept all of the other cursor: it is that valid cursor
        assert _decode(mutant) == _decode(token)
        assert state == original


@given(st.text(max_size=80))
def test_random_text_is_invalid(token: str) -> None:
    _assert_invalid(token)


@given(st.binary(max_size=60))
def test_random_bytes_are_invalid(data: bytes) -> None:
    _assert_invalid(_encode(data))


def test_state_validates() -> None:
    with pytest.raises(ValueError, match="digest_prefix"):
        CursorState(b"short", 0, 1)
    with pytest.raises(ValueError, match="limit_chars"):
        CursorState(PREFIX, 0, 0)


# -- the MAC and the codec's memory of its own cursors ----------------------------------------


@given(st.binary(min_size=16, max_size=200), st.binary(max_size=300))
def test_mac_is_hmac_sha256(secret: bytes, body: bytes) -> None:
    import hmac

    key = CursorKey(3, secret)
    expected = hmac.digest(secret, b"\x01\x03" + BINDING + body, "sha256")[:16]
    assert _mac(key, b"\x01\x03", BINDING, body) == expected


def test_a_remembered_cursor_opens_as_a_verified_one() -> None:
    codec = CursorCodec(KEY, [OLD_KEY])
    token = codec.mint(BINDING, DIGEST, 4096, 512)
    fresh = CursorCodec(KEY, [OLD_KEY])  # the same keys, nothing remembered: decoded and MACed
    assert codec.open(token, BINDING) == fresh.open(token, BINDING)
    assert codec.claimed(token, BINDING) == fresh.claimed(token, BINDING) == (1, KEY.key_id)
    # Remembered for its own binding only: under another, it is verified, and refused.
    other = cursor_binding(GRANT, "cin_a", "emails", "e2", "body")
    _assert_invalid(token, other, codec)
    # A codec without the minting key refuses it, whatever another codec remembers.
    _assert_invalid(token, codec=CursorCodec(OLD_KEY))


def test_the_codec_remembers_a_bounded_number_of_cursors() -> None:
    from pdpp_store._core.cursor import MINTED_KEPT

    codec = CursorCodec(KEY)
    tokens = [codec.mint(BINDING, DIGEST, offset, 10) for offset in range(MINTED_KEPT * 2 + 5)]
    assert len(codec._minted) <= MINTED_KEPT
    for offset, token in enumerate(tokens):  # forgotten or not, each still opens
        assert codec.open(token, BINDING).offset_chars == offset


# -- changes bookmarks: sealed (Rule 8) -------------------------------------------------------

BOOKMARK_BINDING = bookmark_binding(GRANT, "emails")


def _assert_bookmark_invalid(token: object, binding: bytes = BOOKMARK_BINDING) -> None:
    with pytest.raises(BadRequest) as info:
        open_bookmark(CODEC, token, binding)
    assert (info.value.code, info.value.param) == ("invalid_cursor", "changes_since")


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=12), st.integers(min_value=0, max_value=2**63 - 1), max_size=4
    )
)
def test_a_bookmark_round_trips(positions: dict[str, int]) -> None:
    assert (
        open_bookmark(CODEC, mint_bookmark(CODEC, BOOKMARK_BINDING, positions), BOOKMARK_BINDING)
        == positions
    )


def test_a_bookmark_tells_nothing_of_its_positions() -> None:
    """Sealed: the same positions twice give two unrelated tokens, and a bookmark's length is
    the same whether the connection changed once or a trillion times."""
    few, many = {"cin_a": 1}, {"cin_a": 10**12}
    tokens = [mint_bookmark(CODEC, BOOKMARK_BINDING, few) for _ in range(2)]
    assert tokens[0] != tokens[1]
    assert len(mint_bookmark(CODEC, BOOKMARK_BINDING, many)) == len(tokens[0])
    for token in tokens:
        data = _decode(token)
        assert data is not None
        assert b"cin_a" not in data


def test_a_bookmark_opens_only_for_its_grant_and_stream_and_untampered() -> None:
    token = mint_bookmark(CODEC, BOOKMARK_BINDING, {"cin_a": 7})
    _assert_bookmark_invalid(token, bookmark_binding(b"other-grant", "emails"))
    _assert_bookmark_invalid(token, bookmark_binding(GRANT, "messages"))
    data = _decode(token)
    assert data is not None
    for index in (1, 2, 13, 14, len(data) - 1):
        mutant = bytearray(data)
        mutant[index] ^= 0x01
        _assert_bookmark_invalid(_encode(bytes(mutant)))
    for cut in (2, 14, 29, len(data) - 1):
        _assert_bookmark_invalid(_encode(data[:cut]))
    # A list page cursor of the same grant is not a bookmark, nor is a window cursor.
    _assert_bookmark_invalid(mint_list_page(CODEC, BOOKMARK_BINDING, (None, "cin_a", "e1")))
    _assert_bookmark_invalid(CODEC.mint(BINDING, DIGEST, 0, 1))


def test_a_bookmark_survives_rotation() -> None:
    token = mint_bookmark(CursorCodec(OLD_KEY), BOOKMARK_BINDING, {"cin_a": 3})
    assert open_bookmark(CursorCodec(KEY, [OLD_KEY]), token, BOOKMARK_BINDING) == {"cin_a": 3}
    with pytest.raises(BadRequest):
        open_bookmark(CursorCodec(KEY), token, BOOKMARK_BINDING)
