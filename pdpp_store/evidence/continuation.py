"""`Continuation`: how to read more, named after the library operation that does it.

Rules:
1. `operation` is the name of a library operation (`read_field_window`, `read_record`,
   `search`, `blob_info`, ...), never a surface's name for it (no MCP tool, no route).
2. `arguments` are that operation's keyword arguments, JSON values only, with the record given as
   its self-contained id (`record`): a surface can replay them without knowing anything else.
3. `resource_uri` is the `pdpp://` URI of the same read, when there is one. Like every id, it is a
   name: the reader's grant is applied again when it is followed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

__all__ = ["Continuation"]


def _frozen(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType({key: arguments[key] for key in sorted(arguments)})


@dataclass(frozen=True, slots=True)
class Continuation:
    operation: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    resource_uri: str | None = None

    JSON_SCHEMA: ClassVar[dict[str, Any]] = {
        "type": "object",
        "required": ["operation", "arguments", "resource_uri"],
        "properties": {
            "operation": {"type": "string", "minLength": 1},
            "arguments": {"type": "object"},
            "resource_uri": {"type": ["string", "null"]},
        },
        "additionalProperties": False,
    }

    def __post_init__(self) -> None:
        if not isinstance(self.operation, str) or not self.operation:
            raise ValueError("a continuation names a library operation")
        if not isinstance(self.arguments, Mapping) or not all(
            isinstance(key, str) for key in self.arguments
        ):
            raise ValueError("continuation arguments are a mapping of names to values")
        object.__setattr__(self, "arguments", _frozen(self.arguments))

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "arguments": dict(self.arguments),
            "resource_uri": self.resource_uri,
        }
