"""Counts by group over a field's comparable rows alone (`_sql.aggregates` Rule 5), on both
databases and both fronts: the path is taken exactly when the grant's terms are connection and
stream only and there is no filter (seen in the statement the store runs), and wherever it is
taken it gives what the general path and the Python oracle give, the group whose key is null
included, in every place its count puts it; grants with `resources`, a time constraint or a
filter keep the general path."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from _aggregates import AGG_MANIFEST, CONNECTOR, STREAM, Question, expected
from _fronts import StoreFront

from pdpp_store import Grant, StreamGrant
from pdpp_store._core.aggregates import bucket_ranges
from pdpp_store._core.filters import Filter, parse_filter
from pdpp_store._core.grants import TimeConstraint
from pdpp_store._core.manifest import Manifest
from pdpp_store._runtime import observing
from pdpp_store._sql import aggregates as aggregate_sql

SPEC = Manifest.from_dict(AGG_MANIFEST).streams[0]


class _Statements:
    def __init__(self) -> None:
        self.seen: list[str] = []

    def executing(self, engine: Any, statement: str, parameters: Any) -> None:
        self.seen.append(statement)

    def fetched(self, engine: Any, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        pass


@contextmanager
def _statements() -> Iterator[_Statements]:
    seen = _Statements()
    with observing(seen):
        yield seen


def _by_values(statements: list[str]) -> bool:
    """Whether the aggregate statement (the last one) is Rule 5's: groups counted from
    `field_values` alone (`a_keyed`), then one count of `records`, no join of the two."""
    answer = statements[-1]
    return "a_keyed" in answer and "UNION ALL" in answer and "JOIN field_values" not in answer


# Labels chosen so that the null group (missing, null, array, number-less) ties with, beats
# and loses to keyed groups of every kind as the records change.
ROWS: list[dict[str, Any]] = [
    {"id": "a", "when": "2024-03-10T06:59:59Z", "label": "work", "flag": True, "n": 1},
    {"id": "b", "when": "2024-03-10T07:00:00Z", "label": "Work", "flag": False, "n": 1.0},
    {"id": "c", "when": "2024-11-03T05:30:00.250000Z", "label": None, "flag": None, "n": 2},
    {"id": "d", "when": "2024-11-03T06:30:00Z", "label": ["x"], "n": None},
    {"id": "e", "when": "2024-11-03T06:30:00+05:30", "flag": True, "n": "12"},
    {"id": "f", "when": "not a date", "label": "home", "n": 2},
    {"id": "g", "when": "2024-13-01", "label": 5, "flag": False},
    {"id": "h", "label": "home", "flag": True, "n": 0.5},
    {"id": "i", "when": "2023-06-01T12:00:00Z", "label": "Straße", "n": -3},
    {"id": "j", "when": "2024-04-06T14:45:00Z", "label": "strasse", "flag": True, "n": 2},
]
ZONES = ["America/New_York", "Asia/Kolkata", "Pacific/Chatham"]
QUESTIONS = [
    *(
        Question(group_by=name, limit=limit)
        for name in ("label", "flag", "n", "tags")
        for limit in (1, 2, 3, 25)
    ),
    *(
        Question(group_by_time="when", granularity=granularity, time_zone=zone, limit=limit)
        for granularity in ("hour", "day", "week", "month", "year")
        for zone in ZONES
        for limit in (2, 25)
    ),
]
FAST = StreamGrant(STREAM, ("c1", "c2"), None, None, None)
ONE = StreamGrant(STREAM, ("c1",), frozenset({"id", "when", "label", "flag", "n", "tags"}))
SLOW = [
    StreamGrant(STREAM, ("c1", "c2"), None, None, frozenset("abcdefghij")),
    StreamGrant(STREAM, ("c1", "c2"), None, TimeConstraint("when", since="1900-01-01")),
]


def _loaded(store: StoreFront) -> list[tuple[str, dict[str, Any]]]:
    store.register_manifest(AGG_MANIFEST)
    live: list[tuple[str, dict[str, Any]]] = []
    for conn in ("c1", "c2", "c3"):
        store.add_connection(conn, CONNECTOR)
        rows = [{**row, "id": f"{row['id']}"} for row in ROWS]
        if conn == "c2":
            rows = rows[:6]
        store.upsert_records(conn, STREAM, rows)
        live += [(conn, row) for row in rows]
    store.delete_record("c1", STREAM, "j")  # a deleted record's values are gone
    store.delete_record("c2", STREAM, "a")
    store.upsert_records("c1", STREAM, [{"id": "k", "label": "home", "when": "2024-01-01"}])
    live = [(c, r) for c, r in live if (c, r["id"]) not in {("c1", "j"), ("c2", "a")}]
    return [*live, ("c1", {"id": "k", "label": "home", "when": "2024-01-01"})]


def _ask(store: StoreFront, grant: StreamGrant, question: Question, raw: Any = None) -> Any:
    answer = store.aggregate(Grant("g", (grant,)), STREAM, **question.arguments(), filter=raw)
    found = answer.to_dict()
    for group in found.get("groups", []):
        group.pop("query", None)
    return found


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aggregate_sql, "counts_by_values", lambda *args: False)


def test_counts_by_values_are_the_general_paths_and_the_oracles(
    store: StoreFront, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = _loaded(store)
    for grant in (FAST, ONE):
        fast = []
        for question in QUESTIONS:
            with _statements() as seen:
                fast.append(_ask(store, grant, question))
            assert _by_values(seen.seen), question
            assert fast[-1] == expected(question, grant, live, Filter(())), question
        with monkeypatch.context() as patched:
            _general(patched)
            for question, answer in zip(QUESTIONS, fast, strict=True):
                with _statements() as seen:
                    assert _ask(store, grant, question) == answer, question
                assert not _by_values(seen.seen), question


@pytest.mark.parametrize("case", ["resources", "time", "filter", "metric"])
def test_grants_that_need_records_keep_the_general_path(store: StoreFront, case: str) -> None:
    live = _loaded(store)
    grant, raw, questions = FAST, None, QUESTIONS[::3]
    if case == "resources":
        grant = SLOW[0]
    elif case == "time":
        grant = SLOW[1]
    elif case == "filter":
        raw = {"flag": True}
    else:
        questions = [
            Question("sum", "n", group_by="label"),
            Question("min", "when", group_by_time="when"),
        ]
    parsed = parse_filter(raw, SPEC, grant)
    for question in questions:
        with _statements() as seen:
            answer = _ask(store, grant, question, raw)
        assert not _by_values(seen.seen), question
        assert answer == expected(question, grant, live, parsed), question


def test_which_requests_count_by_values() -> None:
    plain = Filter(())
    filtered = parse_filter({"flag": True}, SPEC, FAST)
    assert aggregate_sql.counts_by_values("count", FAST, plain)
    assert aggregate_sql.counts_by_values("count", ONE, plain)  # fields are checked before
    assert not aggregate_sql.counts_by_values("count", FAST, filtered)
    assert not aggregate_sql.counts_by_values("sum", FAST, plain)
    for grant in SLOW:
        assert not aggregate_sql.counts_by_values("count", grant, plain)


def _aggregate_statements(statements: list[str]) -> list[str]:
    return [s for s in statements if "a_keyed" in s or "a_rows" in s or "a_spans" in s]


@pytest.mark.parametrize("granularity", ["day", "week", "month", "year", "hour"])
def test_time_buckets_are_ranges_of_the_instants_index_where_few(
    store: StoreFront, granularity: str
) -> None:
    """Rule 6: buckets counted as bound ranges of instants where the range holds few of them
    (the records span 17 months: every granularity but the hour), else per span; both the
    oracle's answer."""
    live = _loaded(store)
    for zone in ZONES:
        question = Question(group_by_time="when", granularity=granularity, time_zone=zone)
        with _statements() as seen:
            answer = _ask(store, FAST, question)
        (statement,) = _aggregate_statements(seen.seen)
        assert ("a_ranges" in statement) is (granularity != "hour"), question
        assert ("a_spans" in statement) is (granularity == "hour"), question
        assert answer == expected(question, FAST, live, Filter(())), question


