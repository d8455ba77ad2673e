"""The filter vocabulary in SQL (docs/contract.md §11.1): one builder, shared by every statement
that narrows records by a filter (`query_records`' pages and counts, `aggregate`).

A parsed `_core.filters.Filter` becomes one condition on a table holding record keys
(`connection_id`, `stream`, `record_id`: `records` or an alias of it), true exactly for the
records whose stored comparable values (`field_values`, `tables` Rule 8) match every clause, as
`_core.filters.matches` decides in Python.

Rules:
1. Each clause is one correlated `EXISTS` over `field_values` of the same record and the
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
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_, exists, literal_column, or_, select, true

from pdpp_store._core.filters import (
    Bound,
    Clause,
    Comparable,
    Equals,
    Filter,
    Has,
    OneOf,
    Range,
    stored_text,
)

from .dialects import exact_numeric
from .tables import field_values

__all__ = ["filter_condition"]


def _kind(name: str) -> ColumnElement[bool]:
    return field_values.c.kind == literal_column(f"'{name}'")


def _equals(values: tuple[Comparable, ...], table: Any) -> ColumnElement[bool]:
    """The row's value is one of `values` (each compared within its kind, Rule 2)."""
    texts: dict[str, list[str]] = {"string": [], "boolean": []}
    numbers: list[int | float] = []
    null = False
    for value in values:
        if value.kind == "null":
            null = True
        elif value.kind == "boolean":
            texts["boolean"].append("true" if value.value else "false")
        elif value.kind == "number":
            assert isinstance(value.value, int | float)
            numbers.append(value.value)
        else:
            assert isinstance(value.value, str)
            texts["string"].append(stored_text(value.value))
    options: list[ColumnElement[bool]] = []
    for kind, found in texts.items():
        if len(found) == 1:
            options.append(and_(_kind(kind), field_values.c.text == found[0]))
        elif found:
            options.append(and_(_kind(kind), field_values.c.text.in_(found)))
    if numbers:
        options.append(
            and_(
                _kind("number"),
                or_(*(field_values.c.num == exact_numeric(number) for number in numbers)),
            )
        )
    if null:
        options.append(_kind("null"))
    return or_(*options)


def _bound(bound: Bound) -> ColumnElement[bool]:
    column: Any = field_values.c.num if bound.kind == "number" else field_values.c.instant
    value: Any = (
        exact_numeric(bound.value) if bound.kind == "number" else bound.value  # type: ignore[arg-type]
    )
    if bound.op == "gt":
        return column > value  # type: ignore[no-any-return]
    if bound.op == "gte":
        return column >= value  # type: ignore[no-any-return]
    if bound.op == "lt":
        return column < value  # type: ignore[no-any-return]
    return column <= value  # type: ignore[no-any-return]


def _range(clause: Range) -> ColumnElement[bool]:
    if clause.kind == "number":
        kind = _kind("number")
    else:
        kind = and_(_kind("string"), field_values.c.instant.is_not(None))
    return and_(kind, *(_bound(bound) for bound in clause.bounds))


def _clause(clause: Clause, table: Any) -> ColumnElement[bool]:
    same = and_(
        field_values.c.connection_id == table.c.connection_id,
        field_values.c.stream == table.c.stream,
        field_values.c.record_id == table.c.record_id,
        field_values.c.path == clause.field,
    )
    if isinstance(clause, Equals):
        body = and_(field_values.c.element == 0, _equals((clause.value,), table))
    elif isinstance(clause, OneOf):
        body = and_(field_values.c.element == 0, _equals(clause.values, table))
    elif isinstance(clause, Has):
        body = and_(field_values.c.element > 0, _equals((clause.value,), table))
    else:
        body = and_(field_values.c.element == 0, _range(clause))
    return exists(select(literal_column("1")).where(same, body))


def filter_condition(filter: Filter, table: Any) -> ColumnElement[bool]:
    """The condition that `table`'s record (its `connection_id`, `stream`, `record_id`
    columns) matches every clause of `filter` (Rules 1-4); `true()` for an empty filter."""
    if not filter.clauses:
        return true()
    return and_(*(_clause(clause, table) for clause in filter.clauses))
