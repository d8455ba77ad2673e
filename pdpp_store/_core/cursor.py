"""Signed, digest-bound cursors (docs/contract.md §4): mint and open, with key rotation; no I/O.

A cursor names a position in one field of one record, read under one grant, as the field was
when the cursor was minted. Token layout (bytes, then base64url without padding):

    version   1 byte     VERSION (1)
    key id    1 byte     which `CursorKey` signed it (0..255)
    digest    16 bytes   first 16 bytes of the field's SHA-256 digest when minted
    offset    varint     unsigned LEB128, minimal, at most 9 bytes (< 2**63)
    limit     varint     unsigned LEB128, minimal, 1..16384
    mac       16 bytes   HMAC-SHA256(secret, version | key id | binding | digest | varints)[:16]

A token is 36 to 46 bytes, so 48 to 62 characters; a cursor for offset 4096, limit 4096 is 38
bytes, 51 characters (measured in the tests).

Rules:
1. The binding (`cursor_binding`: grant fingerprint, connection, stream, record id, field) is
   MACed but not carried: the reader supplies it from the request, so a cursor used for another
   record, field or grant fails the MAC and is `invalid_cursor`, like any forgery.
2. The digest prefix is carried and MACed, so a stale cursor (the field changed since:
   `stale_cursor`) is told from a forged one. The store compares it (`CursorState.digest_start`)
   in SQL, so changed text never leaves the database, and again on the digest read with it.
3. `CursorCodec.open` accepts exactly the tokens `mint` produces: any other input (wrong type,
   non-canonical base64url, unknown version or key, truncation, trailing bytes, non-minimal
   varints, bad MAC, limit out of range) is `BadRequest("invalid_cursor", param="cursor")`,
   never another exception.
4. Rotation: `mint` signs with the active key; `open` tries every key (active, then previous)
   whose id matches the token's.
5. Search page cursors (`mint_page`/`open_page`) use the same keys and MAC with their own
   version byte (`PAGE_VERSION`): `version | key id | JSON [connection, stream, record id] |
   mac`, the MAC over the page binding (grant and query, `query.page_binding`) too. A page
   cursor is never accepted as a window cursor, nor the reverse.
6. Match cursors (`mint_match`/`open_match`, `MATCH_VERSION`) continue a match window at its
   next occurrence: `version | key id | digest prefix | varints from, before, after, limit (0:
   none) | the needle as written (UTF-8) | mac`, MACed over the window binding (record, field,
   grant) like a window cursor, so the same rules hold: another record, field or grant is
   `invalid_cursor`; a changed field is `stale_cursor`.
7. `query_records` cursors use the same keys and MAC with their own version bytes: a list page
   cursor (`LIST_VERSION`, `mint_list_page`/`open_list_page`: the position after the page's last
   row) is bound to the grant, stream, connection, filter, order, fields and mode
   (`list_binding`); a changes bookmark (`BOOKMARK_VERSION`, `mint_bookmark`/`open_bookmark`:
   per connection, the last change seen) is bound to the grant and stream only
   (`bookmark_binding`), so it may be asked again with another filter or projection. Bodies are
   canonical JSON; neither is accepted as the other, nor as a search or window cursor.
8. A changes bookmark is sealed, not only signed: AES-GCM (`cryptography`) under a key derived
   from the signing key, a random nonce per bookmark, the header and binding as associated data,
   and each position written at a fixed width. Its positions count every change of the
   connection, those the grant cannot see included, so a bookmark whose numbers could be read
   (or compared, or measured by length) would tell a grantee how much it cannot see changed
   between two walks; sealed, two bookmarks say nothing but the connections they name.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from hmac import compare_digest
from hmac import digest as hmac_digest
from os import urandom

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import BadRequest
from .window import MAX_LIMIT_CHARS

__all__ = [
    "MAX_CURSOR_OFFSET",
    "VERSION",
    "CursorCodec",
    "CursorKey",
    "CursorState",
    "bookmark_binding",
    "cursor_binding",
    "list_binding",
    "mint_bookmark",
    "mint_list_page",
    "open_bookmark",
    "open_list_page",
]

VERSION = 1
PAGE_VERSION = 2
MATCH_VERSION = 3
LIST_VERSION = 4
BOOKMARK_VERSION = 6
_MAX_PAGE_TOKEN_CHARS = 16384
MAX_CURSOR_OFFSET = 2**63 - 1
_PREFIX_BYTES = 16
MINTED_KEPT = 1024
"""Cursors a codec remembers having minted (`CursorCodec._minted`); then it starts again."""
_MAC_BYTES = 16
_OFFSET_MAX_BYTES = 9
_LIMIT_MAX_BYTES = 3
_MAX_TOKEN_CHARS = 64
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")
_BINDING_DOMAIN = b"pdpp-store/cursor-binding/v1"
_INNER_PAD = bytes(byte ^ 0x36 for byte in range(256))
_OUTER_PAD = bytes(byte ^ 0x5C for byte in range(256))
_TO_URLSAFE = bytes.maketrans(b"+/", b"-_")
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")
_PADDING = (b"", b"", b"==", b"=")
"""The `=` padding a base64 text of `len % 4` characters lacks (1 is never valid)."""
_SMALL = tuple(bytes((value,)) for value in range(0x80))


@lru_cache(maxsize=4096)
def _digest_prefix(digest: str) -> bytes | None:
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    return bytes.fromhex(match.group(1))[:_PREFIX_BYTES] if match else None


_HMAC_BLOCK = 64
"""SHA-256's block size: an HMAC key is padded (or first hashed) to it (RFC 2104)."""


