"""The filter vocabulary (§11.1): the parser accepts exactly the valid filters, refuses the rest
with a typed error naming the field, never tells an ungranted field's declaration, and puts
values in the comparable form that the oracle `matches` (and later the SQL) compares."""

from __future__ import annotations

import json
import math
from datetime import UTC
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdpp_store._core.errors import BadRequest, Forbidden, StoreError
from pdpp_store._core.filters import (
    MAX_ARRAY_ELEMENTS,
    MAX_CLAUSES,
    MAX_COMPARABLE_CHARS,
    Comparable,
    Equals,
    Filter,
    Has,
    OneOf,
    Range,
    StoredComparable,
    comparable,
    comparable_elements,
    comparable_rows,
    filter_operators,
    matches,
    parse_filter,
)
from pdpp_store._core.folding import fold
from pdpp_store._core.grants import StreamGrant, normalize_instant
from pdpp_store._core.manifest import StreamSpec

SPEC = StreamSpec.from_dict(
    {
        "name": "messages",
        "primary_key": ["id"],
        "schema": {
            "properties": {
                "id": {"type": "string"},
                "subject": {"type": ["string", "null"]},
                "sent_at": {"type": "string", "format": "date-time"},
                "size": {"type": ["integer", "null"]},
                "score": {"type": "number"},
                "seen": {"type": "boolean"},
                "labels": {"type": "array"},
                "loose": {},
                "body": {"type": "string", "contentEncoding": "base64"},
                "meta": {"type": "object"},
            }
        },
        "query": {
            "range_filters": {
                "sent_at": ["gte", "gt", "lte", "lt"],
                "size": ["gte", "lt"],
                "score": ["gt", "gte", "lt", "lte"],
            }
        },
    },
    "streams[0]",
)
ALL = StreamGrant("messages")
SCALAR_FIELDS = ("id", "subject", "sent_at", "size", "score", "seen", "loose")


def _parse(raw: object, scope: Any = ALL) -> Filter:
    return parse_filter(raw, SPEC, scope)


def _refused(raw: object, scope: Any = ALL) -> StoreError:
    with pytest.raises(StoreError) as raised:
        _parse(raw, scope)
    error = raised.value
    assert error.param == "filter"
    return error


# -- comparable form ---------------------------------------------------------------------------


def test_comparable_forms() -> None:
    assert comparable(None) == Comparable("null", None)
    assert comparable(True) == Comparable("boolean", True)
    assert comparable(1) == comparable(1.0) == Comparable("number", 1)
    assert comparable(True) != comparable(1)
    assert comparable(1.5) == Comparable("number", 1.5)
    assert comparable(2**63) == Comparable("number", float(2**63))
    assert comparable(10**400) is None
    assert comparable(math.nan) is None
    assert comparable(math.inf) is None
    assert comparable("ÉCOLE") == Comparable("string", "école", None)
    assert comparable("2024-03-01T10:00:00+01:00") == Comparable(
        "string", "2024-03-01t10:00:00+01:00", "2024-03-01T09:00:00.000000Z"
    )
    assert comparable("x" * MAX_COMPARABLE_CHARS) is not None
    assert comparable("x" * (MAX_COMPARABLE_CHARS + 1)) is None
    assert comparable({"a": 1}) is None
    assert comparable([1]) is None


def test_array_elements_are_scalars_once_in_order_and_bounded() -> None:
    assert comparable_elements(["A", "a", 1, 1.0, True, None, [2], {"x": 3}]) == (
        Comparable("string", "a", None),
        Comparable("number", 1),
        Comparable("boolean", True),
        Comparable("null", None),
    )
    assert comparable_elements("abc") == ()
    many = comparable_elements(list(range(MAX_ARRAY_ELEMENTS + 10)))
    assert len(many) == MAX_ARRAY_ELEMENTS


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=300)
)


@given(JSON_SCALARS)
def test_comparable_form_survives_json_and_is_stable(value: Any) -> None:
    """What the write path stores and what a filter value becomes agree after a JSON trip, and
    the comparable form of a comparable value is itself (idempotent)."""
    try:
        text = json.dumps(value)
    except ValueError:
        return
    assert comparable(json.loads(text)) == comparable(value)
    form = comparable(value)
    if form is not None and form.kind in ("number", "boolean", "null"):
        assert comparable(form.value) == form
    if form is not None and form.kind == "string":
        assert isinstance(form.value, str)
        again = comparable(form.value)
        assert again is not None
        assert again.value == form.value


