"""Record identity (docs/contract.md §6): safe names, record references, ids, handles and resource
URIs.

Forms of a record reference, all parsed by `parse_record_ref`:

    RecordRef("cin_a", "emails", "e1")       the value itself
    "cin_a/emails:e1"                        self-contained id: split at the first '/', then the
                                             rest at the first ':' (a record id may hold ':')
    "emails:e1"                              legacy form; needs `connection_id=`, else it stays an
                                             `UnscopedRecordRef` that the store resolves against
                                             the grant (`ambiguous_connection` if several qualify)
    "pdpp://record/{handle}"                 resource URI

Blobs are named by content: `blob_sha256_<64 hex>` (`blob_id_for`, `is_blob_id`), and their
resource URI is `pdpp://blob/{blob_id}` (`blob_uri`); this module is the only place that spells
either.

Rules:
1. Connection ids, streams and record ids are safe names: non-empty strings with no '/', no '\\',
   no NUL, not '.' and no '..' anywhere. A value that exists is valid (checked when built).
2. Field paths are top-level keys taken literally ("id.with.dot", "a/b", 'say"when' are fine):
   only empty or NUL-containing paths are refused (`invalid_field_path`).
3. The id string is lossless only for streams without ':'; the handle is lossless always.
4. A handle is base64url, unpadded, of the minified UTF-8 JSON array of the parts. Decoding is
   strict: a handle is accepted only if re-encoding what it decodes to gives the same handle, so
   each reference has exactly one handle. Handles are names, never authority.
5. Bad input is always a typed `StoreError` (`invalid_request`, `invalid_window`,
   `conflicting_connection_id`), never another exception.
6. Names are bounded so that every key fits a Postgres B-tree entry (2,704 bytes) with room
   to spare: connection ids and streams at most `MAX_NAME_BYTES` (256) bytes of UTF-8,
   connector ids (URLs) 512, record ids and field paths 1,024 (`invalid_request`,
   `invalid_field_path`). See docs/decisions.md.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from json.encoder import encode_basestring as _json_string
from typing import Any

from .errors import BadRequest, Conflict
from .selector import URI_SELECTOR_ARGS

__all__ = [
    "BLOB_ID_PATTERN",
    "BLOB_ID_PREFIX",
    "BLOB_URI_PREFIX",
    "FIELD_WINDOW_URI_PREFIX",
    "MAX_CONNECTOR_ID_BYTES",
    "MAX_FIELD_PATH_BYTES",
    "MAX_NAME_BYTES",
    "MAX_RECORD_ID_BYTES",
    "RECORD_URI_PREFIX",
    "FieldWindowRef",
    "RecordRef",
    "UnscopedRecordRef",
    "blob_id_for",
    "blob_uri",
    "cursor_window_names",
    "cursor_window_uri",
    "is_blob_id",
    "is_unicode",
    "parse_field_window_uri",
    "parse_record_ref",
    "parse_record_uri",
    "record_handle",
    "validate_connector_id",
    "validate_field_path",
    "validate_safe_name",
]

RECORD_URI_PREFIX = "pdpp://record/"
FIELD_WINDOW_URI_PREFIX = "pdpp://field-window/"
BLOB_URI_PREFIX = "pdpp://blob/"

_HANDLE_ALPHABET = re.compile(r"[A-Za-z0-9_-]*")
BLOB_ID_PREFIX = "blob_sha256_"
BLOB_ID_PATTERN = BLOB_ID_PREFIX + "[0-9a-f]{64}"
"""A blob id as a regular expression (for a whole-string match; JSON Schemas anchor it)."""
_BLOB_ID = re.compile(BLOB_ID_PATTERN)


def blob_id_for(sha256_hex: str) -> str:
    """The id of the blob whose bytes have this SHA-256 (64 lowercase hex digits)."""
    return BLOB_ID_PREFIX + sha256_hex


def is_blob_id(value: object) -> bool:
    return isinstance(value, str) and _BLOB_ID.fullmatch(value) is not None


def blob_uri(blob_id: str) -> str:
    return BLOB_URI_PREFIX + blob_id


MAX_NAME_BYTES = 256
"""The longest connection id, connector id or stream name, in UTF-8 bytes (rule 6)."""
MAX_CONNECTOR_ID_BYTES = 512
"""The longest connector id (a URL, usually), in UTF-8 bytes (rule 6)."""
MAX_RECORD_ID_BYTES = 1024
"""The longest record id, in UTF-8 bytes (rule 6)."""
MAX_FIELD_PATH_BYTES = 1024
"""The longest field path, in UTF-8 bytes (rule 6)."""


def validate_safe_name(value: object, param: str, max_bytes: int | None = None) -> str:
    """Return `value` if it is a safe name (rule 1), else raise `invalid_request` naming `param`.
    A record id may be `MAX_RECORD_ID_BYTES` long, any other name `MAX_NAME_BYTES` (rule 6)."""
    if not isinstance(value, str) or not value:
        raise BadRequest("invalid_request", f"{param} must be a non-empty string", param=param)
    if max_bytes is None:
        max_bytes = MAX_RECORD_ID_BYTES if param.endswith("record_id") else MAX_NAME_BYTES
    if len(value) > max_bytes or _utf8_length(value) > max_bytes:
        raise BadRequest(
            "invalid_request", f"{param} must be at most {max_bytes} bytes of UTF-8", param=param
        )
    if "/" in value or "\\" in value or "\x00" in value or value == "." or ".." in value:
        raise BadRequest(
            "invalid_request",
            f"{param} must not contain '/', '\\', NUL or '..', nor be '.'",
            param=param,
        )
    if not is_unicode(value):
        raise BadRequest("invalid_request", f"{param} holds invalid Unicode", param=param)
    return value


def validate_connector_id(value: object, param: str = "connector_id") -> str:
    """A connector id: any non-empty string of valid Unicode without NUL, at most
    `MAX_CONNECTOR_ID_BYTES` (it is a URL, so '/' is fine); else `invalid_request`."""
    if (
        not isinstance(value, str)
        or not value
        or "\x00" in value
        or not is_unicode(value)
        or _utf8_length(value) > MAX_CONNECTOR_ID_BYTES
    ):
        raise BadRequest(
            "invalid_request",
            f"{param} must be a non-empty string of valid Unicode without NUL, "
            f"at most {MAX_CONNECTOR_ID_BYTES} bytes",
            param=param,
        )
    return value


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def is_unicode(text: str) -> bool:
    """False for a string no database can store: one holding a lone surrogate."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_field_path(value: object, param: str = "field") -> str:
    """Return `value` if it is a field path (rule 2), else raise `invalid_field_path`."""
    if type(value) is str:
        return _valid_path(value, param)
    return _check_field_path(value, param)


