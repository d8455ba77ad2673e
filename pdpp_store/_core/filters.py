"""The filter vocabulary (docs/contract.md §11.1): one parser, one comparable form, one oracle.
Pure: no I/O.

A filter is a JSON object, one clause per field, all clauses ANDed:

    "f": v                              equals v (a string, number, boolean or null)
    "f": {"in": [v, ...]}               equals one of 1..100 values
    "f": {"has": v}                     is an array with an element equal to v
    "f": {"gte"|"gt"|"lte"|"lt": v, ...}  lies in the range (operators the manifest declares)

`parse_filter` turns it (or its JSON text, as REST passes it) into a `Filter` whose values are
already in comparable form; `comparable` and `comparable_elements` give a stored value's
comparable form (the write path stores exactly these); `matches` evaluates a filter over a
record's fields in Python, the oracle the SQL is proved against.

Rules:
1. Comparable form (`comparable`): null and booleans are themselves; a number (never a boolean)
   is an `int` when integral and within the signed 64-bit range, else a finite `float` (so
   `1 == 1.0`, and an integer too large for a double has no comparable form); a string of at
   most `MAX_COMPARABLE_CHARS` (256) code points is its case fold (`folding.fold`) together with
   its normalised instant (`grants.normalize_instant`, the time constraints' normalisation; None
   when it is no date or date-time). A longer string, an object, an array, NaN or an infinity has
   no scalar comparable form: no equality or range clause matches it. An array's comparable
   elements (`comparable_elements`) are those of its scalar elements, each once, in order of
   first appearance, at most `MAX_ARRAY_ELEMENTS` (1,024): `has` looks no further.
2. Semantics: equality compares comparable forms of one kind (a string never equals a number,
   `true` never equals `1`), and `has` compares an array's elements the same way; `"f": null`
   matches a field present with the value null. A field
   absent from the record matches no clause, `null` included. A range compares numbers
   numerically and strings as instants: a number bound matches stored numbers, an instant bound
   matches stored strings that are valid instants; anything else (a malformed date, a long
   string) never matches.
3. Limits: at most `MAX_CLAUSES` (16) clauses, an `in` of 1..`MAX_IN_VALUES` (100) values, a
   string value of at most `MAX_COMPARABLE_CHARS` code points (a longer one could never match),
   field names of at most 1,024 bytes (`identity`'s field path limit), a filter text of at most
   `MAX_FILTER_CHARS` (64 Ki) characters.
4. Checks, in this order, each over every clause before the next begins: (a) shape: the filter
   is an object (JSON text must parse, with no duplicate key and no NaN or infinity), within the
   limits, each clause a well-formed clause of the table above with values of JSON scalar types;
   (b) grant: every field the filter names is granted, else `field_not_granted` (403) for the
   first ungranted one by name; (c) declaration: the field is declared and text-like, the
   operator is allowed on it (equality and `in` on fields that may hold scalars, `has` on fields
   that may hold arrays, a range only with operators `query.range_filters` declares), and each
   value has a type the field declares (a range bound: a number where numbers fit, an ISO-8601
   date or date-time where strings fit), else `invalid_filter` (400). Shape errors depend on the
   request alone and grant errors on the grant alone, so a request about an ungranted field
   learns nothing of the manifest: not whether the field is declared, nor its type or operators.
   Clauses are checked in field-name order, so the error is the same whatever the key order.
   Every error has param `filter` and names the field where there is one, never a value.
5. A `Filter` is canonical: clauses sorted by field, `in` values deduplicated and sorted (an
   `in` of one distinct value is that equality), range bounds in operator order. So two filters
   that match the same records by these rules (`{"f": "ABC"}` and `{"f": "abc"}`, `1` and
   `1.0`) have one `canonical` text and one `fingerprint`, which binds cursors to the filter.
6. What the write path stores (`comparable_rows`) is compared in SQL as text where it is a
   string: `stored_text` makes a folded string storable on every database (Postgres text
   cannot hold NUL) without changing which strings are equal, so a statement compares
   `stored_text` of the filter's value with the stored column.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from .errors import BadRequest, Forbidden
from .folding import fold
from .grants import normalize_instant
from .identity import MAX_FIELD_PATH_BYTES, is_unicode
from .manifest import RANGE_OPERATORS, StreamSpec
from .values import json_type

__all__ = [
    "MAX_ARRAY_ELEMENTS",
    "MAX_CLAUSES",
    "MAX_COMPARABLE_CHARS",
    "MAX_FILTER_CHARS",
    "MAX_IN_VALUES",
    "Bound",
    "Clause",
    "Comparable",
    "Equals",
    "FieldScope",
    "Filter",
    "Has",
    "OneOf",
    "Range",
    "StoredComparable",
    "comparable",
    "comparable_elements",
    "comparable_rows",
    "filter_operators",
    "matches",
    "parse_filter",
    "stored_text",
]

MAX_CLAUSES = 16
MAX_IN_VALUES = 100
MAX_COMPARABLE_CHARS = 256
MAX_ARRAY_ELEMENTS = 1024
MAX_FILTER_CHARS = 65_536
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

Kind = Literal["null", "boolean", "number", "string"]
Operator = Literal["gt", "gte", "lt", "lte"]
_OPERATORS: tuple[Operator, ...] = ("gt", "gte", "lt", "lte")  # `manifest.RANGE_OPERATORS`


class FieldScope(Protocol):
    """What the grant says about a stream's fields (a `StreamGrant` is one)."""

    def allows_field(self, path: str, /) -> bool: ...


