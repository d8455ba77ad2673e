"""P0 gate, proof 1 through the REST server: no answer of any route, under any grant, holds a byte
the grant does not authorize (docs/contract.md §2 "Grants", §5 "Projection, previews and binary
data", §10 "Surfaces").

The canary dataset and its oracle are `test_gate_canaries`'s. Each hypothesis example draws a
grant (the grant of a bearer token) and a few HTTP requests over every route (field windows with
every selector, records with and without `fields=`, search, blob bytes with and without a
`Range`, record lists with filters, projections, orders, counts and changes, discovery), sends
them to the app in process, and asserts:

1. no canary outside the grant (the oracle's `forbidden`; blob bytes count as a read through the
   blob) is in any answer, body or headers, apart from canaries the request itself carried;
2. none crossed the database boundary while the requests ran (`BoundaryAudit`);
3. the check is not vacuous: under the owner's grant, canaries do reach the client, and a server
   that answers under another grant than the token's fails the check.

Each example's token is resolved by one of the servers' resolvers, drawn with the grant: a map
of tokens, the tokens file (`pdpp_store.auth.TokensFile`: the token kept hashed, naming the
grant stored in the store by id), or a JWT access token from a real authorization server
(Authlib's, `tests/_oauth_as.py`, on loopback) carrying the grant as `authorization_details`,
checked by `pdpp_store.auth.OAuth` against its JWKS.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from audit import BoundaryAudit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_gate_canaries import (
    DATASET,
    STREAMS,
    GrantDict,
    Key,
    authorized,
    forbidden,
    grants,
    load,
    selectors,
    targets,
)

from pdpp_store import AsyncStore, Grant, Store
from pdpp_store.auth import OAuth, Resolvers, TokensFile, hash_token
from pdpp_store.http import Resolver
from pdpp_store.rest import _app as rest_app
from pdpp_store.rest import create_app

REST_EXAMPLES = int(os.environ.get("PDPP_GATE_REST_EXAMPLES", "100"))
TOKEN = "tok_gate_rest_000000000000"
Ask = tuple[str, dict[str, str], dict[str, str]]
"""A request: path, query parameters, headers."""
RESOLVERS = ("map", "file", "jwt")
BASE_URL = "http://gate.test"
AS_SCRIPT = Path(__file__).resolve().parents[1] / "_oauth_as.py"


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    """A real authorization server on loopback (its issuer URL), for the `jwt` resolver."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(AS_SCRIPT), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, "the authorization server ended early"
            try:
                httpx.get(f"{url}/jwks", timeout=1)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the authorization server did not start"
                time.sleep(0.1)
        yield url
    finally:
        os.kill(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


async def _tokens(
    served: Served, grant: Grant, resolver: str, issuer: str | None
) -> tuple[dict[str, Grant] | Resolver, str]:
    """What the app is made with, and the token to send, for `grant` under `resolver`."""
    if resolver == "map":
        return {TOKEN: grant}, TOKEN
    terms = {**grant.to_dict(), "grant_id": f"{grant.grant_id}-{uuid.uuid4().hex[:8]}"}
    if resolver == "file":
        await served.store.add_grant(terms)
        path = Path(tempfile.mkdtemp()) / "tokens.json"
        path.write_text(json.dumps({hash_token(TOKEN): terms["grant_id"]}), encoding="utf-8")
        return TokensFile(path), TOKEN
    assert issuer is not None
    details = json.dumps([{"type": "pdpp_grant", **terms}])
    async with httpx.AsyncClient() as client:
        answer = await client.post(
            f"{issuer}/token",
            data={
                "grant_type": "client_credentials",
                "token_format": "jwt",
                "resource": BASE_URL,
                "authorization_details": details,
            },
            auth=("agent", "agent-secret"),
        )
    token: str = answer.json()["access_token"]
    return Resolvers(OAuth(issuer=issuer, resource=BASE_URL, jwks_uri=f"{issuer}/jwks")), token


class Served:
    """The dataset in a database, an `AsyncStore` over it, and the event loop that drives it."""

    def __init__(self, url: str) -> None:
        with Store.open(url) as store:
            load(store)
        self.loop = asyncio.new_event_loop()
        self.store = self.loop.run_until_complete(AsyncStore.open(url))

    def close(self) -> None:
        self.loop.run_until_complete(self.store.close())
        self.loop.close()


@pytest.fixture
def served(db_url: str) -> Iterator[Served]:
    serving = Served(db_url)
    try:
        yield serving
    finally:
        serving.close()


def _record_path(key: Key) -> str:
    _, stream, record_id = key
    return f"/v1/streams/{quote(stream, safe='')}/records/{quote(record_id, safe='')}"


@st.composite
def requests(draw: st.DrawFn, grant: GrantDict) -> Ask:
    kind = draw(
        st.sampled_from(["window", "window", "record", "search", "blob", "records", "discovery"])
    )
    key, path = draw(targets(grant))
    connection: dict[str, str] = {"connection_id": key[0]} if draw(st.booleans()) else {}
    if kind == "records":
        return f"/v1/streams/{quote(key[1], safe='')}/records", draw(list_params(path)), {}
    if kind == "discovery":
        where = draw(st.sampled_from(["/v1/schema", "/v1/streams", f"/v1/streams/{key[1]}"]))
        return where, {}, {}
    if kind == "window":
        selector, _ = draw(selectors(key, path))
        params = {name: str(value) for name, value in selector.items()}
        return f"{_record_path(key)}/field-window", {"field": path, **connection, **params}, {}
    if kind == "record":
        narrowed = {"fields": path} if draw(st.booleans()) else {}
        return _record_path(key), {**connection, **narrowed}, {}
    if kind == "search":
        canaries = [secret.canary for secret in DATASET.secrets]
        q = draw(st.sampled_from(["the", "é", "😀", "zzzz-none"]) | st.sampled_from(canaries))
        streams = draw(st.lists(st.sampled_from(STREAMS), unique=True))
        return "/v1/search", {"q": q, **({"streams": ",".join(streams)} if streams else {})}, {}
    blob = draw(st.sampled_from(sorted(DATASET.blobs.values(), key=lambda b: b.key)))
    ranged = {"Range": f"bytes={draw(st.integers(0, 64))}-"} if draw(st.booleans()) else {}
    return f"/v1/blobs/{blob.blob_id}", {}, ranged


@st.composite
def list_params(draw: st.DrawFn, path: str) -> dict[str, str]:
    """`query_records` parameters: a page size, and maybe a projection, a filter naming `path`
    (a canary value, or a range), an order, a count, a changes walk."""
    params = {"limit": str(draw(st.integers(1, 5)))}
    if draw(st.booleans()):
        params["fields"] = path
    if draw(st.booleans()):
        canaries = [secret.canary for secret in DATASET.secrets]
        value: Any = draw(st.sampled_from(canaries) | st.sampled_from(["x", 1, True, None]))
        if draw(st.booleans()):
            value = {"gte": "2026-01-01T00:00:00Z"}
        params["filter"] = json.dumps({path: value})
    if draw(st.booleans()):
        params["order"] = draw(st.sampled_from(["asc", "desc"]))
    if draw(st.booleans()):
        params["count"] = "exact"
    if draw(st.integers(0, 3)) == 0:
        params["changes_since"] = "beginning"
    return params


async def _ask(
    served: Served,
    grant: Grant,
    asks: list[Ask],
    resolver: str = "map",
    issuer: str | None = None,
) -> list[str]:
    tokens, token = await _tokens(served, grant, resolver, issuer)
    app = create_app(served.store, tokens)
    answers = []
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url=BASE_URL
    ) as client:
        for path, params, headers in asks:
            response = await client.get(
                path, params=params, headers={**headers, "Authorization": f"Bearer {token}"}
            )
            assert response.status_code < 500, response.text
            assert response.status_code != 401, (resolver, response.text)  # the token resolved
            # Bytes as latin-1: a canary is ASCII, so it shows in a body of any encoding.
            answers.append(response.content.decode("latin-1") + str(response.headers))
    return answers


