"""OAuth bearer tokens (docs/contract.md §14), against a real authorization server: Authlib's
(`tests/_oauth_as.py`) as its own process on 127.0.0.1, speaking RFC 7662 introspection with
client authentication and publishing a JWKS for RFC 9068 JWT access tokens; and the real server
(`pdpp-store serve --issuer ...`) as another process, spoken to over sockets with httpx (REST)
and the MCP SDK's Streamable HTTP client.

Covered: active, inactive, expired, wrong-audience, wrong-issuer and bad-signature tokens, in
both forms (introspected and JWT); the grant named by a `grant_id` claim or carried as RFC 9396
`authorization_details`; revocation at the authorization server seen within the cache bound;
the authorization server down (fail closed, a typed 503); the metadata naming the issuer and
the 401's `resource_metadata`; and a stored grant the owner revokes, refused at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from _rest import TEXT, seed, window_path
from _served import CLI, free_port, mcp_read

from pdpp_store import AsyncStore, Store

AS_SCRIPT = Path(__file__).resolve().parents[1] / "_oauth_as.py"
STARTUP_SECONDS = 30.0
CACHE_SECONDS = 2
GRANT = {
    "grant_id": "g-oauth",
    "streams": [{"name": "message_bodies", "instance_ids": ["cin_mail"]}],
}


def _wait(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"{url}: the process ended early: {_stop(process)}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer in {STARTUP_SECONDS}s: {_stop(process)}")


def _stop(process: subprocess.Popen[bytes]) -> str:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()
    assert process.stderr is not None
    return process.stderr.read().decode(errors="replace")


@dataclass
class Site:
    issuer: str
    base_url: str
    authorization_server: subprocess.Popen[bytes]
    server: subprocess.Popen[bytes]

    def token(self, **asked: str) -> str:
        """A token from the authorization server's token endpoint (client credentials)."""
        form = {"grant_type": "client_credentials", "resource": self.base_url, **asked}
        answer = httpx.post(f"{self.issuer}/token", data=form, auth=("agent", "agent-secret"))
        assert answer.status_code == 200, answer.text
        token: str = answer.json()["access_token"]
        return token

    def revoke(self, token: str) -> None:
        answer = httpx.post(
            f"{self.issuer}/revoke", data={"token": token}, auth=("agent", "agent-secret")
        )
        assert answer.status_code == 200, answer.text

    def introspections(self) -> int:
        count: int = httpx.get(f"{self.issuer}/test/introspections").json()["count"]
        return count

    def window(self, token: str) -> httpx.Response:
        return httpx.get(
            self.base_url + window_path(),
            params={"field": "body_text", "limit_chars": 20},
            headers={"Authorization": f"Bearer {token}"},
        )


