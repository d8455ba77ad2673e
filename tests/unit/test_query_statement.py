"""`query_records`' page statements (`_sql.query` Rule 6, `_sql.filters` Rule 6) and its
changes walk (`_sql.changes` Rule 6), compiled without a database: one statement per shape of
the grant, the filter and the order, with the grant's and the filter's values as bound
parameters, never in the statement."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from pdpp_store import Grant
from pdpp_store._core.filters import Bound, Comparable, Equals, Filter, OneOf, Range
from pdpp_store._sql import changes as changes_sql
from pdpp_store._sql import query as query_sql

DIALECTS: list[Dialect] = [sqlite.dialect(), postgresql.dialect()]  # type: ignore[no-untyped-call]


def _grant(
    conn: str,
    resources: list[str] | None = None,
    fields: list[str] | None = None,
    since: str | None = None,
) -> Any:
    stream: dict[str, Any] = {"name": "messages", "instance_ids": [conn]}
    if resources is not None:
        stream["resources"] = resources
    if fields is not None:
        stream["fields"] = fields
    if since is not None:
        stream["time_constraint"] = {"field": "at", "since": since}
    return Grant.from_dict({"grant_id": "g", "streams": [stream]}).stream("messages")


def _sender(value: str) -> Filter:
    return Filter((Equals("sender", Comparable("string", value)),))


def _day(since: str, until: str) -> Range:
    return Range("at", (Bound("gte", "instant", since), Bound("lt", "instant", until)))


def _valued(grant: Any, filter: Filter, **changes: Any) -> Any:
    arguments: dict[str, Any] = {
        "connections": [grant.instance_ids[0]],
        "order_field": "at",
        "order_kind": "instant",
        "direction": "desc",
        "after": None,
        "limit": 26,
    }
    return query_sql.valued_page(grant, filter, **{**arguments, **changes})


def _compiled(request: Any, dialect: Dialect) -> str:
    return str(request.statement.compile(dialect=dialect))


def test_one_page_statement_per_shape() -> None:
    """Two grants and two filters of one shape share the page statement; their connection,
    filter values, position and limit are parameters."""
    one = _valued(
        _grant("c1"),
        _sender("alice@example.com"),
        after=("2026-01-02T00:00:00Z", "c1", "r1"),
        limit=3,
    )
    other = _valued(
        _grant("c2"),
        _sender("bob@example.com"),
        after=("2025-06-01T00:00:00Z", "c2", "r9"),
        limit=26,
    )
    assert one.statement is other.statement
    assert (one.params["q_f0_0"], other.params["q_f0_0"]) == (
        "alice@example.com",
        "bob@example.com",
    )
    assert (one.params["q_conns_0"], other.params["q_conns_0"]) == ("c1", "c2")
    assert (one.params["q_after_value"], one.params["q_limit"]) == ("2026-01-02T00:00:00Z", 3)
    # another shape: another statement
    first = _valued(_grant("c1"), _sender("alice@example.com"))
    assert first.statement is not one.statement
    many = _valued(
        _grant("c1"),
        Filter((OneOf("sender", (Comparable("string", "a"), Comparable("string", "b"))),)),
    )
    assert many.statement is not first.statement


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda dialect: dialect.name)
def test_values_are_parameters_never_statement_text(dialect: Dialect) -> None:
    """No value of the grant or of the filter, nor the order field's name, is in any page,
    count or changes statement: each is a named parameter of the cached statement."""
    secret = "zq-secret-value"
    grant = _grant("conn-zq", resources=["res-zq"])
    windowed = _grant(
        "conn-zq", resources=["res-zq"], fields=["sender", "at"], since="2031-01-01T00:00:00Z"
    )
    ranged = Filter(
        (
            Equals("sender", Comparable("string", secret)),
            _day("2031-01-01T00:00:00Z", "2031-01-02T00:00:00Z"),
        )
    )
    clause = ranged.clauses[1]
    pages: list[Any] = [
        _valued(grant, ranged, after=("2031-01-01T12:00:00Z", "conn-zq", "rec-zq")),
        _valued(grant, ranged, drive=clause),
        query_sql.key_page(
            grant,
            ranged,
            connection_id="conn-zq",
            direction="asc",
            after=("conn-zq", "rec-zq"),
            limit=5,
        ),
        query_sql.missing_page(
            grant,
            ranged,
            connection_id="conn-zq",
            order_field="at",
            order_kind="instant",
            direction="desc",
            after=("conn-zq", "rec-zq"),
            limit=5,
        ),
        query_sql.few_matches(grant, ranged, ["conn-zq"], clause, 2000),
        query_sql.record_count(grant, ranged, connection_id=None, connections=["conn-zq"]),
        query_sql.record_count(grant, ranged, connection_id="conn-zq"),
    ]
    walks: list[Any] = [
        changes_sql.changes_page(
            walk_grant, ranged, connection_id=scope, positions=positions, limit=5
        )
        for walk_grant in (grant, windowed)
        for scope, positions in (("conn-zq", {"conn-zq": 20310}), (None, {"conn-zq": 20310}))
    ]
    # the walk's own constants (a flag's 1 and 0, the empty instant and existence path)
    constants = {"pages": (0,), "walks": (0, 1, "")}
    for kind, requests in (("pages", pages), ("walks", walks)):
        for request in requests:
            compiled = request.statement.compile(dialect=dialect)
            assert not compiled.post_compile_params  # no list expanded at every execution
            text = str(compiled)
            for value in (secret, "zq", "2031", "'at'", "'sender'", "messages", "2000"):
                assert value not in text, (value, text)
            for name, bind in compiled.binds.items():  # given per call, or a constant
                assert bind.required or bind.value in constants[kind], (name, bind.value)
            assert isinstance(request.params, dict)
            assert "conn-zq" in request.params.values()
            assert secret in request.params.values()


def test_one_changes_statement_per_filter_shape() -> None:
    """Filters of one shape (operators and value kinds) share the walk's statement, their
    fields and values its parameters; another shape is another statement."""
    grant = _grant("c1", fields=["sender", "at"], since="2026-01-01T00:00:00Z")

    def walk(filter: Filter) -> Any:
        return changes_sql.changes_page(
            grant, filter, connection_id="c1", positions={"c1": 3}, limit=26
        )

    one, other = walk(_sender("alice@example.com")), walk(_sender("bob@example.com"))
    assert one.statement is other.statement
    assert (one.params["q_f0_0"], other.params["q_f0_0"]) == (
        "alice@example.com",
        "bob@example.com",
    )
    assert one.params["q_f0_path"] == "sender"
    number = walk(Filter((Equals("sender", Comparable("number", 1)),)))
    boolean = walk(Filter((Equals("sender", Comparable("boolean", True)),)))
    assert len({id(one.statement), id(number.statement), id(boolean.statement)}) == 3
    day = walk(Filter((_day("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"),)))
    assert (
        day.statement
        is walk(Filter((_day("2024-03-01T00:00:00Z", "2024-03-05T00:00:00Z"),))).statement
    )
    assert day.statement is not one.statement


def test_a_range_on_the_order_field_bounds_the_walk_by_parameters() -> None:
    """The range's bounds on the order field go on the order value the page walks, as the
    clause's own parameters; another day is the same statement."""
    one = _valued(_grant("c1"), Filter((_day("2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"),)))
    other = _valued(_grant("c1"), Filter((_day("2024-03-01T00:00:00Z", "2024-03-05T00:00:00Z"),)))
    assert one.statement is other.statement
    compiled = _compiled(one, DIALECTS[0])
    assert compiled.count("order_value.instant >= ?") == 1
    assert other.params["q_f0_1"] == "2024-03-05T00:00:00Z"
