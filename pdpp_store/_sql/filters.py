"""The filter vocabulary in SQL (docs/contract.md §11.1): one builder, shared by every statement
that narrows records by a filter (`query_records`' pages, counts and changes walk, search's
statements, `aggregate`).

A parsed `_core.filters.Filter` becomes one condition on a table holding record keys
(`connection_id`, `stream`, `record_id`: `records` or an alias of it), true exactly for the
records whose stored comparable values (`field_values`, `tables` Rule 8) match every clause, as
`_core.filters.matches` decides in Python.

Rules:
1. Each clause is one correlated `EXISTS` over an alias of `field_values` of its own
   (`filter_<n>`, so a statement may join `field_values` itself), of the same record and the
   clause's field (`path`), on the table's primary key `(connection_id, stream, record_id,
   path, element)`: so a statement already narrowed to a connection and stream looks each
   candidate up by key, and a planner that starts from the filter instead has the
   `connection_id`-led value indexes (`ix_field_values_text`, `_num`, `_instant`).
2. Equality and `in` compare the field's own value (`element` 0); `has` compares an array's
   elements (`element` > 0). A value compares with stored rows of its own kind only: a string's
   `text` with `stored_text` of its folded form, a boolean's `text` with `true`/`false`, a
   number's `num` exactly (`dialects.exact_numeric`: never through a double), a null by its
   kind alone.
3. A range compares numbers by `num` (rows of kind `number`) and instants by `instant` (rows of
   kind `string` whose text is a date or date-time; others have no instant and never match).
4. Values are bound parameters (never SQL text); an empty filter is no condition (`true()`).
5. The builder reads no grant: callers check the filter's fields against the grant
   (`parse_filter` does) and put the grant's visibility beside this condition.
6. A filter has a *shape* (`filter_shape`): per clause its operator, the kind of each value
   and a range's operators, never a field name or a value. A statement cached per shape takes
   the clause's field and values as named parameters (`shaped_condition`,
   `shaped_clause_rows`: clause `n`'s are `q_f<n>_path` and `q_f<n>_<i>`, from
   `filter_shape`'s parameters), so filters of one shape share one statement and one plan.
   A statement holding several filters (search: one per group of connections) gives each a
   prefix of its own (`q<g>`: `q<g>_f<n>_path`, `q<g>_f<n>_<i>`), passed alike to
   `filter_shape` and to the builders. `filter_condition` and `clause_rows` build the same
   conditions with the values in the statement, for statements built per call.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, and_, bindparam, exists, literal_column, or_, select, true
from sqlalchemy.types import TypeEngine

from pdpp_store._core.filters import (
    Clause,
    Comparable,
    Filter,
    Has,
    OneOf,
    Range,
    stored_text,
)

from .dialects import ExactNumber
from .tables import field_values

__all__ = [
    "ClauseShape",
    "FilterShape",
    "clause_rows",
    "filter_condition",
    "filter_shape",
    "named",
    "range_bound",
    "shaped_clause_rows",
    "shaped_condition",
]


class ClauseShape(NamedTuple):
    """What a statement needs to know of a clause (Rule 6): `op` `eq`, `in`, `has` or
    `range`; `kinds` the kind of each value in order (of a range: its kind, once a bound);
    `ops` a range's operators in order (else empty)."""

    op: str
    kinds: tuple[str, ...]
    ops: tuple[str, ...] = ()


FilterShape = tuple[ClauseShape, ...]

Bind = Callable[[str, TypeEngine[Any]], ColumnElement[Any]]
"""The parameter of a clause's part (`path`, or a value's position) of a column's type."""

_NUMBER = ExactNumber()


def _stored(value: Comparable) -> Any:
    """The value compared with the stored column of its kind (Rule 2)."""
    if value.kind == "boolean":
        return "true" if value.value else "false"
    if value.kind == "string":
        assert isinstance(value.value, str)
        return stored_text(value.value)
    return value.value


def _clause_shape(clause: Clause) -> tuple[ClauseShape, dict[str, Any]]:
    """A clause's shape and its values by part name (`path`, then each value's position)."""
    values: dict[str, Any] = {"path": clause.field}
    if isinstance(clause, Range):
        for number, bound in enumerate(clause.bounds):
            values[str(number)] = bound.value
        ops = tuple(bound.op for bound in clause.bounds)
        return ClauseShape("range", tuple(bound.kind for bound in clause.bounds), ops), values
    given = clause.values if isinstance(clause, OneOf) else (clause.value,)
    op = "in" if isinstance(clause, OneOf) else "has" if isinstance(clause, Has) else "eq"
    for number, value in enumerate(given):
        if value.kind != "null":
            values[str(number)] = _stored(value)
    return ClauseShape(op, tuple(value.kind for value in given)), values


def filter_shape(filter: Filter, prefix: str = "q") -> tuple[FilterShape, dict[str, Any]]:
    """The filter's shape and the parameters a statement of that shape takes (Rule 6), named
    with `prefix` (the builders' own)."""
    shapes: list[ClauseShape] = []
    params: dict[str, Any] = {}
    for number, clause in enumerate(filter.clauses):
        shape, values = _clause_shape(clause)
        shapes.append(shape)
        params.update({f"{prefix}_f{number}_{part}": value for part, value in values.items()})
    return tuple(shapes), params


def _kind(fv: Any, name: str) -> ColumnElement[bool]:
    return fv.c.kind == literal_column(f"'{name}'")  # type: ignore[no-any-return]