@given(st.integers(min_value=-(2**53), max_value=2**53))
def test_an_integer_and_its_float_are_one_number(n: int) -> None:
    assert comparable(n) == comparable(float(n))


# -- the parser accepts exactly the valid filters -----------------------------------------------

INSTANTS = st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat())
VALUES_FOR: dict[str, st.SearchStrategy[Any]] = {
    "id": st.text(max_size=40),
    "subject": st.none() | st.text(max_size=40),
    "sent_at": st.text(max_size=40),
    "size": st.none() | st.integers(min_value=-(2**62), max_value=2**62),
    "score": st.integers(-1000, 1000) | st.floats(allow_nan=False, allow_infinity=False),
    "seen": st.booleans(),
    "loose": JSON_SCALARS.filter(lambda v: not isinstance(v, str) or len(v) <= 256),
}
RANGE_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "sent_at": INSTANTS,
    "size": st.integers(-(2**40), 2**40),
    "score": st.floats(allow_nan=False, allow_infinity=False, min_value=-1e9, max_value=1e9),
}


def _clause(name: str) -> st.SearchStrategy[tuple[str, Any]]:
    options: list[st.SearchStrategy[Any]] = []
    if name in VALUES_FOR:
        values = VALUES_FOR[name]
        options += [values, st.lists(values, min_size=1, max_size=5).map(lambda v: {"in": v})]
    if name == "labels":
        options.append(st.text(max_size=10).map(lambda v: {"has": v}))
    if name in SPEC.range_filters:
        ops = SPEC.range_filters[name]
        options.append(
            st.dictionaries(st.sampled_from(ops), RANGE_VALUES[name], min_size=1, max_size=4)
        )
    return st.tuples(st.just(name), st.one_of(options))


VALID_FILTERS = st.lists(
    st.sampled_from([*SCALAR_FIELDS, "labels"]), unique=True, max_size=8
).flatmap(lambda names: st.tuples(*(_clause(n) for n in names)).map(dict))


@given(VALID_FILTERS, st.booleans())
@settings(max_examples=300)
def test_every_valid_filter_parses_as_object_and_as_json_text(
    raw: dict[str, Any], text: bool
) -> None:
    parsed = _parse(json.dumps(raw) if text else raw)
    assert parsed.fields == tuple(sorted(raw))
    assert parsed == _parse(raw)
    assert parsed.fingerprint == _parse(raw).fingerprint


INVALID_CLAUSES: list[tuple[str, Any]] = [
    ("nope", "x"),  # undeclared
    ("body", "x"),  # binary
    ("meta", "x"),  # an object holds no scalars
    ("labels", "x"),  # eq on an array field
    ("subject", {"has": "x"}),  # has on a scalar field
    ("subject", {"gte": "2024-01-01"}),  # no range declared
    ("size", {"gt": 1}),  # operator not declared for it
    ("size", "12"),  # wrong type
    ("size", 1.5),  # not an integer
    ("seen", 1),
    ("id", None),  # not nullable
    ("sent_at", {"gte": "yesterday"}),
    ("sent_at", {"gte": 5}),  # a number on a string field
    ("size", {"gte": "2024-01-01"}),  # a date-time on an integer field
    ("score", {"gt": 1, "lt": "2024-01-01"}),
    ("score", {"gt": True}),
    ("score", {"gt": None}),
    ("score", {"between": [1, 2]}),
    ("score", {"in": [1], "gt": 0}),
    ("score", {}),
    ("score", [1, 2]),
    ("score", {"in": []}),
    ("score", {"in": list(range(101))}),
    ("score", {"in": [[1]]}),
    ("score", {"in": "1"}),
    ("labels", {"has": ["x"]}),
    ("subject", "x" * (MAX_COMPARABLE_CHARS + 1)),
    ("size", 10**400),
]


@pytest.mark.parametrize(("name", "clause"), INVALID_CLAUSES)
def test_an_invalid_clause_is_invalid_filter_naming_the_field(name: str, clause: Any) -> None:
    error = _refused({"id": "ok", name: clause})
    assert isinstance(error, BadRequest)
    assert error.code == "invalid_filter"
    assert repr(name) in error.message


