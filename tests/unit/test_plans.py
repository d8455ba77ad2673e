"""Operations as plans, with no database: each operation is a generator that yields statements
and receives rows, so it can be driven by hand with canned rows; and a statement whose best form
depends on the database is built from the dialect's capabilities, compiled here for both.

What this shows that the behaviour suite cannot: the exact requests an operation makes (and in
which order), that rows are read by label (a canned mapping is all it takes), and that dialect
differences are chosen by capability, not by name.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg
from sqlalchemy.dialects.sqlite.base import SQLiteDialect
from sqlalchemy.sql.elements import ClauseElement

from pdpp_store import CursorCodec, CursorKey, FieldInfo, FieldKind, Grant, NotFound, RecordRef
from pdpp_store._ops.reads import ReadContext, describe_field
from pdpp_store._sql import match as match_sql
from pdpp_store._sql import reads as read_sql
from pdpp_store._sql import visibility as visibility_sql
from pdpp_store._sql.dialects import POSTGRESQL, SQLITE, Capabilities
from pdpp_store._sql.requests import Execute, Rows

CODEC = CursorCodec(CursorKey(1, b"k" * 32))
GRANT = Grant.owner("cin_a", "emails")
DIGEST = "sha256:" + "ab" * 32
FIELD_ROW = {
    "path": "body",
    "kind": "text",
    "json_type": "string",
    "size_chars": 12,
    "size_bytes": 12,
    "digest": DIGEST,
    "mime_type": None,
    "blob_id": None,
}
DECLARED = [{"primary_key": '["id"]', "consent_time_field": None, "hints": "{}"}]


def _drive(op: Any, answers: list[Rows]) -> tuple[list[Execute], Any]:
    """Run `op` on canned answers, one per request; the requests it made and what it returned."""
    requests: list[Execute] = []
    reply: Rows | None = None
    try:
        while True:
            request = op.send(reply)
            assert isinstance(request, Execute)
            requests.append(request)
            reply = answers.pop(0)
    except StopIteration as done:
        assert answers == [], "the operation asked less than expected"
        return requests, done.value


def _describe() -> Any:
    return describe_field(ReadContext(CODEC), GRANT, "cin_a/emails:e1", "body")


def test_describe_field_is_two_statements_read_by_label() -> None:
    requests, info = _drive(_describe(), [DECLARED, [FIELD_ROW]])
    assert info == FieldInfo("body", FieldKind.TEXT, "string", 12, 12, DIGEST)
    assert len(requests) == 2
    params = requests[1].params
    assert isinstance(params, dict)
    assert params["f_path"] == "body"


def test_canned_rows_decide_the_error_exactly_as_the_database_would() -> None:
    with pytest.raises(NotFound) as missing:
        _drive(_describe(), [DECLARED, []])  # the record is not visible
    assert missing.value.code == "not_found"
    absent = dict.fromkeys(FIELD_ROW)
    with pytest.raises(NotFound) as no_field:
        _drive(_describe(), [DECLARED, [absent]])  # visible, without the field
    assert no_field.value.code == "field_not_found"
    with pytest.raises(NotFound) as undeclared:
        _drive(_describe(), [[], [], []])  # not declared by the connection, nor anywhere
    assert undeclared.value.code == "stream_not_declared"


def _compiled(request: Execute, caps: Capabilities) -> str:
    postgres: Any = PGDialect_psycopg  # its constructor is untyped
    dialect = SQLiteDialect() if caps is SQLITE else postgres()
    statement = request.statement_for(caps)
    assert isinstance(statement, ClauseElement)
    return str(statement.compile(dialect=dialect))


@pytest.mark.parametrize("needle_chars", [8, 200])
def test_match_windows_are_spelled_by_capability(needle_chars: int) -> None:
    stream_grant = GRANT.stream("emails")
    request = match_sql.match_window(
        RecordRef("cin_a", "emails", "e1"),
        "body",
        stream_grant,
        needle="x" * needle_chars,
        before=10,
        after=10,
        limit=None,
    )
    on_sqlite, on_postgres = _compiled(request, SQLITE), _compiled(request, POSTGRESQL)
    assert "instr(" in on_sqlite
    assert "strpos(" in on_postgres
    for text in (on_sqlite, on_postgres):
        for label in ("match_start", "window_start", "window_limit", "limit_clamped", "text"):
            assert label in text
    long_needle = needle_chars - 1 > 63
    assert ("lead(" in on_postgres) is (long_needle and POSTGRESQL.streams_window_functions)
    assert "lead(" not in on_sqlite  # materialised there: a probe per chunk instead


def test_a_grants_parameters_are_the_callers_own() -> None:
    """A stream grant's parameters are computed once (`_grant_terms`); each statement gets its
    own copy, so changing one never changes the next."""
    stream_grant = Grant.from_dict(
        {"grant_id": "g", "streams": [{"name": "emails", "instance_ids": ["cin_a"]}]}
    ).stream("emails")
    first = visibility_sql.grant_params(stream_grant)
    first["g_stream"] = "chats"
    window = read_sql.field_window(
        RecordRef("cin_a", "emails", "e1"), "body", stream_grant, start=0, limit=5
    )
    assert visibility_sql.grant_params(stream_grant) == {
        "g_stream": "emails",
        "g_instances": ["cin_a"],
    }
    assert isinstance(window.params, dict)
    assert window.params["g_stream"] == "emails"
    assert visibility_sql.grant_params(stream_grant, "g0") == {
        "g0_stream": "emails",
        "g0_instances": ["cin_a"],
    }