@dataclass(frozen=True, slots=True)
class Comparable:
    """The comparable form of one scalar (rule 1). `value` is None for null, a bool, an int or
    finite float, or a folded string; `instant` is the normalised instant of a string, if any."""

    kind: Kind
    value: bool | int | float | str | None
    instant: str | None = None

    def to_json(self) -> list[Any]:
        return [self.kind, self.value]

    def sort_key(self) -> tuple[int, Any]:
        order = ("null", "boolean", "number", "string").index(self.kind)
        return (order, 0 if self.value is None else self.value)


def _number(value: int | float) -> int | float | None:
    """A number's comparable form, or None (non-finite, or an integer beyond a double)."""
    if isinstance(value, int):
        if _INT64_MIN <= value <= _INT64_MAX:
            return value
        try:
            return float(value)
        except OverflowError:
            return None
    if not math.isfinite(value):
        return None
    if value.is_integer() and _INT64_MIN <= value <= _INT64_MAX:
        return int(value)
    return value


def comparable(value: object) -> Comparable | None:
    """A stored scalar's comparable form (rule 1), or None where no scalar clause can match."""
    if value is None:
        return Comparable("null", None)
    if isinstance(value, bool):
        return Comparable("boolean", value)
    if isinstance(value, int | float):
        number = _number(value)
        return None if number is None else Comparable("number", number)
    if isinstance(value, str):
        if len(value) > MAX_COMPARABLE_CHARS:
            return None
        return Comparable("string", fold(value), normalize_instant(value))
    return None


def comparable_elements(value: object) -> tuple[Comparable, ...]:
    """An array's comparable scalar elements, each once, at most `MAX_ARRAY_ELEMENTS` (rule 1);
    not an array: none."""
    if not isinstance(value, list | tuple):
        return ()
    seen: dict[Comparable, None] = {}
    for element in value:
        if isinstance(element, list | tuple | Mapping):
            continue
        form = comparable(element)
        if form is not None:
            seen.setdefault(form, None)
            if len(seen) == MAX_ARRAY_ELEMENTS:
                break
    return tuple(seen)


@dataclass(frozen=True, slots=True)
class Equals:
    field: str
    value: Comparable

    def to_json(self) -> list[Any]:
        return [self.field, "eq", self.value.to_json()]


@dataclass(frozen=True, slots=True)
class OneOf:
    """`{"in": [...]}`: values deduplicated and sorted."""

    field: str
    values: tuple[Comparable, ...]

    def to_json(self) -> list[Any]:
        return [self.field, "in", [value.to_json() for value in self.values]]


@dataclass(frozen=True, slots=True)
class Has:
    field: str
    value: Comparable

    def to_json(self) -> list[Any]:
        return [self.field, "has", self.value.to_json()]


