"""`aggregate` (docs/contract.md §12) against the Python oracle (`_aggregates.expected`) on both
databases and both fronts: random records (instants around DST changes in several zones, in
several spellings, malformed ones, numbers, booleans, arrays, missing values), random grants
(fields, connections, resources, time constraints), random filters and questions give the
oracle's exact answer, `other_count` included; and typed errors in the contract's order."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from _aggregates import AGG_MANIFEST, CONNECTOR, STREAM, Question, exact_sum, expected
from _fronts import StoreFront
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pdpp_store import BadRequest, Forbidden, Grant, NotFound, StoreError, StreamGrant
from pdpp_store._core.filters import Filter, parse_filter
from pdpp_store._core.grants import TimeConstraint
from pdpp_store._core.manifest import Manifest, StreamSpec

_CONNECTIONS = itertools.count()
IDS = [f"r{n}" for n in range(7)]
ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Paris",
    "Australia/Lord_Howe",
    "Asia/Kolkata",
    "America/Havana",
    "Pacific/Chatham",
]
CHANGES = [
    datetime(2024, 3, 10, 7, tzinfo=UTC),  # New York springs forward
    datetime(2024, 11, 3, 6, tzinfo=UTC),  # and falls back
    datetime(2024, 3, 31, 1, tzinfo=UTC),  # Paris
    datetime(2024, 10, 27, 1, tzinfo=UTC),
    datetime(2024, 4, 6, 15, tzinfo=UTC),  # Lord Howe: half an hour
    datetime(2024, 3, 10, 5, tzinfo=UTC),  # Havana: at local midnight
    datetime(2024, 4, 6, 14, 45, tzinfo=UTC),  # Chatham: +13:45 to +12:45
    datetime(2023, 12, 31, 23, 30, tzinfo=UTC),  # a year's end
    datetime(2024, 2, 29, 22, tzinfo=UTC),  # a leap day
    datetime(1969, 12, 31, 23, tzinfo=UTC),  # before 1970
]
LABELS = ["Work", "work", "WORK", "home", "Straße", "STRASSE", "a\x00b", "\x01x", "", "y" * 257]
NUMBERS = [0, 1, 1.0, -7, 0.5, 2.25, -1.75, 12, 2**40, -(2**39), 3.5]
NUMBERS += [0.1, 0.2, -0.3, 0.7, 123456.789, 1e-20, 0.3333333333333333, -2.675, 0.30000000000000004]


@st.composite
def _instant(draw: st.DrawFn) -> Any:
    moment = draw(st.sampled_from(CHANGES)) + timedelta(minutes=draw(st.integers(-150, 150)))
    spelling = draw(st.integers(0, 5))
    if spelling == 0:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    if spelling == 1:
        shift = timedelta(minutes=draw(st.sampled_from([-300, 330, 60, 0])))
        return moment.astimezone(timezone(shift)).isoformat()
    if spelling == 2:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.123456Z")
    if spelling == 3:
        return moment.date().isoformat()
    if spelling == 4:
        return draw(st.sampled_from(["2024-13-01", "yesterday", "", "0001-01-01T00:00:00Z"]))
    return draw(st.sampled_from([None, 17, ["2024-03-10T07:00:00Z"], True]))


@st.composite
def _record(draw: st.DrawFn, record_id: str) -> dict[str, Any]:
    record: dict[str, Any] = {"id": record_id}
    chosen: dict[str, st.SearchStrategy[Any]] = {
        "when": _instant(),
        "n": st.sampled_from(NUMBERS) | st.sampled_from([None, "12", [1, 2], True]),
        "flag": st.booleans() | st.none(),
        "label": st.sampled_from(LABELS) | st.sampled_from([None, 5]),
        "tags": st.lists(st.sampled_from(["a", "b", 1]), max_size=3) | st.sampled_from(["a", 1]),
        "secret": st.sampled_from(["canary", "other"]),
    }
    for name, values in chosen.items():
        if draw(st.integers(0, 4)) < 4 or name == "when":  # mostly present
            record[name] = draw(values)
    return record


def _random_record(rnd: Any, record_id: str) -> dict[str, Any]:
    """A record drawn with a seeded `random.Random`: broader than what hypothesis favours (it
    prefers small, repeated values), so the groups and buckets are many and varied."""
    moment = rnd.choice(CHANGES) + timedelta(minutes=rnd.randint(-200, 200))
    spellings = [
        moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        moment.astimezone(timezone(timedelta(minutes=rnd.choice([-300, 330, 60])))).isoformat(),
        moment.strftime("%Y-%m-%dT%H:%M:%S.654321Z"),
        moment.date().isoformat(),
        rnd.choice(["2024-13-01", "", None, 17, ["2024-03-10T07:00:00Z"], "0001-01-01T00:00:00Z"]),
    ]
    record: dict[str, Any] = {"id": record_id, "when": rnd.choice(spellings[:4] * 3 + spellings)}
    options: dict[str, list[Any]] = {
        "n": [*NUMBERS, None, "12", [1, 2], True],
        "flag": [True, False, None],
        "label": [*LABELS, None, 5],
        "tags": [["a"], ["a", "b"], [1, "a"], [], "a", 1],
        "secret": ["canary", "other"],
    }
    for name, values in options.items():
        if rnd.random() < 0.85:
            record[name] = rnd.choice(values)
    return record


_QUESTIONS = st.one_of(
    st.builds(Question),
    st.builds(
        Question,
        metric=st.sampled_from(["sum", "min", "max"]),
        field=st.just("n"),
    ),
    st.builds(Question, metric=st.sampled_from(["min", "max"]), field=st.just("when")),
    st.builds(Question, metric=st.just("count_distinct"), field=st.sampled_from(["label", "n"])),
    st.builds(
        Question,
        metric=st.sampled_from(["count", "sum", "max"]),
        field=st.sampled_from(["n"]),
        group_by=st.sampled_from(["label", "flag", "n", "tags"]),
        limit=st.integers(1, 4),
    ).map(lambda q: q if q.metric != "count" else Question(group_by=q.group_by, limit=q.limit)),
    st.builds(
        Question,
        metric=st.sampled_from(["count", "min"]),
        group_by_time=st.just("when"),
        granularity=st.sampled_from(["hour", "day", "week", "month", "year"]),
        time_zone=st.sampled_from(ZONES),
        limit=st.integers(1, 6),
    ).map(
        lambda q: (
            q
            if q.metric == "count"
            else Question("min", "when", None, "when", q.granularity, q.time_zone, q.limit)
        )
    ),
)


def _every_kind(zone: str, limit: int) -> list[Question]:
    """One question of each kind, so every example asks each of them."""
    return [
        Question(),
        Question("sum", "n"),
        Question("min", "n"),
        Question("max", "when"),
        Question("count_distinct", "label"),
        Question(group_by="label", limit=limit),
        Question("sum", "n", group_by="flag", limit=limit),
        Question("max", "n", group_by="tags", limit=limit),
        Question("min", "when", group_by="n", limit=limit),
        *(
            Question(group_by_time="when", granularity=granularity, time_zone=zone, limit=limit)
            for granularity in ("hour", "day", "week", "month", "year")
        ),
        Question("max", "n", group_by_time="when", time_zone=zone, limit=limit),
    ]


_FILTERS = st.sampled_from(
    [
        None,
        {"flag": True},
        {"label": "work"},
        {"label": {"in": ["home", "straße"]}},
        {"n": {"gt": 0}},
        {"when": {"gte": "2024-03-10T06:00:00Z", "lt": "2024-11-03T06:30:00Z"}},
        {"tags": {"has": "a"}},
    ]
)


@st.composite
def _grant(draw: st.DrawFn, connections: list[str]) -> StreamGrant:
    """Mostly generous grants (so most questions have an answer to check), sometimes narrow."""
    names = ["id", "when", "n", "flag", "label", "tags", "secret"]
    fields = None
    if draw(st.integers(0, 3)) == 3:
        fields = draw(st.sets(st.sampled_from(names)).map(frozenset))
    instances = list(connections)
    if draw(st.integers(0, 3)) == 3:
        instances = draw(st.lists(st.sampled_from(connections), unique=True, max_size=2))
    resources = None
    if draw(st.integers(0, 3)) == 3:
        resources = draw(st.sets(st.sampled_from(IDS), max_size=5).map(frozenset))
    time = draw(
        st.none()
        | st.builds(
            TimeConstraint,
            field=st.just("when"),
            since=st.sampled_from([None, "2024-03-10T06:00:00Z", "2024-01-01"]),
            until=st.sampled_from([None, "2024-11-03T06:00:00Z"]),
        )
    )
    return StreamGrant(STREAM, tuple(instances), fields, time, resources)


def _answer(store: StoreFront, grant: Grant, question: Question, filter: Any) -> Any:
    try:
        return store.aggregate(grant, STREAM, **question.arguments(), filter=filter).to_dict()
    except StoreError as exc:
        return (exc.code, exc.param)


def _strip(answer: Any) -> Any:
    if isinstance(answer, dict) and "groups" in answer:
        answer = {
            **answer,
            "groups": [
                {k: v for k, v in group.items() if k != "query"} for group in answer["groups"]
            ],
        }
    return answer


def _oracle(
    question: Question, stream_grant: StreamGrant, live: list[tuple[str, dict[str, Any]]], raw: Any
) -> Any:
    named = [("field", question.field), ("group_by", question.group_by)]
    named.append(("group_by_time", question.group_by_time))
    for param, name in named:
        if name is not None and not stream_grant.allows_field(name):
            return ("field_not_granted", param)
    spec = Manifest.from_dict(AGG_MANIFEST).streams[0]
    if not stream_grant.instance_ids:  # no covered connection: no manifest declares anything
        spec = StreamSpec(STREAM, ("id",), None, {})
    try:
        parsed = parse_filter(raw, spec, stream_grant)
    except StoreError as exc:
        return (exc.code, exc.param)
    if not stream_grant.instance_ids:
        return ("invalid_aggregate", "metric" if question.metric == "count" else "field")
    return expected(question, stream_grant, live, parsed)


def test_aggregates_are_the_oracles(store: StoreFront) -> None:
    store.register_manifest(AGG_MANIFEST)

    @settings(
        max_examples=12,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
        phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking is slow here
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        connections = [f"a{next(_CONNECTIONS)}", f"a{next(_CONNECTIONS)}"]
        live: list[tuple[str, dict[str, Any]]] = []
        rnd = data.draw(st.randoms(use_true_random=False))
        for conn in connections:
            store.add_connection(conn, CONNECTOR)
            if data.draw(st.booleans()):
                rows = tuple(_random_record(rnd, record_id) for record_id in IDS)
            else:
                rows = data.draw(st.tuples(*(_record(record_id) for record_id in IDS)))
            deleted = data.draw(st.sets(st.sampled_from(IDS), max_size=2))
            store.upsert_records(conn, STREAM, list(rows))
            for record_id in sorted(deleted):
                store.delete_record(conn, STREAM, record_id)
            live += [(conn, row) for row in rows if row["id"] not in deleted]
        for _ in range(2):
            stream_grant = data.draw(_grant(connections))
            grant = Grant("g", (stream_grant,))
            raw = data.draw(_FILTERS)
            zone = data.draw(st.sampled_from(ZONES))
            limit = data.draw(st.sampled_from([25, 3, 1]))
            questions = [data.draw(_QUESTIONS), *_every_kind(zone, limit)]
            for question in questions:
                want = _oracle(question, stream_grant, live, raw)
                got = _strip(_answer(store, grant, question, raw))
                assert got == want, (question, raw)

    run()


# ---------------------------------------------------------------- exact cases


def _mail(store: StoreFront, rows: list[dict[str, Any]], conn: str = "c1") -> Grant:
    store.register_manifest(AGG_MANIFEST)
    store.add_connection(conn, CONNECTOR)
    store.upsert_records(conn, STREAM, rows)
    return Grant.owner(conn, STREAM)


def test_buckets_follow_dst_in_new_york(store: StoreFront) -> None:
    """The hour New York repeats in November is two buckets; its days have 23 and 25 hours."""
    rows = [
        {"id": "a", "when": "2024-11-03T05:30:00Z"},  # 01:30 EDT
        {"id": "b", "when": "2024-11-03T06:30:00Z"},  # 01:30 EST
        {"id": "c", "when": "2024-11-04T04:59:59Z"},  # 23:59:59 EST on the 3rd
        {"id": "d", "when": "2024-03-10T06:59:00Z"},  # 01:59 EST
        {"id": "e", "when": "2024-03-10T07:00:00Z"},  # 03:00 EDT
        {"id": "f", "when": "2024-03-10T04:59:00Z"},  # 23:59 EST on the 9th
    ]
    grant = _mail(store, rows)
    hours = store.aggregate(
        grant, STREAM, group_by_time="when", granularity="hour", time_zone="America/New_York"
    ).to_dict()
    keys = [group["key"] for group in hours["groups"]]
    assert keys == [
        "2024-03-09T23:00-05:00",
        "2024-03-10T01:00-05:00",
        "2024-03-10T03:00-04:00",
        "2024-11-03T01:00-04:00",
        "2024-11-03T01:00-05:00",
        "2024-11-03T23:00-05:00",
    ]
    days = store.aggregate(
        grant, STREAM, group_by_time="when", granularity="day", time_zone="America/New_York"
    ).to_dict()
    assert [(g["key"], g["value"]) for g in days["groups"]] == [
        ("2024-03-09", 1),
        ("2024-03-10", 2),
        ("2024-11-03", 3),
    ]
    query = days["groups"][2]["query"]
    assert query["operation"] == "query_records"
    assert query["arguments"]["filter"] == {
        "when": {"gte": "2024-11-03T04:00:00Z", "lt": "2024-11-04T05:00:00Z"}
    }


def test_weeks_start_on_monday_and_limit_counts_the_rest(store: StoreFront) -> None:
    rows = [{"id": f"r{n}", "when": f"2024-01-{n + 1:02d}T12:00:00Z"} for n in range(20)]
    grant = _mail(store, rows)
    answer = store.aggregate(grant, STREAM, group_by_time="when", granularity="week", limit=2)
    shown = answer.to_dict()
    assert [(g["key"], g["value"]) for g in shown["groups"]] == [
        ("2024-01-01", 7),
        ("2024-01-08", 7),
    ]
    assert shown["other_count"] == 6


def test_sums_are_exact_past_64_bits(store: StoreFront) -> None:
    rows: list[dict[str, Any]] = [{"id": f"r{n}", "n": 2**62 + n} for n in range(4)] + [
        {"id": "h", "n": 0.5}
    ]
    grant = _mail(store, rows)
    assert store.aggregate(grant, STREAM, metric="sum", field="n").value == 2**64 + 6.5
    rows2 = [{"id": f"r{n}", "n": 2**62} for n in range(4)]
    store.upsert_records("c1", STREAM, rows2)
    store.delete_record("c1", STREAM, "h")
    assert store.aggregate(grant, STREAM, metric="sum", field="n").value == 2**64


def _exact(value: float) -> Decimal:
    return Decimal(repr(value))


def _shown(total: Decimal) -> int | float:
    return int(total) if total == total.to_integral_value() else float(total)


def _summed_exactly(value: float) -> bool:
    """What docs/decisions.md promises sums exactly on every database: a number whose shortest
    decimal has at most 22 decimal places, below 2**53 unless whole, and not one of 16
    significant digits whose mantissa is 2**53 or more."""
    exact = _exact(value)
    _, digits, exponent = exact.normalize().as_tuple()
    assert isinstance(exponent, int)
    if exact == exact.to_integral_value():
        return abs(exact) < 2**62
    mantissa = int("".join(map(str, digits)))
    return exponent >= -22 and abs(exact) < 2**53 and not (len(digits) == 16 and mantissa >= 2**53)


_DECIMALS = st.builds(
    lambda mantissa, scale: float(Decimal(mantissa).scaleb(-scale)),
    st.integers(-(10**17), 10**17) | st.integers(-999, 999),
    st.integers(0, 22),
).filter(_summed_exactly)


def test_sums_of_fractions_are_exact(store: StoreFront) -> None:
    """A sum is the exact decimal sum of the numbers as written (what Postgres's NUMERIC
    holds), on both databases: never a sum of doubles. Each example also adds the number that
    makes the exact sum whole, which any rounding on the way would miss."""
    store.register_manifest(AGG_MANIFEST)

    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(numbers=st.lists(_DECIMALS, min_size=1, max_size=12))
    def run(numbers: list[float]) -> None:
        conn = f"x{next(_CONNECTIONS)}"
        store.add_connection(conn, CONNECTOR)
        total = exact_sum(_exact(n) for n in numbers)
        closing = float(total.to_integral_value() - total)
        if not _summed_exactly(closing):
            closing = 0.0
        rows = [{"id": f"r{i}", "n": n, "flag": i % 2 == 0} for i, n in enumerate(numbers)]
        rows += [{"id": "closing", "flag": None}]
        grant = Grant.owner(conn, STREAM)
        store.upsert_records(conn, STREAM, rows)
        got = store.aggregate(grant, STREAM, metric="sum", field="n").value
        assert got == _shown(total), (numbers, total)
        store.upsert_records(conn, STREAM, [{"id": "closing", "n": closing}])
        whole = exact_sum([total, _exact(closing)])
        got = store.aggregate(grant, STREAM, metric="sum", field="n").value
        assert got == _shown(whole), whole
        assert isinstance(got, int) == (whole == int(whole)), whole
        grouped = store.aggregate(grant, STREAM, metric="sum", field="n", group_by="flag")
        assert grouped.groups is not None
        sums: dict[Any, Decimal] = {None: _exact(closing)}
        for i, n in enumerate(numbers):
            sums[i % 2 == 0] = exact_sum([sums.get(i % 2 == 0, Decimal(0)), _exact(n)])
        order = sorted(sums.items(), key=lambda item: (-item[1], _FLAG_ORDER[item[0]]))
        want = [(key, _shown(value)) for key, value in order]
        assert [(group.key, group.value) for group in grouped.groups] == want, sums

    run()


_FLAG_ORDER = {False: 0, True: 1, None: 2}
"""The order of equal sums: by the key's kind (boolean before null), then its text."""