@given(VALID_FILTERS, st.sampled_from(INVALID_CLAUSES))
@settings(max_examples=100)
def test_one_invalid_clause_spoils_any_valid_filter(
    raw: dict[str, Any], bad: tuple[str, Any]
) -> None:
    raw = {k: v for k, v in raw.items() if k != bad[0]} | {bad[0]: bad[1]}
    assert _refused(raw).code == "invalid_filter"


@pytest.mark.parametrize(
    "raw",
    [
        [],
        "[]",
        "null",
        "{",
        '{"a": NaN}',
        '{"size": Infinity}',
        '{"id": "a", "id": "b"}',
        "x" * 70_000,
        {"": 1},
        {"a\x00b": 1},
        {"a" * 1025: 1},
        {1: 1, "a": 2},
        "[" * 60_000,
    ],
)
def test_a_malformed_filter_is_invalid_filter(raw: object) -> None:
    assert _refused(raw).code == "invalid_filter"


def test_limits() -> None:
    names = [f"f{i}" for i in range(MAX_CLAUSES + 1)]
    spec = StreamSpec.from_dict(
        {
            "name": "wide",
            "primary_key": ["f0"],
            "schema": {"properties": {n: {"type": "integer"} for n in names}},
        },
        "streams[0]",
    )
    assert len(parse_filter(dict.fromkeys(names[:-1], 1), spec, ALL).clauses) == MAX_CLAUSES
    with pytest.raises(BadRequest, match="17 clauses"):
        parse_filter(dict.fromkeys(names, 1), spec, ALL)
    widest = _parse({"size": {"in": list(range(100))}}).clauses[0]
    assert isinstance(widest, OneOf)
    assert len(widest.values) == 100


def test_no_filter_and_the_empty_filter_are_one_filter() -> None:
    assert _parse(None) == _parse({}) == _parse("{}") == Filter()
    assert not Filter()
    assert _parse(None).fingerprint == Filter().fingerprint


# -- the grant comes before the manifest --------------------------------------------------------

NARROW = StreamGrant("messages", fields=frozenset({"id", "subject"}))


@pytest.mark.parametrize(
    "clause",
    [
        {"size": 1},  # declared, right type
        {"size": "wrong type"},  # declared, wrong type
        {"size": {"gt": 1}},  # declared, undeclared operator
        {"nope": 1},  # undeclared
        {"body": "x"},  # binary
    ],
)
def test_an_ungranted_field_is_refused_alike_whatever_its_declaration(
    clause: dict[str, Any],
) -> None:
    (name,) = clause
    error = _refused({"subject": "hello"} | clause, NARROW)
    assert isinstance(error, Forbidden)
    assert error.code == "field_not_granted"
    assert error.message == (f"filter on {name!r}: the field is not granted for stream 'messages'")
    assert error.details == {}


def test_shape_errors_do_not_depend_on_the_grant_or_the_manifest() -> None:
    for scope in (ALL, NARROW):
        for name in ("size", "nope"):
            error = _refused({name: {"in": []}}, scope)
            assert error.code == "invalid_filter"
            assert error.message == f"filter on {name!r}: `in` takes a list of 1 to 100 values"


def test_the_error_does_not_depend_on_the_order_of_the_keys() -> None:
    raw = {"zeta": {"in": []}, "size": "wrong", "alpha": {"bad": 1}}
    first = _refused(raw)
    assert "'alpha'" in first.message
    assert _refused(dict(reversed(raw.items()))).message == first.message


def test_the_first_ungranted_field_by_name_is_named() -> None:
    error = _refused({"zeta": 1, "size": 1, "alpha": 1}, NARROW)
    assert "'alpha'" in error.message


# -- canonical form and fingerprint -------------------------------------------------------------


def test_equivalent_filters_share_a_fingerprint_and_different_ones_do_not() -> None:
    same = [
        {"subject": "Hello", "size": 1},
        '{"size": 1.0, "subject": "HELLO"}',
        {"size": {"in": [1, 1.0]}, "subject": "hello"},
    ]
    prints = {_parse(raw).fingerprint for raw in same}
    assert len(prints) == 1
    assert _parse({"size": {"in": [2, 1, 1.0]}}) == _parse({"size": {"in": [1, 2]}})
    others = [
        {"subject": "hello"},
        {"subject": "hello", "size": 2},
        {"subject": "hello", "size": {"in": [1, 2]}},
        {"subject": "hello", "size": {"gte": 1}},
        {"subject": "hello", "size": None},
        {"subject": "1", "size": 1},
    ]
    assert len({_parse(raw).fingerprint for raw in others} | prints) == len(others) + 1