@dataclass(frozen=True, slots=True)
class CursorKey:
    """One signing key: `key_id` 0..255 is written into each token it signs."""

    key_id: int
    secret: bytes = field(repr=False)
    pads: tuple[hashlib._Hash, hashlib._Hash] = field(init=False, repr=False, compare=False)
    """The SHA-256 states after the key's inner and outer HMAC pads, hashed once: each MAC
    copies them (`_mac`) instead of deriving the pads again, as a one-shot HMAC does."""

    def __post_init__(self) -> None:
        if not isinstance(self.key_id, int) or isinstance(self.key_id, bool):
            raise TypeError("key_id must be an int")
        if not 0 <= self.key_id <= 255:
            raise ValueError("key_id must be between 0 and 255")
        if not isinstance(self.secret, bytes) or len(self.secret) < 16:
            raise ValueError("secret must be at least 16 bytes")
        key = self.secret
        if len(key) > _HMAC_BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_HMAC_BLOCK, b"\0")
        inner = hashlib.sha256(key.translate(_INNER_PAD))
        outer = hashlib.sha256(key.translate(_OUTER_PAD))
        object.__setattr__(self, "pads", (inner, outer))


@dataclass(frozen=True, slots=True)
class CursorState:
    """What an authentic cursor says: the field's digest prefix, an offset and a limit."""

    digest_prefix: bytes
    offset_chars: int
    limit_chars: int

    def __post_init__(self) -> None:
        if not isinstance(self.digest_prefix, bytes) or len(self.digest_prefix) != _PREFIX_BYTES:
            raise ValueError(f"digest_prefix must be {_PREFIX_BYTES} bytes")
        if not 0 <= self.offset_chars <= MAX_CURSOR_OFFSET:
            raise ValueError("offset_chars out of range")
        if not 1 <= self.limit_chars <= MAX_LIMIT_CHARS:
            raise ValueError("limit_chars out of range")

    @property
    def digest_start(self) -> str:
        """How the digest the cursor was minted for begins (`sha256:` and 32 hex digits): the
        field is unchanged exactly when its digest still starts with this (Rule 2)."""
        return "sha256:" + self.digest_prefix.hex()


@lru_cache(maxsize=4096)
def cursor_binding(
    grant_fingerprint: bytes, connection_id: str, stream: str, record_id: str, field: str
) -> bytes:
    """The 16-byte binding of a cursor to a grant, a record and a field.

    Each part is length-prefixed (8 bytes, big-endian), so no two different tuples of parts
    encode alike (e.g. `("ab", "c")` and `("a", "bc")`). Computed once per distinct binding.
    """
    hasher = hashlib.sha256(_BINDING_DOMAIN)
    parts = [grant_fingerprint] + [
        text.encode("utf-8", "surrogatepass") for text in (connection_id, stream, record_id, field)
    ]
    for part in parts:
        hasher.update(len(part).to_bytes(8, "big"))
        hasher.update(part)
    return hasher.digest()[:16]


def _varint(value: int) -> bytes:
    if 0 <= value < 0x80:
        return _SMALL[value]
    if 0x80 <= value < 0x4000:
        return bytes((value & 0x7F | 0x80, value >> 7))
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _read_varint(data: bytes, pos: int, max_bytes: int) -> tuple[int, int]:
    """Read a minimal LEB128 varint at `pos`; return it and the position after it."""
    value = 0
    for index in range(max_bytes):
        if pos + index >= len(data):
            raise _invalid("is truncated")
        byte = data[pos + index]
        value |= (byte & 0x7F) << (7 * index)
        if not byte & 0x80:
            if byte == 0 and index > 0:
                raise _invalid("is not canonical")
            return value, pos + index + 1
    raise _invalid("has an over-long number")


