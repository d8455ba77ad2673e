"""Bearer tokens to grants, and the one 401 every HTTP surface answers with (REST and MCP).

Rules:
1. A presented token is compared with every known one in constant time, so how long a refusal
   takes says nothing about how close a guess came.
2. No `Authorization: Bearer <token>` header is `missing_token`; a token not held is
   `invalid_token`. Both are `Unauthenticated` (401), which every surface answers with
   `_errors.unauthenticated_response`.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from pdpp_store import Grant

from ._errors import Unauthenticated

__all__ = ["Tokens", "bearer_token"]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization` header value if it is a bearer token, else None."""
    if authorization is None:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class Tokens:
    """The server's tokens: which grant a presented bearer token carries (rule 1)."""

    def __init__(self, tokens: Mapping[str, Grant]) -> None:
        self._known = [(token.encode(), grant) for token, grant in tokens.items()]

    def grant_of(self, presented: str | None) -> Grant:
        """The grant of `presented`, or `Unauthenticated` (rule 2)."""
        if presented is None:
            raise Unauthenticated(
                "missing_token", "this request needs an Authorization: Bearer <token> header"
            )
        found = None
        candidate = presented.encode()
        for token, grant in self._known:
            if hmac.compare_digest(token, candidate):
                found = grant
        if found is None:
            raise Unauthenticated("invalid_token", "the bearer token is not known to this server")
        return found
