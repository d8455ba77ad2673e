"""The grants table's statements: keep a grant, revoke it, list them, and the one question every
read asks (does the store hold this grant revoked or expired?).

Rows decode here too: `stored_grant_of` turns a row into the `StoredGrant` card. Instants are
fixed-width UTC text (`normalize_instant`), so they compare as strings in SQL and decode alike
under SQLAlchemy and the bare driver.
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from typing import Any

from sqlalchemy import Select, Update, bindparam, insert, select, update

from pdpp_store._core.grants import Grant
from pdpp_store.evidence import StoredGrant

from .requests import Execute, Row, Rows
from .tables import grants

__all__ = [
    "grant_row",
    "grant_standing",
    "insert_grant",
    "list_grant_rows",
    "revoke_grant",
    "standing_of",
    "stored_grant_of",
]


def insert_grant(grant: Grant, now: str) -> Execute:
    terms = grant.to_dict()
    return Execute(
        insert(grants),
        {
            "grant_id": grant.grant_id,
            "terms": json.dumps(terms, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
            "created_at": now,
            "expires_at": terms.get("expires_at"),
            "revoked_at": None,
        },
    )


def grant_row(grant_id: str) -> Execute:
    """The stored row of one grant (none when the store does not hold it)."""
    return Execute(_grant_row(), {"g_id": grant_id}, bounded=True)


@cache
def _grant_row() -> Select[Any]:
    return select(*_COLUMNS).where(grants.c.grant_id == bindparam("g_id"))


_COLUMNS = (
    grants.c.grant_id,
    grants.c.terms,
    grants.c.created_at,
    grants.c.expires_at,
    grants.c.revoked_at,
)


def list_grant_rows() -> Execute:
    """Every stored grant, by id (the owner's list: a handful to thousands of rows)."""
    return Execute(_list_rows())


@cache
def _list_rows() -> Select[Any]:
    return select(*_COLUMNS).order_by(grants.c.grant_id)


def revoke_grant(grant_id: str, now: str) -> Execute:
    """Mark the grant revoked, once: a second revocation keeps the first instant."""
    return Execute(_revoke(), {"g_id": grant_id, "g_now": now})


@cache
def _revoke() -> Update:
    return (
        update(grants)
        .where(grants.c.grant_id == bindparam("g_id"), grants.c.revoked_at.is_(None))
        .values(revoked_at=bindparam("g_now"))
    )


def grant_standing(grant_id: str) -> Execute:
    """What every read asks before anything else: whether the store holds this grant, and if so
    when it was revoked and when it expires. One primary-key lookup."""
    return Execute(_standing(), {"g_id": grant_id}, bounded=True)


@cache
def _standing() -> Select[Any]:
    return select(grants.c.revoked_at, grants.c.expires_at).where(
        grants.c.grant_id == bindparam("g_id")
    )


def standing_of(rows: Rows | None) -> tuple[str | None, str | None] | None:
    """`grant_standing`'s answer: None when the grant is not stored, else (revoked_at,
    expires_at)."""
    if not rows:
        return None
    row = rows[0]
    return row["revoked_at"], row["expires_at"]


def stored_grant_of(row: Row, now: str) -> StoredGrant:
    """The card of a stored row, its status as of `now` (a normalised instant)."""
    grant = dataclasses.replace(Grant.from_dict(json.loads(row["terms"])), stored=True)
    revoked_at = row["revoked_at"]
    expires_at = row["expires_at"]
    if revoked_at is not None:
        status: Any = "revoked"
    elif expires_at is not None and expires_at <= now:
        status = "expired"
    else:
        status = "active"
    return StoredGrant(grant, row["created_at"], revoked_at, status)
