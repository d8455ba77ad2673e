"""The changes walk's statement (`_sql.changes`, Rules 5 and 6), compiled without a database:
each logged change's window look-up named once, and one statement per grant shape."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from pdpp_store import Grant
from pdpp_store._core.filters import Filter
from pdpp_store._sql import changes as changes_sql


def _stream_grant(since: str, fields: list[str] | None, conn: str = "c1") -> Any:
    stream: dict[str, Any] = {
        "name": "messages",
        "instance_ids": [conn],
        "time_constraint": {"field": "received_at", "since": since},
    }
    if fields is not None:
        stream["fields"] = fields
    return Grant.from_dict({"grant_id": "g", "streams": [stream]}).stream("messages")


DIALECTS: list[Dialect] = [sqlite.dialect(), postgresql.dialect()]  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda dialect: dialect.name)
@pytest.mark.parametrize("fields", [None, ["subject", "received_at"]], ids=["all", "some"])
def test_a_windowed_walk_names_each_look_up_once(dialect: Any, fields: list[str] | None) -> None:
    """Three aliases of `change_log` look the window up (the change itself, whether it left a
    tombstone, and each later change of its record), each once: a look-up named per use made
    the Postgres planner's estimate JIT-compile the statement (seconds a page)."""
    request = changes_sql.changes_page(
        _stream_grant("2026-01-01T00:00:00Z", fields),
        Filter(),
        connection_id="c1",
        positions={"c1": 7},
        limit=26,
    )
    compiled = str(request.statement.compile(dialect=dialect)).lower()  # type: ignore[union-attr]
    # the walk, the later changes, and one look-up of the next change for each of the three
    assert compiled.count("from change_log as") == 5
    # one look-up of the stored instant for each of the three, and the grant's own time term
    assert compiled.count("from fields as") == 4


def test_one_statement_per_grant_shape() -> None:
    """Grants of the same shape share the statement (one cached plan); their values, the
    positions, the connection and the limit are parameters."""
    one = changes_sql.changes_page(
        _stream_grant("2026-01-01T00:00:00Z", ["subject"], "c1"),
        Filter(),
        connection_id="c1",
        positions={"c1": 3},
        limit=2,
    )
    other = changes_sql.changes_page(
        _stream_grant("2025-06-01T00:00:00Z", ["body"], "c2"),
        Filter(),
        connection_id="c2",
        positions={"c2": 40},
        limit=26,
    )
    assert one.statement is other.statement
    first, second = one.params, other.params
    assert isinstance(first, dict)
    assert isinstance(second, dict)
    assert (first["c_scope"], first["c_after_0"], first["q_limit"]) == ("c1", 3, 2)
    assert second["c_fields"] == ["body"]
    assert second["g_since"] != first["g_since"]
    unscoped = changes_sql.changes_page(
        _stream_grant("2026-01-01T00:00:00Z", ["subject"], "c1"),
        Filter(),
        connection_id=None,
        positions={},
        limit=2,
    )
    assert unscoped.statement is not one.statement
