"""HTTP as RFC 9110 says, over a real socket (`pdpp-store serve` in a subprocess): `HEAD` wherever
`GET` is (the same status and headers, no body), `If-None-Match` (304) on the field-window and
record routes, `If-Match` (412) on both, each after every refusal of the read itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import httpx
import pytest
from _data import MAILBOX, body
from _rest import DATA, NARROW, OWNER, TEXT, window_path
from _served import Server, server, tokens_file

from pdpp_store import Store

__all__ = ["server", "tokens_file"]  # fixtures of _served, used here too

RECORD = "/v1/streams/message_bodies/records/b1"
WINDOW: dict[str, str | int] = {"field": "body_text", "limit_chars": 50}

# Headers that describe the answer and must be the same for HEAD as for GET (`date` and the
# request id differ by request).
_SAME = ("content-type", "content-length", "etag", "cache-control", "content-range", "allow")


@pytest.fixture
def client(server: Server) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {OWNER}"}
    with httpx.Client(base_url=server.base_url, headers=headers) as opened:
        yield opened


def _blob_path() -> str:
    return f"/v1/blobs/blob_sha256_{hashlib.sha256(DATA).hexdigest()}"


def _same_but_body(get: httpx.Response, head: httpx.Response) -> None:
    assert head.status_code == get.status_code
    assert head.content == b""
    for name in _SAME:
        assert head.headers.get(name) == get.headers.get(name), name


def test_head_answers_wherever_get_does(client: httpx.Client) -> None:
    blob = _blob_path()
    for path, params, headers in (
        (window_path(), WINDOW, {}),
        (RECORD, {}, {}),
        ("/v1/search", {"q": "short"}, {}),
        (blob, {}, {}),
        (blob, {}, {"Range": "bytes=10-19"}),
        ("/.well-known/oauth-protected-resource", {}, {}),
        ("/.well-known/oauth-protected-resource/mcp", {}, {}),
        # refusals are the same too
        (window_path(), {"field": "nope"}, {}),
        (window_path(), {**WINDOW, "unknown": "1"}, {}),
        (RECORD, {}, {"Authorization": "Bearer tok_unknown_000000000000"}),
        (blob, {}, {"Range": "bytes=99999999-"}),
    ):
        get = client.get(path, params=params, headers=headers)
        head = client.head(path, params=params, headers=headers)
        assert get.status_code != 405, path
        _same_but_body(get, head)
        assert int(get.headers.get("content-length", len(get.content))) == len(get.content)
    ranged = client.head(blob, headers={"Range": "bytes=10-19"})
    assert (ranged.status_code, ranged.headers["content-range"]) == (206, "bytes 10-19/200000")


def test_other_methods_are_still_405(client: httpx.Client) -> None:
    assert client.head("/v1/nowhere").status_code == 404
    refused = client.post(window_path(), params=WINDOW)
    assert refused.status_code == 405
    assert refused.headers["Allow"] == "GET, HEAD"


def test_if_none_match_is_304_on_windows_and_records(client: httpx.Client) -> None:
    for path, params in ((window_path(), WINDOW), (RECORD, {})):
        first = client.get(path, params=params)
        tag = first.headers["ETag"]
        for header in (tag, f'"other", {tag}', f"W/{tag}", "*"):
            for method in ("GET", "HEAD"):
                again = client.request(
                    method, path, params=params, headers={"If-None-Match": header}
                )
                assert again.status_code == 304, (path, header, method)
                assert again.content == b""
                assert again.headers["ETag"] == tag
                assert again.headers["Cache-Control"] == "private, no-store"
        other = client.get(path, params=params, headers={"If-None-Match": '"other"'})
        assert (other.status_code, other.json()) == (200, first.json())
    # a window elsewhere in the same field is the same field's tag: still the window asked for
    moved = client.get(window_path(), params={**WINDOW, "offset_chars": 50})
    assert moved.json()["window"]["text"] == TEXT[50:100]


def test_if_none_match_never_hides_a_refusal(server: Server, client: httpx.Client) -> None:
    tag = client.get(RECORD).headers["ETag"]
    narrow = {"Authorization": f"Bearer {NARROW}", "If-None-Match": tag}
    hidden = client.get(window_path(), params={"field": "body_html"}, headers=narrow)
    assert hidden.status_code == 403
    gone = client.get(window_path("b9"), params=WINDOW, headers={"If-None-Match": "*"})
    assert gone.status_code == 404


def test_an_edit_makes_if_match_412_and_if_none_match_200(
    client: httpx.Client, db_url: str
) -> None:
    held = {
        path: client.get(path, params=params).headers["ETag"]
        for path, params in ((window_path(), WINDOW), (RECORD, {}))
    }
    for path, params in ((window_path(), WINDOW), (RECORD, {})):
        same = client.get(path, params=params, headers={"If-Match": held[path]})
        assert same.status_code == 200
    edited = TEXT + " edited"
    with Store.open(db_url) as store:
        store.upsert_records(MAILBOX, "message_bodies", [body("b1", edited)])
    for path, params, current in (
        (window_path(), WINDOW, "current_digest"),
        (RECORD, {}, "current_revision"),
    ):
        for method in ("GET", "HEAD"):
            refused = client.request(method, path, params=params, headers={"If-Match": held[path]})
            assert refused.status_code == 412, (path, method)
        error = client.get(path, params=params, headers={"If-Match": held[path]}).json()["error"]
        assert (error["code"], error["param"]) == ("precondition_failed", "If-Match")
        now = client.get(path, params=params)
        assert now.headers["ETag"] == f'"{error[current]}"' != held[path]
        fresh = client.get(path, params=params, headers={"If-None-Match": held[path]})
        assert fresh.status_code == 200
        both = {"If-Match": held[path], "If-None-Match": now.headers["ETag"]}
        assert client.get(path, params=params, headers=both).status_code == 412  # If-Match first
        weak = client.get(path, params=params, headers={"If-Match": f"W/{now.headers['ETag']}"})
        assert weak.status_code == 412  # If-Match compares strongly
