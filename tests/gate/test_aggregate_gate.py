"""P0 gate for aggregates (docs/contract.md §12): no value, group key, count, order or error of
an aggregate depends on a record or field the grant cannot see.

The grant covers connection `c1`, the fields other than `secret`, the records `r0`..`r7`
(`resources`) and instants from 2024 on (time constraint). The hidden additions carry canaries
(unique tokens, mixed case) in every place the grant excludes: records of another connection,
records of `c1` outside `resources`, outside the time constraint, or deleted, and the ungranted
field `secret` of the visible records; each hidden record also brings new numbers, labels,
flags and instants (new groups, buckets, extremes and sums if it were counted). Proofs, on both
databases:

1. Every question (each metric, grouping and granularity, with and without a filter, and the
   refused ones) answers exactly the same before and after the hidden additions.
2. No cell the database returns while answering them holds a canary, nor any statement text or
   parameter (`BoundaryAudit`).
3. The proofs bite: with the visibility condition removed from the aggregate statements, they
   fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from _aggregates import AGG_MANIFEST, CONNECTOR, STREAM
from _bites import breakable_monkeypatch
from audit import BoundaryAudit

from pdpp_store import Grant, Store, StoreError, StreamGrant
from pdpp_store._core.grants import TimeConstraint
from pdpp_store._sql import visibility

CANARIES = {
    "other_connection": "cAnARy1042aG",
    "outside_resources": "cAnARy1077rS",
    "outside_time": "cAnARy1313tM",
    "deleted": "cAnARy1555dL",
    "ungranted_field": "cAnARy1616fD",
}
GRANTED = frozenset({"id", "when", "n", "flag", "label", "tags"})
GRANT = Grant(
    "gate",
    (
        StreamGrant(
            STREAM,
            ("c1",),
            GRANTED,
            TimeConstraint("when", since="2024-01-01T00:00:00Z"),
            frozenset(f"r{n}" for n in range(8)),
        ),
    ),
)

VISIBLE: list[dict[str, Any]] = [
    {"id": "r0", "when": "2024-03-10T06:30:00Z", "n": 3, "flag": True, "label": "work"},
    {"id": "r1", "when": "2024-03-10T07:30:00Z", "n": 5, "flag": False, "label": "Home"},
    {"id": "r2", "when": "2024-11-03T05:30:00Z", "n": 0.5, "label": "work", "tags": ["a"]},
    {"id": "r3", "when": "2024-11-03T06:30:00+01:00", "n": -2, "flag": None},
    {"id": "r4", "when": "2024-12-31T23:59:59Z", "label": "home", "tags": "a"},
]
HIDDEN_BASE = {"n": 10**6, "flag": True, "tags": ["z"]}


def _hidden(canary: str, record_id: str, when: str) -> dict[str, Any]:
    return {**HIDDEN_BASE, "id": record_id, "when": when, "label": canary, "secret": canary}


QUESTIONS: list[dict[str, Any]] = [
    {},
    {"metric": "sum", "field": "n"},
    {"metric": "min", "field": "n"},
    {"metric": "max", "field": "n"},
    {"metric": "min", "field": "when"},
    {"metric": "max", "field": "when"},
    {"metric": "count_distinct", "field": "label"},
    {"metric": "count_distinct", "field": "n"},
    {"group_by": "label"},
    {"group_by": "flag", "metric": "sum", "field": "n"},
    {"group_by": "tags", "limit": 1},
    {"group_by": "n", "metric": "max", "field": "when", "limit": 2},
    *(
        {"group_by_time": "when", "granularity": g, "time_zone": "America/New_York", "limit": 3}
        for g in ("hour", "day", "week", "month", "year")
    ),
    {"group_by_time": "when", "granularity": "day", "time_zone": "Europe/Paris"},
    {"filter": {"flag": True}},
    {"filter": {"n": {"gt": 0}}, "metric": "sum", "field": "n", "group_by": "label"},
    {"filter": {"when": {"gte": "2024-06-01T00:00:00Z"}}, "group_by_time": "when"},
    {"group_by": "secret"},
    {"metric": "count_distinct", "field": "secret"},
    {"filter": {"secret": "x"}},
    {"group_by": "nothing_declared"},
]


def _answers(store: Store) -> list[Any]:
    found: list[Any] = []
    for question in QUESTIONS:
        try:
            found.append(store.aggregate(GRANT, STREAM, **question).to_dict())
        except StoreError as error:
            found.append(error.to_dict())
    return found


def _hide_everything(store: Store) -> None:
    store.add_connection("c2", CONNECTOR)
    store.upsert_records(
        "c2",
        STREAM,
        [_hidden(CANARIES["other_connection"], f"r{n}", "2024-05-05T05:05:05Z") for n in range(4)],
    )
    store.upsert_records(
        "c1",
        STREAM,
        [
            _hidden(CANARIES["outside_resources"], "x1", "2024-07-07T07:07:07Z"),
            _hidden(CANARIES["outside_time"], "r5", "2019-01-01T00:00:00Z"),
            _hidden(CANARIES["deleted"], "r6", "2024-08-08T08:08:08Z"),
            _hidden(CANARIES["outside_time"], "r7", "not a date"),
        ],
    )
    store.delete_record("c1", STREAM, "r6")
    store.upsert_records(
        "c1", STREAM, [{**row, "secret": CANARIES["ungranted_field"]} for row in VISIBLE]
    )


def check_aggregate_gate(store: Store) -> None:
    before = _answers(store)
    _hide_everything(store)
    with BoundaryAudit(store.engine) as audit:
        after = _answers(store)
    for question, was, now in zip(QUESTIONS, before, after, strict=True):
        assert now == was, f"hidden records or fields changed the answer to {question}"
    for where, canary in CANARIES.items():
        assert not audit.saw(canary), f"the {where} canary leaked"


@pytest.fixture(
    params=[
        pytest.param("sqlite_store", id="sqlite"),
        pytest.param("pg_store", id="postgres", marks=pytest.mark.postgres),
    ]
)
def loaded(request: pytest.FixtureRequest) -> Store:
    store: Store = request.getfixturevalue(request.param)
    store.register_manifest(AGG_MANIFEST)
    store.add_connection("c1", CONNECTOR)
    store.upsert_records("c1", STREAM, VISIBLE)
    return store


def test_no_aggregate_depends_on_what_the_grant_hides(loaded: Store) -> None:
    assert [a for a in _answers(loaded) if "error" not in a], "the questions have answers"
    check_aggregate_gate(loaded)


@pytest.fixture
def breakable(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield from breakable_monkeypatch(monkeypatch)


def test_visibility_removed_from_the_aggregate_sql_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import and_

    from pdpp_store._sql.tables import records

    def only_the_stream(shape: Any, prefix: str = "g", only: Any = None) -> Any:
        from sqlalchemy import bindparam

        return and_(records.c.stream == bindparam(f"{prefix}_stream"))

    breakable.setattr(visibility, "visible_records", only_the_stream)
    with pytest.raises(AssertionError, match=r"changed the answer|leaked"):
        check_aggregate_gate(loaded)


# ------------------------------------------- counts over the grouping field's values alone

VALUES_GRANTS = [
    Grant("gate-values", (StreamGrant(STREAM, ("c1", "c9"), GRANTED),)),
    Grant("gate-values-one", (StreamGrant(STREAM, ("c1",), GRANTED),)),
]
"""Grants of connection and stream only (two connections, and one: then compared by equality):
counts by group read `field_values` alone (`_sql.aggregates` Rule 5), time buckets as ranges
of its instants' index (Rule 6), and a filter's equality clause stands for its records (Rule
8), so what they hide is other connections, deleted records and the ungranted field."""
VALUES_QUESTIONS: list[dict[str, Any]] = [
    {"group_by": "label"},
    {"group_by": "flag", "limit": 1},
    {"group_by": "tags"},
    *(
        {"group_by_time": "when", "granularity": g, "time_zone": "Asia/Kolkata"}
        for g in ("hour", "month")
    ),
    {"group_by_time": "when", "granularity": "day", "time_zone": "America/New_York", "limit": 2},
    {"group_by_time": "when", "granularity": "week"},
    {"filter": {"flag": True}, "metric": "sum", "field": "n"},
    {"filter": {"flag": True}},
    {"filter": {"label": "work"}, "group_by": "flag"},
    {"filter": {"flag": True, "n": {"gt": 0}}, "metric": "max", "field": "when"},
    {"filter": {"flag": True}, "group_by_time": "when", "granularity": "day"},
]


def _values_answers(store: Store) -> list[Any]:
    return [
        store.aggregate(grant, STREAM, **question).to_dict()
        for grant in VALUES_GRANTS
        for question in VALUES_QUESTIONS
    ]


def check_values_gate(store: Store) -> None:
    before = _values_answers(store)
    store.add_connection("c2", CONNECTOR)
    store.upsert_records(
        "c2", STREAM, [_hidden(CANARIES["other_connection"], "r0", "2024-05-05T05:05:05Z")]
    )
    store.upsert_records("c1", STREAM, [_hidden(CANARIES["deleted"], "r6", "2024-08-08T08:08:08Z")])
    store.delete_record("c1", STREAM, "r6")
    store.upsert_records(
        "c1", STREAM, [{**row, "secret": CANARIES["ungranted_field"]} for row in VISIBLE]
    )
    with BoundaryAudit(store.engine) as audit:
        after = _values_answers(store)
    asked = [question for _ in VALUES_GRANTS for question in VALUES_QUESTIONS]
    for question, was, now in zip(asked, before, after, strict=True):
        assert now == was, f"hidden records or fields changed the answer to {question}"
    for where in ("other_connection", "deleted", "ungranted_field"):
        assert not audit.saw(CANARIES[where]), f"the {where} canary leaked"


def test_no_count_over_values_depends_on_what_the_grant_hides(loaded: Store) -> None:
    check_values_gate(loaded)


def test_visibility_removed_from_the_values_path_fails_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    from sqlalchemy import bindparam

    def only_the_stream(shape: Any, table: Any, prefix: str = "g", only: Any = None) -> Any:
        return table.c.stream == bindparam(f"{prefix}_stream")

    breakable.setattr(visibility, "visible_values", only_the_stream)
    with pytest.raises(AssertionError, match=r"changed the answer|leaked"):
        check_values_gate(loaded)


def test_counts_kept_wrong_by_the_write_path_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """The counts by value the write path keeps (`value_counts`, read for a count by
    `group_by`): a delete that leaves its record's values counted fails the proof."""
    from pdpp_store._sql import values as value_sql

    breakable.setattr(value_sql, "uncount_record_values", lambda *args: ())
    with pytest.raises(AssertionError, match=r"changed the answer|leaked"):
        check_values_gate(loaded)


def test_counts_kept_across_connections_fail_the_proofs(
    loaded: Store, breakable: pytest.MonkeyPatch
) -> None:
    """Counts of another connection's values kept as the granted connection's fail the
    proof."""
    from pdpp_store._sql import values as value_sql

    counted = value_sql.count_values

    def as_c1(rows: Any) -> Any:
        return counted([("c1", *row[1:]) for row in rows])

    breakable.setattr(value_sql, "count_values", as_c1)
    with pytest.raises(AssertionError, match=r"changed the answer|leaked"):
        check_values_gate(loaded)
