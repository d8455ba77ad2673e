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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    and_,
    bindparam,
    case,
    exists,
    false,
    func,
    literal,
    not_,
    or_,
    select,
    true,
)

from pdpp_store._core.filters import Filter
from pdpp_store._core.grants import StreamGrant

from . import visibility
from .dialects import IdList, id_set
from .filters import filter_condition
from .requests import Execute, Rows
from .tables import EXISTENCE, change_counters, change_log, fields, records
from .visibility import GrantShape, grant_terms, same_record

__all__ = ["ChangeRow", "change_rows", "changes_page", "counter_tops", "tops"]

_NO_INSTANT = ""
"""An instant that is no instant: below every stored one (a field absent or without one)."""


class _Relevance:
    """Rule 1's conditions on one alias of `change_log`, under one grant shape."""

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

    def _instant_after(self, row: Any, name: str) -> ColumnElement[Any]:
        """The constrained field's instant right after the change `row` (Rule 1)."""
        later = change_log.alias(f"{name}_later")
        stored = fields.alias(f"{name}_field")
        next_before = (
            select(func.coalesce(later.c.time_before, _NO_INSTANT))
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
            select(stored.c.time_value)
            .where(same_record(stored, row), stored.c.path == bindparam("g_time_field"))
            .scalar_subquery()
        )
        return func.coalesce(next_before, now, literal(_NO_INSTANT))

    def visible_after(self, row: Any, name: str) -> ColumnElement[bool]:
        dead_before: ColumnElement[bool] = row.c.live_before == False  # noqa: E712
        live_after = or_(row.c.path != EXISTENCE, dead_before)
        if not self.shape.time_field:
            return live_after
        return and_(live_after, self._in_window(self._instant_after(row, name)))

    def visible_before(self, row: Any, name: str) -> ColumnElement[bool]:
        live_before: ColumnElement[bool] = row.c.live_before == True  # noqa: E712
        if not self.shape.time_field:
            return live_before
        instant = case(
            (
                row.c.path == bindparam("g_time_field"),
                func.coalesce(row.c.time_before, _NO_INSTANT),
            ),
            else_=self._instant_after(row, name),
        )
        return and_(live_before, self._in_window(instant))

    def granted(self, row: Any) -> ColumnElement[bool]:
        path: ColumnElement[str] = row.c.path
        if self.every_field:
            return path != EXISTENCE
        return path.op("IN")(id_set(bindparam("c_fields", type_=IdList())))

    def relevant(self, row: Any, name: str) -> ColumnElement[bool]:
        before = self.visible_before(row, name)
        after = self.visible_after(row, name)
        return or_(
            and_(before, not_(after)),
            and_(after, or_(not_(before), self.granted(row))),
        )


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
    shape, terms = grant_terms(grant)
    params: dict[str, Any] = dict(terms)
    every_field = grant.fields is None
    if not every_field:
        params["c_fields"] = sorted(grant.fields or ())
    rule = _Relevance(shape, every_field=every_field)
    logged = change_log.alias("cl")
    other = change_log.alias("cl_other")
    static = visibility.visible_records(
        shape._replace(time_field=False, since=False, until=False), with_deleted=True
    )
    live = and_(visibility.visible_records(shape), filter_condition(filter, records))
    named = sorted(positions)
    since = [
        and_(logged.c.connection_id == conn, logged.c.change_seq > positions[conn])
        for conn in named
    ]
    if named:
        since.append(logged.c.connection_id.not_in(named))
    scope: list[ColumnElement[bool]] = [logged.c.stream == bindparam("g_stream")]
    if connection_id is not None:
        scope.append(logged.c.connection_id == connection_id)
    later_relevant = exists().where(
        same_record(other, logged),
        or_(
            other.c.change_seq > logged.c.change_seq,
            and_(other.c.change_seq == logged.c.change_seq, other.c.path > logged.c.path),
        ),
        rule.relevant(other, "o"),
    )
    shown_after = rule.visible_after(logged, "l")
    statement = (
        select(
            logged.c.connection_id,
            logged.c.record_id,
            logged.c.change_seq,
            case((shown_after, false()), else_=true()).label("deleted"),
        )
        .select_from(logged.join(records, same_record(records, logged)))
        .where(
            *scope,
            or_(*since) if since else true(),
            static,
            rule.relevant(logged, "l"),
            not_(later_relevant),
            or_(not_(shown_after), live),
        )
        .order_by(logged.c.connection_id, logged.c.stream, logged.c.change_seq)
        .limit(bindparam("q_limit", limit, type_=Integer))
    )
    return Execute(statement, params)


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
