"""Helpers for the cards' JSON Schemas (draft 2020-12): plain dicts, built once at import.

A card's `JSON_SCHEMA` is a whole schema document (it names its dialect); a card shown inside
another card is embedded as a copy without the dialect line (`embedded`), so every document
stands alone, with no `$ref` to resolve.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["DIALECT", "card", "embedded", "nullable", "warning_list"]

DIALECT = "https://json-schema.org/draft/2020-12/schema"

Schema = dict[str, Any]


def card(
    title: str, properties: Schema, required: list[str], *, closed: bool = True, **more: Any
) -> Schema:
    """The schema of a card: an object with these properties (closed unless said otherwise)."""
    schema: Schema = {
        "$schema": DIALECT,
        "title": title,
        "type": "object",
        "required": required,
        "properties": properties,
    }
    if closed:
        schema["additionalProperties"] = False
    schema.update(more)
    return schema


def embedded(schema: Schema) -> Schema:
    """A card's schema as a part of another card's (a copy: the cards' schemas stay apart)."""
    return {key: copy.deepcopy(value) for key, value in schema.items() if key != "$schema"}


def nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def warning_list() -> Schema:
    """A list of `{"code", "param"}` warnings (e.g. `limit_clamped`)."""
    return {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["code"],
            "properties": {"code": {"type": "string"}, "param": {"type": "string"}},
            "additionalProperties": False,
        },
    }
