"""The grant in SQL: a stream grant's terms as one condition on `records`, and the small
pieces every record statement is built from.

Rules:
1. Every statement that reads record data carries the grant's visibility condition
   (`visible_records`): connection, stream, not deleted, `resources`, time constraint. A hidden
   record therefore produces no row at all, exactly like a missing one.
2. Statements take the condition from this module at build time (`visibility.visible_records`,
   never a copy imported into another module), so it is written and replaced in one place.
3. A grant's lists (connections, resources, fields) are bound as one parameter each
   (`in_ids`, `dialects.IdList`), whatever their length.
4. Statements are cached per `GrantShape` (which optional terms a grant has), with the grant's
   values as parameters (`grant_params`), so a read costs one cached compile.
5. A grant with no `resources` and no time constraint admits a live record by its key alone,
   so a statement that needs only a field's comparable values may read `field_values` (or
   the counts kept from it, `value_counts`) under `visible_values` instead of joining
   `records` (the rows of deleted records are gone, and their counts with them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from types import MappingProxyType
from typing import Any, NamedTuple

from sqlalchemy import ColumnElement, and_, bindparam, exists, literal_column

from pdpp_store._core.fields import FieldKind
from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.identity import RecordRef

from .dialects import IdList, id_set
from .tables import fields, records

__all__ = [
    "BOUNDED_GRANT_TERMS",
    "GrantShape",
    "few_terms",
    "grant_params",
    "grant_terms",
    "in_ids",
    "kind_in",
    "record_is",
    "record_params",
    "same_record",
    "values_suffice",
    "visible_records",
    "visible_values",
]


def in_ids(column: ColumnElement[str], name: str) -> ColumnElement[bool]:
    """`column` is one of the names bound to parameter `name` (an `IdList`: one parameter)."""
    return column.op("IN")(id_set(bindparam(name, type_=IdList())))


def kind_in(text_like: bool) -> ColumnElement[bool]:
    """`fields.kind` is one of the text-like (or binary-only) kinds, with the kinds as SQL
    literals: an IN list of bound values would be re-rendered on every execution."""
    kinds: list[ColumnElement[str]] = [
        literal_column(f"'{kind.value}'") for kind in FieldKind if kind.text_like is text_like
    ]
    return fields.c.kind.in_(kinds)


def same_record(table: Any, other: Any) -> ColumnElement[bool]:
    """Rows of `table` and `other` belong to the same record (the key's three columns)."""
    return and_(
        table.c.connection_id == other.c.connection_id,
        table.c.stream == other.c.stream,
        table.c.record_id == other.c.record_id,
    )


class GrantShape(NamedTuple):
    """Which of a stream grant's optional terms are present: the key of a cached statement (a
    named tuple: it is hashed on every read, by the statement caches)."""

    instances: bool
    resources: bool
    time_field: bool
    since: bool
    until: bool

    @classmethod
    def of(cls, grant: StreamGrant) -> GrantShape:
        return grant_terms(grant)[0]


BOUNDED_GRANT_TERMS = 64
"""A statement bound to a grant is `Execute.bounded` only while the grant's lists (connections,
resources, fields) hold at most this many names in all: each list is matched as one parameter
(`in_ids`), which the database reads whole on every statement, so a read under a grant naming
thousands of connections costs in proportion to it (and an async SQLite read then runs in a
reader thread, not on the event loop)."""


def few_terms(grant: StreamGrant, *more: Sequence[str] | None) -> bool:
    """Whether `grant`'s lists and `more` (other bound lists) name at most
    `BOUNDED_GRANT_TERMS` values in all."""
    total = sum(
        len(names) for names in (grant.instance_ids, grant.resources, grant.fields, *more) if names
    )
    return total <= BOUNDED_GRANT_TERMS


@lru_cache(maxsize=1024)
def grant_terms(grant: StreamGrant) -> tuple[GrantShape, Mapping[str, Any]]:
    """A stream grant's shape and its parameters (`grant_params` with the default prefix), once
    per distinct stream grant: a server reads under the same grants again and again. Callers
    copy the parameters into their own (they are never changed in place)."""
    time = grant.time_constraint
    shape = GrantShape(
        grant.instance_ids is not None,
        grant.resources is not None,
        time is not None,
        time is not None and time.since is not None,
        time is not None and time.until is not None,
    )
    return shape, MappingProxyType(_grant_params(grant, "g"))


def grant_params(grant: StreamGrant, prefix: str = "g") -> dict[str, Any]:
    if prefix == "g":
        return dict(grant_terms(grant)[1])
    return _grant_params(grant, prefix)


def _grant_params(grant: StreamGrant, prefix: str) -> dict[str, Any]:
    params: dict[str, Any] = {f"{prefix}_stream": grant.name}
    if grant.instance_ids is not None:
        params[f"{prefix}_instances"] = list(grant.instance_ids)
    if grant.resources is not None:
        params[f"{prefix}_resources"] = sorted(grant.resources)
    time = grant.time_constraint
    if time is not None:
        params[f"{prefix}_time_field"] = time.field
        params[f"{prefix}_since"] = time.since
        params[f"{prefix}_until"] = time.until
    return params


def visible_records(
    shape: GrantShape, prefix: str = "g", *, with_deleted: bool = False, only: str | None = None
) -> ColumnElement[bool]:
    """A stream grant's terms as a condition on `records` (Rule 1), parameters named by
    `grant_params` with the same prefix. `with_deleted` leaves out the `deleted` term, for a
    changes page's tombstones: a deleted record whose key the grant would show. `only` names a
    parameter bound to the grant's one connection, for a grant that names exactly one (as
    `visible_values`): compared by equality, a range of an index rather than a join."""
    conditions: list[ColumnElement[bool]] = [records.c.stream == bindparam(f"{prefix}_stream")]
    if not with_deleted:
        conditions.append(records.c.deleted == False)  # noqa: E712 - SQL comparison
    if shape.instances and only is not None:
        conditions.append(records.c.connection_id == bindparam(only))
    elif shape.instances:
        conditions.append(in_ids(records.c.connection_id, f"{prefix}_instances"))
    if shape.resources:
        conditions.append(in_ids(records.c.record_id, f"{prefix}_resources"))
    if shape.time_field:
        timed = fields.alias(f"{prefix}_timed")
        bounds: list[ColumnElement[bool]] = [
            same_record(timed, records),
            timed.c.path == bindparam(f"{prefix}_time_field"),
            timed.c.time_value.is_not(None),
        ]
        if shape.since:
            bounds.append(timed.c.time_value >= bindparam(f"{prefix}_since"))
        if shape.until:
            bounds.append(timed.c.time_value < bindparam(f"{prefix}_until"))
        conditions.append(exists().where(*bounds))
    return and_(*conditions)


def values_suffice(shape: GrantShape) -> bool:
    """Whether `visible_values` can stand for `visible_records` (Rule 5): the grant has no
    `resources` and no time constraint."""
    return not shape.resources and not shape.time_field


def visible_values(
    shape: GrantShape, table: Any, prefix: str = "g", *, only: str | None = None
) -> ColumnElement[bool]:
    """A stream grant's terms as a condition on `field_values` (or an alias), Rule 5: true
    exactly for the comparable rows of the records `visible_records` admits, when
    `values_suffice(shape)`. A record's comparable rows are written and removed with its fields
    in the same transaction, and removed when it is deleted (`_sql.values` Rule 1), so every row
    belongs to a live record: connection and stream are the whole of such a grant's terms.
    `only` names a parameter bound to the grant's one connection, for a grant that names
    exactly one: it is then compared by equality, which every planner reads as a range of an
    index (a list parameter is a join, which keeps Postgres from reading an index's ends for
    `min` and `max`)."""
    if not values_suffice(shape):
        raise ValueError("a grant with resources or a time constraint needs `records`")
    conditions: list[ColumnElement[bool]] = [table.c.stream == bindparam(f"{prefix}_stream")]
    if shape.instances and only is not None:
        conditions.append(table.c.connection_id == bindparam(only))
    elif shape.instances:
        conditions.append(in_ids(table.c.connection_id, f"{prefix}_instances"))
    return and_(*conditions)


def record_params(ref: RecordRef, path: str | None = None) -> dict[str, Any]:
    """The parameters `record_is` (and `f_path`, a field of it) names."""
    params = {"r_conn": ref.connection_id, "r_stream": ref.stream, "r_id": ref.record_id}
    if path is not None:
        params["f_path"] = path
    return params


def record_is(table: Any = records) -> ColumnElement[bool]:
    """Rows of `table` belong to the record bound as `r_conn`, `r_stream`, `r_id`."""
    return and_(
        table.c.connection_id == bindparam("r_conn"),
        table.c.stream == bindparam("r_stream"),
        table.c.record_id == bindparam("r_id"),
    )
