"""The REST surface over HTTP (httpx against the app, in process), on every database.

Each test reads through the routes and compares with the library (the `AsyncStore` the app
serves) or with the Python oracle; errors are checked as the wire shows them: status, the
docs/contract.md §7 envelope with its `request_id`, and the headers.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from _data import MAILBOX, big_text, body, manifest, sha256_of
from _rest import (
    CANARY,
    DATA,
    EXPIRED,
    MAIL_ONLY,
    NARROW,
    OWNER,
    REVOKED,
    TEXT,
    Site,
    served,
    window_path,
)
from audit import BoundaryAudit

from pdpp_store import Grant
from pdpp_store.rest import _routes

BODY = "body_text"


@pytest.fixture
async def site(db_url: str) -> AsyncIterator[Site]:
    async with served(db_url) as opened:
        yield opened


def error_of(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The envelope's error object, after checking the status, code, type and request id."""
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert error["request_id"] == response.headers["X-Request-Id"]
    assert error["request_id"].startswith("req_")
    expected_type = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
    }.get(status)
    if expected_type is not None:
        assert error["type"] == expected_type
    return error


# ---------------------------------------------------------------- field windows


async def test_a_field_window_is_the_library_envelope_plus_links(site: Site) -> None:
    response = await site.get(OWNER, window_path(), {"field": BODY, "limit_chars": 100})
    assert response.status_code == 200
    got = response.json()
    grant = Grant.from_dict({"grant_id": "g-owner", "streams": _owner_streams()})
    library = await site.store.read_field_window(
        grant, f"{MAILBOX}/message_bodies:b1", BODY, limit_chars=100
    )
    expected = library.to_dict()
    assert {k: v for k, v in got.items() if k not in ("url", "links")} == expected
    assert got["window"]["text"] == TEXT[:100]
    assert response.headers["ETag"] == f'"{sha256_of(TEXT)}"'
    assert response.headers["Cache-Control"] == "private, no-store"
    assert got["url"] == f"{window_path()}?field={BODY}&limit_chars=100"
    links = got["links"]
    assert links["previous"] is None
    assert links["self"].endswith("offset_chars=0&limit_chars=100")
    follow = await site.client.get(links["next"], headers={"Authorization": f"Bearer {OWNER}"})
    assert follow.json()["window"]["text"] == TEXT[100:200]


def _owner_streams() -> list[dict[str, Any]]:
    return [
        {"name": "message_bodies", "instance_ids": [MAILBOX]},
        {"name": "attachments", "instance_ids": [MAILBOX]},
    ]


async def test_match_windows_and_connection_id_are_passed_through(site: Site) -> None:
    needle = TEXT[3000:3006]
    response = await site.get(
        OWNER,
        window_path(),
        {
            "field": BODY,
            "q": needle,
            "before_chars": 10,
            "after_chars": 5,
            "connection_id": MAILBOX,
        },
    )
    assert response.status_code == 200, response.text
    window = response.json()["window"]
    start = window["match_start_chars"]
    assert TEXT[start : start + len(needle)].casefold() == needle.casefold()
    assert window["text"] == TEXT[window["start_chars"] : window["end_chars"]]
    assert response.json()["connection_id"] == MAILBOX


async def test_occurrence_and_next_match_cursor_are_passed_through(site: Site) -> None:
    """`occurrence` (docs/contract.md §3) reads the n-th match; `next_match_cursor` the one
    after."""
    q = "e"
    from pdpp_store import fold

    starts = [n for n, char in enumerate(fold(TEXT)) if char == q][:3]
    params = {"field": BODY, "q": q, "before_chars": 0, "after_chars": 0}
    second = await site.get(OWNER, window_path(), {**params, "occurrence": 2})
    assert second.status_code == 200, second.text
    assert second.json()["window"]["match_start_chars"] == starts[1]
    follow = second.json()["window"]["next_match_cursor"]
    third = await site.get(OWNER, window_path(), {"field": BODY, "cursor": follow})
    assert third.status_code == 200, third.text
    assert third.json()["window"]["match_start_chars"] == starts[2]
    for bad in ("0", "x", "10001"):
        response = await site.get(OWNER, window_path(), {**params, "occurrence": bad})
        assert error_of(response, 400, "invalid_window")["param"] == "occurrence"


