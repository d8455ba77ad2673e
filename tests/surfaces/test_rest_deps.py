"""`rest/_deps`: how the `/v1` handlers get their arguments (`DirectRoute`), on every database;
and FastAPI's own telemetry, which the app leaves off.

A `/v1` request runs no FastAPI dependency solving (counted by wrapping FastAPI's own
`solve_dependencies`, which the discovery routes still go through, so the count is seen to
work); the bearer token is read as FastAPI's `HTTPBearer` read it; a handler the route cannot
serve is refused when it is registered.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

import fastapi.routing
import httpx
import pytest
from _rest import OWNER, Site, served, window_path
from fastapi import APIRouter, Depends, FastAPI, Path, Request, Response
from fastapi.dependencies.utils import solve_dependencies
from fastapi.security import HTTPBearer
from fastapi.testclient import TestClient
from opentelemetry import trace

from pdpp_store.http import bearer_token
from pdpp_store.rest._deps import DirectRoute, GrantDep, StoreDep
from pdpp_store.rest._routes import PRIVATE

BODY = "body_text"


@pytest.fixture
async def site(db_url: str) -> AsyncIterator[Site]:
    async with served(db_url) as opened:
        yield opened


async def test_a_v1_request_solves_no_dependencies(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    solving = solve_dependencies  # what `fastapi.routing` calls for each request it solves
    calls: list[str] = []

    async def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs["request"].url.path)
        return await solving(*args, **kwargs)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    window = await site.get(OWNER, window_path(), {"field": BODY, "limit_chars": 10})
    assert window.status_code == 200, window.text
    assert (await site.get(OWNER, "/v1/streams")).status_code == 200
    assert (await site.get(None, window_path(), {"field": BODY})).status_code == 401
    assert calls == []
    discovery = await site.get(None, "/.well-known/oauth-protected-resource")
    assert discovery.status_code == 200
    assert calls == ["/.well-known/oauth-protected-resource"]  # the count sees FastAPI's routes


@pytest.mark.parametrize(
    ("authorization", "status"),
    [
        (f"Bearer {OWNER}", 200),
        (f"bearer {OWNER}", 200),  # the scheme is case-insensitive
        (f"BEARER   {OWNER}  ", 200),  # the token is stripped
        (f"Basic {OWNER}", 401),
        ("Bearer", 401),
        ("Bearer    ", 401),
        (f" Bearer {OWNER}", 401),  # no scheme before the first space
        ("", 401),
    ],
)
async def test_the_bearer_token_is_read_as_http_bearer_read_it(
    site: Site, authorization: str, status: int
) -> None:
    headers = {"Authorization": authorization}
    response = await site.client.get(window_path(), params={"field": BODY}, headers=headers)
    assert response.status_code == status, response.text
    if status == 401:
        assert response.json()["error"]["code"] == "missing_token"


async def _handler_with_a_number(
    request: Request, grant: GrantDep, limit: Annotated[int, Path()]
) -> Response:
    return Response(headers=PRIVATE)


async def _handler_with_a_query(request: Request, store: StoreDep, q: str) -> Response:
    return Response(headers=PRIVATE)


def _sync_handler(request: Request) -> Response:
    return Response(headers=PRIVATE)


async def _handler_of_a_dict(request: Request) -> dict[str, bool]:
    return {"ok": True}


async def _handler_with_a_pattern(
    request: Request, stream: Annotated[str, Path(pattern="^[a-z]+$")]
) -> Response:
    return Response(headers=PRIVATE)


async def _served_handler(request: Request, grant: GrantDep) -> Response:
    return Response(headers=PRIVATE)


async def _a_check_of_its_own() -> None:
    """A dependency FastAPI would run (a scope check, a rate limit): `DirectRoute` would not."""


@pytest.mark.parametrize(
    ("path", "handler", "named"),
    [
        ("/things/{limit}", _handler_with_a_number, "'limit'"),
        ("/things", _handler_with_a_query, "'q'"),
        ("/things", _sync_handler, "coroutine"),
        ("/things", _handler_of_a_dict, "Response"),
        ("/things/{stream}", _handler_with_a_pattern, "'stream'"),
    ],
)
def test_a_handler_it_cannot_serve_is_refused_when_registered(
    path: str, handler: Any, named: str
) -> None:
    router = APIRouter(route_class=DirectRoute)
    with pytest.raises(TypeError, match=named):
        router.add_api_route(path, handler, methods=["GET"])


class _Recording(trace.TracerProvider):
    """A configured tracer provider that keeps the name and attributes of every span begun."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, Any]]] = []

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _Tracer(self.spans)


