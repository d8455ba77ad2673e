"""Turning a record into what is stored: one `EncodedField` per top-level key. Pure: no I/O.

Rules:
1. The kind of a field is decided here, once (see `_core.fields`): from the manifest's hint or
   from the value's content, never from the field's name.
2. The digest is computed here, at write time, and never on read: `sha256:` of the UTF-8 bytes
   for every string (text, base64 and NUL-holding strings alike), of the canonical JSON text
   for any other value.
3. Stored text is cut into chunks of `CHUNK_CHARS` code points. Each chunk is stored with its
   folded form (`_core.folding.fold`) unless folding leaves it unchanged (stored as NULL then),
   so a match is an exact substring search on folded text in SQL, and offsets count code points.
4. Nothing here holds more than one slice of a large value beyond the value itself: digests are
   computed slice by slice and chunks are produced lazily.
5. A bad record (not an object, missing or unsafe primary key, lone surrogates, values JSON
   cannot hold) raises `invalid_record` naming the record and the field.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring  # what json.dumps(ensure_ascii=False) writes
from typing import Any

from .errors import BadRequest, shown
from .fields import FieldKind
from .folding import fold
from .grants import normalize_instant
from .identity import MAX_FIELD_PATH_BYTES, blob_id_for, is_blob_id, is_unicode, validate_safe_name
from .manifest import StreamSpec

__all__ = [
    "CHUNK_CHARS",
    "LOOKAHEAD_CHARS",
    "EncodedField",
    "EncodedRecord",
    "encode_record",
    "json_type",
    "record_id_for",
]

CHUNK_CHARS = 1024
"""Code points per stored chunk. At least `_window.MAX_QUERY_CHARS`, so a needle crosses at most
one chunk boundary; small enough that a chunk row stays inline in a Postgres page."""

LOOKAHEAD_CHARS = 63
"""Folded code points of the next chunk kept with each chunk (see `StoredChunk.lookahead`)."""

_DIGEST_SLICE = 1 << 20
_BASE64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_BASE64_MIN_CHARS = 128
_DEFAULT_MIME = "application/octet-stream"


def _bad_record(record_label: str, message: str, param: str | None = None) -> BadRequest:
    return BadRequest("invalid_record", f"record {record_label}: {message}", param=param)


def digest_text(text: str) -> tuple[str, int]:
    """(`sha256:<hex>`, UTF-8 byte length), one slice at a time. Lone surrogates raise."""
    hasher = hashlib.sha256()
    size = 0
    for start in range(0, len(text), _DIGEST_SLICE):
        data = text[start : start + _DIGEST_SLICE].encode("utf-8")
        hasher.update(data)
        size += len(data)
    return "sha256:" + hasher.hexdigest(), size


def looks_like_base64(text: str) -> bool:
    """Unmistakable base64: long, padded to a multiple of 4, only the standard alphabet, and
    mixing upper case, lower case, digits and `+` or `/` as encoded bytes do (ids and hex don't)."""
    if len(text) < _BASE64_MIN_CHARS or len(text) % 4 or not _BASE64.fullmatch(text):
        return False
    return (
        any(c.isupper() for c in text[:256])
        and any(c.islower() for c in text[:256])
        and any(c.isdigit() for c in text[:256])
        and ("+" in text or "/" in text)
    )


def _decode_base64(text: str) -> bytes | None:
    """The bytes of strict base64, or None (declared base64 that is not: kept, but no blob)."""
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None


def _is_blob_ref(value: object) -> bool:
    return (
        isinstance(value, Mapping)
        and is_blob_id(value.get("blob_id"))
        and isinstance(value.get("mime_type"), str)
        and isinstance(value.get("size_bytes"), int)
        and not isinstance(value["size_bytes"], bool)
        and 0 <= value["size_bytes"] < 2**63
        and isinstance(value.get("sha256"), str)
    )


def json_type(value: object) -> str:
    """The JSON Schema type name of a JSON value (`FieldInfo.json_type`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def canonical_json(value: object) -> str:
    return json.dumps(
        value, ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False
    )


@dataclass(frozen=True, slots=True)
class EncodedField:
    path: str
    kind: FieldKind
    json_type: str
    stored: str
    """The text kept in chunks: the string itself, canonical JSON, or (for NUL strings) the
    JSON-escaped string, which Postgres text can hold and which decodes back losslessly."""
    size_chars: int
    size_bytes: int
    digest: str
    item_count: int | None = None
    mime_type: str | None = None
    blob_id: str | None = None
    time_value: str | None = None
    payload: bytes | None = field(default=None, repr=False, compare=False)
    """For binary-only strings: the bytes kept as a blob (decoded base64, or the UTF-8 of a NUL
    string), so the field has a blob id, an export path and byte-range reads."""

    def chunks(self) -> Iterator[StoredChunk]:
        """The chunks, lazily; folded text and look-ahead only for text-like kinds."""
        stored, foldable = self.stored, self.kind.text_like
        starts = range(0, len(stored), CHUNK_CHARS)
        for number, start in enumerate(starts):
            text = stored[start : start + CHUNK_CHARS]
            if not foldable:
                yield StoredChunk(number, text, None, None)
                continue
            folded = fold(text)
            ahead = stored[start + CHUNK_CHARS : start + CHUNK_CHARS + LOOKAHEAD_CHARS]
            yield StoredChunk(
                number, text, None if folded == text else folded, fold(ahead) if ahead else None
            )


@dataclass(frozen=True, slots=True)
class StoredChunk:
    chunk_no: int
    text: str
    folded: str | None
    """`fold(text)`, or None where folding changes nothing."""
    lookahead: str | None
    """The folded first `LOOKAHEAD_CHARS` code points of the next chunk (None for the last), so
    a needle of up to `LOOKAHEAD_CHARS + 1` code points that crosses into the next chunk is found
    in this row alone."""


def _encode_string(
    path: str, value: str, hint_kind: FieldKind | None, hint_mime: str | None
) -> EncodedField:
    digest, size_bytes = digest_text(value)
    if "\x00" in value:
        return EncodedField(
            path,
            FieldKind.BINARY,
            "string",
            json.dumps(value, ensure_ascii=False),
            len(value),
            size_bytes,
            digest,
            mime_type=hint_mime or _DEFAULT_MIME,
            blob_id=blob_id_for(digest.removeprefix("sha256:")),
            payload=value.encode("utf-8"),
        )
    if hint_kind is FieldKind.BASE64 or looks_like_base64(value):
        padding = len(value) - len(value.rstrip("="))
        decoded = _decode_base64(value)
        return EncodedField(
            path,
            FieldKind.BASE64,
            "string",
            value,
            len(value),
            len(decoded) if decoded is not None else len(value) // 4 * 3 - padding,
            digest,
            mime_type=hint_mime or _DEFAULT_MIME,
            blob_id=None if decoded is None else blob_id_for(hashlib.sha256(decoded).hexdigest()),
            payload=decoded,
        )
    return EncodedField(
        path,
        FieldKind.TEXT,
        "string",
        value,
        len(value),
        size_bytes,
        digest,
        time_value=normalize_instant(value),
    )


def encode_field(path: str, value: Any, spec: StreamSpec, record_label: str) -> EncodedField:
    hint = spec.hints.get(path)
    hint_kind = hint.kind if hint else None
    hint_mime = hint.mime_type if hint else None
    try:
        if isinstance(value, str):
            return _encode_string(path, value, hint_kind, hint_mime)
        stored = canonical_json(value)
        digest, size_bytes = digest_text(stored)
    except UnicodeEncodeError as exc:
        raise _bad_record(
            record_label,
            f"field {path!r} holds invalid Unicode (a lone surrogate at {exc.start})",
            path,
        ) from None
    except (TypeError, ValueError) as exc:
        raise _bad_record(record_label, f"field {path!r} is not JSON: {exc}", path) from None
    except RecursionError:
        raise _bad_record(record_label, f"field {path!r} is nested too deeply", path) from None
    items = len(value) if isinstance(value, list | dict) else None
    if _is_blob_ref(value) and hint_kind in (FieldKind.BLOB_REF, None):
        return EncodedField(
            path,
            FieldKind.BLOB_REF,
            "object",
            stored,
            len(stored),
            value["size_bytes"],
            digest,
            items,
            value["mime_type"],
            value["blob_id"],
        )
    return EncodedField(
        path, FieldKind.JSON, json_type(value), stored, len(stored), size_bytes, digest, items
    )


def record_id_for(record: Mapping[str, Any], spec: StreamSpec, record_label: str) -> str:
    """The canonical key string: `str(value)` of a single key, minified JSON of a compound one."""
    values = []
    for key in spec.primary_key:
        value = record.get(key)
        if value is None or isinstance(value, list | dict):
            raise _bad_record(
                record_label, f"primary key field {key!r} is missing or not a scalar", key
            )
        values.append(value)
    try:
        if len(values) == 1:
            record_id = values[0] if isinstance(values[0], str) else canonical_json(values[0])
        else:
            record_id = canonical_json(values)
    except (TypeError, ValueError):
        raise _bad_record(
            record_label, "the primary key is not a JSON string or number", spec.primary_key[0]
        ) from None
    key_name = spec.primary_key[0] if len(spec.primary_key) == 1 else list(spec.primary_key)
    if not is_unicode(record_id):
        raise _bad_record(
            record_label, f"primary key {key_name!r} holds invalid Unicode", spec.primary_key[0]
        )
    try:
        return validate_safe_name(record_id, "record_id")
    except BadRequest as exc:
        raise _bad_record(
            record_label,
            f"primary key {key_name!r} is not a safe id: {exc.message}",
            spec.primary_key[0],
        ) from None


@dataclass(frozen=True, slots=True)
class EncodedRecord:
    record_id: str
    fields: tuple[EncodedField, ...]

    @property
    def digest(self) -> str:
        """The record's content identity: its fields' paths and digests, in path order (the
        canonical JSON of `[path, kind, digest]` per field, spelt out: `json.dumps` per field
        cost more than the rest of the record's encoding; `test_values` checks they agree)."""
        hasher = hashlib.sha256()
        for item in sorted(self.fields, key=lambda f: f.path):
            hasher.update(field_identity(item.path, item.kind.value, item.digest).encode())
        return "sha256:" + hasher.hexdigest()


def field_identity(path: str, kind: str, digest: str) -> str:
    """`canonical_json([path, kind, digest])`, for a kind and a digest that JSON writes as they
    are (lower-case letters, digits, `_` and `:`)."""
    return f'[{encode_basestring(path)},"{kind}","{digest}"]'


def encode_record(record: object, spec: StreamSpec, index: int) -> EncodedRecord:
    label = f"#{index} of stream {spec.name!r}"
    if not isinstance(record, Mapping):
        raise _bad_record(label, f"must be a JSON object, not {type(record).__name__}")
    for path in record:
        if (
            not isinstance(path, str)
            or not path
            or "\x00" in path
            or not is_unicode(path)
            or len(path.encode("utf-8")) > MAX_FIELD_PATH_BYTES
        ):
            raise BadRequest(
                "invalid_field_path",
                f"record {label}: field name {shown(path)} is not valid",
                param="field",
            )
    record_id = record_id_for(record, spec, label)
    label = f"{record_id!r} ({label})"
    return EncodedRecord(
        record_id, tuple(encode_field(path, value, spec, label) for path, value in record.items())
    )