@pytest.fixture
def site(db_url: str, tmp_path: Path) -> Iterator[Site]:
    async def seeded() -> None:
        store = await AsyncStore.open(db_url)
        try:
            await seed(store)
            await store.add_grant(GRANT)
        finally:
            await store.close()

    asyncio.run(seeded())
    as_port, port = free_port(), free_port()
    issuer = f"http://127.0.0.1:{as_port}"
    authorization_server = subprocess.Popen(
        [sys.executable, str(AS_SCRIPT), str(as_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    secret = tmp_path / "client_secret"
    secret.write_text("rs-secret\n", encoding="utf-8")
    server = None
    try:
        _wait(f"{issuer}/jwks", authorization_server)
        server = subprocess.Popen(
            [
                str(CLI),
                "--db",
                db_url,
                "serve",
                "--port",
                str(port),
                "--issuer",
                issuer,
                "--introspection-url",
                f"{issuer}/introspect",
                "--client-id",
                "rs-client",
                "--client-secret-file",
                str(secret),
                "--jwks-url",
                f"{issuer}/jwks",
                "--introspection-cache-seconds",
                str(CACHE_SECONDS),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        base_url = f"http://127.0.0.1:{port}"
        _wait(f"{base_url}/.well-known/oauth-protected-resource", server)
        yield Site(issuer, base_url, authorization_server, server)
    finally:
        if server is not None:
            _stop(server)
        _stop(authorization_server)


@pytest.mark.parametrize("token_format", ["opaque", "jwt"])
def test_an_active_token_reads_by_its_grant_id_and_bad_tokens_are_401(
    site: Site, token_format: str
) -> None:
    good = site.token(token_format=token_format, grant_id="g-oauth")
    answer = site.window(good)
    assert answer.status_code == 200, answer.text
    assert answer.json()["window"]["text"] == TEXT[:20]

    carried = json.dumps([{"type": "pdpp_grant", **GRANT, "grant_id": "g-carried"}])
    inline = site.window(site.token(token_format=token_format, authorization_details=carried))
    assert inline.status_code == 200, inline.text

    bad = {
        "expired": site.token(token_format=token_format, grant_id="g-oauth", expires_in="-10"),
        "wrong audience": site.token(
            token_format=token_format, grant_id="g-oauth", resource="http://elsewhere.example"
        ),
        "wrong issuer": site.token(
            token_format=token_format, grant_id="g-oauth", issuer="http://other-as.example"
        ),
        "no grant": site.token(token_format=token_format),
        "unknown grant": site.token(token_format=token_format, grant_id="g-nobody"),
        "never issued": "opaque_never_issued_by_anyone_0000"
        if token_format == "opaque"
        else good[:-6] + "AAAAAA",
    }
    if token_format == "jwt":
        bad["bad signature"] = site.token(
            token_format="jwt", grant_id="g-oauth", sign_with="foreign"
        )
    for why, token in bad.items():
        refused = site.window(token)
        assert refused.status_code == 401, (why, refused.text)
        error = refused.json()["error"]
        assert error["code"] == "invalid_token", why
        assert token not in refused.text
        challenge = refused.headers["WWW-Authenticate"]
        assert (
            f'resource_metadata="{site.base_url}/.well-known/oauth-protected-resource"' in challenge
        )

    metadata = httpx.get(f"{site.base_url}/.well-known/oauth-protected-resource").json()
    assert metadata["authorization_servers"] == [site.issuer]
    assert metadata["resource"] == site.base_url
    mcp_metadata = httpx.get(f"{site.base_url}/.well-known/oauth-protected-resource/mcp").json()
    assert mcp_metadata["authorization_servers"] == [site.issuer]

    result = asyncio.run(mcp_read(site.base_url, good))
    assert not result.is_error
    assert result.structured_content["window"]["text"] == TEXT[:40]


def test_an_introspected_token_is_kept_at_most_the_cache_bound(site: Site) -> None:
    token = site.token(grant_id="g-oauth")
    assert site.window(token).status_code == 200
    asked = site.introspections()
    assert site.window(token).status_code == 200  # kept: the authorization server not asked
    assert site.introspections() == asked

    site.revoke(token)
    revoked_at = time.monotonic()
    while site.window(token).status_code == 200:
        assert time.monotonic() - revoked_at < CACHE_SECONDS + 1, "served past the cache bound"
        time.sleep(0.1)
    refused = site.window(token)
    assert refused.status_code == 401
    before = site.introspections()
    site.window(token)  # an inactive answer is never kept
    assert site.introspections() == before + 1


def test_a_stored_grant_revoked_by_the_owner_is_refused_at_once(site: Site, db_url: str) -> None:
    token = site.token(token_format="jwt", grant_id="g-oauth")
    assert site.window(token).status_code == 200
    with Store.open(db_url) as owner:
        owner.revoke_grant("g-oauth")
    refused = site.window(token)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "grant_revoked"


def test_the_authorization_server_down_fails_closed(site: Site) -> None:
    """Neither an opaque token (introspection) nor a JWT (the JWKS, not fetched yet) is
    accepted while the authorization server cannot be reached: a typed 503, never a read."""
    tokens = [site.token(grant_id="g-oauth"), site.token(token_format="jwt", grant_id="g-oauth")]
    _stop(site.authorization_server)
    for token in tokens:
        refused = site.window(token)
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "authorization_server_unavailable"
        assert "Retry-After" in refused.headers
        assert TEXT[:20] not in refused.text
    mcp = httpx.post(
        f"{site.base_url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={
            "Authorization": f"Bearer {tokens[0]}",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert mcp.status_code == 503
    assert mcp.json()["error"]["code"] == "authorization_server_unavailable"
