"""Errors (docs/contract.md §7, "Errors"): the check order, the codes with their HTTP status and
`param`, and the wire envelope, on every front.

The order is tested with requests that are wrong in two (or more) ways at once: the earlier check
must win. The contract's order is

    stream declared → field path → selector → stream granted → connection → field granted
    (no row read yet) → record visible → field present / text-like → cursor freshness → match

and, from the library's own docstring (`_reads`): the record reference is parsed before
everything, the grant's usability is checked with "stream granted", and a cursor's signature is
checked with "field granted" (it binds the grant, record and field, so it cannot be checked
earlier). "Cursor freshness → match" has no case: a cursor and `q` cannot be combined (that is
itself `invalid_window`), so no request can be both stale and unmatched.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from _data import MAILBOX, OTHER_MAILBOX, attachment, body, grant, ref_id, setup_mailbox
from _fronts import FRONTS, StoreFront, open_front

from pdpp_store import (
    BadRequest,
    Conflict,
    Forbidden,
    Grant,
    NotFound,
    StoreError,
    Unprocessable,
)

BODIES = "message_bodies"
SECRET = "TOPSECRET-b7e1"
"""Planted in every stored value; no error may ever show it."""
NOWHERE = "cin_nowhere"
NEVER_BLOB = "blob_sha256_" + "0" * 64

GRANTED = ["id", "body_text", "body_html", "message_received_at", "no_such_field"]


@dataclass(frozen=True)
class World:
    """The data every case reads, and the cursors minted before the data changed."""

    full: Grant  # message_bodies on MAILBOX, the fields of GRANTED
    narrow: Grant  # message_bodies on MAILBOX, field "id" only
    other_stream: Grant  # "threads" only
    expired: Grant
    revoked: Grant
    expired_other_stream: Grant
    anywhere: Grant  # message_bodies on every connection (a legacy id is ambiguous)
    stale: str  # cursor on "stale": body_text changed since
    gone: str  # cursor on "gone": body_text removed since
    binary: str  # cursor on "binary": body_text holds NUL since
    deleted: str  # cursor on "deleted": the record was deleted since
    blob_id: str  # referenced by an attachment no grant here covers


def _cursor(store: StoreFront, g: Grant, record_id: str) -> str:
    window = store.read_field_window(g, ref_id(record_id), "body_text", limit_chars=4)
    assert window.next_cursor is not None
    return window.next_cursor


def build_world(store: StoreFront) -> World:
    setup_mailbox(store, MAILBOX, OTHER_MAILBOX)
    text = f"hello {SECRET} " * 20
    names = ("e1", "stale", "gone", "binary", "deleted")
    records = [{**body(name, text), "body_html": f"{SECRET}\x00nul"} for name in names]
    store.upsert_records(MAILBOX, BODIES, records)
    store.upsert_records(OTHER_MAILBOX, BODIES, [body("e1", text)])
    blob = store.put_blob(SECRET.encode() * 10, "application/pdf")
    store.upsert_records(MAILBOX, "attachments", [attachment("a1", blob.as_ref())])

    terms = {"name": BODIES, "instance_ids": [MAILBOX]}
    full = grant({**terms, "fields": GRANTED})
    cursors = {name: _cursor(store, full, name) for name in names[1:]}
    changed = {
        "stale": body("stale", f"changed {SECRET} " * 20),
        "gone": {k: v for k, v in body("gone", "").items() if k != "body_text"},
        "binary": body("binary", f"{SECRET}\x00now binary"),
    }
    store.upsert_records(MAILBOX, BODIES, list(changed.values()))
    store.delete_record(MAILBOX, BODIES, "deleted")
    return World(
        full=full,
        narrow=grant({**terms, "fields": ["id"]}),
        other_stream=grant({"name": "threads"}),
        expired=grant({**terms, "fields": GRANTED}, expires_at="2020-01-01T00:00:00Z"),
        revoked=grant({**terms, "fields": GRANTED}, status="revoked"),
        expired_other_stream=grant({"name": "threads"}, expires_at="2020-01-01T00:00:00Z"),
        anywhere=grant({"name": BODIES, "fields": GRANTED}),
        blob_id=blob.blob_id,
        **cursors,
    )


@dataclass(frozen=True)
class Case:
    label: str
    expected: str
    call: Callable[[StoreFront], object]


def _window(g: Grant, record: str, field: str, **selector: Any) -> Callable[[StoreFront], object]:
    return lambda store: store.read_field_window(g, record, field, **selector)


def _describe(g: Grant, record: str, field: str) -> Callable[[StoreFront], object]:
    return lambda store: store.describe_field(g, record, field)


def _record(g: Grant, record: str, **kwargs: Any) -> Callable[[StoreFront], object]:
    return lambda store: store.read_record(g, record, **kwargs)


def order_cases(w: World) -> list[Case]:
    """Requests wrong in several ways; `expected` is the code of the earliest check."""
    e1, missing = ref_id("e1"), ref_id("missing")
    undeclared = ref_id("e1", stream="no_such_stream")
    other, nowhere = ref_id("e1", OTHER_MAILBOX), ref_id("e1", NOWHERE)
    bad = {"offset_chars": -1}
    return [
        # reference parsed > everything
        Case("reference > stream declared", "invalid_request", _window(w.full, "e1", "")),
        Case(
            "reference > stream declared (conflicting connection)",
            "conflicting_connection_id",
            _record(w.other_stream, undeclared, connection_id=OTHER_MAILBOX),
        ),
        # stream declared > field path
        Case(
            "stream declared > field path", "stream_not_declared", _window(w.full, undeclared, "")
        ),
        Case(
            "stream declared > all later checks",
            "stream_not_declared",
            _window(w.expired_other_stream, ref_id("missing", NOWHERE, "nope"), "\x00", **bad),
        ),
        Case(
            "stream declared > field path (describe)",
            "stream_not_declared",
            _describe(w.narrow, undeclared, ""),
        ),
        # field path > selector
        Case("field path > selector", "invalid_field_path", _window(w.full, e1, "", **bad)),
        Case(
            "field path (NUL) > selector",
            "invalid_field_path",
            _window(w.full, e1, "a\x00b", q="x", offset_chars=3),
        ),
        Case(
            "field path > all later checks",
            "invalid_field_path",
            _window(w.expired_other_stream, ref_id("missing", NOWHERE), "", cursor=w.stale, q="x"),
        ),
        # selector > stream granted (and grant usable)
        Case(
            "selector > stream granted", "invalid_window", _window(w.other_stream, e1, "x", **bad)
        ),
        Case(
            "selector (cursor with q) > stream granted",
            "invalid_window",
            _window(w.other_stream, e1, "body_text", cursor=w.stale, q="hello"),
        ),
        Case(
            "selector > grant usable", "invalid_window", _window(w.expired, e1, "body_text", **bad)
        ),
        Case(
            "selector > all later checks",
            "invalid_window",
            _window(w.narrow, ref_id("missing", OTHER_MAILBOX), "body_text", before_chars=1),
        ),
        # stream granted / grant usable > connection
        Case(
            "stream granted > connection (missing)",
            "grant_stream_not_allowed",
            _window(w.other_stream, nowhere, "body_text"),
        ),
        Case(
            "stream granted > connection (uncovered)",
            "grant_stream_not_allowed",
            _window(w.other_stream, other, "body_text"),
        ),
        Case(
            "stream granted > connection (ambiguous)",
            "grant_stream_not_allowed",
            _window(w.other_stream, "message_bodies:e1", "body_text"),
        ),
        Case(
            "stream granted > connection (record)",
            "grant_stream_not_allowed",
            _record(w.other_stream, nowhere),
        ),
        Case("grant usable > connection", "grant_expired", _window(w.expired, nowhere, "x")),
        Case("grant revoked > connection", "grant_revoked", _describe(w.revoked, nowhere, "x")),
        Case(
            "grant usable > stream granted",
            "grant_expired",
            _window(w.expired_other_stream, e1, "body_text"),
        ),
        # connection > field granted
        Case(
            "connection (uncovered) > field granted",
            "connection_not_found",
            _window(w.narrow, other, "body_text"),
        ),
        Case(
            "connection (missing) > field granted",
            "connection_not_found",
            _describe(w.narrow, nowhere, "body_text"),
        ),
        Case(
            "connection (ambiguous) > field granted",
            "ambiguous_connection",
            _window(w.anywhere, "message_bodies:e1", "charset"),
        ),
        Case(
            "connection > record visible",
            "connection_not_found",
            _record(w.full, ref_id("missing", OTHER_MAILBOX)),
        ),
        # field granted > record visible (no row is read before the field is known granted)
        Case(
            "field granted > record visible (missing)",
            "field_not_granted",
            _window(w.narrow, missing, "body_text"),
        ),
        Case(
            "field granted > record visible (deleted)",
            "field_not_granted",
            _describe(w.narrow, ref_id("deleted"), "body_text"),
        ),
        Case(
            "field granted > cursor signature",
            "field_not_granted",
            _window(w.narrow, e1, "body_text", cursor="garbage"),
        ),
        Case(
            "field granted > all later checks",
            "field_not_granted",
            _window(w.narrow, ref_id("gone"), "body_text", cursor=w.gone),
        ),
        # cursor signature (checked with field granted) > record visible
        Case(
            "cursor signature > record visible",
            "invalid_cursor",
            _window(w.full, missing, "body_text", cursor="garbage"),
        ),
        Case(
            "cursor signature (other record) > field present",
            "invalid_cursor",
            _window(w.full, ref_id("gone"), "body_text", cursor=w.stale),
        ),
        # record visible > field present / text-like
        Case(
            "record visible > field present",
            "not_found",
            _window(w.full, missing, "no_such_field"),
        ),
        Case(
            "record visible (deleted) > field present",
            "not_found",
            _describe(w.full, ref_id("deleted"), "no_such_field"),
        ),
        Case("record visible > match", "not_found", _window(w.full, missing, "body_text", q="zz")),
        Case(
            "record visible > cursor freshness",
            "not_found",
            _window(w.full, ref_id("deleted"), "body_text", cursor=w.deleted),
        ),
        # field present / text-like > cursor freshness, > match
        Case(
            "field present > cursor freshness",
            "field_not_found",
            _window(w.full, ref_id("gone"), "body_text", cursor=w.gone),
        ),
        Case(
            "field text-like > cursor freshness",
            "field_not_text",
            _window(w.full, ref_id("binary"), "body_text", cursor=w.binary),
        ),
        Case(
            "field present > match",
            "field_not_found",
            _window(w.full, e1, "no_such_field", q="zz"),
        ),
        Case("field text-like > match", "field_not_text", _window(w.full, e1, "body_html", q="zz")),
        # the last two checks alone
        Case(
            "cursor freshness",
            "stale_cursor",
            _window(w.full, ref_id("stale"), "body_text", cursor=w.stale),
        ),
        Case("match", "query_not_found", _window(w.full, e1, "body_text", q="no such words")),
    ]


def run_case(store: StoreFront, case: Case | Coded) -> StoreError | None:
    try:
        case.call(store)
    except StoreError as exc:
        return exc
    return None


def test_check_order(store: StoreFront) -> None:
    world = build_world(store)
    wrong = []
    for case in order_cases(world):
        error = run_case(store, case)
        found = error.code if error is not None else "no error"
        if found != case.expected:
            wrong.append(f"{case.label}: expected {case.expected}, got {found}")
        if error is not None:
            assert SECRET not in json.dumps(error.to_dict(), ensure_ascii=False), case.label
    assert wrong == []


# ---------------------------------------------------------------- the table of codes

STATUS_CLASS: dict[int, type[StoreError]] = {
    400: BadRequest,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: Unprocessable,
}


@dataclass(frozen=True)
class Coded:
    code: str
    status: int
    param: str | None
    named: str | None  # what the message must name (a parameter, field, record, ...)
    call: Callable[[StoreFront], object]


def coded_cases(w: World) -> list[Coded]:
    e1 = ref_id("e1")
    return [
        Coded(
            "invalid_window",
            400,
            "limit_chars",
            "limit_chars",
            _window(w.full, e1, "id", limit_chars=0),
        ),
        Coded("invalid_field_path", 400, "field", "field", _window(w.full, e1, "")),
        Coded(
            "invalid_cursor",
            400,
            "cursor",
            "cursor",
            _window(w.full, e1, "body_text", cursor="x" * 51),
        ),
        Coded("invalid_request", 400, "record", "record", _record(w.full, "no colon here")),
        Coded("grant_stream_not_allowed", 403, "stream", BODIES, _record(w.other_stream, e1)),
        Coded("field_not_granted", 403, "field", "body_text", _describe(w.narrow, e1, "body_text")),
        Coded("grant_expired", 403, None, None, _record(w.expired, e1)),
        Coded("grant_revoked", 403, None, None, _record(w.revoked, e1)),
        Coded(
            "stale_cursor",
            409,
            "cursor",
            "body_text",
            _window(w.full, ref_id("stale"), "body_text", cursor=w.stale),
        ),
        Coded("not_found", 404, "record", ref_id("missing"), _record(w.full, ref_id("missing"))),
        Coded(
            "field_not_found", 404, "field", "no_such_field", _describe(w.full, e1, "no_such_field")
        ),
        Coded(
            "query_not_found",
            404,
            "q",
            "body_text",
            _window(w.full, e1, "body_text", q="absent words"),
        ),
        Coded(
            "stream_not_declared",
            404,
            "stream",
            "no_such_stream",
            _record(w.full, ref_id("e1", stream="no_such_stream")),
        ),
        Coded(
            "connection_not_found",
            404,
            "connection_id",
            OTHER_MAILBOX,
            _record(w.full, ref_id("e1", OTHER_MAILBOX)),
        ),
        Coded(
            "blob_not_found",
            404,
            "blob_id",
            None,
            lambda store: store.blob_info(w.full, w.blob_id),
        ),
        Coded("field_not_text", 422, "field", "body_html", _window(w.full, e1, "body_html")),
        Coded(
            "ambiguous_connection",
            409,
            "connection_id",
            None,
            _record(w.anywhere, "message_bodies:e1"),
        ),
        Coded(
            "conflicting_connection_id",
            409,
            "connection_id",
            None,
            _record(w.full, e1, connection_id=OTHER_MAILBOX),
        ),
    ]


CONTRACT_CODES = {
    "invalid_window": 400,
    "invalid_field_path": 400,
    "invalid_cursor": 400,
    "invalid_request": 400,
    "grant_stream_not_allowed": 403,
    "field_not_granted": 403,
    "grant_expired": 403,
    "grant_revoked": 403,
    "stale_cursor": 409,
    "not_found": 404,
    "field_not_found": 404,
    "query_not_found": 404,
    "stream_not_declared": 404,
    "connection_not_found": 404,
    "blob_not_found": 404,
    "field_not_text": 422,
    "ambiguous_connection": 409,
    "conflicting_connection_id": 409,
}
"""Contract §7's table (docs/contract.md, "Errors"), copied."""


