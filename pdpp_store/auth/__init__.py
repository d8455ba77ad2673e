"""`pdpp_store.auth`: how a server turns a bearer token into a grant (docs/contract.md §14).

    TokensFile("tokens.json")                                  the tokens file, re-read on change
    OAuth(issuer=..., resource=..., introspection_endpoint=..., client_id=..., client_secret=...,
          jwks_uri=...)                                        RFC 7662 and RFC 9068 tokens
    Resolvers(TokensFile(...), OAuth(...))                     the first that knows the token

Each is a `pdpp_store.http.Resolver`, which `pdpp_store.rest.create_app`,
`pdpp_store.mcp.http_app` and `pdpp_store.serve` take in place of a map of tokens.

Rules:
1. A token names its grant by id (a tokens-file string, a `grant_id` claim) or carries it (a
   tokens-file object, RFC 9396 `authorization_details` of type `pdpp_grant`). A grant named by
   id is the served store's (`Store.add_grant`); a revoked or expired stored grant is refused
   by the library on every read (`grant_revoked`, `grant_expired`), on the next request.
2. `Resolvers` asks its sources in order; the first that knows the token decides. A source that
   refuses a token it knows (an expired JWT, an inactive introspected token) refuses it: no
   later source is asked. A source that cannot answer fails closed (503).
3. No token and no claim is ever written to a log or a message.
"""

from __future__ import annotations

from collections.abc import Sequence

from pdpp_store import AsyncStore
from pdpp_store.http import Access

from ._common import Lookup, invalid_token, missing_token
from ._oauth import CACHE_SECONDS, OAuth
from ._tokens_file import TokensFile, hash_token

__all__ = ["CACHE_SECONDS", "Lookup", "OAuth", "Resolvers", "TokensFile", "hash_token"]


class Resolvers:
    """Several sources of tokens as one `pdpp_store.http.Resolver` (rule 2)."""

    def __init__(self, *sources: Lookup) -> None:
        if not sources:
            raise ValueError("Resolvers needs at least one source of tokens")
        self._sources = sources

    @property
    def authorization_servers(self) -> Sequence[str]:
        named: list[str] = []
        for source in self._sources:
            named.extend(s for s in source.authorization_servers if s not in named)
        return tuple(named)

    async def resolve(self, presented: str | None, store: AsyncStore) -> Access:
        if presented is None:
            raise missing_token()
        for source in self._sources:
            found = await source.lookup(presented, store)
            if found is not None:
                return found
        raise invalid_token()
