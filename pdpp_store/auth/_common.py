"""What every resolver shares: a lookup that may say "not mine", the grants tokens name by id,
and a token's grant taken from its claims.

Rules:
1. A token names its grant by a `grant_id` (claim, or a tokens-file entry's string), or carries
   it as RFC 9396 `authorization_details` of type `pdpp_grant` (the grant's JSON beside
   `"type"`; with no `streams` it only names a stored grant by its `grant_id`). A token that
   names no grant, or names it twice differently, is `invalid_token`.
2. A grant named by id is the one the served store keeps (`list_grants(grant_id)`); its terms
   never change once stored, so they are kept here once read. Whether it is revoked or expired is
   not kept: the library asks the store on every read. An id the store does not hold is
   `invalid_token`, asked again next time (the owner may add it).
3. No message here contains a token.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from pdpp_store import AsyncStore, Grant, StoreError
from pdpp_store.http import Access, Unauthenticated

__all__ = ["Lookup", "StoredGrants", "grant_named_by", "invalid_token", "missing_token"]

MAX_KEPT_GRANTS = 10_000


def missing_token() -> Unauthenticated:
    return Unauthenticated(
        "missing_token", "this request needs an Authorization: Bearer <token> header"
    )


def invalid_token(why: str = "the bearer token is not known to this server") -> Unauthenticated:
    return Unauthenticated("invalid_token", why)


class Lookup(Protocol):
    """One source of tokens: `Access` for a token it knows, None for one it does not."""

    @property
    def authorization_servers(self) -> Sequence[str]: ...

    async def lookup(self, presented: str, store: AsyncStore) -> Access | None: ...


class StoredGrants:
    """The terms of the grants tokens name by id (rule 2)."""

    def __init__(self) -> None:
        self._terms: dict[str, Grant] = {}

    def __getstate__(self) -> dict[str, Any]:  # a worker process starts with none kept
        return {"kept": 0}  # not empty: pickle skips `__setstate__` for a false state

    def __setstate__(self, _: dict[str, Any]) -> None:
        self._terms = {}

    async def grant(self, grant_id: str, store: AsyncStore) -> Grant:
        found = self._terms.get(grant_id)
        if found is None:
            listed = await store.list_grants(grant_id)
            if not listed:
                raise invalid_token("the bearer token names a grant this server does not hold")
            found = listed[0].grant
            if len(self._terms) >= MAX_KEPT_GRANTS:
                self._terms.clear()
            self._terms[grant_id] = found
        return found


def _pdpp_grant(details: object) -> Grant | str | None:
    """The `pdpp_grant` entry of RFC 9396 `authorization_details`, if any (rule 1)."""
    if details is None:
        return None
    if not isinstance(details, list):
        raise invalid_token("the token's authorization_details is not a list")
    found: Grant | str | None = None
    for entry in details:
        if not isinstance(entry, Mapping) or entry.get("type") != "pdpp_grant":
            continue
        if found is not None:
            raise invalid_token("the token carries more than one pdpp_grant")
        body = {key: value for key, value in entry.items() if key != "type"}
        if "streams" in body:
            try:
                found = Grant.from_dict(body)
            except StoreError as error:
                raise invalid_token(
                    f"the token's pdpp_grant is not a grant: {error.message}"
                ) from None
        else:
            grant_id = body.get("grant_id")
            if not isinstance(grant_id, str) or not grant_id:
                raise invalid_token("the token's pdpp_grant names no grant_id")
            found = grant_id
    return found


def grant_named_by(claims: Mapping[str, Any]) -> Grant | str:
    """The grant (or stored grant's id) a token's claims name (rule 1)."""
    carried = _pdpp_grant(claims.get("authorization_details"))
    claimed = claims.get("grant_id")
    if claimed is not None and (not isinstance(claimed, str) or not claimed):
        raise invalid_token("the token's grant_id claim is not a string")
    if carried is None:
        if claimed is None:
            raise invalid_token("the token names no grant (no grant_id, no pdpp_grant)")
        return claimed
    carried_id = carried if isinstance(carried, str) else carried.grant_id
    if claimed is not None and claimed != carried_id:
        raise invalid_token("the token's grant_id and its pdpp_grant name different grants")
    return carried
