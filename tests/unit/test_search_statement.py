"""Search's filtered statements (`_sql.search` Rule 6): the hits, the word index's ranking and
band, and the hits' counts, compiled without a database. Each group's filter is bound by shape,
as `query_records`' is (`_sql.shapes` Rule 1): its fields and values are parameters, never
statement text, and filters of one shape share one cached statement."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pdpp_store import Grant
from pdpp_store._core.filters import Bound, Comparable, Equals, Filter, OneOf, Range
from pdpp_store._core.grants import StreamGrant
from pdpp_store._sql import ranking as ranking_sql
from pdpp_store._sql import search as search_sql
from pdpp_store._sql import words as words_sql
from pdpp_store._sql.dialects import Capabilities, capabilities
from pdpp_store._sql.requests import Execute
from pdpp_store._sql.search import SearchGroup

CAPS = [capabilities("sqlite"), capabilities("postgresql")]
KEY = ("conn-a", "messages", "r1")
TARGET = (*KEY, "subject")


def _grants() -> list[StreamGrant]:
    streams = [
        {"name": "messages", "instance_ids": ["conn-a", "conn-b"], "resources": ["r1"]},
        {"name": "notes", "instance_ids": ["conn-a"]},
    ]
    grant = Grant.from_dict({"grant_id": "g", "streams": streams})
    return [grant.stream("messages"), grant.stream("notes")]


def _groups(one: Filter, other: Filter) -> list[SearchGroup]:
    """Two groups of two stream grants, each with its own filter (its own manifest's)."""
    return [
        SearchGroup(0, ("conn-a", "conn-b"), ("subject", "body"), one),
        SearchGroup(1, ("conn-a",), ("title",), other),
    ]


def _sender(value: str, since: str) -> Filter:
    return Filter(
        (
            Equals("zq_from", Comparable("string", value)),
            Range("zq_at", (Bound("gte", "instant", since),)),
        )
    )


def _either(first: str, second: str, least: int) -> Filter:
    return Filter(
        (
            OneOf("zq_label", (Comparable("string", first), Comparable("string", second))),
            Range("zq_size", (Bound("gt", "number", least),)),
        )
    )


Build = Callable[[list[StreamGrant], list[SearchGroup]], Execute]
BUILDERS: dict[str, Build] = {
    "hits": lambda grants, groups: search_sql.hits(grants, groups, ["budget"], None, 26),
    "hits_paged_among": lambda grants, groups: search_sql.hits(
        grants, groups, ["budget", "a longer phrase"], KEY, 26, among=[KEY]
    ),
    "ranked": lambda grants, groups: words_sql.ranked(grants, groups, ["budget", "q"], 26),
    "ranked_capped": lambda grants, groups: words_sql.ranked(
        grants, groups, ["budget"], 26, cap=1.5
    ),
    "band": lambda grants, groups: words_sql.band(grants, groups, ["budget"], 26, 1.0, 1.1),
    "hit_counts": lambda grants, groups: ranking_sql.hit_counts(
        grants, groups, ["budget"], 2, [TARGET]
    ),
}


def _statement(request: Execute, caps: Capabilities) -> Any:
    return request.statement_for(caps)


def _params(request: Execute) -> dict[str, Any]:
    assert isinstance(request.params, dict)
    return request.params


@pytest.mark.parametrize("caps", CAPS, ids=lambda caps: caps.name)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_search_filter_values_are_parameters_never_statement_text(
    name: str, caps: Capabilities
) -> None:
    """No filter's field or value is in any filtered search statement: each group's are
    parameters of its own (`q<group>_f<clause>_*`)."""
    groups = _groups(
        _sender("zq-sender@example.org", "2031-07-09T00:00:00Z"),
        _either("zq-label-one", "zq-label-two", 7319),
    )
    request = BUILDERS[name](_grants(), groups)
    compiled = _statement(request, caps).compile(dialect=_dialect(caps))
    text = str(compiled)
    for value in ("zq", "2031", "7319", "ann@", "zq-sender"):
        assert value not in text.lower(), (value, text)
    params = _params(request)
    given = {
        group: {v for k, v in params.items() if k.startswith(group)} for group in ("q0_", "q1_")
    }
    assert given["q0_"] == {"zq_from", "zq-sender@example.org", "zq_at", "2031-07-09T00:00:00Z"}
    assert given["q1_"] == {"zq_label", "zq-label-one", "zq-label-two", "zq_size", 7319}
    named = {key for key in params if key.startswith(("q0_", "q1_"))}
    assert named <= set(compiled.binds), named - set(compiled.binds)
    assert all(compiled.binds[key].required for key in named)


def _dialect(caps: Capabilities) -> Any:
    from sqlalchemy.dialects import postgresql, sqlite

    return postgresql.dialect() if caps.name == "postgresql" else sqlite.dialect()  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("caps", CAPS, ids=lambda caps: caps.name)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_one_search_statement_per_filter_shape(name: str, caps: Capabilities) -> None:
    """Filters of one shape share one statement, built once; another shape (a value of
    another kind, another clause) is another statement; no filter at all is the statement
    of an unfiltered search, with no filter parameter."""
    build = BUILDERS[name]
    grants = _grants()
    one = build(grants, _groups(_sender("ann@example.org", "2026-03-01"), _either("a", "b", 1)))
    first = _statement(one, caps)
    cached = _cache(name).cache_info()
    other = build(
        grants, _groups(_sender("bob@example.org", "2024-01-31T10:00:00Z"), _either("c", "d", 9))
    )
    assert _statement(other, caps) is first
    assert _cache(name).cache_info().misses == cached.misses
    assert _params(one) != _params(other)
    numbered = Filter((Equals("zq_from", Comparable("number", 3)),))
    shapes = [
        _groups(numbered, _either("a", "b", 1)),
        _groups(_sender("ann@example.org", "2026-03-01"), Filter()),
        _groups(Filter(), Filter()),
    ]
    built = [_statement(build(grants, groups), caps) for groups in shapes]
    assert len({id(first), *map(id, built)}) == 4
    bare = build(grants, _groups(Filter(), Filter()))
    assert not any(key.startswith("q") for key in _params(bare))


def _cache(name: str) -> Any:
    """The cached builder behind `BUILDERS[name]`."""
    if name.startswith("hits"):
        return search_sql._hits
    if name == "hit_counts":
        return ranking_sql._hit_counts
    return words_sql._ranked