@lru_cache(maxsize=4096)
def _valid_path(value: str, param: str) -> str:
    """A path checked once per distinct text (a read checks the same few paths again and again;
    errors are never cached)."""
    return _check_field_path(value, param)


def _check_field_path(value: object, param: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value or not is_unicode(value):
        raise BadRequest(
            "invalid_field_path",
            f"{param} must be a non-empty string of valid Unicode without NUL",
            param=param,
        )
    if _utf8_length(value) > MAX_FIELD_PATH_BYTES:
        raise BadRequest(
            "invalid_field_path",
            f"{param} must be at most {MAX_FIELD_PATH_BYTES} bytes of UTF-8",
            param=param,
        )
    return value


@dataclass(frozen=True, slots=True)
class RecordRef:
    """A record, named by connection, stream and record id."""

    connection_id: str
    stream: str
    record_id: str

    def __post_init__(self) -> None:
        validate_safe_name(self.connection_id, "connection_id")
        validate_safe_name(self.stream, "stream")
        validate_safe_name(self.record_id, "record_id")

    @property
    def id(self) -> str:
        return f"{self.connection_id}/{self.stream}:{self.record_id}"

    @property
    def handle(self) -> str:
        return record_handle(self)

    @property
    def uri(self) -> str:
        return RECORD_URI_PREFIX + record_handle(self)

    @property
    def argument(self) -> str:
        """How a continuation names this record: the self-contained id, or the resource URI
        when the id would not parse back to this record (a stream holding ':', rule 3)."""
        own = self.id
        if parse_record_ref(own) == self:
            return own
        return self.uri


@dataclass(frozen=True, slots=True)
class UnscopedRecordRef:
    """A legacy `stream:record_id` reference whose connection is not known yet."""

    stream: str
    record_id: str

    def __post_init__(self) -> None:
        validate_safe_name(self.stream, "stream")
        validate_safe_name(self.record_id, "record_id")

    @property
    def id(self) -> str:
        return f"{self.stream}:{self.record_id}"

    def scoped(self, connection_id: str) -> RecordRef:
        return RecordRef(connection_id, self.stream, self.record_id)


def _check_optional_int(value: object, param: str, minimum: int) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest("invalid_window", f"{param} must be an integer >= {minimum}", param=param)


@dataclass(frozen=True, slots=True)
class FieldWindowRef:
    """A window of one field of a record, as a resource (`pdpp://field-window/{handle}`).

    The selector keys are those of `URI_SELECTOR_ARGS` (offset, limit, cursor); which may combine
    is checked when the window is read (`parse_selector`), so that the error is the same as for a
    direct read.
    """

    record: RecordRef
    field: str
    offset_chars: int | None = None
    limit_chars: int | None = None
    cursor: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.record, RecordRef):
            raise BadRequest("invalid_request", "record must be a RecordRef", param="record")
        validate_field_path(self.field)
        _check_optional_int(self.offset_chars, "offset_chars", 0)
        _check_optional_int(self.limit_chars, "limit_chars", 1)
        if self.cursor is not None and (not isinstance(self.cursor, str) or not self.cursor):
            raise BadRequest("invalid_window", "cursor must be a non-empty string", param="cursor")

    def selector(self) -> dict[str, int | str]:
        """The selector arguments that are set, in a fixed order."""
        selector: dict[str, int | str] = {}
        for key in URI_SELECTOR_ARGS:
            value = getattr(self, key)
            if value is not None:
                selector[key] = value
        return selector

    @classmethod
    def parse(cls, uri: object, *, param: str = "uri") -> FieldWindowRef:
        """The window a `pdpp://field-window/{handle}` URI names (`parse_field_window_uri`)."""
        return parse_field_window_uri(uri, param=param)

    @property
    def handle(self) -> str:
        ref = self.record
        selector = ",".join(
            f"{_json_string(key)}:{_json_string(value) if isinstance(value, str) else int(value)}"
            for key, value in self.selector().items()
        )
        names = (ref.connection_id, ref.stream, ref.record_id, self.field)
        return _b64(f"[{','.join(map(_json_string, names))},{{{selector}}}]")

    @property
    def uri(self) -> str:
        return FIELD_WINDOW_URI_PREFIX + self.handle


