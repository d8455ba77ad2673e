"""The JSON Schema of the error envelope every surface renders (`StoreError.to_dict()`,
docs/contract.md §7).

The body is open: `details` are merged into it, and an error may carry facts of its own. The
details that are cards are typed by those cards' schemas: a binary field's metadata (`field`,
with `field_not_text`) and the counts already committed by a failed ingestion (`committed`).
"""

from __future__ import annotations

from typing import Any

from ._schema import DIALECT, embedded
from .field import FieldInfo
from .upsert import UpsertResult

__all__ = ["ERROR_SCHEMA"]

ERROR_SCHEMA: dict[str, Any] = {
    "$schema": DIALECT,
    "title": "Error",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "code", "message"],
            "properties": {
                "type": {"type": "string"},
                "code": {"type": "string", "pattern": "^[a-z_]+$"},
                "message": {"type": "string"},
                "param": {"type": "string"},
                "field": embedded(FieldInfo.JSON_SCHEMA),
                "committed": embedded(UpsertResult.JSON_SCHEMA),
                "digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
                "size_chars": {"type": "integer", "minimum": 0},
            },
        }
    },
    "additionalProperties": False,
}
