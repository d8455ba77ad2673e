"""`Continuation`: how to read more, named after the library operation that does it.

Rules:
1. `operation` is the name of a library operation (`read_field_window`, `read_record`,
   `search`, `blob_info`, ...), never a surface's name for it (no MCP tool, no route).
2. `arguments` are that operation's keyword arguments, JSON values only, with the record given as
   its self-contained id (`record`): a surface can replay them without knowing anything else.
3. `resource_uri` is the `pdpp://` URI of the same read, when there is one. Like every id, it is a
   name: the reader's grant is applied again when it is followed.
4. A window read is built from its address (`read_window`), so the arguments and the URI name the
   same window by construction; the selector's argument names are `_core.selector`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar

from pdpp_store._core.identity import FieldWindowRef

from ._schema import card, nullable

__all__ = ["Continuation"]


def _frozen(arguments: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType({key: arguments[key] for key in sorted(arguments)})


@dataclass(frozen=True, slots=True)
class Continuation:
    operation: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    resource_uri: str | None = None

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "Continuation",
        {
            "operation": {"type": "string", "minLength": 1},
            "arguments": {"type": "object"},
            "resource_uri": nullable({"type": "string", "pattern": "^pdpp://"}),
        },
        ["operation", "arguments", "resource_uri"],
    )

    def __post_init__(self) -> None:
        if not isinstance(self.operation, str) or not self.operation:
            raise ValueError("a continuation names a library operation")
        arguments = self.arguments
        if not isinstance(arguments, Mapping) or not all(isinstance(key, str) for key in arguments):
            raise ValueError("continuation arguments are a mapping of names to values")
        object.__setattr__(self, "arguments", _frozen(arguments))

    @classmethod
    def read_window(cls, window: FieldWindowRef) -> Continuation:
        """The `read_field_window` call that reads the window at this address (rule 4)."""
        arguments = {"record": window.record.argument, "field": window.field, **window.selector()}
        return cls("read_field_window", arguments, window.uri)

    def to_dict(self) -> dict[str, Any]:
        return {
            "operation": self.operation,
            "arguments": dict(self.arguments),
            "resource_uri": self.resource_uri,
        }