@given(data=st.data())
@settings(
    max_examples=REST_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_property_no_rest_answer_shows_what_the_grant_excludes(
    served: Served, issuer: str, data: st.DataObject
) -> None:
    grant_dict = data.draw(grants("g-rest"), label="grant")
    resolver = data.draw(st.sampled_from(RESOLVERS), label="resolver")
    asks = [
        data.draw(requests(grant_dict), label="request")
        for _ in range(data.draw(st.integers(1, 6), label="requests"))
    ]
    check_rest(served, grant_dict, asks, resolver, issuer)


def check_rest(
    served: Served,
    grant_dict: GrantDict,
    asks: list[Ask],
    resolver: str = "map",
    issuer: str | None = None,
) -> None:
    """Rules 1 and 2 of the module for `asks` under `grant_dict`, the token resolved by
    `resolver`."""
    sent = json.dumps(asks, ensure_ascii=False).lower() + json.dumps(grant_dict).lower()
    secret = [c for c in forbidden(grant_dict, through_blobs=True) if c.lower() not in sent]
    with BoundaryAudit(served.store.engine) as audit:
        answers = served.loop.run_until_complete(
            _ask(served, Grant.from_dict(grant_dict), asks, resolver, issuer)
        )
    said = "\n".join(answers).lower()
    shown = [c for c in secret if c.lower() in said]
    assert not shown, f"unauthorized canary in a REST answer: {shown}; {asks} under {grant_dict}"
    cells = "".join(
        v if isinstance(v, str) else bytes(v).decode("latin-1")
        for v in audit.values
        if isinstance(v, str | bytes | memoryview)
    ).lower()
    crossed = [c for c in secret if c.lower() in cells]
    assert not crossed, f"unauthorized canary crossed into Python: {crossed}; {asks}"


def _first_body(stream: str) -> Key:
    return next(k for k in DATASET.records if k[1] == stream and not DATASET.records[k].deleted)


def test_the_rest_check_bites(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proof 3: a server that answers under another grant than the token's (here the owner's)
    fails `check_rest`, for the right reason."""
    narrow = {"grant_id": "g-n", "streams": [{"name": "message_bodies", "fields": ["id"]}]}
    holder = next(
        secret.record
        for secret in DATASET.secrets
        if secret.kind == "text"
        and secret.record is not None
        and secret.record[1] == "message_bodies"
        and secret.field != "id"
        and not DATASET.records[secret.record].deleted
    )
    asks: list[Ask] = [(_record_path(holder), {"connection_id": holder[0]}, {})]
    check_rest(served, narrow, asks)  # the real server passes
    everything = Grant.from_dict({"grant_id": "g-all", "streams": [{"name": s} for s in STREAMS]})
    real = rest_app._grant_resolver

    def resolver(tokens: Any, store: Any) -> Any:
        return real(dict.fromkeys(tokens, everything), store)

    monkeypatch.setattr(rest_app, "_grant_resolver", resolver)
    with pytest.raises(AssertionError, match="unauthorized canary in a REST answer"):
        check_rest(served, narrow, asks)


def test_the_rest_check_sees_authorized_canaries(served: Served) -> None:
    """Proof 3 for this proof: under the owner's grant canaries do reach the client (records,
    windows and blob bytes), so a missing canary above means an exclusion held."""
    owner = {"grant_id": "g-owner", "streams": [{"name": s} for s in STREAMS]}
    key = _first_body("message_bodies")
    asks: list[Ask] = [
        (_record_path(key), {"connection_id": key[0]}, {}),
        (f"{_record_path(key)}/field-window", {"field": "charset", "connection_id": key[0]}, {}),
        *((f"/v1/blobs/{blob.blob_id}", {}, {}) for blob in DATASET.blobs.values()),
        ("/v1/streams/message_bodies/records", {"fields": "charset", "limit": "50"}, {}),
        ("/v1/schema", {}, {}),
    ]
    said = "\n".join(
        served.loop.run_until_complete(_ask(served, Grant.from_dict(owner), asks))
    ).lower()
    seen = [c for c in authorized(owner, through_blobs=True) if c.lower() in said]
    assert seen
    narrow = {"grant_id": "g-n", "streams": [{"name": "message_bodies", "fields": ["id"]}]}
    check_rest(served, narrow, asks)