def test_every_code_of_the_table_has_its_status_param_and_envelope(store: StoreFront) -> None:
    world = build_world(store)
    cases = coded_cases(world)
    assert {case.code: case.status for case in cases} == CONTRACT_CODES
    for case in cases:
        error = run_case(store, case)
        assert error is not None, case.code
        assert (error.code, error.http_status, error.param) == (
            case.code,
            case.status,
            case.param,
        ), case.code
        assert isinstance(error, STATUS_CLASS[case.status]), case.code
        if case.named is not None:
            assert case.named in error.message, case.code

        envelope = error.to_dict()
        assert list(envelope) == ["error"]
        inner = envelope["error"]
        core = {"type": inner["type"], "code": case.code, "message": error.message}
        if case.param is not None:
            core["param"] = case.param
        assert {key: inner[key] for key in core} == core, case.code
        assert "param" in inner or case.param is None
        assert isinstance(inner["type"], str)
        assert inner["type"]
        assert inner["message"]
        # Anything else in the envelope is the error's documented, safe details.
        assert set(inner) - set(core) == set(error.details), case.code
        assert json.loads(json.dumps(envelope)) == envelope
        assert SECRET not in json.dumps(envelope, ensure_ascii=False), case.code
        assert SECRET not in repr(error)
        assert SECRET not in str(error)

    # The same status always comes with the same type.
    types: dict[int, set[str]] = {}
    for case in cases:
        error = run_case(store, case)
        assert error is not None
        types.setdefault(case.status, set()).add(error.to_dict()["error"]["type"])
    assert all(len(names) == 1 for names in types.values()), types

    # The details are safe facts: a stale cursor's current digest (the client restarts from
    # it), a binary field's metadata.
    stale = run_case(store, next(case for case in cases if case.code == "stale_cursor"))
    assert stale is not None
    current = store.describe_field(world.full, ref_id("stale"), "body_text")
    assert stale.details["digest"] == current.digest
    binary = run_case(store, next(case for case in cases if case.code == "field_not_text"))
    assert binary is not None
    carried = binary.to_dict()["error"]["field"]
    assert carried == store.describe_field(world.full, ref_id("e1"), "body_html").to_dict()
    assert carried["text_like"] is False