# -- the oracle ---------------------------------------------------------------------------------


def test_equality_semantics() -> None:
    f = _parse({"subject": "Café"})
    assert matches(f, {"subject": "CAFÉ"})
    assert matches(f, {"subject": "café"})
    assert not matches(f, {"subject": "cafe"})
    assert not matches(f, {})
    assert not matches(f, {"subject": ["café"]})
    null = _parse({"subject": None})
    assert matches(null, {"subject": None})
    assert not matches(null, {})
    assert not matches(null, {"subject": ""})
    one = _parse({"size": 1})
    assert matches(one, {"size": 1.0})
    assert not matches(one, {"size": True})
    assert not matches(one, {"size": "1"})
    loose = _parse({"loose": True})
    assert matches(loose, {"loose": True})
    assert not matches(loose, {"loose": 1})
    long = "x" * (MAX_COMPARABLE_CHARS + 1)
    assert not matches(_parse({"subject": "x" * MAX_COMPARABLE_CHARS}), {"subject": long})


def test_in_and_has() -> None:
    f = _parse({"size": {"in": [1, 3]}, "labels": {"has": "Inbox"}})
    assert matches(f, {"size": 3, "labels": ["work", "INBOX"]})
    assert not matches(f, {"size": 2, "labels": ["inbox"]})
    assert not matches(f, {"size": 1, "labels": "inbox"})
    assert not matches(f, {"size": 1, "labels": [["inbox"]]})
    assert matches(_parse({"labels": {"has": None}}), {"labels": [None]})


def test_ranges_compare_instants_and_numbers() -> None:
    f = _parse({"sent_at": {"gte": "2024-03-01", "lt": "2024-04-01T00:00:00+00:00"}})
    assert matches(f, {"sent_at": "2024-03-01T00:00:00Z"})
    assert matches(f, {"sent_at": "2024-04-01T01:59:00+02:00"})  # 23:59 UTC on March 31st
    assert not matches(f, {"sent_at": "2024-04-01T00:00:00Z"})
    assert not matches(f, {"sent_at": "not a date"})
    assert not matches(f, {"sent_at": None})
    assert not matches(f, {"sent_at": 20240315})
    n = _parse({"score": {"gt": 1, "lte": 2.5}})
    assert matches(n, {"score": 2.5})
    assert matches(n, {"score": 2})
    assert not matches(n, {"score": 1})
    assert not matches(n, {"score": True})
    assert not matches(n, {"score": "2"})
    half = _parse({"size": {"gte": 1.5}})
    assert matches(half, {"size": 2})
    assert not matches(half, {"size": 1})
    big = _parse({"size": {"gte": 2**62}})
    assert matches(big, {"size": 2**62})
    assert not matches(big, {"size": 2**62 - 1})
    assert not matches(big, {"size": 10**400})  # no comparable form: never matches
    clause = _parse({"size": {"lt": 5}}).clauses[0]
    assert isinstance(clause, Range)
    assert clause.kind == "number"


@given(
    st.integers(-50, 50),
    st.integers(-50, 50),
    st.integers(-60, 60) | st.floats(-60, 60),
)
def test_a_numeric_range_is_the_interval(low: int, high: int, x: float) -> None:
    f = _parse({"score": {"gte": low, "lt": high}})
    assert matches(f, {"score": x}) == (low <= x < high)


@given(VALUES_FOR["subject"].filter(lambda v: v is not None), st.text(max_size=40))
def test_string_equality_is_equality_of_folds(wanted: str, stored: str) -> None:
    f = _parse({"subject": wanted})
    assert matches(f, {"subject": stored}) == (fold(stored) == fold(wanted))
    assert matches(f, {"subject": wanted.upper()}) == (fold(wanted.upper()) == fold(wanted))


@given(INSTANTS, INSTANTS)
def test_an_instant_range_orders_like_the_instants(bound: str, stored: str) -> None:
    f = _parse({"sent_at": {"gt": bound}})
    a, b = normalize_instant(stored), normalize_instant(bound)
    assert a is not None
    assert b is not None
    assert matches(f, {"sent_at": stored}) == (a > b)