@dataclass(frozen=True, slots=True)
class Bound:
    """One side of a range: `kind` `number` compares numbers, `instant` normalised instants."""

    op: Operator
    kind: Literal["number", "instant"]
    value: int | float | str

    def admits(self, stored: int | float | str) -> bool:
        value: Any = self.value
        if self.op == "gt":
            return bool(stored > value)
        if self.op == "gte":
            return bool(stored >= value)
        if self.op == "lt":
            return bool(stored < value)
        return bool(stored <= value)


@dataclass(frozen=True, slots=True)
class Range:
    """Bounds of one kind, in `RANGE_OPERATORS` order."""

    field: str
    bounds: tuple[Bound, ...]

    @property
    def kind(self) -> Literal["number", "instant"]:
        return self.bounds[0].kind

    def to_json(self) -> list[Any]:
        return [self.field, "range", [[b.op, b.kind, b.value] for b in self.bounds]]


Clause = Equals | OneOf | Has | Range


@dataclass(frozen=True, slots=True)
class Filter:
    """A parsed, checked filter (rules 4 and 5): clauses sorted by field, one per field."""

    clauses: tuple[Clause, ...] = ()
    canonical: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        clauses = tuple(sorted(self.clauses, key=lambda clause: clause.field))
        object.__setattr__(self, "clauses", clauses)
        text = json.dumps(
            [clause.to_json() for clause in clauses],
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )
        object.__setattr__(self, "canonical", text)

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(clause.field for clause in self.clauses)

    @property
    def fingerprint(self) -> bytes:
        """16 bytes that bind a cursor to this filter (the empty filter included)."""
        return hashlib.sha256(b"filter\x00" + self.canonical.encode()).digest()[:16]

    def __bool__(self) -> bool:
        return bool(self.clauses)


def _invalid(message: str) -> BadRequest:
    return BadRequest("invalid_filter", message, param="filter")


