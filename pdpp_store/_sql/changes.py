"""`query_records`' changes pages (docs/contract.md §11.2, "Changes"): the records whose view
under a grant changed since a bookmark, with tombstones, and the change sequence's tops a
bookmark is checked against.

What a grant sees of a record at a moment is its *view*: nothing when the record is deleted or
outside the grant (connection, stream, `resources`, time window), else its granted fields.
`change_log` (`tables` Rule 10) says, per change, what it changed; this module decides, per
logged change and under one grant, whether the change moved the grant's view, so a page
depends only on the history of what the grant can see (docs/decisions.md, "What a changes walk
reports").

Rules:
1. A logged change is *relevant* to a grant when the record was visible before it and not
   after, or not before and visible after, or visible after it with a granted field among what
   it changed. "Visible" is the record being live and, under a time constraint, its
   constrained field's instant in the window: before a change, the instant the log kept
   (`time_before`) when the change rewrote that field, else the instant after it; after a
   change, the `time_before` of the field's next logged change, else the stored field's
   instant (`fields.time_value`, kept through a delete). A field change of a record whose
   view did not change (an ungranted field, a record outside the window) is not relevant.
2. A record is reported once, at its last relevant change after the bookmark's position: as a
   row when it is visible after that change (which, nothing relevant following, is its view
   now; it must also match the filter), else as a tombstone (it was visible at some moment
   since the position, and is not now). A record never visible since the position gives
   nothing, so no tombstone names a key the grant could not see.
3. The static terms of the grant (connection, stream, `resources`) bound every row, from
   `visibility.visible_records` (without its `deleted` term and time constraint); a row
   reported live must also pass the whole visibility condition and the filter.
4. Changes go by (connection_id, change_seq) ascending, strictly after the bookmark's position
   per connection (a connection the bookmark does not name: from the beginning), along
   `change_log`'s key: the change sequence is per connection (`tables` Rule 9). The operation
   asks one connection a statement, so the key's order is the page's and no statement sorts.
5. Under a time constraint, each logged change's window is looked up once where the statement
   names it: Rule 1 is `CASE WHEN <in the window after the change> THEN X ELSE Y END`, where X
   (relevant while in the window after it) is an existence change, a field written while the
   record was deleted, a granted field, or the time field coming into the window; and Y
   (relevant while out of the window after it) is the time field leaving the window of a live
   record. The window is tested inside each look-up (`in_window_after`), so an instant is never
   named twice. (Naming it once per use, as Rule 1 reads, gave Postgres 40 correlated
   look-ups a statement, whose estimated cost JIT-compiled it: seconds for a page.)
6. The statement is built once per shape (`shapes.per_shape`): the grant's and the filter's
   (`shapes.shaped`: which terms, operators and value kinds), whether the grant names fields,
   and how many connections the positions name (`_walk`). Everything else is a named
   parameter: the grant's values (`g_*`, `c_fields`), the filter's fields and values
   (`q_f<n>_*`), the positions (`c_conn_<i>`, `c_after_<i>`), the connection and the limit.
   So a page costs one cached plan, not a compile, and no value is ever statement text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    not_,
    or_,
    select,
    true,
)

from pdpp_store._core.filters import Filter
from pdpp_store._core.grants import StreamGrant

from . import visibility
from .dialects import IdList, id_set
from .filters import FilterShape, shaped_condition
from .requests import Execute, Rows
from .shapes import per_shape, shaped
from .tables import EXISTENCE, change_counters, change_log, fields, records
from .visibility import GrantShape, same_record

__all__ = ["ChangeRow", "change_rows", "changes_page", "counter_tops", "tops"]

_NO_INSTANT = ""
"""An instant that is no instant: below every stored one (a field absent or without one)."""


class _Relevance:
    """Rule 1's conditions on one alias of `change_log`, under one grant shape (Rule 5)."""

    def __init__(self, shape: GrantShape, *, every_field: bool) -> None:
        self.shape = shape
        self.every_field = every_field

    def _in_window(self, instant: ColumnElement[Any]) -> ColumnElement[bool]:
        bounds: list[ColumnElement[bool]] = [instant > _NO_INSTANT]
        if self.shape.since:
            bounds.append(instant >= bindparam("g_since"))
        if self.shape.until:
            bounds.append(instant < bindparam("g_until"))
        return and_(*bounds)

    def _flag(self, instant: ColumnElement[Any]) -> ColumnElement[int]:
        """1 when `instant` (coalesced to no instant) is in the window, else 0."""
        return case((self._in_window(func.coalesce(instant, _NO_INSTANT)), 1), else_=0)

    def in_window_after(self, row: Any, name: str) -> ColumnElement[bool]:
        """The constrained field's instant right after the change `row` is in the window
        (Rule 1): the `time_before` of the field's next logged change, else the stored
        field's. The window is tested inside each look-up, so the statement names each once
        (Rule 5)."""
        later = change_log.alias(f"{name}_later")
        stored = fields.alias(f"{name}_field")
        next_before = (
            select(self._flag(later.c.time_before))
            .where(
                same_record(later, row),
                later.c.path == bindparam("g_time_field"),
                later.c.change_seq > row.c.change_seq,
            )
            .order_by(later.c.change_seq)
            .limit(1)
            .scalar_subquery()
        )
        now = (
            select(self._flag(stored.c.time_value))
            .where(same_record(stored, row), stored.c.path == bindparam("g_time_field"))
            .scalar_subquery()
        )
        return func.coalesce(next_before, now, 0) == 1

    def granted(self, row: Any) -> ColumnElement[bool]:
        path: ColumnElement[str] = row.c.path
        if self.every_field:
            return path != EXISTENCE
        return path.op("IN")(id_set(bindparam("c_fields", type_=IdList())))

    def _moved_in_window(self, row: Any) -> ColumnElement[bool]:
        """Rule 5's X: relevant when the record is in the window after the change."""
        ways: list[ColumnElement[bool]] = [
            row.c.path == EXISTENCE,
            row.c.live_before == False,  # noqa: E712 - SQL comparison
            self.granted(row),
        ]
        if self.shape.time_field:
            ways.append(
                and_(
                    row.c.path == bindparam("g_time_field"),
                    not_(self._in_window(func.coalesce(row.c.time_before, _NO_INSTANT))),
                )
            )
        return or_(*ways)

    def _left_window(self, row: Any) -> ColumnElement[bool]:
        """Rule 5's Y: relevant when the record is out of the window after the change."""
        return and_(
            row.c.path == bindparam("g_time_field"),
            row.c.live_before == True,  # noqa: E712 - SQL comparison
            self._in_window(func.coalesce(row.c.time_before, _NO_INSTANT)),
        )

    def relevant(
        self, row: Any, name: str, *, and_shown: ColumnElement[bool] | None = None
    ) -> ColumnElement[bool]:
        """Rule 1 for `row`; with `and_shown`, also that condition wherever the record is
        visible after the change (one look-up of the window for both)."""
        moved = self._moved_in_window(row)
        if and_shown is not None:
            moved = and_(moved, or_(self.tombstone_when_in_window(row), and_shown))
        if not self.shape.time_field:
            return moved
        return case((self.in_window_after(row, name), moved), else_=self._left_window(row))

    @staticmethod
    def tombstone_when_in_window(row: Any) -> ColumnElement[bool]:
        """The change left the record invisible even in the window: a delete."""
        return and_(row.c.path == EXISTENCE, row.c.live_before == True)  # noqa: E712

    def deleted_after(self, row: Any, name: str) -> ColumnElement[bool]:
        """The record is not visible right after the change `row`."""
        gone = self.tombstone_when_in_window(row)
        if not self.shape.time_field:
            return gone
        return case((self.in_window_after(row, name), gone), else_=true())


