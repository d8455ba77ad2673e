"""What the store knows about one stored field, without reading its value.

Every field is stored with a `kind` decided once, at write time:

    text      a string; windows are slices of it
    json      any other JSON value (number, bool, null, object, array); windows are slices of its
              canonical JSON text (sorted keys, minified, UTF-8)
    blob_ref  an object pointing at a stored blob ({"blob_id", "mime_type", "size_bytes",
              "sha256"})
    base64    a string of base64 (declared by the manifest, or unmistakable by content)
    binary    a string holding NUL, which Postgres text cannot hold; kept losslessly, metadata-only

The first two are text-like (readable in windows); the last three are metadata-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = ["FieldInfo", "FieldKind"]


class FieldKind(StrEnum):
    TEXT = "text"
    JSON = "json"
    BLOB_REF = "blob_ref"
    BASE64 = "base64"
    BINARY = "binary"

    @property
    def text_like(self) -> bool:
        return self in (FieldKind.TEXT, FieldKind.JSON)


@dataclass(frozen=True, slots=True)
class FieldInfo:
    """Metadata of one stored field (no content)."""

    path: str
    kind: FieldKind
    json_type: str
    size_chars: int
    size_bytes: int
    digest: str
    mime_type: str | None = None
    blob_id: str | None = None

    @property
    def text_like(self) -> bool:
        return self.kind.text_like

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "type": self.json_type,
            "text_like": self.text_like,
            "size_chars": self.size_chars,
            "digest": self.digest,
        }
        if not self.text_like:
            out["binary_kind"] = self.kind.value
            out["mime_type"] = self.mime_type
            out["size_bytes"] = self.size_bytes
            out["blob_id"] = self.blob_id
            out["export_uri"] = f"pdpp://blob/{self.blob_id}" if self.blob_id else None
        return out