# ---------------------------------------------------------------- identical on every front


def _fronts(urls: dict[str, str]) -> Iterator[tuple[str, StoreFront]]:
    for backend, url in urls.items():
        for front in FRONTS:
            yield f"{backend}-{front}", open_front(front, url)


@pytest.mark.postgres
def test_errors_are_identical_on_every_front(sqlite_db_url: str, pg_db_url: str) -> None:
    """The whole envelope of every case above (not just its code) is the same on SQLite and
    Postgres, sync and async. Each backend's data is built once, by its sync front."""
    urls = {"sqlite": sqlite_db_url, "postgres": pg_db_url}
    answers: dict[str, list[dict[str, Any] | None]] = {}
    worlds: dict[str, World] = {}
    for name, store in _fronts(urls):
        try:
            backend = name.split("-")[0]
            if backend not in worlds:
                worlds[backend] = build_world(store)
            world = worlds[backend]
            found = []
            cases: list[Case | Coded] = [*order_cases(world), *coded_cases(world)]
            for case in cases:
                error = run_case(store, case)
                found.append(None if error is None else error.to_dict())
            answers[name] = found
        finally:
            store.close()
    reference = answers["sqlite-sync"]
    assert all(outcome is not None for outcome in reference)
    for name, found in answers.items():
        assert found == reference, name