class _Tracer(trace.Tracer):
    def __init__(self, spans: list[tuple[str, dict[str, Any]]]) -> None:
        self.spans = spans

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> trace.Span:
        self.spans.append((name, dict(kwargs.get("attributes") or {})))
        return trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)

    @contextlib.contextmanager
    def start_as_current_span(  # type: ignore[override]
        self, name: str, *args: Any, **kwargs: Any
    ) -> Iterator[trace.Span]:
        span = self.start_span(name, *args, **kwargs)
        with trace.use_span(span):
            yield span


async def test_fastapi_telemetry_is_off_even_with_a_provider_configured(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    recording = _Recording()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: recording)
    plain = FastAPI()

    @plain.get("/ping")
    async def ping() -> dict[str, str]:
        return {"q": "pong"}

    transport = httpx.ASGITransport(app=plain)
    async with httpx.AsyncClient(transport=transport, base_url="http://pdpp.test") as client:
        assert (await client.get("/ping", params={"q": "secret"})).status_code == 200
    assert any("secret" in str(attributes) for _, attributes in recording.spans)  # it would
    recording.spans.clear()
    async with served(db_url) as site:
        asked = {"field": BODY, "limit_chars": 10}
        assert (await site.get(OWNER, window_path(), asked)).status_code == 200
        assert (await site.get(None, "/.well-known/oauth-protected-resource")).status_code == 200
    assert recording.spans == []


def test_a_dependency_it_would_not_run_is_refused_when_registered_or_first_handled() -> None:
    router = APIRouter(route_class=DirectRoute)
    with pytest.raises(TypeError, match="_a_check_of_its_own"):
        router.add_api_route(
            "/things", _served_handler, methods=["GET"], dependencies=[Depends(_a_check_of_its_own)]
        )
    checked = APIRouter(route_class=DirectRoute, dependencies=[Depends(_a_check_of_its_own)])
    with pytest.raises(TypeError, match="_a_check_of_its_own"):
        checked.add_api_route("/things", _served_handler, methods=["GET"])
    served_alone = APIRouter(route_class=DirectRoute)
    served_alone.add_api_route("/things", _served_handler, methods=["GET"])  # ours only: served
    app = FastAPI()
    app.include_router(served_alone, dependencies=[Depends(_a_check_of_its_own)])
    client = TestClient(app)
    with pytest.raises(TypeError, match="_a_check_of_its_own"):
        client.get("/things")  # an inclusion's route is made when first handled


@pytest.mark.parametrize(
    "authorization",
    [
        f"Bearer {OWNER}",
        f"bearer {OWNER}",
        f"BEARER   {OWNER}  ",
        f"Bearer\t{OWNER}",
        f"Basic {OWNER}",
        "Bearer",
        "Bearer    ",
        f" Bearer {OWNER}",
        "",
        None,
    ],
)
async def test_bearer_token_reads_what_http_bearer_reads(authorization: str | None) -> None:
    headers = [] if authorization is None else [(b"authorization", authorization.encode())]
    request = Request({"type": "http", "method": "GET", "path": "/", "headers": headers})
    credentials = await HTTPBearer(auto_error=False)(request)
    expected = None if credentials is None else credentials.credentials
    assert bearer_token(authorization) == expected