def test_instants_outside_the_ranges_are_counted_again_per_span(
    store: StoreFront, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Instants written between reading the range and counting it lie outside the ranges: the
    statement sees them (`ranges_missed`) and the operation asks again per span, so the answer
    is still the oracle's (here the ranges are cut short by hand, as such a write would)."""
    from pdpp_store._ops import aggregate as aggregate_op

    live = _loaded(store)
    cut: list[int] = []

    def short(*args: Any) -> Any:
        found = bucket_ranges(*args)
        assert found is not None
        cut.append(len(found))
        return found[1:-1]

    monkeypatch.setattr(aggregate_op, "bucket_ranges", short)
    for zone in ZONES:
        question = Question(group_by_time="when", granularity="month", time_zone=zone)
        with _statements() as seen:
            answer = _ask(store, FAST, question)
        ranged, spans = _aggregate_statements(seen.seen)
        assert "a_ranges" in ranged, question
        assert "a_spans" in spans, question
        assert answer == expected(question, FAST, live, Filter(())), question
    assert cut
    assert all(n > 2 for n in cut)


@pytest.mark.parametrize("grant", [FAST, ONE, *SLOW], ids=["fast", "one", "resources", "time"])
def test_an_equality_filter_drives_from_its_value_index(
    store: StoreFront, grant: StreamGrant
) -> None:
    """Rule 8: a filter with an equality clause is driven by that clause's rows; under a grant
    of connection and stream only `records` is not read, else each match is joined to it."""
    live = _loaded(store)
    values_only = grant in (FAST, ONE)
    questions = [
        Question("sum", "n"),
        Question(),
        Question(group_by="label"),
        Question("max", "when", group_by="flag"),
        Question(group_by_time="when", granularity="week", time_zone="Asia/Kolkata"),
    ]
    for raw in (
        {"flag": True},
        {"label": {"in": ["work", "home"]}, "n": {"gt": 0}},
        {"tags": {"has": "a"}},
    ):
        parsed = parse_filter(raw, SPEC, grant)
        for question in questions:
            with _statements() as seen:
                answer = _ask(store, grant, question, raw)
            statement = seen.seen[-1]
            assert "a_drive" in statement, (question, raw)
            reads_records = re.search(r"\b(FROM|JOIN) records\b", statement) is not None
            assert reads_records is not values_only, question
            assert answer == expected(question, grant, live, parsed), (question, raw)