async def test_cursor_paging_reconstructs_a_3_million_character_field(site: Site) -> None:
    text = big_text(3_000_000, mixed=True)
    await site.store.upsert_records(MAILBOX, "message_bodies", [body("huge", text)])
    params: dict[str, Any] = {"field": BODY, "limit_chars": 16384}
    pieces = []
    path = window_path("huge")
    requests = 0
    while True:
        response = await site.get(OWNER, path, params)
        assert response.status_code == 200, response.text
        requests += 1
        window = response.json()["window"]
        pieces.append(window["text"])
        if not window["has_more"]:
            break
        params = {"field": BODY, "cursor": window["next_cursor"], "limit_chars": 16384}
    assert "".join(pieces) == text
    assert requests == -(-len(text) // 16384)


async def test_if_match_after_an_edit_is_412(site: Site) -> None:
    first = await site.get(OWNER, window_path(), {"field": BODY, "limit_chars": 10})
    tag = first.headers["ETag"]
    same = await site.get(OWNER, window_path(), {"field": BODY}, {"If-Match": tag})
    assert same.status_code == 200
    await site.store.upsert_records(MAILBOX, "message_bodies", [body("b1", TEXT + " edited")])
    changed = await site.get(
        OWNER, window_path(), {"field": BODY, "offset_chars": 10}, {"If-Match": tag}
    )
    error = error_of(changed, 412, "precondition_failed")
    assert error["current_digest"] == sha256_of(TEXT + " edited")
    assert error["param"] == "If-Match"
    for header in ("*", f'W/{tag}, "other", "{sha256_of(TEXT + " edited")}"'):
        ok = await site.get(OWNER, window_path(), {"field": BODY}, {"If-Match": header})
        assert ok.status_code == 200
    weak = await site.get(OWNER, window_path(), {"field": BODY}, {"If-Match": f"W/{tag}"})
    error_of(weak, 412, "precondition_failed")
    # The cursor minted before the edit is stale, with the current digest.
    stale = await site.get(
        OWNER, window_path(), {"field": BODY, "cursor": first.json()["window"]["next_cursor"]}
    )
    error_of(stale, 409, "stale_cursor")


# ---------------------------------------------------------------- records


async def test_a_record_is_the_library_projection(site: Site) -> None:
    response = await site.get(OWNER, "/v1/streams/message_bodies/records/b1")
    assert response.status_code == 200
    view = await site.store.read_record(
        Grant.from_dict({"grant_id": "g-owner", "streams": _owner_streams()}),
        f"{MAILBOX}/message_bodies:b1",
    )
    assert response.json() == view.to_dict()
    assert response.headers["ETag"] == f'"{view.revision}"'
    narrowed = await site.get(
        OWNER, "/v1/streams/message_bodies/records/b1", {"fields": "id,body_html"}
    )
    data = narrowed.json()["data"]
    assert set(data) == {"id", "body_html"}
    assert set(narrowed.json()["content_ladder"]) <= {"id", "body_html"}


# ---------------------------------------------------------------- search


async def test_search_is_the_library_page(site: Site) -> None:
    grant = Grant.from_dict({"grant_id": "g-owner", "streams": _owner_streams()})
    response = await site.get(OWNER, "/v1/search", {"q": "7f3a9"})
    assert response.status_code == 200, response.text
    assert response.headers["Cache-Control"] == "private, no-store"
    page = response.json()
    assert page == (await site.store.search(grant, "7f3a9")).to_dict()
    assert [hit["id"] for hit in page["data"]] == [f"{MAILBOX}/message_bodies:b3"]
    # The narrow token's resources hide b3: no hit, and no trace of it.
    hidden = await site.get(NARROW, "/v1/search", {"q": "7f3a9"})
    assert hidden.json() == {
        "object": "list",
        "data": [],
        "has_more": False,
        "next_cursor": None,
        "next": None,
        "complete": True,
    }


async def test_search_pages_by_cursor_without_skips_or_repeats(site: Site) -> None:
    bodies = [body(f"s{i}", f"quarterly report number {i}") for i in range(7)]
    await site.store.upsert_records(MAILBOX, "message_bodies", bodies)
    seen: list[str] = []
    params: dict[str, Any] = {"q": "quarterly", "limit": 3, "streams": "message_bodies"}
    while True:
        response = await site.get(OWNER, "/v1/search", params)
        assert response.status_code == 200, response.text
        page = response.json()
        seen += [hit["id"] for hit in page["data"]]
        assert len(page["data"]) <= 3
        if not page["has_more"]:
            break
        params = {**params, "cursor": page["next_cursor"]}
    assert sorted(seen) == sorted(f"{MAILBOX}/message_bodies:s{i}" for i in range(7))
    assert len(set(seen)) == len(seen)
    both = await site.client.get(
        "/v1/search?q=quarterly&streams=message_bodies&streams=attachments",
        headers={"Authorization": f"Bearer {OWNER}"},
    )
    commas = await site.get(
        OWNER, "/v1/search", {"q": "quarterly", "streams": "message_bodies,attachments"}
    )
    assert both.status_code == commas.status_code == 200
    assert both.json() == commas.json()
    assert len(both.json()["data"]) == 7


SEARCH_ERRORS = [
    ({}, 400, "invalid_request", "q"),
    ({"q": "x", "limit": 0}, 400, "invalid_request", "limit"),
    ({"q": "x", "limit": 51}, 400, "invalid_request", "limit"),
    ({"q": "x", "limit": "many"}, 400, "invalid_request", "limit"),
    ({"q": "x", "cursor": "garbage"}, 400, "invalid_cursor", "cursor"),
    ({"q": "x", "streams": "threads"}, 403, "grant_stream_not_allowed", "stream"),
    ({"q": "x", "connection_id": "cin_nope"}, 404, "connection_not_found", "connection_id"),
    ({"q": "x", "qq": "y"}, 400, "invalid_request", "qq"),
]


@pytest.mark.parametrize(("params", "status", "code", "param"), SEARCH_ERRORS)
async def test_search_errors(
    site: Site, params: dict[str, Any], status: int, code: str, param: str
) -> None:
    response = await site.get(OWNER, "/v1/search", params)
    assert error_of(response, status, code).get("param") == param


# ---------------------------------------------------------------- errors (contract §7 and HTTP)

W = window_path()
ERRORS: list[tuple[str, str | None, str, dict[str, Any], int, str, str | None]] = [
    # (name, token, path, params, status, code, param)
    (
        "invalid_window",
        OWNER,
        W,
        {"field": BODY, "limit_chars": 0},
        400,
        "invalid_window",
        "limit_chars",
    ),
    (
        "window_type",
        OWNER,
        W,
        {"field": BODY, "offset_chars": "x"},
        400,
        "invalid_window",
        "offset_chars",
    ),
    ("invalid_field_path", OWNER, W, {"field": "a\x00b"}, 400, "invalid_field_path", "field"),
    ("missing_field", OWNER, W, {}, 400, "invalid_request", "field"),
    (
        "invalid_cursor",
        OWNER,
        W,
        {"field": BODY, "cursor": "garbage"},
        400,
        "invalid_cursor",
        "cursor",
    ),
    ("unknown_param", OWNER, W, {"field": BODY, "fieldz": "x"}, 400, "invalid_request", "fieldz"),
    (
        "grant_stream_not_allowed",
        MAIL_ONLY,
        window_path("a1", "attachments"),
        {"field": "filename"},
        403,
        "grant_stream_not_allowed",
        "stream",
    ),
    ("field_not_granted", NARROW, W, {"field": "body_html"}, 403, "field_not_granted", "field"),
    ("grant_expired", EXPIRED, W, {"field": BODY}, 403, "grant_expired", None),
    ("grant_revoked", REVOKED, W, {"field": BODY}, 403, "grant_revoked", None),
    ("not_found", OWNER, window_path("b9"), {"field": BODY}, 404, "not_found", "record"),
    ("field_not_found", OWNER, W, {"field": "nope"}, 404, "field_not_found", "field"),
    ("query_not_found", OWNER, W, {"field": BODY, "q": "zzzzqqqq"}, 404, "query_not_found", "q"),
    (
        "stream_not_declared",
        OWNER,
        window_path("b1", "nope"),
        {"field": BODY},
        404,
        "stream_not_declared",
        "stream",
    ),
    (
        "connection_not_found",
        OWNER,
        W,
        {"field": BODY, "connection_id": "cin_nope"},
        404,
        "connection_not_found",
        "connection_id",
    ),
    (
        "blob_not_found",
        OWNER,
        "/v1/blobs/blob_sha256_" + "0" * 64,
        {},
        404,
        "blob_not_found",
        "blob_id",
    ),
    (
        "field_not_text",
        OWNER,
        window_path("a1", "attachments"),
        {"field": "blob_ref"},
        422,
        "field_not_text",
        "field",
    ),
    ("missing_token", None, W, {"field": BODY}, 401, "missing_token", None),
    ("invalid_token", "tok_unknown_000000000000", W, {"field": BODY}, 401, "invalid_token", None),
    ("route_not_found", OWNER, "/v1/nothing", {}, 404, "route_not_found", None),
]


@pytest.mark.parametrize(
    ("token", "path", "params", "status", "code", "param"),
    [pytest.param(*case[1:], id=case[0]) for case in ERRORS],
)
async def test_each_error_has_its_status_and_envelope(
    site: Site,
    *,
    token: str | None,
    path: str,
    params: dict[str, Any],
    status: int,
    code: str,
    param: str | None,
) -> None:
    response = await site.get(token, path, params)
    error = error_of(response, status, code)
    assert error.get("param") == param
    if status == 401:
        challenge = response.headers["WWW-Authenticate"]
        assert challenge.startswith("Bearer ")
        assert 'resource_metadata="http://pdpp.test/.well-known/oauth-protected-resource"' in (
            challenge
        )
        assert ('error="invalid_token"' in challenge) == (code == "invalid_token")


async def test_errors_in_the_library_order(site: Site) -> None:
    # stream declared comes before the selector and the grant, as in the library.
    response = await site.get(
        NARROW, window_path("b1", "nope"), {"field": "body_html", "limit_chars": 0}
    )
    error_of(response, 404, "stream_not_declared")
    # no token comes before everything a route checks (a path no route matches is 404 for all).
    error_of(await site.get(None, W, {"bogus": "1", "limit_chars": "x"}), 401, "missing_token")
    error_of(await site.get(None, "/v1/nothing"), 404, "route_not_found")


async def test_ambiguous_connection_is_409(db_url: str) -> None:
    async with served(db_url) as site:
        gmail = manifest("gmail")
        await site.store.add_connection("cin_second", gmail["connector_id"])
        await site.store.upsert_records("cin_second", "message_bodies", [body("b1", "x")])
        grant = {
            "grant_id": "g-two",
            "streams": [{"name": "message_bodies", "instance_ids": [MAILBOX, "cin_second"]}],
        }
        from pdpp_store.rest import create_app

        app = create_app(site.store, {OWNER: Grant.from_dict(grant)})
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://pdpp.test"
        ) as client:
            headers = {"Authorization": f"Bearer {OWNER}"}
            response = await client.get(W, params={"field": BODY}, headers=headers)
            error_of(response, 409, "ambiguous_connection")
            chosen = await client.get(
                W, params={"field": BODY, "connection_id": "cin_second"}, headers=headers
            )
            assert chosen.json()["window"]["text"] == "x"