def _invalid(why: str) -> BadRequest:
    return BadRequest("invalid_cursor", f"cursor {why}", param="cursor")


def _b64encode(data: bytes) -> str:
    """base64url without padding (binascii's, as `base64.urlsafe_b64encode` is, with fewer
    steps: two are minted per window read)."""
    encoded = binascii.b2a_base64(data, newline=False).translate(_TO_URLSAFE)
    return encoded.rstrip(b"=").decode("ascii")


def _b64decode(token: str) -> bytes | None:
    """The bytes of which `token` is the canonical base64url spelling (unpadded), or None.
    Whatever a lenient decoder makes of the text, only a text that re-encodes to itself is
    accepted, so its alphabet, padding and unused low bits need no check of their own."""
    try:
        padded = token.encode("ascii").translate(_FROM_URLSAFE) + _PADDING[len(token) % 4]
        data = binascii.a2b_base64(padded)
    except (UnicodeEncodeError, binascii.Error):
        return None
    return data if _b64encode(data) == token else None


def _b64decode_strict(token: str) -> bytes:
    if len(token) > _MAX_TOKEN_CHARS or len(token) % 4 == 1:
        raise _invalid("has the wrong length")
    data = _b64decode(token)
    if data is None:
        raise _invalid("is not canonical base64url")
    return data


def _check_binding(binding: bytes) -> None:
    if not isinstance(binding, bytes) or len(binding) != 16:
        raise ValueError("binding must be the 16 bytes of cursor_binding()")


class CursorCodec:
    """Mints cursors with the active key and opens cursors signed by any known key."""

    __slots__ = ("_active", "_by_id", "_header", "_minted", "_previous", "key_ids")

    def __init__(self, active: CursorKey, previous: Sequence[CursorKey] = ()) -> None:
        if not isinstance(active, CursorKey) or not all(
            isinstance(key, CursorKey) for key in previous
        ):
            raise TypeError("keys must be CursorKey values")
        self._active = active
        self._previous = tuple(previous)
        self._header = bytes((VERSION, active.key_id))
        by_id: dict[int, tuple[CursorKey, ...]] = {}
        for key in (active, *self._previous):  # the active key first (Rule 4)
            by_id[key.key_id] = (*by_id.get(key.key_id, ()), key)
        self._by_id = by_id
        self.key_ids = frozenset(by_id)
        """The ids of the keys this codec opens cursors of."""
        self._minted: dict[tuple[str, bytes], CursorState] = {}
        """What the cursors this codec minted say, by token and binding (at most
        `MINTED_KEPT`): a cursor is usually read back by the process that minted it, and opening
        it then needs no decoding or MAC. Only `mint` adds to it, so a token found here under its
        binding is one this codec signed for that binding: as authentic as a verified one."""

    @property
    def active(self) -> CursorKey:
        return self._active

    @property
    def previous(self) -> tuple[CursorKey, ...]:
        return self._previous

    def claimed(self, token: object, binding: bytes) -> tuple[int, int] | None:
        """What `token_header` says of `token`, known without a look when this codec minted it
        for `binding`."""
        if type(token) is str and type(binding) is bytes and (token, binding) in self._minted:
            return VERSION, self._active.key_id
        return token_header(token)

    def keys(self, key_id: int) -> tuple[CursorKey, ...]:
        """The keys with this id (the active one first), which may have signed a token."""
        return self._by_id.get(key_id, ())

    def mint(self, binding: bytes, digest: str, offset_chars: int, limit_chars: int) -> str:
        """A cursor for `offset_chars`/`limit_chars` in the field of `digest`, under `binding`."""
        _check_binding(binding)
        prefix = _digest_prefix(digest)
        if prefix is None:
            raise ValueError("digest must be 'sha256:' and 64 lowercase hex digits")
        if not (0 <= offset_chars <= MAX_CURSOR_OFFSET and 1 <= limit_chars <= MAX_LIMIT_CHARS):
            CursorState(prefix, offset_chars, limit_chars)  # raises, naming the number
        header = self._header
        body = prefix + _varint(offset_chars) + _varint(limit_chars)
        token = _b64encode(header + body + _mac(self._active, header, binding, body))
        minted = self._minted
        if len(minted) >= MINTED_KEPT:
            minted.clear()
        minted[token, binding] = CursorState(prefix, offset_chars, limit_chars)
        return token

    def open(self, token: object, binding: bytes) -> CursorState:
        """Verify `token` under `binding` and return what it says, or raise `invalid_cursor`.

        Whether the field has changed since (`CursorState.digest_start`) is the caller's question.
        """
        if type(token) is str and type(binding) is bytes:
            known = self._minted.get((token, binding))
            if known is not None:
                return known
        _check_binding(binding)
        if not isinstance(token, str) or not token:
            raise _invalid("must be a non-empty string")
        data = _b64decode_strict(token)
        if len(data) < 2 + _PREFIX_BYTES:
            raise _invalid("is truncated")
        if data[0] != VERSION:
            raise _invalid("has an unknown version")
        keys = self._by_id.get(data[1])
        if not keys:
            raise _invalid("was signed by an unknown key")
        pos = 2 + _PREFIX_BYTES
        offset, pos = _read_varint(data, pos, _OFFSET_MAX_BYTES)
        limit, pos = _read_varint(data, pos, _LIMIT_MAX_BYTES)
        if len(data) != pos + _MAC_BYTES:
            raise _invalid("has the wrong length")
        header, body, mac = data[:2], data[2:pos], data[pos:]
        if not _signed(keys, header, binding, body, mac):
            raise _invalid("is not valid for this record, field and grant")
        if not 1 <= limit <= MAX_LIMIT_CHARS:
            raise _invalid("has a limit out of range")
        return CursorState(body[:_PREFIX_BYTES], offset, limit)


