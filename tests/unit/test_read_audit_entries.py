"""The read audit's entries, built with no database (`_ops.audit.entry_row`): what is kept of
the caller's terms (never a cursor or a bookmark, a field-window URI as its parts, long terms
cut), the grant's id, the outcome of an error, and who asked."""

from __future__ import annotations

import json

from pdpp_store import FieldWindowRef, Grant, NotFound, RecordRef, audit_context
from pdpp_store._ops import audit
from pdpp_store._ops.catalogue import QUERY_RECORDS, READ_RESOURCE, SEARCH, Operation

Row = dict[str, object]

GRANT = Grant.from_dict({"grant_id": "g-unit", "streams": [{"name": "message_bodies"}]})
REF = RecordRef("cin_mail", "message_bodies", "e1")


def _row(operation: Operation, args: tuple[object, ...], kwargs: dict[str, object]) -> Row:
    return audit.entry_row(operation, args, kwargs, NotFound("not_found", "gone"), None)


def test_a_cursor_and_a_bookmark_are_kept_only_as_given() -> None:
    row = _row(
        QUERY_RECORDS,
        (GRANT, "message_bodies"),
        {"cursor": "c2VjcmV0LW9yZGVyLXZhbHVl.sig", "filter": {"from": "a@b.c"}},
    )
    assert json.loads(str(row["terms"])) == {
        "stream": "message_bodies",
        "cursor": "<given>",
        "filter": {"from": "a@b.c"},
    }
    bookmark = _row(QUERY_RECORDS, (GRANT, "s"), {"changes_since": "opaque.bookmark"})
    assert json.loads(str(bookmark["terms"]))["changes_since"] == "<given>"
    beginning = _row(QUERY_RECORDS, (GRANT, "s"), {"changes_since": "beginning"})
    assert json.loads(str(beginning["terms"]))["changes_since"] == "beginning"


def test_a_field_window_uri_is_kept_as_its_parts() -> None:
    uri = FieldWindowRef(REF, "body_text", offset_chars=10, cursor="opaque.cursor").uri
    row = _row(READ_RESOURCE, (GRANT, uri), {})
    assert json.loads(str(row["terms"])) == {
        "uri": "pdpp://field-window/",
        "record": REF.id,
        "field": "body_text",
        "offset_chars": 10,
        "limit_chars": None,
        "cursor": "<given>",
    }
    assert "opaque.cursor" not in json.dumps(row)
    assert (row["stream"], row["connection_id"]) == (None, None)  # nothing served, nothing named


def test_an_error_is_its_code_and_long_terms_are_cut() -> None:
    row = _row(SEARCH, (GRANT, "x" * 5000), {"streams": ["message_bodies"]})
    assert (row["outcome"], row["grant_id"], row["operation"]) == ("not_found", "g-unit", "search")
    assert (row["record_ids"], row["record_count"], row["fields"]) == ("[]", 0, "[]")
    terms = json.loads(str(row["terms"]))
    assert len(terms["q"]) == audit.MAX_TERM_CHARS
    assert terms["q"].endswith("…")
    assert terms["streams"] == ["message_bodies"]


def test_who_asked_comes_from_the_context() -> None:
    with audit_context("mcp", request_id="req_1", client="host") as reader:
        row = audit.entry_row(SEARCH, (GRANT, "q"), {}, RuntimeError("boom"), reader)
    assert (row["surface"], row["request_id"], row["client"]) == ("mcp", "req_1", "host")
    assert row["outcome"] == "internal_error"
    plain = audit.entry_row(SEARCH, (GRANT, "q"), {}, RuntimeError("boom"), None)
    assert (plain["surface"], plain["request_id"], plain["client"]) == ("library", None, None)


def test_an_overlong_integer_or_a_non_finite_number_is_kept_as_its_kind() -> None:
    """What the store refuses as input still makes an entry: a 10,000-digit integer (which
    Python will not even turn into text) by its size, NaN and infinity by their names."""
    huge = 10**10_000
    row = _row(
        QUERY_RECORDS, (GRANT, "message_bodies"), {"limit": huge, "filter": {"n": float("nan")}}
    )
    terms = json.loads(str(row["terms"]))
    assert terms["limit"] == f"<integer of {huge.bit_length()} bits>"
    assert terms["filter"] == {"n": "nan"}
    assert json.loads(str(_row(QUERY_RECORDS, (GRANT, "s"), {"limit": 2**64 - 1})["terms"])) == {
        "stream": "s",
        "limit": 2**64 - 1,
    }
