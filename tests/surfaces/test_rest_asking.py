"""The asking routes over a real socket (`pdpp-store serve` in a subprocess), on every database:
discovery (`/v1/schema`, `/v1/streams`, `/v1/streams/{stream}`) and `query_records`
(`/v1/streams/{stream}/records`): the library's cards on the wire, `ETag`/304 and `HEAD` like the
other routes, and every kind of bad input a typed 4xx naming the parameter, never a 500.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
from _data import MAILBOX
from _rest import CANARY, MAIL_ONLY, NARROW, OWNER, TOKEN_GRANTS
from _served import Server, server, tokens_file

from pdpp_store import AsyncStore, Grant

__all__ = ["server", "tokens_file"]  # fixtures of _served, used here too

BODIES = "/v1/streams/message_bodies"


def _get(
    server: Server, token: str, path: str, params: Any = None, **headers: str
) -> httpx.Response:
    sent = {"Authorization": f"Bearer {token}", **headers}
    return httpx.get(f"{server.base_url}{path}", params=params, headers=sent, timeout=30)


def _refused(response: httpx.Response, status: int, code: str, param: str | None) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert (error["code"], error.get("param")) == (code, param), error
    assert error["request_id"] == response.headers["X-Request-Id"]


def _library(db_url: str, token: str, call: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """What the library answers under the token's grant (a store of this process's own)."""

    async def ask() -> dict[str, Any]:
        store = await AsyncStore.open(db_url)
        try:
            card = await getattr(store, call)(Grant.from_dict(TOKEN_GRANTS[token]), *args, **kwargs)
            answer: dict[str, Any] = card.to_dict()
            return answer
        finally:
            await store.close()

    return asyncio.run(ask())


def test_discovery_routes(server: Server, db_url: str) -> None:
    whole = _get(server, OWNER, "/v1/schema")
    assert whole.status_code == 200, whole.text
    assert whole.json() == _library(db_url, OWNER, "describe_grant")
    assert whole.headers["Cache-Control"] == "private, no-store"
    tag = whole.headers["ETag"]
    assert _get(server, OWNER, "/v1/schema", **{"If-None-Match": tag}).status_code == 304
    head = httpx.head(f"{server.base_url}/v1/schema", headers={"Authorization": f"Bearer {OWNER}"})
    assert (head.status_code, head.headers["ETag"], head.content) == (200, tag, b"")

    listed = _get(server, OWNER, "/v1/streams").json()
    assert listed["object"] == "list"
    assert [s["name"] for s in listed["data"]] == ["attachments", "message_bodies"]
    assert listed["data"] == whole.json()["streams"]
    assert (listed["has_more"], listed["next"]) == (False, None)

    # a page at a time: `limit` and `after`, `next` the library call that goes on
    first = _get(server, OWNER, "/v1/schema", {"limit": 1}).json()
    assert first == _library(db_url, OWNER, "describe_grant", limit=1)
    assert [s["name"] for s in first["streams"]] == ["attachments"]
    assert first["next"]["arguments"] == {"after": "attachments", "limit": 1}
    rest = _get(server, OWNER, "/v1/streams", first["next"]["arguments"]).json()
    assert rest["data"] == whole.json()["streams"][1:]
    assert (rest["has_more"], rest["next"]) == (False, None)

    one = _get(server, OWNER, BODIES).json()
    assert one == listed["data"][1]
    assert one["record_count"] == 3
    assert one["order"]["field"] == "message_received_at"

    # NARROW: b3 hidden by resources, the order field not granted
    narrow = _get(server, NARROW, BODIES)
    assert narrow.status_code == 200
    seen = narrow.json()
    assert seen["record_count"] == 2
    assert seen["order"] == {"field": None, "oldest": None, "newest": None}
    assert CANARY not in narrow.text
    assert "body_html" not in narrow.text


def test_discovery_refusals(server: Server) -> None:
    _refused(
        _get(server, MAIL_ONLY, "/v1/streams/attachments"),
        403,
        "grant_stream_not_allowed",
        "stream",
    )
    _refused(_get(server, OWNER, "/v1/streams/a%5Cb"), 400, "invalid_request", "stream")
    _refused(_get(server, OWNER, "/v1/schema", {"stream": "x"}), 400, "invalid_request", "stream")
    _refused(_get(server, OWNER, "/v1/streams", {"q": "x"}), 400, "invalid_request", "q")
    for bad in ("0", "101", "x", ""):
        _refused(_get(server, OWNER, "/v1/schema", {"limit": bad}), 400, "invalid_request", "limit")
    _refused(_get(server, OWNER, "/v1/streams", {"after": ".."}), 400, "invalid_request", "after")
    _refused(_get(server, OWNER, BODIES, {"after": "a"}), 400, "invalid_request", "after")
    unauthorized = httpx.get(f"{server.base_url}/v1/schema")
    assert unauthorized.status_code == 401
    assert "Bearer" in unauthorized.headers["WWW-Authenticate"]


def test_records_route(server: Server, db_url: str) -> None:
    first = _get(server, OWNER, f"{BODIES}/records", {"limit": 2, "count": "exact"})
    assert first.status_code == 200, first.text
    page = first.json()
    library = _library(db_url, OWNER, "query_records", "message_bodies", limit=2, count="exact")
    assert page == library
    assert page["count"] == {"kind": "exact", "value": 3}
    assert len(page["data"]) == 2
    assert page["has_more"] is True
    following = _get(
        server,
        OWNER,
        f"{BODIES}/records",
        {"limit": 2, "count": "exact", "cursor": page["next_cursor"]},
    ).json()
    ids = [row["record_id"] for row in page["data"] + following["data"]]
    assert sorted(ids) == ["b1", "b2", "b3"]
    assert following["has_more"] is False

    tag = first.headers["ETag"]
    again = _get(
        server, OWNER, f"{BODIES}/records", {"limit": 2, "count": "exact"}, **{"If-None-Match": tag}
    )
    assert again.status_code == 304
    head = httpx.head(
        f"{server.base_url}{BODIES}/records",
        params={"limit": 2, "count": "exact"},
        headers={"Authorization": f"Bearer {OWNER}"},
    )
    assert (head.status_code, head.headers["ETag"], head.content) == (200, tag, b"")

    # the JSON filter and the bracket form ask the same
    as_json = {"filter": json.dumps({"charset": "UTF-8"}), "fields": "id,charset"}
    by_json = _get(server, OWNER, f"{BODIES}/records", as_json).json()
    bracketed = _get(
        server, OWNER, f"{BODIES}/records", {"filter[charset]": "UTF-8", "fields": "id,charset"}
    ).json()
    assert by_json["data"] == bracketed["data"]
    assert len(by_json["data"]) == 3
    ranged = {
        "filter[message_received_at][gte]": "2026-03-01T00:00:00Z",
        "filter[message_received_at][lt]": "2026-03-02",
    }
    assert len(_get(server, OWNER, f"{BODIES}/records", ranged).json()["data"]) == 3
    none = {"filter[message_received_at][lt]": "2026-01-01"}
    assert _get(server, OWNER, f"{BODIES}/records", none).json()["data"] == []

    # NARROW sees b1 and b2 only, in key order (the order field is not granted), newest first
    narrow = _get(server, NARROW, f"{BODIES}/records", {"count": "exact"})
    assert narrow.status_code == 200, narrow.text
    assert [row["record_id"] for row in narrow.json()["data"]] == ["b2", "b1"]
    assert narrow.json()["order"] == {"field": None, "direction": "desc", "by": "key"}
    assert CANARY not in narrow.text

    changes = _get(server, OWNER, f"{BODIES}/records", {"changes_since": "beginning"}).json()
    assert "next_changes_since" in changes or changes["has_more"]


BAD_INPUT: list[tuple[dict[str, Any], int, str, str]] = [
    ({"filter": "{not json"}, 400, "invalid_filter", "filter"),
    ({"filter": "[1]"}, 400, "invalid_filter", "filter"),
    ({"filter": json.dumps({"nope": 1})}, 400, "invalid_filter", "filter"),
    ({"filter": json.dumps({"body_text": {"gte": 1}})}, 400, "invalid_filter", "filter"),
    ({"filter": json.dumps({f"f{i}": 1 for i in range(17)})}, 400, "invalid_filter", "filter"),
    (
        {"filter": json.dumps({"charset": {"in": list(range(101))}})},
        400,
        "invalid_filter",
        "filter",
    ),
    ({"filter": "{}", "filter[charset]": "x"}, 400, "invalid_filter", "filter"),
    ({"filter[charset][between]": "x"}, 400, "invalid_filter", "filter"),
    ({"filter[]": "x"}, 400, "invalid_filter", "filter"),
    ({"limit": "abc"}, 400, "invalid_request", "limit"),
    ({"limit": "0"}, 400, "invalid_request", "limit"),
    ({"limit": "101"}, 400, "invalid_request", "limit"),
    ({"order": "sideways"}, 400, "invalid_request", "order"),
    ({"count": "roughly"}, 400, "invalid_request", "count"),
    ({"cursor": "garbage"}, 400, "invalid_cursor", "cursor"),
    ({"changes_since": "garbage"}, 400, "invalid_cursor", "changes_since"),
    ({"connection_id": "cin_nobody"}, 404, "connection_not_found", "connection_id"),
    ({"bogus": "1"}, 400, "invalid_request", "bogus"),
    ({"limit": "1", "limit ": "2"}, 400, "invalid_request", "limit "),
]


def test_records_bad_input_is_a_typed_4xx(server: Server) -> None:
    """Each bad request (one server for all of them) is its typed 4xx naming the parameter."""
    for params, status, code, param in BAD_INPUT:
        _refused(_get(server, OWNER, f"{BODIES}/records", params), status, code, param)


def test_records_refusals_under_the_grant(server: Server) -> None:
    ungranted = {"filter": json.dumps({"body_html": "x"})}
    _refused(
        _get(server, NARROW, f"{BODIES}/records", ungranted), 403, "field_not_granted", "filter"
    )
    _refused(
        _get(server, NARROW, f"{BODIES}/records", {"fields": "body_html"}),
        403,
        "field_not_granted",
        "fields",
    )
    _refused(
        _get(server, MAIL_ONLY, "/v1/streams/attachments/records"),
        403,
        "grant_stream_not_allowed",
        "stream",
    )
    # a cursor minted for another filter is refused
    page = _get(server, OWNER, f"{BODIES}/records", {"limit": 1}).json()
    other = {"limit": 1, "cursor": page["next_cursor"], "filter": json.dumps({"charset": "x"})}
    _refused(_get(server, OWNER, f"{BODIES}/records", other), 400, "invalid_cursor", "cursor")
    assert MAILBOX in json.dumps(page)
