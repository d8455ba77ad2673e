"""`FieldInfo`: what the store knows about one stored field, without its value.

Rules:
1. Every field shows its path, JSON type, text-likeness, size in code points and digest.
2. A metadata-only field (blob reference, base64, NUL-holding string) also shows its binary kind,
   MIME type, size in bytes, blob id and the blob's resource URI (`export_uri`): the way to get
   its bytes, never the bytes themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from pdpp_store._core.fields import FieldKind
from pdpp_store._core.identity import blob_uri

from ._schema import card, nullable

__all__ = ["FieldInfo"]

_DIGEST = {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}
_COUNT = {"type": "integer", "minimum": 0}


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

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "FieldInfo",
        {
            "path": {"type": "string", "minLength": 1},
            "type": {"enum": ["string", "integer", "number", "boolean", "null", "array", "object"]},
            "text_like": {"type": "boolean"},
            "size_chars": _COUNT,
            "digest": _DIGEST,
            "binary_kind": {"enum": [k.value for k in FieldKind if not k.text_like]},
            "mime_type": nullable({"type": "string"}),
            "size_bytes": _COUNT,
            "blob_id": nullable({"type": "string"}),
            "export_uri": nullable({"type": "string", "pattern": "^pdpp://blob/"}),
        },
        ["path", "type", "text_like", "size_chars", "digest"],
        # Rule 2: the binary keys appear exactly on metadata-only fields.
        allOf=[
            {
                "if": {"properties": {"text_like": {"const": False}}},
                "then": {
                    "required": ["binary_kind", "mime_type", "size_bytes", "blob_id", "export_uri"]
                },
                "else": {
                    "not": {
                        "anyOf": [
                            {"required": [key]}
                            for key in (
                                "binary_kind",
                                "mime_type",
                                "size_bytes",
                                "blob_id",
                                "export_uri",
                            )
                        ]
                    }
                },
            }
        ],
    )

    @property
    def text_like(self) -> bool:
        return self.kind.text_like

    @property
    def export_uri(self) -> str | None:
        return blob_uri(self.blob_id) if self.blob_id else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "type": self.json_type,
            "text_like": (text_like := self.kind.text_like),
            "size_chars": self.size_chars,
            "digest": self.digest,
        }
        if not text_like:
            out["binary_kind"] = self.kind.value
            out["mime_type"] = self.mime_type
            out["size_bytes"] = self.size_bytes
            out["blob_id"] = self.blob_id
            out["export_uri"] = self.export_uri
        return out