@lru_cache(maxsize=4096)
def cursor_window_names(
    connection_id: str, stream: str, record_id: str, field: str
) -> tuple[str, str]:
    """What every window of this record's field read by a cursor shares: the record's
    `argument` and the JSON of the four names that open its handle, once per record field.
    They are checked as `FieldWindowRef(RecordRef(...), field)` checks them (the same
    `BadRequest`; errors are never cached), and the key is the four names themselves, so one
    record's names never answer for another's."""
    ref = FieldWindowRef(RecordRef(connection_id, stream, record_id), field)
    names = (connection_id, stream, record_id, field)
    return ref.record.argument, ",".join(map(_json_string, names))


def cursor_window_uri(names: str, cursor: str) -> str:
    """`FieldWindowRef(record, field, cursor=cursor).uri` from `cursor_window_names`' `names`:
    the same handle, spelled as `FieldWindowRef.handle` spells it (a test holds them equal)."""
    return FIELD_WINDOW_URI_PREFIX + _b64(f'[{names},{{"cursor":{_json_string(cursor)}}}]')


# -- handles ----------------------------------------------------------------------------------


_HANDLE_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""`json.dumps(..., ensure_ascii=False, separators=(",", ":"))`, built once. The handles the
store makes (`record_handle`, `FieldWindowRef.handle`) spell the same JSON themselves, string by
string with json's own encoder: an encoder's `encode` sets up its machinery on every call."""


def _encode(parts: list[Any]) -> str:
    return _b64(_HANDLE_JSON.encode(parts))


def _b64(text: str) -> str:
    """A handle: the minified JSON `text` as UTF-8 in base64url, unpadded (rule 4)."""
    return base64.urlsafe_b64encode(text.encode("utf-8")).rstrip(b"=").decode("ascii")


def _invalid(param: str, what: str) -> BadRequest:
    return BadRequest("invalid_request", f"{param} is not a valid {what}", param=param)


def _decode(handle: str, param: str, what: str) -> list[Any]:
    """Strictly decode a handle to its JSON array, or raise `invalid_request` naming `param`."""
    if not handle or not _HANDLE_ALPHABET.fullmatch(handle) or len(handle) % 4 == 1:
        raise _invalid(param, what)
    try:
        data = base64.urlsafe_b64decode(handle + "=" * (-len(handle) % 4))
        parts: object = json.loads(data.decode("utf-8"))
        if isinstance(parts, list) and _encode(parts) == handle:
            return parts
    except (binascii.Error, ValueError, RecursionError, UnicodeError):
        # ValueError covers JSON errors and over-long integers; UnicodeError covers bad UTF-8
        # and lone surrogates smuggled in as JSON escapes (they cannot be re-encoded).
        pass
    raise _invalid(param, what)


@lru_cache(maxsize=4096)
def record_handle(ref: RecordRef) -> str:
    """The opaque, URL-safe handle of a record reference (once per record: every projection
    and window continuation names its record by it)."""
    names = (ref.connection_id, ref.stream, ref.record_id)
    return _b64(f"[{','.join(map(_json_string, names))}]")  # `_encode` of the names, spelled


def _record_from_handle(handle: str, param: str) -> RecordRef:
    parts = _decode(handle, param, "record handle")
    if len(parts) != 3 or not all(isinstance(part, str) for part in parts):
        raise _invalid(param, "record handle")
    try:
        return RecordRef(*parts)
    except BadRequest:
        raise _invalid(param, "record handle") from None


def parse_record_uri(uri: object, *, param: str = "uri") -> RecordRef:
    """Parse `pdpp://record/{handle}`; anything else is `invalid_request` naming `param`."""
    if not isinstance(uri, str) or not uri.startswith(RECORD_URI_PREFIX):
        raise _invalid(param, "record URI")
    return _record_from_handle(uri.removeprefix(RECORD_URI_PREFIX), param)


def parse_field_window_uri(uri: object, *, param: str = "uri") -> FieldWindowRef:
    """Parse `pdpp://field-window/{handle}`; anything else is `invalid_request` naming `param`."""
    what = "field-window URI"
    if not isinstance(uri, str) or not uri.startswith(FIELD_WINDOW_URI_PREFIX):
        raise _invalid(param, what)
    parts = _decode(uri.removeprefix(FIELD_WINDOW_URI_PREFIX), param, what)
    if (
        len(parts) != 5
        or not all(isinstance(part, str) for part in parts[:4])
        or not isinstance(parts[4], dict)
        or any(key not in URI_SELECTOR_ARGS for key in parts[4])
    ):
        raise _invalid(param, what)
    connection_id, stream, record_id, field, selector = parts
    try:
        window = FieldWindowRef(RecordRef(connection_id, stream, record_id), field, **selector)
    except BadRequest:
        raise _invalid(param, what) from None
    if window.handle != uri.removeprefix(FIELD_WINDOW_URI_PREFIX):  # e.g. selector key order
        raise _invalid(param, what)
    return window


# -- references -------------------------------------------------------------------------------


def _check_connection(ref: RecordRef, connection_id: str | None) -> RecordRef:
    if connection_id is not None and connection_id != ref.connection_id:
        raise Conflict(
            "conflicting_connection_id",
            "the record names a different connection than connection_id",
            param="connection_id",
        )
    return ref


def parse_record_ref(
    value: RecordRef | UnscopedRecordRef | str, *, connection_id: str | None = None
) -> RecordRef | UnscopedRecordRef:
    """Parse any accepted form of a record reference (see the module docstring).

    With `connection_id`, the result is always a `RecordRef` in that connection; a reference
    that embeds another connection is `conflicting_connection_id`.
    """
    if connection_id is not None:
        validate_safe_name(connection_id, "connection_id")
    if isinstance(value, RecordRef):
        return _check_connection(value, connection_id)
    if isinstance(value, UnscopedRecordRef):
        return value if connection_id is None else value.scoped(connection_id)
    if not isinstance(value, str):
        raise _invalid("record", "record reference")
    return _parse_text_ref(value, connection_id)


@lru_cache(maxsize=4096)
def _parse_text_ref(value: str, connection_id: str | None) -> RecordRef | UnscopedRecordRef:
    """A reference given as text, parsed once per distinct text (a server reads the same
    records again and again; the result is immutable and errors are never cached)."""
    if value.startswith(RECORD_URI_PREFIX):
        return _check_connection(parse_record_uri(value, param="record"), connection_id)
    if value.startswith("pdpp://"):
        raise _invalid("record", "record reference")
    head, slash, rest = value.partition("/")
    stream, colon, record_id = (rest if slash else head).partition(":")
    if not colon:
        raise _invalid("record", "record reference: expected 'connection/stream:record_id'")
    try:
        if slash:
            return _check_connection(RecordRef(head, stream, record_id), connection_id)
        if connection_id is None:
            return UnscopedRecordRef(stream, record_id)
        return RecordRef(connection_id, stream, record_id)
    except BadRequest as exc:
        raise BadRequest(
            "invalid_request",
            f"record is not a valid record reference: {exc.message}",
            param="record",
        ) from None