async def test_repeated_and_unknown_parameters_are_refused_by_name(site: Site) -> None:
    twice = await site.client.get(
        f"{W}?field={BODY}&field=body_html", headers={"Authorization": f"Bearer {OWNER}"}
    )
    assert error_of(twice, 400, "invalid_request")["param"] == "field"
    long_name = "x" * 500
    unknown = await site.get(OWNER, W, {"field": BODY, long_name: "1"})
    assert len(error_of(unknown, 400, "invalid_request")["param"]) <= 64


async def test_no_validation_error_is_422(site: Site) -> None:
    for params in ({"field": BODY, "limit_chars": "1.5"}, {"field": BODY, "before_chars": "x"}):
        response = await site.get(OWNER, W, params)
        assert response.status_code == 400


async def test_wrong_method_is_405_with_the_envelope(site: Site) -> None:
    response = await site.client.post(W, headers={"Authorization": f"Bearer {OWNER}"})
    error = error_of(response, 405, "method_not_allowed")
    assert error["type"] == "invalid_request_error"
    assert "GET" in response.headers["Allow"]


async def test_anything_unexpected_is_a_generic_500(
    db_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with served(db_url) as site:

        async def broken(*_: Any, **__: Any) -> Any:
            raise RuntimeError("internal detail: /srv/secret/path")

        monkeypatch.setattr(site.store, "read_record", broken)
        transport = httpx.ASGITransport(app=site.client._transport.app, raise_app_exceptions=False)  # type: ignore[attr-defined]
        async with httpx.AsyncClient(transport=transport, base_url="http://pdpp.test") as client:
            with caplog.at_level(logging.ERROR, logger="pdpp_store.rest"):
                response = await client.get(
                    "/v1/streams/message_bodies/records/b1",
                    headers={"Authorization": f"Bearer {OWNER}"},
                )
        assert response.status_code == 500
        assert "secret" not in response.text
        assert "RuntimeError" not in response.text
        error = response.json()["error"]
        assert error["code"] == "internal_error"
        assert error["request_id"] == response.headers["X-Request-Id"]
        assert "internal detail" in caplog.text


async def test_a_record_hidden_by_resources_answers_exactly_like_a_missing_one(site: Site) -> None:
    for path, params in (
        ("/v1/streams/message_bodies/records/{}", {}),
        ("/v1/streams/message_bodies/records/{}/field-window", {"field": BODY}),
        ("/v1/streams/message_bodies/records/{}/field-window", {"field": BODY, "q": "hidden"}),
    ):
        hidden = await site.get(NARROW, path.format("b3"), params)
        missing = await site.get(NARROW, path.format("b9"), params)
        assert hidden.status_code == missing.status_code == 404

        def same(response: httpx.Response, record_id: str) -> tuple[Any, ...]:
            envelope = response.json()
            del envelope["error"]["request_id"]
            text = json.dumps(envelope).replace(record_id, "RID")
            headers = {k: v for k, v in response.headers.items() if k != "x-request-id"}
            headers.pop("content-length")
            return text, headers

        assert same(hidden, "b3") == same(missing, "b9")


# ---------------------------------------------------------------- blobs


def _blob_path(site: Site) -> str:
    return f"/v1/blobs/{site.blob.blob_id}"


async def test_a_blob_is_streamed_whole_with_its_headers(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    lengths: list[int] = []
    read = site.store.read_blob_range

    async def counted(grant: Grant, blob_id: str, offset: int, length: int) -> Any:
        lengths.append(length)
        return await read(grant, blob_id, offset, length)

    monkeypatch.setattr(site.store, "read_blob_range", counted)
    response = await site.get(OWNER, _blob_path(site))
    assert response.status_code == 200
    assert response.content == DATA
    assert response.headers["Content-Type"] == "application/pdf"
    assert response.headers["Content-Length"] == str(len(DATA))
    assert response.headers["ETag"] == f'"sha256:{site.blob.sha256}"'
    assert response.headers["Cache-Control"] == "private, no-store"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Accept-Ranges"] == "bytes"
    assert max(lengths) <= _routes.BLOB_CHUNK_BYTES
    assert len(lengths) == -(-len(DATA) // _routes.BLOB_CHUNK_BYTES)


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=10-19", 10, 19),
        ("bytes=70000-", 70000, len(DATA) - 1),
        ("bytes=-100", len(DATA) - 100, len(DATA) - 1),
        ("bytes=0-0", 0, 0),
        (f"bytes=5-{len(DATA) * 2}", 5, len(DATA) - 1),
        ("bytes=-999999999", 0, len(DATA) - 1),
    ],
)
async def test_a_single_range_is_206(site: Site, header: str, first: int, last: int) -> None:
    response = await site.get(OWNER, _blob_path(site), headers={"Range": header})
    assert response.status_code == 206
    assert response.content == DATA[first : last + 1]
    assert response.headers["Content-Range"] == f"bytes {first}-{last}/{len(DATA)}"
    assert response.headers["Content-Length"] == str(last - first + 1)


@pytest.mark.parametrize(
    "header", ["bytes=0-1,5-6", "items=0-1", "bytes=9-3", "bytes=x-", "bytes=" + "9" * 5000 + "-"]
)
async def test_ranges_not_served_give_the_whole_blob(site: Site, header: str) -> None:
    response = await site.get(OWNER, _blob_path(site), headers={"Range": header})
    assert response.status_code == 200
    assert response.content == DATA


@pytest.mark.parametrize(
    "header", [f"bytes={len(DATA)}-", "bytes=999999999-1000000000", "bytes=-0"]
)
async def test_an_unsatisfiable_range_is_416(site: Site, header: str) -> None:
    response = await site.get(OWNER, _blob_path(site), headers={"Range": header})
    error_of(response, 416, "range_not_satisfiable")
    assert response.headers["Content-Range"] == f"bytes */{len(DATA)}"


async def test_conditional_blob_requests(site: Site) -> None:
    tag = f'"sha256:{site.blob.sha256}"'
    not_modified = await site.get(OWNER, _blob_path(site), headers={"If-None-Match": tag})
    assert not_modified.status_code == 304
    assert not_modified.content == b""
    assert not_modified.headers["ETag"] == tag
    for header in (f'"x", W/{tag}', "*"):
        again = await site.get(OWNER, _blob_path(site), headers={"If-None-Match": header})
        assert again.status_code == 304
    other = await site.get(OWNER, _blob_path(site), headers={"If-None-Match": '"other"'})
    assert other.status_code == 200
    assert other.content == DATA
    ranged = {"Range": "bytes=0-9"}
    current = await site.get(OWNER, _blob_path(site), headers={**ranged, "If-Range": tag})
    assert (current.status_code, current.content) == (206, DATA[:10])
    for stale in ('"sha256:other"', f"W/{tag}", "Wed, 21 Oct 2015 07:28:00 GMT"):
        whole = await site.get(OWNER, _blob_path(site), headers={**ranged, "If-Range": stale})
        assert (whole.status_code, whole.content) == (200, DATA)


async def test_a_blob_outside_the_grant_is_not_found(site: Site) -> None:
    never = await site.get(NARROW, "/v1/blobs/blob_sha256_" + "0" * 64)
    ungranted = await site.get(NARROW, _blob_path(site))
    error_of(ungranted, 404, "blob_not_found")
    assert ungranted.json()["error"]["message"].replace(site.blob.blob_id, "X") == (
        never.json()["error"]["message"].replace("blob_sha256_" + "0" * 64, "X")
    )
    error_of(await site.get(NARROW, "/v1/blobs/not-a-blob-id"), 404, "blob_not_found")


async def test_an_empty_blob(db_url: str) -> None:
    async with served(db_url) as site:
        empty = await site.store.put_blob(b"", "text/plain")
        from _data import attachment

        await site.store.upsert_records(
            MAILBOX, "attachments", [attachment("a-empty", empty.as_ref())]
        )
        response = await site.get(OWNER, f"/v1/blobs/{empty.blob_id}")
        assert (response.status_code, response.content) == (200, b"")
        ranged = await site.get(OWNER, f"/v1/blobs/{empty.blob_id}", headers={"Range": "bytes=0-"})
        error_of(ranged, 416, "range_not_satisfiable")


# ---------------------------------------------------------------- the boundary, through HTTP


async def test_a_narrow_token_never_sees_an_ungranted_byte(site: Site) -> None:
    """Every route, with the narrow token: the canary (in b1's ungranted `body_html`, in the
    hidden b3, and in the blob of a field it does not cover) never leaves the database, and is in
    no answer."""
    secret_blob = f"/v1/blobs/{site.secret_blob.blob_id}"
    requests: list[tuple[str, dict[str, Any], dict[str, str]]] = [
        (W, {"field": BODY}, {}),
        (W, {"field": BODY, "q": "canary"}, {}),
        (W, {"field": "body_html"}, {}),
        (W, {"field": "body_html", "q": "7f3a9"}, {}),
        (window_path("b3"), {"field": BODY}, {}),
        (window_path("b3"), {"field": BODY, "q": "7f3a9"}, {}),
        ("/v1/streams/message_bodies/records/b1", {}, {}),
        ("/v1/streams/message_bodies/records/b1", {"fields": "body_html"}, {}),
        ("/v1/streams/message_bodies/records/b3", {}, {}),
        ("/v1/streams/attachments/records/a2", {}, {}),
        (window_path("a2", "attachments"), {"field": "blob_ref"}, {}),
        (secret_blob, {}, {}),
        (secret_blob, {}, {"Range": "bytes=0-10"}),
        (_blob_path(site), {}, {}),
        ("/v1/search", {"q": "7f3a9"}, {}),
        ("/v1/search", {"q": "never-leaves", "streams": "message_bodies"}, {}),
    ]
    answers = []
    with BoundaryAudit(site.store.engine) as audit:
        for path, params, headers in requests:
            answers.append(await site.get(NARROW, path, params, headers))
    assert audit.rows, "the audit saw the reads"
    assert not audit.saw(CANARY)
    for response in answers:
        assert CANARY.casefold() not in response.text.casefold()
        assert CANARY not in str(response.headers)
    assert answers[0].status_code == 200
    # The owner does see it: the canary is really there to be found.
    with BoundaryAudit(site.store.engine) as audit:
        seen = await site.get(OWNER, W, {"field": "body_html"})
    assert CANARY in seen.text
    assert audit.saw(CANARY)


# ---------------------------------------------------------------- discovery


async def test_protected_resource_metadata(site: Site) -> None:
    for path, resource in (
        ("/.well-known/oauth-protected-resource", "http://pdpp.test"),
        ("/.well-known/oauth-protected-resource/mcp", "http://pdpp.test/mcp"),
    ):
        response = await site.get(None, path)
        assert response.status_code == 200
        metadata = response.json()
        assert metadata["resource"] == resource
        assert metadata["bearer_methods_supported"] == ["header"]


async def test_the_openapi_document_lists_every_route_and_status(site: Site) -> None:
    document = (await site.get(None, "/openapi.json")).json()
    paths = document["paths"]
    operations = {op["operationId"]: op for path in paths.values() for op in path.values()}
    assert {"read_field_window", "read_record", "read_blob", "search"} <= set(operations)
    window = operations["read_field_window"]
    assert set(window["responses"]) == {
        "200", "304", "400", "401", "403", "404", "409", "412", "422", "503"
    }  # fmt: skip
    names = {p["name"] for p in window["parameters"]}
    assert {"field", "connection_id", "offset_chars", "limit_chars", "q"} <= names
    assert {"before_chars", "after_chars", "cursor", "If-Match", "If-None-Match"} <= names
    record = operations["read_record"]
    assert {"304", "412"} <= set(record["responses"])
    assert {"If-Match", "If-None-Match"} <= {p["name"] for p in record["parameters"]}
    assert all(set(path) == {"get"} for path in paths.values())  # HEAD goes without saying
    assert set(operations["read_blob"]["responses"]) >= {"200", "206", "304", "416"}
    for operation in operations.values():
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")):
                schema = response["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}
    assert "HTTPValidationError" not in json.dumps(document)
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