def changes_page(
    grant: StreamGrant,
    filter: Filter,
    *,
    connection_id: str | None,
    positions: Mapping[str, int],
    limit: int,
) -> Execute:
    """The next `limit` records whose view changed after `positions` (per connection, the last
    change seen) in (connection_id, change_seq) order (Rules 1-4), decoded by `change_rows`."""
    shape, filtered, params = shaped(grant, filter)
    every_field = grant.fields is None
    if not every_field:
        params["c_fields"] = sorted(grant.fields or ())
    named = sorted(positions)
    for number, conn in enumerate(named):
        params[f"c_conn_{number}"] = conn
        params[f"c_after_{number}"] = positions[conn]
    if named:
        params["c_named"] = named
    if connection_id is not None:
        params["c_scope"] = connection_id
    params["q_limit"] = limit
    statement = _walk(
        shape, filtered, every_field=every_field, named=len(named), scoped=connection_id is not None
    )
    return Execute(statement, params)


@per_shape
def _walk(
    shape: GrantShape, filtered: FilterShape, *, every_field: bool, named: int, scoped: bool
) -> Select[Any]:
    """The walk's statement, built once per shape (Rule 6)."""
    rule = _Relevance(shape, every_field=every_field)
    logged = change_log.alias("cl")
    other = change_log.alias("cl_other")
    static = visibility.visible_records(
        shape._replace(time_field=False, since=False, until=False), with_deleted=True
    )
    live = and_(visibility.visible_records(shape), shaped_condition(filtered, records))
    since = [
        and_(
            logged.c.connection_id == bindparam(f"c_conn_{number}"),
            logged.c.change_seq > bindparam(f"c_after_{number}", type_=BigInteger),
        )
        for number in range(named)
    ]
    if named:
        since.append(
            logged.c.connection_id.op("NOT IN")(id_set(bindparam("c_named", type_=IdList())))
        )
    scope: list[ColumnElement[bool]] = [logged.c.stream == bindparam("g_stream")]
    if scoped:
        scope.append(logged.c.connection_id == bindparam("c_scope"))
    later_relevant = exists().where(
        same_record(other, logged),
        or_(
            other.c.change_seq > logged.c.change_seq,
            and_(other.c.change_seq == logged.c.change_seq, other.c.path > logged.c.path),
        ),
        rule.relevant(other, "o"),
    )
    return (
        select(
            logged.c.connection_id,
            logged.c.record_id,
            logged.c.change_seq,
            case((rule.deleted_after(logged, "d"), true()), else_=false()).label("deleted"),
        )
        .select_from(logged.join(records, same_record(records, logged)))
        .where(
            *scope,
            or_(*since) if since else true(),
            static,
            rule.relevant(logged, "l", and_shown=live),
            not_(later_relevant),
        )
        .order_by(logged.c.connection_id, logged.c.stream, logged.c.change_seq)
        .limit(bindparam("q_limit", type_=Integer))
    )


@dataclass(frozen=True, slots=True)
class ChangeRow:
    connection_id: str
    record_id: str
    change_seq: int
    deleted: bool


def change_rows(rows: Rows | None) -> list[ChangeRow]:
    return [
        ChangeRow(
            str(row["connection_id"]),
            str(row["record_id"]),
            int(row["change_seq"]),
            bool(row["deleted"]),
        )
        for row in rows or ()
    ]


def counter_tops(connection_ids: Sequence[str]) -> Execute:
    """The change sequence's top of each named connection (decoded by `tops`)."""
    return Execute(
        select(change_counters.c.connection_id, change_counters.c.last_change_seq).where(
            change_counters.c.connection_id.in_(list(connection_ids))
        ),
        bounded=True,
    )


def tops(rows: Rows | None) -> dict[str, int]:
    return {str(row["connection_id"]): int(row["last_change_seq"]) for row in rows or ()}
