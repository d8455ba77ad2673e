"""OAuth bearer tokens: RFC 7662 token introspection and RFC 9068 JWT access tokens.

    OAuth(issuer="https://as.example", resource="https://rs.example",
          introspection_endpoint=..., client_id=..., client_secret=...,   # RFC 7662
          jwks_uri=...)                                                   # RFC 9068

Rules:
1. Introspection (RFC 7662 §2): the token is POSTed as a form to the endpoint with the server's
   client credentials (HTTP Basic, `client_secret_basic`). The answer must say `"active": true`;
   its `exp`, if any, must be in the future; its `iss`, if any, must be the configured issuer;
   its `aud` must name this resource. Anything else is `invalid_token` (401).
2. A positive answer is kept for at most `min(exp, cache_seconds)` (60 s by default, and never
   more): a token the authorization server revokes is refused again within that bound. An
   inactive or refused token is never kept: the next request asks again.
3. A JWT access token (a compact JWS, three dot-separated parts, when `jwks_uri` is configured)
   is checked locally, RFC 9068 §4: header `typ` `at+jwt`, an asymmetric signature by a key of
   the authorization server's JWKS (`RS256`, `PS256`, `ES256`, `EdDSA`; never `none` or an HMAC
   key), `iss` the configured issuer, `aud` naming this resource, `exp` in the future. The JWKS
   is fetched on first use, kept `JWKS_SECONDS`, and fetched again (at most once every
   `JWKS_RETRY_SECONDS`) when a token names a key id it lacks.
4. The resource this server is (the `aud` it accepts) is its public base URL, or that URL with
   `/mcp` (the MCP endpoint's, as an MCP client asks for it per RFC 8707).
5. An authorization server that cannot be reached, times out, or answers anything but a JSON
   object (HTTP 200) fails closed: `authorization_server_unavailable` (503), never a read.
6. The grant comes from the claims (`pdpp_store.auth` rule 1); `client_id` names the client.
7. No message or log line contains a token or an answer's claims.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from joserfc import jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from pdpp_store import AsyncStore, Grant, Unavailable
from pdpp_store.http import Access

from ._common import StoredGrants, grant_named_by, invalid_token

__all__ = ["CACHE_SECONDS", "OAuth"]

CACHE_SECONDS = 60
JWKS_SECONDS = 300
JWKS_RETRY_SECONDS = 10
TIMEOUT_SECONDS = 5.0
MAX_KEPT_ANSWERS = 10_000
ALGORITHMS = ("RS256", "PS256", "ES256", "EdDSA")
_AT_JWT = {"at+jwt", "application/at+jwt"}


def _unavailable(what: str) -> Unavailable:
    return Unavailable(
        "authorization_server_unavailable",
        f"the authorization server could not be asked ({what}); no token is accepted until it "
        "answers",
        details={"retry_after_s": 5},
    )


def _looks_like_jwt(token: str) -> bool:
    parts = token.split(".")
    return len(parts) == 3 and all(parts)


@dataclass
class OAuth:
    """Bearer tokens an OAuth authorization server issued, as a `Lookup` (see the rules)."""

    issuer: str
    resource: str | None = None
    """This server's base URL (rule 4); `pdpp_store.serve` fills it in from its public URL."""
    introspection_endpoint: str | None = None
    client_id: str | None = None
    client_secret: str | None = field(default=None, repr=False)
    jwks_uri: str | None = None
    timeout_s: float = TIMEOUT_SECONDS
    cache_seconds: float = CACHE_SECONDS
    """How long a positive introspection answer is kept, at most (rule 2): 0 to 60 seconds."""
    _answers: dict[bytes, tuple[float, Access]] = field(default_factory=dict, repr=False)
    _jwks: tuple[float, KeySet] | None = field(default=None, repr=False)
    _jwks_asked_at: float = field(default=0.0, repr=False)
    _clients: dict[int, httpx.AsyncClient] = field(default_factory=dict, repr=False)
    _stored: StoredGrants = field(default_factory=StoredGrants, repr=False)

    def __post_init__(self) -> None:
        if not 0 <= self.cache_seconds <= CACHE_SECONDS:
            raise ValueError(f"cache_seconds must be between 0 and {CACHE_SECONDS}")
        if self.introspection_endpoint is None and self.jwks_uri is None:
            raise ValueError("OAuth needs an introspection endpoint, a JWKS URI, or both")
        if self.introspection_endpoint is not None and not (self.client_id and self.client_secret):
            raise ValueError("token introspection needs the server's client id and secret")

    def __getstate__(self) -> dict[str, Any]:  # a worker starts with nothing kept
        kept = ("issuer", "resource", "introspection_endpoint", "client_id", "client_secret")
        more = ("jwks_uri", "timeout_s", "cache_seconds")
        return {name: getattr(self, name) for name in (*kept, *more)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @property
    def authorization_servers(self) -> Sequence[str]:
        return (self.issuer,)

    @property
    def audiences(self) -> frozenset[str]:
        if self.resource is None:
            raise ValueError("OAuth.resource (this server's public base URL) is not set")
        return frozenset({self.resource, self.resource + "/mcp"})

    def _client(self) -> httpx.AsyncClient:
        """One HTTP client per event loop (a client belongs to the loop it was made on)."""
        loop = id(asyncio.get_running_loop())
        found = self._clients.get(loop)
        if found is None:
            found = httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False)
            self._clients = {loop: found}  # a loop that ended takes its client with it
        return found

    async def lookup(self, presented: str, store: AsyncStore) -> Access | None:
        if self.jwks_uri is not None and _looks_like_jwt(presented):
            return await self._grant_access(await self._verified_jwt(presented), store)
        if self.introspection_endpoint is None:
            return None
        return await self._introspected(presented, store)

    # ------------------------------------------------------------ introspection (rules 1, 2)

    async def _introspected(self, presented: str, store: AsyncStore) -> Access:
        key = hashlib.sha256(presented.encode()).digest()
        now = time.time()
        kept = self._answers.get(key)
        if kept is not None:
            if kept[0] > now:
                return kept[1]
            del self._answers[key]
        claims = await self._introspect(presented)
        if claims.get("active") is not True:
            raise invalid_token("the authorization server says the token is not active")
        exp = claims.get("exp")
        if exp is not None and (not isinstance(exp, int | float) or exp <= now):
            raise invalid_token("the token has expired")
        iss = claims.get("iss")
        if iss is not None and iss != self.issuer:
            raise invalid_token("the token was issued by another authorization server")
        self._check_audience(claims.get("aud"))
        access = await self._grant_access(claims, store)
        bound = now + self.cache_seconds
        until = bound if exp is None else min(float(exp), bound)
        if len(self._answers) >= MAX_KEPT_ANSWERS:
            self._answers.clear()
        self._answers[key] = (until, access)
        return access

    async def _introspect(self, presented: str) -> Mapping[str, Any]:
        assert self.introspection_endpoint is not None
        assert self.client_id is not None
        assert self.client_secret is not None
        try:
            answer = await self._client().post(
                self.introspection_endpoint,
                data={"token": presented, "token_type_hint": "access_token"},
                auth=(self.client_id, self.client_secret),
                headers={"Accept": "application/json"},
            )
        except httpx.HTTPError as error:
            raise _unavailable(type(error).__name__) from None
        if answer.status_code != 200:
            raise _unavailable(f"introspection answered HTTP {answer.status_code}")
        try:
            claims = answer.json()
        except ValueError:
            raise _unavailable("introspection answered something that is not JSON") from None
        if not isinstance(claims, dict):
            raise _unavailable("introspection answered something that is not a JSON object")
        return claims

    def _check_audience(self, aud: object) -> None:
        named = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        if not any(isinstance(one, str) and one in self.audiences for one in named):
            raise invalid_token("the token is not meant for this resource (aud)")

    async def _grant_access(self, claims: Mapping[str, Any], store: AsyncStore) -> Access:
        named = grant_named_by(claims)
        grant = named if isinstance(named, Grant) else await self._stored.grant(named, store)
        client = claims.get("client_id")
        return Access(grant, client if isinstance(client, str) else None)

    # ------------------------------------------------------------ JWT access tokens (rule 3)

    async def _keys(self, refresh: bool) -> KeySet:
        now = time.monotonic()
        if self._jwks is not None and self._jwks[0] > now and not refresh:
            return self._jwks[1]
        if refresh and self._jwks is not None and now - self._jwks_asked_at < JWKS_RETRY_SECONDS:
            return self._jwks[1]
        assert self.jwks_uri is not None
        self._jwks_asked_at = now
        try:
            answer = await self._client().get(self.jwks_uri, headers={"Accept": "application/json"})
        except httpx.HTTPError as error:
            raise _unavailable(type(error).__name__) from None
        if answer.status_code != 200:
            raise _unavailable(f"the JWKS answered HTTP {answer.status_code}")
        try:
            keys = KeySet.import_key_set(answer.json())
        except (ValueError, TypeError, KeyError, JoseError):
            raise _unavailable("the JWKS is not a usable key set") from None
        public = [key for key in keys.keys if key.key_type in ("RSA", "EC", "OKP")]
        key_set = KeySet(public)
        self._jwks = (now + JWKS_SECONDS, key_set)
        return key_set

    async def _verified_jwt(self, presented: str) -> Mapping[str, Any]:
        try:
            header = jws.extract_compact(presented.encode()).headers()
        except (JoseError, ValueError, TypeError):  # a malformed token is only a bad token
            raise invalid_token("the bearer token is not a well-formed JWT") from None
        typ = header.get("typ")
        if not isinstance(typ, str) or typ.lower() not in _AT_JWT:
            raise invalid_token("the token is not a JWT access token (typ at+jwt)")
        keys = await self._keys(refresh=False)
        kid = header.get("kid")
        if isinstance(kid, str) and not any(key.kid == kid for key in keys.keys):
            keys = await self._keys(refresh=True)
        try:
            token = jwt.decode(presented, keys, algorithms=list(ALGORITHMS))
        except JoseError:
            raise invalid_token("the token's signature does not verify") from None
        except Exception:
            raise invalid_token("the bearer token is not a well-formed JWT") from None
        claims = token.claims
        registry = jwt.JWTClaimsRegistry(
            iss={"essential": True, "value": self.issuer},
            exp={"essential": True},
        )
        try:
            registry.validate(claims)
        except JoseError as error:
            claim = getattr(error, "claim", None) or "a claim"
            if claim == "iss":
                raise invalid_token(
                    "the token was issued by another authorization server"
                ) from None
            if claim == "exp":
                raise invalid_token("the token has expired") from None
            raise invalid_token(f"the token's {claim} is not acceptable") from None
        self._check_audience(claims.get("aud"))
        return claims