@given(VALID_FILTERS, st.dictionaries(st.sampled_from([*SCALAR_FIELDS, "labels"]), JSON_SCALARS))
@settings(max_examples=200)
def test_in_is_the_union_of_equalities(raw: dict[str, Any], record: dict[str, Any]) -> None:
    """Each clause of a parsed filter decides on its own, and the filter is their AND."""
    parsed = _parse(raw)
    alone = [matches(Filter((clause,)), record) for clause in parsed.clauses]
    assert matches(parsed, record) == all(alone)
    for clause in parsed.clauses:
        if isinstance(clause, OneOf):
            each = [matches(Filter((Equals(clause.field, v),)), record) for v in clause.values]
            assert matches(Filter((clause,)), record) == any(each)


# -- what discovery shows, and what the write path stores ---------------------------------------


def test_filter_operators_under_the_grant() -> None:
    assert filter_operators(SPEC, NARROW) == {"id": ("eq", "in"), "subject": ("eq", "in")}
    every = filter_operators(SPEC, ALL)
    assert every["sent_at"] == ("eq", "in", "gt", "gte", "lt", "lte")
    assert every["size"] == ("eq", "in", "gte", "lt")
    assert every["labels"] == ("has",)
    assert every["loose"] == ("eq", "in", "has")
    assert "body" not in every
    assert "meta" not in every  # an object: nothing to compare


EXAMPLE_VALUE: dict[str, Any] = {
    "id": "x",
    "subject": "x",
    "sent_at": "2024-01-01",
    "size": 1,
    "score": 1,
    "seen": True,
    "labels": "x",
    "loose": 1,
}


def test_filter_operators_are_what_the_parser_accepts() -> None:
    every = filter_operators(SPEC, ALL)
    for name in [*SPEC.declared, "nope"]:
        value = EXAMPLE_VALUE.get(name, "x")
        for op in ("eq", "in", "has", "gt", "gte", "lt", "lte"):
            clause = {
                "eq": value,
                "in": {"in": [value]},
                "has": {"has": value},
            }.get(op, {op: value})
            try:
                _parse({name: clause})
                accepted = True
            except BadRequest:
                accepted = False
            assert accepted == (op in every.get(name, ())), (name, op)


def _rows_match(parsed: Filter, rows: tuple[StoredComparable, ...]) -> bool:
    """A filter decided from the stored rows alone, the way SQL over them decides it."""

    def same(form: Comparable, wanted: Comparable) -> bool:
        return form.kind == wanted.kind and form.value == wanted.value

    for clause in parsed.clauses:
        own = [r.form for r in rows if r.field == clause.field and not r.element]
        elements = [r.form for r in rows if r.field == clause.field and r.element]
        if isinstance(clause, Equals):
            ok = any(same(form, clause.value) for form in own)
        elif isinstance(clause, OneOf):
            ok = any(same(form, v) for form in own for v in clause.values)
        elif isinstance(clause, Has):
            ok = any(same(form, clause.value) for form in elements)
        else:
            points = [
                form.value if clause.kind == "number" else form.instant
                for form in own
                if form.kind == ("number" if clause.kind == "number" else "string")
            ]
            ok = any(
                p is not None and all(b.admits(p) for b in clause.bounds)
                for p in points
                if not isinstance(p, bool)
            )
        if not ok:
            return False
    return True


STORED_VALUES = (
    JSON_SCALARS | INSTANTS | st.lists(JSON_SCALARS | st.lists(st.integers()), max_size=4)
)


@given(
    VALID_FILTERS,
    st.dictionaries(st.sampled_from([*SCALAR_FIELDS, "labels", "body", "extra"]), STORED_VALUES),
)
@settings(max_examples=300)
def test_the_stored_rows_decide_every_filter_as_the_oracle_does(
    raw: dict[str, Any], record: dict[str, Any]
) -> None:
    parsed = _parse(raw)
    rows = comparable_rows(SPEC, record)
    assert {row.field for row in rows} <= set(SPEC.declared) - {"body"}
    assert _rows_match(parsed, rows) == matches(parsed, record)


def test_the_stored_rows_of_a_record() -> None:
    rows = comparable_rows(SPEC, {"subject": "Hi", "labels": ["A", "a"], "nope": 1, "body": "x"})
    assert rows == (
        StoredComparable("labels", True, Comparable("string", "a", None)),
        StoredComparable("subject", False, Comparable("string", "hi", None)),
    )
