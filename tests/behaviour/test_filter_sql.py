"""The filter SQL builder (`_sql.filters.filter_condition`) against the Python oracle
(`_core.filters.matches`) on both databases: for random records (every kind of value a filter
compares, NUL strings, integers past 2**53, doubles of 17 digits, instants with offsets,
arrays) and random valid filters, the records the SQL selects are exactly those the oracle
matches, and deleted records are never selected."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from _values import STREAM, VALUES_MANIFEST, spec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from pdpp_store import Store, StreamGrant
from pdpp_store._core.errors import BadRequest
from pdpp_store._core.filters import Filter, matches, parse_filter
from pdpp_store._sql.filters import filter_condition
from pdpp_store._sql.tables import records

_CONNECTIONS = itertools.count()
IDS = [f"r{n}" for n in range(8)]
ALL = StreamGrant(STREAM)
STRINGS = [
    "alice",
    "ALICE",
    "Straße",
    "STRASSE",
    "a\x00b",
    "\x01x",
    "İ",
    "2026-03-01T10:00:00Z",
    "2026-03-01T11:00:00+01:00",
    "2026-03-01",
    "2026-03-02T00:00:00Z",
    "2026-13-01",
    "",
    "y" * 257,
]
NUMBERS = [0, 1, 1.0, 0.1, -0.0, 2**53, 2**53 + 1, 2.0**53, 1.2345678901234567, 1e300, 2**63, -7]
_scalar = st.one_of(st.none(), st.booleans(), st.sampled_from(STRINGS), st.sampled_from(NUMBERS))
_value = st.one_of(_scalar, st.lists(st.one_of(_scalar, st.lists(_scalar, max_size=1)), max_size=4))


@st.composite
def _record(draw: st.DrawFn, record_id: str) -> dict[str, Any]:
    record: dict[str, Any] = {"id": record_id}
    chosen: dict[str, st.SearchStrategy[Any]] = {
        "title": st.sampled_from(STRINGS),
        "n": st.sampled_from(NUMBERS),
        "flag": st.booleans(),
        "tags": st.lists(_scalar, max_size=4),
        "when": st.sampled_from(STRINGS),
        "maybe": st.one_of(st.none(), st.sampled_from(STRINGS)),
        "anything": _value,
    }
    for name, values in chosen.items():
        if draw(st.booleans()):
            record[name] = draw(values)
    return record


_INSTANTS = ["2026-03-01", "2026-03-01T10:00:00Z", "2026-03-01T10:30:00+01:00", "2027-01-01"]
_CLAUSES: dict[str, st.SearchStrategy[Any]] = {
    "id": st.sampled_from(IDS)
    | st.lists(st.sampled_from(IDS), min_size=1, max_size=4).map(lambda v: {"in": v}),
    "title": st.sampled_from([s for s in STRINGS if len(s) <= 256])
    | st.lists(st.sampled_from(STRINGS[:6]), min_size=1, max_size=3).map(lambda v: {"in": v}),
    "n": st.sampled_from([n for n in NUMBERS if n != 2**63])
    | st.dictionaries(
        st.sampled_from(["gt", "lte"]),
        st.sampled_from([-1, 0, 0.5, 1, 2**53, 2**53 + 1]),
        min_size=1,
    ),
    "flag": st.booleans(),
    "tags": st.one_of(_scalar.filter(lambda v: v != "y" * 257)).map(lambda v: {"has": v}),
    "when": st.dictionaries(st.sampled_from(["gte", "lt"]), st.sampled_from(_INSTANTS), min_size=1)
    | st.sampled_from(STRINGS[:8]),
    "maybe": st.none() | st.sampled_from(STRINGS[:4]),
    "anything": st.one_of(
        _scalar.filter(lambda v: v not in ("y" * 257, 2**63)),
        st.lists(st.sampled_from([None, True, 1, 0.1, "alice"]), min_size=1, max_size=4).map(
            lambda v: {"in": v}
        ),
        st.sampled_from([1, "alice", None, True]).map(lambda v: {"has": v}),
    ),
}
_FILTERS = st.lists(st.sampled_from(sorted(_CLAUSES)), unique=True, min_size=1, max_size=3).flatmap(
    lambda names: st.tuples(*(_CLAUSES[name] for name in names)).map(
        lambda clauses: dict(zip(names, clauses, strict=True))
    )
)


def _selected(store: Store, connection_id: str, parsed: Filter) -> set[str]:
    statement = select(records.c.record_id).where(
        records.c.connection_id == connection_id,
        records.c.stream == STREAM,
        records.c.deleted == False,  # noqa: E712 - SQL comparison
        filter_condition(parsed, records),
    )
    with store.engine.connect() as conn:
        return {row[0] for row in conn.execute(statement)}


@pytest.fixture(
    params=[
        pytest.param("sqlite_store", id="sqlite"),
        pytest.param("pg_store", id="postgres", marks=pytest.mark.postgres),
    ]
)
def values_store(request: pytest.FixtureRequest) -> Store:
    opened: Store = request.getfixturevalue(request.param)
    opened.register_manifest(VALUES_MANIFEST)
    return opened


def test_the_sql_selects_what_the_oracle_matches(values_store: Store) -> None:
    stream_spec = spec()

    @settings(
        max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(
        rows=st.tuples(*(_record(record_id) for record_id in IDS)),
        deleted=st.sets(st.sampled_from(IDS), max_size=2),
        filters=st.lists(_FILTERS, min_size=1, max_size=6),
    )
    def run(rows: tuple[dict[str, Any], ...], deleted: set[str], filters: list[Any]) -> None:
        connection_id = f"f{next(_CONNECTIONS)}"
        values_store.add_connection(connection_id, VALUES_MANIFEST["connector_id"])
        values_store.upsert_records(connection_id, STREAM, list(rows))
        for record_id in sorted(deleted):
            values_store.delete_record(connection_id, STREAM, record_id)
        live = {row["id"]: row for row in rows if row["id"] not in deleted}
        for raw in filters:
            try:
                parsed = parse_filter(raw, stream_spec, ALL)
            except BadRequest:
                continue  # a value of a type the field does not declare: the parser's test
            expected = {rid for rid, row in live.items() if matches(parsed, row)}
            assert _selected(values_store, connection_id, parsed) == expected, raw

    run()


EDGE_ROWS: list[dict[str, Any]] = [
    {"id": "big", "n": 2**53 + 1, "title": "Straße", "when": "2026-03-01T10:00:00Z"},
    {"id": "round", "n": 2**53, "title": "a\x00b", "when": "2026-03-01T11:00:00+01:00"},
    {"id": "tenth", "n": 0.1, "tags": [1.0, "x\x00"], "when": "2026-03-01"},
    {"id": "one", "n": 1, "tags": ["x", [1]], "maybe": None, "when": "not a date"},
]
EXACT: list[tuple[dict[str, Any], set[str]]] = [
    ({"n": 2**53 + 1}, {"big"}),
    ({"n": 2**53}, {"round"}),
    ({"n": 0.1}, {"tenth"}),
    ({"n": {"gt": 2**53}}, {"big"}),
    ({"n": {"gt": 0.1}}, {"big", "round", "one"}),
    ({"n": {"lte": 1}}, {"tenth", "one"}),
    ({"title": "STRAßE"}, {"big"}),
    ({"title": "STRASSE"}, set()),
    ({"title": "A\x00B"}, {"round"}),
    ({"title": {"in": ["straße", "a\x00b"]}}, {"big", "round"}),
    ({"when": {"gte": "2026-03-01T10:00:00Z", "lt": "2026-03-01T10:00:01Z"}}, {"big", "round"}),
    ({"tags": {"has": "X"}}, {"one"}),
    ({"tags": {"has": 1}}, {"tenth"}),
    ({"maybe": None}, {"one"}),
]


@pytest.mark.parametrize(("raw", "expected"), EXACT, ids=[repr(raw) for raw, _ in EXACT])
def test_edges_compare_exactly(
    values_store: Store, raw: dict[str, Any], expected: set[str]
) -> None:
    """Numbers beyond a double's precision, NUL strings, folding, instants with offsets."""
    values_store.add_connection("edges", VALUES_MANIFEST["connector_id"])
    values_store.upsert_records("edges", STREAM, EDGE_ROWS)
    parsed = parse_filter(raw, spec(), ALL)
    assert {row["id"] for row in EDGE_ROWS if matches(parsed, row)} == expected  # the oracle
    assert _selected(values_store, "edges", parsed) == expected
