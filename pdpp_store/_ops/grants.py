"""Grants kept in the store (docs/contract.md §14): add, revoke, list, and the check every read
makes first.

Rules:
1. A stored grant's terms never change: adding a grant under an id the store holds is
   idempotent when the terms are the same and the grant is not revoked, and `grant_exists`
   (409) otherwise. A revoked id is never reused, so a token that named it can never come to
   mean something else.
2. Revocation is for good and takes effect on the next read of every surface, in every process:
   each read operation is wrapped by `checked`, which, for a grant obtained from the store
   (`Grant.stored`: from `add_grant`, `list_grants`, or a server's token naming it by id), asks
   the store about its id before the operation's own first step. Revoked is `grant_revoked`,
   expired `grant_expired` (403), before anything else is looked at: a grant taken back answers
   nothing, not even whether a stream is declared. A grant the caller builds (a `Grant` or its
   JSON) is judged by its own terms, as before, and its reads stay one statement each.
3. Revoking an id the store does not hold is `grant_not_found` (404) naming `grant_id`;
   revoking a revoked grant changes nothing and answers the same card.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TypeVar

from pdpp_store._core.errors import BadRequest, Conflict, Forbidden, NotFound
from pdpp_store._core.grants import Grant, as_grant, normalize_instant
from pdpp_store._core.identity import is_unicode
from pdpp_store._sql import grants as grant_sql
from pdpp_store._sql.requests import Op
from pdpp_store.evidence import StoredGrant

__all__ = ["add_grant", "checked", "list_grants", "now_instant", "revoke_grant"]

T = TypeVar("T")


def now_instant() -> str:
    instant = normalize_instant(datetime.now(UTC).isoformat())
    assert instant is not None
    return instant


def _grant_id(value: object) -> str:
    if not isinstance(value, str) or not value or "\x00" in value or not is_unicode(value):
        raise BadRequest("invalid_request", "grant_id must be a non-empty string", param="grant_id")
    return value


def add_grant(grant: object) -> Op[StoredGrant]:
    checked_grant = as_grant(grant)
    now = now_instant()
    rows = yield grant_sql.grant_row(checked_grant.grant_id)
    if rows:
        existing = grant_sql.stored_grant_of(rows[0], now)
        if existing.revoked_at is None and existing.grant.to_dict() == checked_grant.to_dict():
            return existing
        why = "was revoked (ids are never reused)" if existing.revoked_at else "has other terms"
        raise Conflict(
            "grant_exists",
            f"the store already holds a grant {checked_grant.grant_id!r}, which {why}; "
            "add the new terms under a new grant_id",
            param="grant_id",
        )
    yield grant_sql.insert_grant(checked_grant, now)
    rows = yield grant_sql.grant_row(checked_grant.grant_id)
    assert rows
    return grant_sql.stored_grant_of(rows[0], now)


def revoke_grant(grant_id: object) -> Op[StoredGrant]:
    name = _grant_id(grant_id)
    now = now_instant()
    yield grant_sql.revoke_grant(name, now)
    rows = yield grant_sql.grant_row(name)
    if not rows:
        raise NotFound("grant_not_found", f"the store holds no grant {name!r}", param="grant_id")
    return grant_sql.stored_grant_of(rows[0], now)


def list_grants(grant_id: object = None) -> Op[list[StoredGrant]]:
    now = now_instant()
    if grant_id is not None:
        rows = (yield grant_sql.grant_row(_grant_id(grant_id))) or []
    else:
        rows = (yield grant_sql.list_grant_rows()) or []
    return [grant_sql.stored_grant_of(row, now) for row in rows]


def _id_of(grant: object) -> str | None:
    """The id to ask the store about: a stored grant's (rule 2); None for a grant the caller
    built (a `Grant` or its JSON), which its own terms govern."""
    if isinstance(grant, Grant) and grant.stored:
        return grant.grant_id
    return None


def checked(grant: object, op: Op[T]) -> Op[T]:
    """`op` (a read under `grant`), run only if the store does not hold `grant` revoked or
    expired (rule 2)."""
    grant_id = _id_of(grant)
    if grant_id is not None:
        try:
            standing = grant_sql.standing_of((yield grant_sql.grant_standing(grant_id)))
        except BaseException:
            op.close()
            raise
        if standing is not None:
            revoked_at, expires_at = standing
            refusal = None
            if revoked_at is not None:
                refusal = Forbidden("grant_revoked", f"grant {grant_id!r} has been revoked")
            elif expires_at is not None and expires_at <= now_instant():
                refusal = Forbidden("grant_expired", f"grant {grant_id!r} has expired")
            if refusal is not None:
                op.close()
                raise refusal
    return (yield from op)
