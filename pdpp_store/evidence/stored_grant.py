"""`StoredGrant`: a grant the owner keeps in the store, and where it stands.

Rules:
1. `grant` is the grant's JSON exactly as the store keeps it (`Grant.to_dict`); its terms never
   change once stored.
2. `status` is where the grant stood when the card was made: `revoked` once revoked (for good),
   else `expired` once its `expires_at` has passed, else `active`. Instants are fixed-width UTC
   ISO-8601 strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pdpp_store._core.grants import Grant

from ._schema import card, nullable

__all__ = ["StoredGrant"]

_INSTANT = {"type": "string", "format": "date-time"}
GrantStatus = Literal["active", "expired", "revoked"]


@dataclass(frozen=True, slots=True)
class StoredGrant:
    grant: Grant
    created_at: str
    revoked_at: str | None
    status: GrantStatus

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "StoredGrant",
        {
            "object": {"const": "stored_grant"},
            "grant_id": {"type": "string", "minLength": 1},
            "status": {"enum": ["active", "expired", "revoked"]},
            "created_at": _INSTANT,
            "expires_at": nullable(_INSTANT),
            "revoked_at": nullable(_INSTANT),
            "grant": {"type": "object", "required": ["grant_id", "streams"]},
        },
        ["object", "grant_id", "status", "created_at", "expires_at", "revoked_at", "grant"],
    )

    @property
    def grant_id(self) -> str:
        return self.grant.grant_id

    def to_dict(self) -> dict[str, Any]:
        terms = self.grant.to_dict()
        return {
            "object": "stored_grant",
            "grant_id": self.grant.grant_id,
            "status": self.status,
            "created_at": self.created_at,
            "expires_at": terms.get("expires_at"),
            "revoked_at": self.revoked_at,
            "grant": terms,
        }