def _signed(
    keys: Sequence[CursorKey], header: bytes, binding: bytes, body: bytes, mac: bytes
) -> bool:
    """Whether one of `keys` made `mac` (each is compared in constant time)."""
    return any(compare_digest(_mac(key, header, binding, body), mac) for key in keys)


def _page_invalid(why: str) -> BadRequest:
    return BadRequest("invalid_cursor", f"cursor {why}", param="cursor")


Position = tuple[float, str | None, str, str, str]
"""A place in the relevance or time order of search hits: (score, order-field instant or
None, connection id, stream, record id)."""


def mint_position(codec: CursorCodec, binding: bytes, position: Position) -> str:
    """A search page cursor for an ordered search: the position after the hit at `position`
    (a JSON array of five items under the same MAC as `mint_page`)."""
    return _mint_json(codec, PAGE_VERSION, binding, list(position))


def open_position(codec: CursorCodec, token: object, binding: bytes) -> Position:
    """The position a `mint_position` cursor names, or `invalid_cursor`."""
    value = _open_json(codec, token, PAGE_VERSION, binding, "grant and query")
    if not (
        isinstance(value, list)
        and len(value) == 5
        and isinstance(value[0], int | float)
        and not isinstance(value[0], bool)
        and (value[1] is None or isinstance(value[1], str))
        and all(isinstance(v, str) for v in value[2:])
    ):
        raise _page_invalid("is malformed")
    return float(value[0]), value[1], value[2], value[3], value[4]


def mint_page(codec: CursorCodec, binding: bytes, key: tuple[str, str, str]) -> str:
    """A search page cursor: the position after the hit `key`, under `binding`."""
    return _mint_json(codec, PAGE_VERSION, binding, list(key))


def open_page(codec: CursorCodec, token: object, binding: bytes) -> tuple[str, str, str]:
    """The hit key a page cursor names, or `invalid_cursor` (also when used for another grant,
    query or filter: the binding is part of the MAC)."""
    value = _open_json(codec, token, PAGE_VERSION, binding, "grant and query")
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, str) for v in value)):
        raise _page_invalid("is malformed")
    return value[0], value[1], value[2]


@dataclass(frozen=True, slots=True)
class MatchCursorState:
    """What an authentic match cursor says: continue `q` from `from_chars` in the field whose
    digest starts with `digest_prefix`, with the window arguments of the first read."""

    digest_prefix: bytes
    from_chars: int
    before_chars: int
    after_chars: int
    limit_chars: int | None
    q: str


def _decode_long(token: object, version: int) -> bytes:
    if not isinstance(token, str) or not token:
        raise _page_invalid("must be a non-empty string")
    if len(token) > _MAX_PAGE_TOKEN_CHARS or len(token) % 4 == 1:
        raise _page_invalid("has the wrong length")
    data = _b64decode(token)
    if data is None:
        raise _page_invalid("is not canonical base64url")
    if len(data) < 2 + _MAC_BYTES or data[0] != version:
        raise _page_invalid("has an unknown version")
    return data


