"""The kinds of stored field: decided once, at write time.

    text      a string; windows are slices of it
    json      any other JSON value (number, bool, null, object, array); windows are slices of its
              canonical JSON text (sorted keys, minified, UTF-8)
    blob_ref  an object pointing at a stored blob ({"blob_id", "mime_type", "size_bytes",
              "sha256"})
    base64    a string of base64 (declared by the manifest, or unmistakable by content)
    binary    a string holding NUL, which Postgres text cannot hold; kept losslessly, metadata-only

The first two are text-like (readable in windows); the last three are metadata-only. What a
reader is shown of a stored field is the `pdpp_store.evidence.FieldInfo` card.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["FieldKind"]


class FieldKind(StrEnum):
    TEXT = "text"
    JSON = "json"
    BLOB_REF = "blob_ref"
    BASE64 = "base64"
    BINARY = "binary"

    @property
    def text_like(self) -> bool:
        # Members are singletons: compared by identity, not hashed (an enum's hash is a Python
        # method, and every card of every read asks this).
        return self is FieldKind.TEXT or self is FieldKind.JSON
