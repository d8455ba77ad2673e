"""How the MCP server names the library's operations: continuations rendered as tool calls.

Imports no SDK: the CLI renders the same text as `content[]` with these calls, without the
`[server]` extra.

Rules:
1. A continuation names a library operation and its arguments (`pdpp_store.evidence`); the tool
   that performs it is fixed here, once: `read_field_window` is `read_record_field`,
   `read_record` and `blob_info` are `fetch`, `search` is `search`, `query_records` is
   `query_records` (also an aggregate group's records), `describe_grant` is `schema`.
2. Argument names follow the tool's input schema (`record` is `id`, `field` is `field_path`;
   `_inputs` derives the schemas from the catalogue); a blob is fetched by its `pdpp://blob/`
   URI.
3. A continuation the tools cannot express gives `None`, never a call that would fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._inputs import TOOL_INPUTS

__all__ = ["READ_FIELD_ARGUMENTS", "TOOL_OF_OPERATION", "as_tool_call"]

TOOL_OF_OPERATION = {
    "read_field_window": "read_record_field",
    "read_record": "fetch",
    "blob_info": "fetch",
    "search": "search",
    "query_records": "query_records",
    "describe_grant": "schema",
}
_RENAMED = {"record": "id", "field": "field_path"}
_ACCEPTED = {tool: frozenset(schema["properties"]) for tool, schema in TOOL_INPUTS.items()}
READ_FIELD_ARGUMENTS = _ACCEPTED["read_record_field"]


def as_tool_call(continuation: Mapping[str, Any]) -> dict[str, Any] | None:
    """`{"tool", "arguments"}` for a continuation (see the module's rules)."""
    if "tool" in continuation:  # already a call (a card that predates `Continuation`)
        return {"tool": continuation["tool"], "arguments": dict(continuation["arguments"])}
    operation = continuation.get("operation")
    tool = TOOL_OF_OPERATION.get(operation) if isinstance(operation, str) else None
    arguments = continuation.get("arguments") or {}
    if tool is None or tool not in _ACCEPTED:  # a tool not served (yet): no call
        return None
    if operation == "blob_info":
        return {"tool": tool, "arguments": {"id": f"pdpp://blob/{arguments['blob_id']}"}}
    renamed = {_RENAMED.get(key, key): value for key, value in arguments.items()}
    if not set(renamed) <= _ACCEPTED[tool]:
        return None
    return {"tool": tool, "arguments": renamed}