def token_header(token: object) -> tuple[int, int] | None:
    """The version byte (1 window, 2 search page, 3 match) and the key id a cursor token claims,
    or None: a cheap look at its first four characters, verifying nothing."""
    head = _b64decode(token[:4]) if isinstance(token, str) and len(token) >= 4 else None
    return None if head is None else (head[0], head[1])


def mint_match(codec: CursorCodec, binding: bytes, digest: str, state: MatchCursorState) -> str:
    _check_binding(binding)
    prefix = _digest_prefix(digest)
    if prefix is None:
        raise ValueError("digest must be 'sha256:' and 64 lowercase hex digits")
    header = bytes((MATCH_VERSION, codec.active.key_id))
    body = (
        prefix
        + _varint(state.from_chars)
        + _varint(state.before_chars)
        + _varint(state.after_chars)
        + _varint(state.limit_chars or 0)
        + state.q.encode("utf-8")
    )
    return _b64encode(header + body + _mac(codec.active, header, binding, body))


def open_match(codec: CursorCodec, token: object, binding: bytes) -> MatchCursorState:
    _check_binding(binding)
    data = _decode_long(token, MATCH_VERSION)
    header, body, mac = data[:2], data[2:-_MAC_BYTES], data[-_MAC_BYTES:]
    if not _signed(codec.keys(data[1]), header, binding, body, mac):
        raise _invalid("is not valid for this record, field and grant")
    if len(body) < _PREFIX_BYTES + 4:
        raise _invalid("is truncated")
    pos = _PREFIX_BYTES
    numbers = []
    for _ in range(4):
        value, pos = _read_varint(body, pos, _OFFSET_MAX_BYTES)
        numbers.append(value)
    try:
        q = body[pos:].decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid("is malformed") from None
    start, before, after, limit = numbers
    if not q or limit > MAX_LIMIT_CHARS:
        raise _invalid("is malformed")
    return MatchCursorState(body[:_PREFIX_BYTES], start, before, after, limit or None, q)


def codec_for_stored_keys(stored: Sequence[tuple[int, bytes]]) -> CursorCodec:
    """The codec for a store's own keys, newest first: the newest signs, all verify."""
    keys = [CursorKey(key_id, secret) for key_id, secret in stored]
    return CursorCodec(keys[0], keys[1:])


def _mac(key: CursorKey, header: bytes, binding: bytes, body: bytes) -> bytes:
    """HMAC-SHA256 (RFC 2104) of `header | binding | body` under `key`, truncated: the same bytes
    as `hmac.digest(key.secret, ..., "sha256")`, from the key's pads hashed once (`CursorKey.pads`)
    instead of twice per MAC, which was half of a one-shot HMAC's cost."""
    inner_pad, outer_pad = key.pads
    inner = inner_pad.copy()
    inner.update(header + binding + body)
    outer = outer_pad.copy()
    outer.update(inner.digest())
    return outer.digest()[:_MAC_BYTES]


def _parts_binding(domain: bytes, parts: Sequence[bytes | str]) -> bytes:
    hasher = hashlib.sha256(domain)
    for part in parts:
        data = part if isinstance(part, bytes) else part.encode("utf-8", "surrogatepass")
        hasher.update(len(data).to_bytes(8, "big"))
        hasher.update(data)
    return hasher.digest()[:16]


def list_binding(  # noqa: PLR0917 - everything that shaped a page, in one order
    grant_fingerprint: bytes,
    stream: str,
    connection_id: str | None,
    filter_fingerprint: bytes,
    order: str,
    fields: Sequence[str] | None,
    mode: str,
) -> bytes:
    """The 16 bytes a `query_records` page cursor is bound to (Rule 7)."""
    shown = "\x00" if fields is None else json.dumps(list(fields), ensure_ascii=False)
    return _parts_binding(
        b"pdpp-store/list-page/v1",
        [grant_fingerprint, stream, connection_id or "", filter_fingerprint, order, shown, mode],
    )


def bookmark_binding(grant_fingerprint: bytes, stream: str) -> bytes:
    """The 16 bytes a changes bookmark is bound to: the grant and the stream (Rule 7)."""
    return _parts_binding(b"pdpp-store/changes-bookmark/v1", [grant_fingerprint, stream])