def _reject_constant(name: str) -> Any:
    raise _invalid(f"filter is not valid JSON: {name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _invalid(f"filter names {key!r} twice in one object")
        result[key] = value
    return result


def _loaded(raw: object) -> Mapping[Any, Any]:
    if isinstance(raw, str):
        if len(raw) > MAX_FILTER_CHARS:
            raise _invalid(f"filter text is longer than {MAX_FILTER_CHARS} characters")
        try:
            raw = json.loads(raw, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
        except BadRequest:
            raise
        except (ValueError, RecursionError):
            raise _invalid("filter is not valid JSON") from None
    if not isinstance(raw, Mapping):
        raise _invalid("filter must be a JSON object, one clause per field")
    return raw


_Shape = tuple[str, str, Any]
"""A clause after the shape check: (field, "eq" | "in" | "has" | "range", raw value(s))."""


def _is_scalar(value: object) -> bool:
    if value is None or isinstance(value, bool | str):
        return not isinstance(value, str) or is_unicode(value)
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _field_name(name: object) -> str:
    if not isinstance(name, str) or not name or "\x00" in name or not is_unicode(name):
        raise _invalid("filter field names must be non-empty strings")
    if len(name.encode()) > MAX_FIELD_PATH_BYTES:
        raise _invalid(f"filter field names are at most {MAX_FIELD_PATH_BYTES} bytes")
    return name


def _shape(name: str, body: object) -> _Shape:
    label = f"filter on {name!r}"
    if _is_scalar(body):
        return (name, "eq", body)
    if not isinstance(body, Mapping) or not body:
        raise _invalid(
            f"{label}: a clause is a scalar, or an object with `in`, `has` or range operators"
        )
    keys = set(body)
    if keys == {"in"}:
        values = body["in"]
        if not isinstance(values, list | tuple) or not 1 <= len(values) <= MAX_IN_VALUES:
            raise _invalid(f"{label}: `in` takes a list of 1 to {MAX_IN_VALUES} values")
        if not all(_is_scalar(value) for value in values):
            raise _invalid(f"{label}: `in` values must be strings, numbers, booleans or null")
        return (name, "in", tuple(values))
    if keys == {"has"}:
        if not _is_scalar(body["has"]):
            raise _invalid(f"{label}: `has` takes a string, number, boolean or null")
        return (name, "has", body["has"])
    if keys <= set(RANGE_OPERATORS):
        bounds = {op: body[op] for op in RANGE_OPERATORS if op in body}
        if not all(
            isinstance(v, str | int | float) and not isinstance(v, bool) and _is_scalar(v)
            for v in bounds.values()
        ):
            raise _invalid(f"{label}: a range bound is a number or a date-time string")
        return (name, "range", bounds)
    unknown = sorted(str(key) for key in keys - {"in", "has", *RANGE_OPERATORS})
    detail = f"unknown operator {unknown[0]!r}" if unknown else "operators that do not combine"
    raise _invalid(f"{label}: {detail}; use one of in, has, gt, gte, lt, lte")


def _json_type(value: object) -> str:
    """`values.json_type`, except that an integral float is an integer (`1.0` fits an integer
    field, as JSON Schema says)."""
    if isinstance(value, float) and value.is_integer():
        return "integer"
    return json_type(value)


def _value(spec: StreamSpec, name: str, value: object, *, typed: bool = True) -> Comparable:
    """An equality value in comparable form, checked against the field's declared type."""
    label = f"filter on {name!r}"
    if typed and not spec.declared[name].admits(_json_type(value)):
        declared = spec.declared[name].json_type
        raise _invalid(f"{label}: a {_json_type(value)} value does not fit type {declared!r}")
    if isinstance(value, str) and len(value) > MAX_COMPARABLE_CHARS:
        raise _invalid(f"{label}: string values are at most {MAX_COMPARABLE_CHARS} code points")
    form = comparable(value)
    if form is None:
        raise _invalid(f"{label}: the number is out of range")
    return Comparable(form.kind, form.value)  # equality ignores the instant


def _range(spec: StreamSpec, name: str, bounds: Mapping[str, Any]) -> Range:
    label = f"filter on {name!r}"
    allowed = spec.range_filters.get(name)
    if allowed is None:
        raise _invalid(f"{label}: the stream declares no range filter on this field")
    known = spec.declared[name]
    parsed: list[Bound] = []
    for op in _OPERATORS:
        if op not in bounds:
            continue
        raw = bounds[op]
        if op not in allowed:
            raise _invalid(f"{label}: operator {op!r} is not declared (declared: {list(allowed)})")
        if isinstance(raw, str):
            if not known.admits("string"):
                raise _invalid(f"{label}: a string does not fit type {known.json_type!r}")
            instant = normalize_instant(raw)
            if instant is None:
                raise _invalid(f"{label}: {op} must be an ISO-8601 date or date-time")
            parsed.append(Bound(op, "instant", instant))
        else:
            if not known.admits("integer"):  # a bound need not be integral: `size > 1.5`
                raise _invalid(f"{label}: a number does not fit type {known.json_type!r}")
            number = _number(raw)
            if number is None:
                raise _invalid(f"{label}: the number is out of range")
            parsed.append(Bound(op, "number", number))
    if len({bound.kind for bound in parsed}) > 1:
        raise _invalid(f"{label}: bounds mix numbers and date-times")
    return Range(name, tuple(parsed))


def parse_filter(raw: object, spec: StreamSpec, scope: FieldScope) -> Filter:
    """The filter `raw` (an object, its JSON text, or None for no filter) checked against the
    stream's manifest and the grant's fields (rule 4)."""
    if raw is None:
        return Filter()
    body = _loaded(raw)
    if len(body) > MAX_CLAUSES:
        raise _invalid(f"filter has {len(body)} clauses; at most {MAX_CLAUSES}")
    names = sorted(_field_name(name) for name in body)
    shapes = [_shape(name, body[name]) for name in names]
    for name, _, _ in shapes:
        if not scope.allows_field(name):
            raise Forbidden(
                "field_not_granted",
                f"filter on {name!r}: the field is not granted for stream {spec.name!r}",
                param="filter",
            )
    clauses: list[Clause] = []
    for name, op, value in shapes:
        known = spec.declared.get(name)
        if known is None or not known.text_like:
            reason = "not declared by" if known is None else "binary data in"
            raise _invalid(f"filter on {name!r}: the field is {reason} stream {spec.name!r}")
        if op == "range":
            clauses.append(_range(spec, name, value))
        elif op == "has":
            if not known.holds_arrays:
                raise _invalid(f"filter on {name!r}: `has` needs a field declared as an array")
            clauses.append(Has(name, _value(spec, name, value, typed=False)))
        else:
            if not known.holds_scalars:
                raise _invalid(f"filter on {name!r}: the field does not hold scalar values")
            values = value if op == "in" else (value,)
            forms = {_value(spec, name, item): None for item in values}
            if len(forms) == 1:  # `{"in": [v]}` is `v` (rule 5)
                clauses.append(Equals(name, next(iter(forms))))
            else:
                ordered = tuple(sorted(forms, key=Comparable.sort_key))
                clauses.append(OneOf(name, ordered))
    return Filter(tuple(clauses))


def _equal(stored: object, wanted: Comparable) -> bool:
    form = comparable(stored)
    return form is not None and form.kind == wanted.kind and form.value == wanted.value


def _in_range(stored: object, clause: Range) -> bool:
    if clause.kind == "number":
        if isinstance(stored, bool) or not isinstance(stored, int | float):
            return False
        point: int | float | str | None = _number(stored)
    else:
        form = comparable(stored) if isinstance(stored, str) else None
        point = None if form is None else form.instant
    return point is not None and all(bound.admits(point) for bound in clause.bounds)


def _clause_matches(clause: Clause, stored: object) -> bool:
    if isinstance(clause, Equals):
        return _equal(stored, clause.value)
    if isinstance(clause, OneOf):
        return any(_equal(stored, value) for value in clause.values)
    if isinstance(clause, Has):
        wanted = clause.value
        return any(
            element.kind == wanted.kind and element.value == wanted.value
            for element in comparable_elements(stored)
        )
    return _in_range(stored, clause)


def filter_operators(spec: StreamSpec, scope: FieldScope) -> dict[str, tuple[str, ...]]:
    """Per granted field, by name, what a filter may ask of it (rule 4c): `eq` and `in` where
    the field may hold scalars, `has` where it may hold arrays, and its declared range operators.
    Discovery shows this; `parse_filter` accepts exactly these, with values of declared types.
    Ungranted fields are left out: discovery tells nothing of them."""
    operators: dict[str, tuple[str, ...]] = {}
    for name in sorted(spec.declared):
        known = spec.declared[name]
        if not known.text_like or not scope.allows_field(name):
            continue
        ops = [
            *(("eq", "in") if known.holds_scalars else ()),
            *(("has",) if known.holds_arrays else ()),
            *spec.range_filters.get(name, ()),
        ]
        if ops:
            operators[name] = tuple(ops)
    return operators


@dataclass(frozen=True, slots=True)
class StoredComparable:
    """One comparable form the write path stores for a record: of a field's own value, or
    (`element`) of one element of an array field, for `has`."""

    field: str
    element: bool
    form: Comparable


def comparable_rows(spec: StreamSpec, fields: Mapping[str, Any]) -> tuple[StoredComparable, ...]:
    """What a record's fields give a filter to compare (rule 1): for each declared, text-like
    field present, its own comparable form, or for an array its comparable elements. Filters
    name only such fields, so these rows decide every clause exactly as `matches` does."""
    rows: list[StoredComparable] = []
    for name in sorted(fields):
        known = spec.declared.get(name)
        if known is None or not known.text_like:
            continue
        value = fields[name]
        if isinstance(value, list | tuple):
            rows.extend(StoredComparable(name, True, form) for form in comparable_elements(value))
            continue
        form = comparable(value)
        if form is not None:
            rows.append(StoredComparable(name, False, form))
    return tuple(rows)


_ESCAPE = "\x01"


def stored_text(folded: str) -> str:
    """A folded string as the database stores and compares it (rule 6): itself, unless it holds
    NUL or opens with U+0001; then U+0001 followed by the string with U+0001 written twice and
    NUL written as U+0001 U+0002. One-to-one, and never holding NUL."""
    if "\x00" not in folded and not folded.startswith(_ESCAPE):
        return folded
    escaped = folded.replace(_ESCAPE, _ESCAPE * 2).replace("\x00", _ESCAPE + "\x02")
    return _ESCAPE + escaped


def matches(filter: Filter, fields: Mapping[str, Any]) -> bool:
    """Whether a record with these fields matches `filter` (rule 2): the Python oracle."""
    for clause in filter.clauses:
        if clause.field not in fields:
            return False
        if not _clause_matches(clause, fields[clause.field]):
            return False
    return True
