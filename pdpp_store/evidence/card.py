"""`RecordCard`: a record presented by its fields' declared roles (docs/contract.md §13).

A card is what a `query_records` row, a search hit and the head of `read_record` have in common:
the record's identity and up to five slots, `title`, `time`, `actor`, `secondary` and `amount`.

Rules:
1. A slot is filled only from a field whose manifest declares the matching `x_pdpp_role`
   (`primary-title`, `event-time`, `actor`, `secondary`, `amount`) and only when the grant covers
   that field, and never from a binary field (a blob reference or base64: a card shows no bytes).
   A stream that declares no role gets no slots: nothing is guessed from a field's or a stream's
   name.
2. Where several fields declare a role, the first granted one holding a value a slot can show
   fills it: for `time`, the stream's order field first (so the card shows the time the page is
   ordered by), then the others; otherwise by field name in code-point order (the order a stored
   manifest keeps). A slot shows a string, a number or a boolean; null, an absent field, an
   object or an array leaves the slot to the next field, else empty.
3. Every slot is bounded (`SLOT_BOUNDS`, in code points of a string value): title 200, actor 200,
   secondary 280, time 64, amount 64. A string cut to its bound says `complete: false`. Numbers
   and booleans are shown whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from pdpp_store._core.identity import RecordRef
from pdpp_store._core.manifest import StreamSpec

from ._schema import card, embedded

__all__ = ["SLOT_BOUNDS", "SLOT_ROLES", "CardSlot", "RecordCard"]

SLOT_ROLES: dict[str, str] = {
    "title": "primary-title",
    "time": "event-time",
    "actor": "actor",
    "secondary": "secondary",
    "amount": "amount",
}
"""Each slot and the `x_pdpp_role` that fills it, in the order a card shows them."""

SLOT_BOUNDS: dict[str, int] = {
    "title": 200,
    "time": 64,
    "actor": 200,
    "secondary": 280,
    "amount": 64,
}
"""The most code points of a string a slot shows (rule 3)."""


class _Scope(Protocol):
    def allows_field(self, path: str, /) -> bool: ...


@dataclass(frozen=True, slots=True)
class CardSlot:
    """One filled slot: the field it comes from, its value (a string cut to the slot's bound, a
    number or a boolean) and whether that value is whole."""

    field: str
    value: str | int | float | bool
    complete: bool = True

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "CardSlot",
        {
            "field": {"type": "string"},
            "value": {"type": ["string", "number", "boolean"]},
            "complete": {"type": "boolean"},
        },
        ["field", "value", "complete"],
    )

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "value": self.value, "complete": self.complete}


def _slot(name: str, path: str, value: object) -> CardSlot | None:
    if isinstance(value, str):
        bound = SLOT_BOUNDS[name]
        if len(value) > bound:
            return CardSlot(path, value[:bound], complete=False)
        return CardSlot(path, value)
    if isinstance(value, bool | int):
        return CardSlot(path, value)
    if isinstance(value, float) and math.isfinite(value):
        return CardSlot(path, value)
    return None


def _candidates(spec: StreamSpec, name: str) -> tuple[str, ...]:
    role = SLOT_ROLES[name]
    declared = tuple(path for path in spec.fields_with_role(role) if spec.declared[path].text_like)
    order = spec.order_field
    if name == "time" and order in declared:
        return (order, *(path for path in declared if path != order))
    return declared


def _slot_schema() -> dict[str, Any]:
    return embedded(CardSlot.JSON_SCHEMA)


@dataclass(frozen=True, slots=True)
class RecordCard:
    """A record's identity and its declared-role slots under a grant (rules 1-3)."""

    ref: RecordRef
    title: CardSlot | None = None
    time: CardSlot | None = None
    actor: CardSlot | None = None
    secondary: CardSlot | None = None
    amount: CardSlot | None = None

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "RecordCard",
        {
            "object": {"const": "record_card"},
            "id": {"type": "string"},
            "uri": {"type": "string"},
            "connection_id": {"type": "string"},
            "stream": {"type": "string"},
            "record_id": {"type": "string"},
            **{name: _slot_schema() for name in SLOT_ROLES},
        },
        ["object", "id", "uri", "connection_id", "stream", "record_id"],
    )

    @classmethod
    def build(
        cls, ref: RecordRef, spec: StreamSpec, scope: _Scope, fields: Mapping[str, Any]
    ) -> RecordCard:
        """The card of a record of `spec`'s stream whose stored fields are `fields`, under a
        grant whose stream terms are `scope` (a `StreamGrant`)."""
        slots: dict[str, CardSlot] = {}
        for name in SLOT_ROLES:
            for path in _candidates(spec, name):
                if not scope.allows_field(path) or path not in fields:
                    continue
                filled = _slot(name, path, fields[path])
                if filled is not None:
                    slots[name] = filled
                    break
        return cls(ref, **slots)

    @property
    def slots(self) -> dict[str, CardSlot]:
        """The filled slots, in card order."""
        found = {name: getattr(self, name) for name in SLOT_ROLES}
        return {name: slot for name, slot in found.items() if slot is not None}

    def to_dict(self) -> dict[str, Any]:
        ref = self.ref
        return {
            "object": "record_card",
            "id": ref.id,
            "uri": ref.uri,
            "connection_id": ref.connection_id,
            "stream": ref.stream,
            "record_id": ref.record_id,
            **{name: slot.to_dict() for name, slot in self.slots.items()},
        }