def _mint_json(codec: CursorCodec, version: int, binding: bytes, value: object) -> str:
    _check_binding(binding)
    header = bytes((version, codec.active.key_id))
    body = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode(
        "utf-8", "surrogatepass"
    )
    return _b64encode(header + body + _mac(codec.active, header, binding, body))


def _open_json(
    codec: CursorCodec, token: object, version: int, binding: bytes, what: str
) -> object:
    _check_binding(binding)
    data = _decode_long(token, version)
    header, body, mac = data[:2], data[2:-_MAC_BYTES], data[-_MAC_BYTES:]
    if not _signed(codec.keys(data[1]), header, binding, body, mac):
        raise _page_invalid(f"is not valid for this {what}")
    try:
        return json.loads(body.decode("utf-8"))
    except ValueError:
        raise _page_invalid("is malformed") from None


ListPosition = tuple[str | int | float | None, str, str]
"""After which row a list page goes on: (order value or None, connection_id, record_id)."""


def mint_list_page(codec: CursorCodec, binding: bytes, position: ListPosition) -> str:
    return _mint_json(codec, LIST_VERSION, binding, list(position))


def open_list_page(codec: CursorCodec, token: object, binding: bytes) -> ListPosition:
    """The position a list page cursor names, or `invalid_cursor` (a cursor of another grant,
    stream, connection, filter, order, fields or mode fails the MAC)."""
    value = _open_json(
        codec, token, LIST_VERSION, binding, "grant, stream, filter, order and fields"
    )
    if not (
        isinstance(value, list)
        and len(value) == 3
        and (value[0] is None or isinstance(value[0], str | int | float))
        and not isinstance(value[0], bool)
        and all(isinstance(part, str) for part in value[1:])
    ):
        raise _page_invalid("is malformed")
    return value[0], value[1], value[2]


_NONCE_BYTES = 12
_POSITION_DIGITS = 20
"""A bookmark's positions are written as 20 digits (2**63 has 19), so its length names only
its connections (Rule 8)."""


@lru_cache(maxsize=16)
def _sealer(key: CursorKey) -> AESGCM:
    """The AES-256-GCM key a signing key seals bookmarks with (an HMAC of its secret over a
    label: the signing key itself is never used to encrypt)."""
    return AESGCM(hmac_digest(key.secret, b"pdpp-store/changes-bookmark/seal/v1", "sha256"))


def mint_bookmark(codec: CursorCodec, binding: bytes, positions: dict[str, int]) -> str:
    """A changes bookmark: per connection, the last change seen, sealed (Rules 7 and 8)."""
    _check_binding(binding)
    header = bytes((BOOKMARK_VERSION, codec.active.key_id))
    body = json.dumps(
        {k: f"{positions[k]:0{_POSITION_DIGITS}d}" for k in sorted(positions)},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8", "surrogatepass")
    nonce = urandom(_NONCE_BYTES)
    sealed = _sealer(codec.active).encrypt(nonce, body, header + binding)
    return _b64encode(header + nonce + sealed)


def _unsealed(codec: CursorCodec, token: object, binding: bytes) -> object:
    _check_binding(binding)
    data = _decode_long(token, BOOKMARK_VERSION)
    if len(data) < 2 + _NONCE_BYTES + _MAC_BYTES:  # the GCM tag is as long as a MAC
        raise _page_invalid("has the wrong length")
    header, nonce, sealed = data[:2], data[2 : 2 + _NONCE_BYTES], data[2 + _NONCE_BYTES :]
    for key in codec.keys(data[1]):
        try:
            body = _sealer(key).decrypt(nonce, sealed, header + binding)
        except InvalidTag:
            continue
        try:
            return json.loads(body.decode("utf-8"))
        except ValueError:
            break
    raise _page_invalid("is not valid for this grant and stream")


def open_bookmark(
    codec: CursorCodec, token: object, binding: bytes, *, param: str = "changes_since"
) -> dict[str, int]:
    try:
        value = _unsealed(codec, token, binding)
    except BadRequest as exc:
        raise BadRequest(
            "invalid_cursor", exc.message.replace("cursor", param, 1), param=param
        ) from None
    if not (
        isinstance(value, dict)
        and all(
            isinstance(k, str)
            and isinstance(v, str)
            and len(v) == _POSITION_DIGITS
            and v.isascii()
            and v.isdigit()
            for k, v in value.items()
        )
    ):
        raise BadRequest("invalid_cursor", f"{param} is malformed", param=param)
    return {k: int(v) for k, v in value.items()}
