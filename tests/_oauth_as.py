"""A real OAuth 2.0 authorization server for the token-resolution tests, run as its own process
on 127.0.0.1: Authlib's Flask server (the client credentials grant at `/token`, RFC 7662
introspection at `/introspect`, RFC 7009 revocation at `/revoke`, both with client
authentication) and a JWKS at `/jwks`; RFC 9068 JWT access tokens from Authlib's generator.

    python tests/_oauth_as.py PORT

Clients: `rs-client` / `rs-secret` (the resource server: may introspect), `agent` /
`agent-secret` (asks for tokens). What a test asks of a token, as extra form fields of the
token request: `token_format` (`opaque` or `jwt`), `resource` (its `aud`, RFC 8707),
`grant_id`, `authorization_details` (JSON, RFC 9396), `expires_in` (seconds, may be negative),
`issuer` (another `iss`), `sign_with=foreign` (a key the JWKS does not hold).
`GET /test/introspections` says how many introspection requests were answered.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, TokenMixin
from authlib.oauth2.rfc6749.grants import ClientCredentialsGrant
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7662 import IntrospectionEndpoint
from authlib.oauth2.rfc9068 import JWTBearerTokenGenerator
from flask import Flask, jsonify, request
from joserfc.jwk import KeySet, RSAKey

SIGNING_KEY = RSAKey.generate_key(2048, parameters={"kid": "as-key-1", "alg": "RS256"})
FOREIGN_KEY = RSAKey.generate_key(2048, parameters={"kid": "as-key-1", "alg": "RS256"})


@dataclass
class Client(ClientMixin):  # type: ignore[misc]
    client_id: str
    secret: str

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return None

    def get_allowed_scope(self, scope: str) -> str:
        return scope or ""

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return False

    def check_client_secret(self, client_secret: str) -> bool:
        return client_secret == self.secret

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_basic"

    def check_response_type(self, response_type: str) -> bool:
        return False

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type == "client_credentials" and self.client_id == "agent"


CLIENTS = {"rs-client": Client("rs-client", "rs-secret"), "agent": Client("agent", "agent-secret")}


@dataclass
class Token(TokenMixin):  # type: ignore[misc]
    access_token: str
    client_id: str
    issued_at: int
    expires_in: int
    claims: dict[str, Any] = field(default_factory=dict)
    revoked: bool = False

    def check_client(self, client: Client) -> bool:
        return True

    def get_scope(self) -> str:
        return ""

    def get_expires_in(self) -> int:
        return self.expires_in

    def is_expired(self) -> bool:
        return self.issued_at + self.expires_in <= time.time()

    def is_revoked(self) -> bool:
        return self.revoked


TOKENS: dict[str, Token] = {}
INTROSPECTIONS = [0]


def _asked() -> dict[str, Any]:
    """The claims a test asked for (the module's doc), from the token request's form."""
    form = request.form
    claims: dict[str, Any] = {}
    if "resource" in form:
        claims["aud"] = form["resource"]
    if "grant_id" in form:
        claims["grant_id"] = form["grant_id"]
    if "authorization_details" in form:
        claims["authorization_details"] = json.loads(form["authorization_details"])
    if "issuer" in form:
        claims["iss"] = form["issuer"]
    return claims


def _expires_in(client: Client, grant_type: str) -> int:
    return int(request.form.get("expires_in", "3600"))


class JwtTokens(JWTBearerTokenGenerator):  # type: ignore[misc]
    def get_jwks(self) -> Any:
        key = FOREIGN_KEY if request.form.get("sign_with") == "foreign" else SIGNING_KEY
        return KeySet([key]).as_dict(private=True)

    def get_audiences(self, client: Client, user: Any, scope: str) -> list[str]:
        return []

    def get_extra_claims(self, client: Client, grant_type: str, user: Any, scope: str) -> Any:
        return _asked()


def create_app(issuer: str) -> Flask:
    app = Flask(__name__)
    server = AuthorizationServer(app, query_client=CLIENTS.get, save_token=_save)
    server.register_grant(ClientCredentialsGrant)
    jwt_tokens = JwtTokens(issuer, expires_generator=_expires_in)
    opaque_tokens = BearerTokenGenerator(
        lambda **_: "opaque_" + secrets.token_urlsafe(24),
        expires_generator=_expires_in,
    )

    def generate(**arguments: Any) -> Any:
        chosen = jwt_tokens if request.form.get("token_format") == "jwt" else opaque_tokens
        return chosen.generate(**arguments)

    server.register_token_generator("client_credentials", generate)

    class Introspection(IntrospectionEndpoint):  # type: ignore[misc]
        CLIENT_AUTH_METHODS: ClassVar[list[str]] = ["client_secret_basic"]

        def query_token(self, token: str, token_type_hint: str | None) -> Token | None:
            INTROSPECTIONS[0] += 1
            return TOKENS.get(token)

        def check_permission(self, token: Token, client: Client, req: Any) -> bool:
            return bool(client.client_id == "rs-client")

        def introspect_token(self, token: Token) -> dict[str, Any]:
            return {
                "active": True,
                "client_id": token.client_id,
                "token_type": "Bearer",
                "iss": issuer,
                "iat": token.issued_at,
                "exp": token.issued_at + token.expires_in,
                **token.claims,
            }

    class Revocation(RevocationEndpoint):  # type: ignore[misc]
        CLIENT_AUTH_METHODS: ClassVar[list[str]] = ["client_secret_basic"]

        def query_token(self, token: str, token_type_hint: str | None) -> Token | None:
            return TOKENS.get(token)

        def revoke_token(self, token: Token, req: Any) -> None:
            token.revoked = True

    server.register_endpoint(Introspection)
    server.register_endpoint(Revocation)

    @app.post("/token")
    def issue() -> Any:
        return server.create_token_response()

    @app.post("/introspect")
    def introspect() -> Any:
        return server.create_endpoint_response(Introspection.ENDPOINT_NAME)

    @app.post("/revoke")
    def revoke() -> Any:
        return server.create_endpoint_response(RevocationEndpoint.ENDPOINT_NAME)

    @app.get("/jwks")
    def jwks() -> Any:
        return jsonify(KeySet([SIGNING_KEY]).as_dict(private=False))

    @app.get("/test/introspections")
    def introspections() -> Any:
        return jsonify({"count": INTROSPECTIONS[0]})

    return app


def _save(token: dict[str, Any], req: Any) -> None:
    if request.form.get("token_format") == "jwt":
        return
    TOKENS[token["access_token"]] = Token(
        token["access_token"],
        req.client.client_id,
        int(time.time()),
        int(token.get("expires_in", 3600)),
        _asked(),
    )


if __name__ == "__main__":
    port = int(sys.argv[1])
    create_app(f"http://127.0.0.1:{port}").run(host="127.0.0.1", port=port, threaded=True)
