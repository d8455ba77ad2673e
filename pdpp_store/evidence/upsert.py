"""`UpsertResult`: what one `upsert_records` call did, as counts of records.

The same counts appear in the `details.committed` of an error raised part-way through a call
(what earlier batches already committed), so the card has no `object` key of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ._schema import card

__all__ = ["UpsertResult"]

_COUNT = {"type": "integer", "minimum": 0}


@dataclass(slots=True)
class UpsertResult:
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "UpsertResult",
        {"inserted": _COUNT, "updated": _COUNT, "unchanged": _COUNT},
        ["inserted", "updated", "unchanged"],
    )

    def to_dict(self) -> dict[str, int]:
        return {"inserted": self.inserted, "updated": self.updated, "unchanged": self.unchanged}