def test_keys_are_comparable_forms(store: StoreFront) -> None:
    rows: list[dict[str, Any]] = [
        {"id": "a", "label": "Work"},
        {"id": "b", "label": "WORK"},
        {"id": "c", "label": "home"},
        {"id": "d"},
        {"id": "e", "label": None},
    ]
    grant = _mail(store, rows)
    shown = store.aggregate(grant, STREAM, group_by="label").to_dict()
    # ties by key: kinds in the order boolean, null, number, string
    assert [(g["key"], g["value"]) for g in shown["groups"]] == [
        (None, 2),
        ("work", 2),
        ("home", 1),
    ]
    assert shown["groups"][1]["query"]["arguments"] == {
        "stream": STREAM,
        "filter": {"label": "work"},
    }
    assert shown["groups"][0]["query"] is None


ERRORS: list[tuple[dict[str, Any], type[StoreError], str, str]] = [
    ({"metric": "avg"}, BadRequest, "invalid_aggregate", "metric"),
    ({"metric": "sum"}, BadRequest, "invalid_aggregate", "field"),
    ({"metric": "count", "field": "n"}, BadRequest, "invalid_aggregate", "field"),
    ({"metric": "sum", "field": "label"}, BadRequest, "invalid_aggregate", "field"),
    ({"group_by": "when"}, BadRequest, "invalid_aggregate", "group_by"),
    ({"group_by_time": "label"}, BadRequest, "invalid_aggregate", "group_by_time"),
    (
        {"group_by": "label", "group_by_time": "when"},
        BadRequest,
        "invalid_aggregate",
        "group_by_time",
    ),
    (
        {"group_by_time": "when", "granularity": "minute"},
        BadRequest,
        "invalid_aggregate",
        "granularity",
    ),
    (
        {"group_by_time": "when", "time_zone": "Mars/Olympus"},
        BadRequest,
        "invalid_aggregate",
        "time_zone",
    ),
    ({"time_zone": "../../etc/passwd"}, BadRequest, "invalid_aggregate", "time_zone"),
    ({"limit": 0}, BadRequest, "invalid_request", "limit"),
    ({"limit": 101}, BadRequest, "invalid_request", "limit"),
    ({"limit": True}, BadRequest, "invalid_request", "limit"),
    ({"metric": "sum", "field": "secret"}, Forbidden, "field_not_granted", "field"),
    ({"group_by": "nope"}, Forbidden, "field_not_granted", "group_by"),
    ({"filter": {"secret": "x"}}, Forbidden, "field_not_granted", "filter"),
    ({"filter": {"label": {"gt": 1}}}, BadRequest, "invalid_filter", "filter"),
    ({"filter": "{"}, BadRequest, "invalid_filter", "filter"),
    ({"connection_id": "elsewhere"}, NotFound, "connection_not_found", "connection_id"),
]