def _equals(kinds: tuple[str, ...], fv: Any, bind: Bind) -> ColumnElement[bool]:
    """The row's value is one of the clause's values (each compared within its kind, Rule 2)."""
    texts: dict[str, list[ColumnElement[Any]]] = {"string": [], "boolean": []}
    numbers: list[ColumnElement[Any]] = []
    null = False
    for number, kind in enumerate(kinds):
        if kind == "null":
            null = True
        elif kind == "number":
            numbers.append(bind(str(number), _NUMBER))
        else:
            texts[kind].append(bind(str(number), fv.c.text.type))
    options: list[ColumnElement[bool]] = []
    for kind, found in texts.items():
        if len(found) == 1:
            options.append(and_(_kind(fv, kind), fv.c.text == found[0]))
        elif found:
            options.append(and_(_kind(fv, kind), fv.c.text.in_(found)))
    if numbers:
        options.append(and_(_kind(fv, "number"), or_(*(fv.c.num == value for value in numbers))))
    if null:
        options.append(_kind(fv, "null"))
    return or_(*options)


def _bound(op: str, kind: str, value: ColumnElement[Any], fv: Any) -> ColumnElement[bool]:
    column: Any = fv.c.num if kind == "number" else fv.c.instant
    if op == "gt":
        return column > value  # type: ignore[no-any-return]
    if op == "gte":
        return column >= value  # type: ignore[no-any-return]
    if op == "lt":
        return column < value  # type: ignore[no-any-return]
    return column <= value  # type: ignore[no-any-return]


def _range(shape: ClauseShape, fv: Any, bind: Bind) -> ColumnElement[bool]:
    if shape.kinds[0] == "number":
        kind = _kind(fv, "number")
    else:
        kind = and_(_kind(fv, "string"), fv.c.instant.is_not(None))
    bounds = [
        _bound(op, shape.kinds[0], bind(str(number), _bound_type(shape.kinds[0], fv)), fv)
        for number, op in enumerate(shape.ops)
    ]
    return and_(kind, *bounds)


def _bound_type(kind: str, fv: Any) -> TypeEngine[Any]:
    return _NUMBER if kind == "number" else fv.c.instant.type


def range_bound(
    shape: ClauseShape, number: int, bind: Bind, fv: Any
) -> tuple[str, ColumnElement[Any]]:
    """A range clause's `number`th bound: its operator and its parameter (of `fv`'s column)."""
    return shape.ops[number], bind(str(number), _bound_type(shape.kinds[0], fv))


def _rows(shape: ClauseShape, fv: Any, bind: Bind) -> ColumnElement[bool]:
    if shape.op == "range":
        body = and_(fv.c.element == 0, _range(shape, fv, bind))
    elif shape.op == "has":
        body = and_(fv.c.element > 0, _equals(shape.kinds, fv, bind))
    else:
        body = and_(fv.c.element == 0, _equals(shape.kinds, fv, bind))
    return and_(fv.c.path == bind("path", fv.c.path.type), body)


def named(number: int, prefix: str = "q") -> Bind:
    """Clause `number`'s parameters by name (Rule 6)."""

    def bind(part: str, type_: TypeEngine[Any]) -> ColumnElement[Any]:
        return bindparam(f"{prefix}_f{number}_{part}", type_=type_)

    return bind


def _given(values: dict[str, Any]) -> Bind:
    """A clause's own values, in the statement."""

    def bind(part: str, type_: TypeEngine[Any]) -> ColumnElement[Any]:
        return bindparam(None, values[part], type_=type_, unique=True)

    return bind


def clause_rows(clause: Clause, fv: Any) -> ColumnElement[bool]:
    """The rows of `fv` (`field_values` or an alias) that satisfy `clause` for their record:
    its field, and the element and value conditions of Rules 2-3. A record matches the clause
    exactly when one of its rows does, and at most one does (a field has one own value, and an
    array's comparable elements are distinct), so a statement may join these rows to drive by
    the value index without repeating a record."""
    shape, values = _clause_shape(clause)
    return _rows(shape, fv, _given(values))


def shaped_clause_rows(
    shape: FilterShape, number: int, fv: Any, prefix: str = "q"
) -> ColumnElement[bool]:
    """`clause_rows` of clause `number` of a filter of `shape`, its values parameters."""
    return _rows(shape[number], fv, named(number, prefix))


def _exists(number: int, body: Callable[[Any], ColumnElement[bool]], table: Any) -> Any:
    fv = field_values.alias(f"filter_{number}")
    same = and_(
        fv.c.connection_id == table.c.connection_id,
        fv.c.stream == table.c.stream,
        fv.c.record_id == table.c.record_id,
    )
    return exists(
        select(literal_column("1")).select_from(fv).where(same, body(fv)).correlate(table)
    )


def filter_condition(filter: Filter, table: Any) -> ColumnElement[bool]:
    """The condition that `table`'s record (its `connection_id`, `stream`, `record_id`
    columns) matches every clause of `filter` (Rules 1-4); `true()` for an empty filter."""
    if not filter.clauses:
        return true()
    return and_(
        *(
            _exists(number, partial(clause_rows, clause), table)
            for number, clause in enumerate(filter.clauses)
        )
    )


def shaped_condition(
    shape: FilterShape, table: Any, *, skip: int | None = None, prefix: str = "q"
) -> ColumnElement[bool]:
    """`filter_condition` of a filter of `shape`, its values parameters named with `prefix`
    (Rule 6), without clause `skip` (one a statement applies otherwise)."""
    conditions = [
        _exists(number, partial(shaped_clause_rows, shape, number, prefix=prefix), table)
        for number in range(len(shape))
        if number != skip
    ]
    return and_(*conditions) if conditions else true()
