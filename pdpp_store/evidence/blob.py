"""`BlobInfo` and `BlobRange`: a stored blob's metadata, and a byte range read from it.

Rules:
1. A blob is named by its content (`blob_sha256_<hex>`); its metadata is shown only through a
   record the grant can see whose granted field references it (the store enforces this; the
   card only renders what it was given).
2. A range's bytes are the card's `data`, never part of its JSON: `to_dict()` says where the
   range lies and whether more follows, and a surface sends the bytes its own way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pdpp_store._core.identity import BLOB_ID_PATTERN, blob_id_for, blob_uri, is_blob_id

from ._schema import card, embedded

__all__ = ["BlobInfo", "BlobRange"]

_BLOB_ID = {"type": "string", "pattern": f"^{BLOB_ID_PATTERN}$"}
_BYTES = {"type": "integer", "minimum": 0}


@dataclass(frozen=True, slots=True)
class BlobInfo:
    blob_id: str
    sha256: str
    mime_type: str
    size_bytes: int

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "BlobInfo",
        {
            "object": {"const": "blob"},
            "blob_id": _BLOB_ID,
            "mime_type": {"type": "string"},
            "size_bytes": _BYTES,
            "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        },
        ["object", "blob_id", "mime_type", "size_bytes", "sha256"],
    )

    def __post_init__(self) -> None:
        if not is_blob_id(self.blob_id) or blob_id_for(self.sha256) != self.blob_id:
            raise ValueError("a blob's id is its SHA-256")

    @property
    def uri(self) -> str:
        return blob_uri(self.blob_id)

    def to_dict(self) -> dict[str, Any]:
        return {"object": "blob", **self.as_ref()}

    def as_ref(self) -> dict[str, Any]:
        """The value a record field holds to point at this blob (`blob_ref`)."""
        return {
            "blob_id": self.blob_id,
            "mime_type": self.mime_type,
            "size_bytes": self.size_bytes,
            "sha256": self.sha256,
        }


@dataclass(frozen=True, slots=True)
class BlobRange:
    blob: BlobInfo
    offset_bytes: int
    data: bytes

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "BlobRange",
        {
            "object": {"const": "blob_range"},
            "blob": embedded(BlobInfo.JSON_SCHEMA),
            "offset_bytes": _BYTES,
            "length_bytes": _BYTES,
            "has_more": {"type": "boolean"},
        },
        ["object", "blob", "offset_bytes", "length_bytes", "has_more"],
    )

    def __post_init__(self) -> None:
        if not 0 <= self.offset_bytes <= self.offset_bytes + len(self.data) <= self.blob.size_bytes:
            raise ValueError("a range lies within its blob")

    @property
    def has_more(self) -> bool:
        return self.offset_bytes + len(self.data) < self.blob.size_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "object": "blob_range",
            "blob": self.blob.to_dict(),
            "offset_bytes": self.offset_bytes,
            "length_bytes": len(self.data),
            "has_more": self.has_more,
        }