@pytest.mark.parametrize(
    ("arguments", "error", "code", "param"),
    ERRORS,
    ids=[f"{e[2]}-{e[3]}-{n}" for n, e in enumerate(ERRORS)],
)
def test_bad_input_is_a_typed_error(
    store: StoreFront, arguments: dict[str, Any], error: type[StoreError], code: str, param: str
) -> None:
    store.register_manifest(AGG_MANIFEST)
    store.add_connection("c1", CONNECTOR)
    names = frozenset({"id", "when", "n", "flag", "label", "tags"})
    grant = Grant("g", (StreamGrant(STREAM, ("c1",), names),))
    with pytest.raises(error) as raised:
        store.aggregate(grant, STREAM, **arguments)
    assert (raised.value.code, raised.value.param) == (code, param)


def test_an_ungranted_stream_is_refused(store: StoreFront) -> None:
    store.register_manifest(AGG_MANIFEST)
    store.add_connection("c1", CONNECTOR)
    with pytest.raises(Forbidden) as raised:
        store.aggregate(Grant.owner("c1", "other"), STREAM)
    assert raised.value.code == "grant_stream_not_allowed"


def test_filters_narrow_and_leave_no_trace_of_parse(store: StoreFront) -> None:
    rows = [{"id": f"r{n}", "n": n, "flag": n % 2 == 0} for n in range(10)]
    grant = _mail(store, rows)
    value = store.aggregate(grant, STREAM, metric="sum", field="n", filter={"flag": True}).value
    assert value == 0 + 2 + 4 + 6 + 8
    text = store.aggregate(grant, STREAM, metric="sum", field="n", filter='{"n": {"gt": 6}}')
    assert text.value == 7 + 8 + 9
    assert isinstance(Filter(), Filter)
