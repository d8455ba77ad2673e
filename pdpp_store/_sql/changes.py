"""`query_records`' changes pages (docs/contract.md §11.2, "Changes"): the visible records
changed since a bookmark, with tombstones, and the change sequence's tops a bookmark is checked
against.

Rules:
1. A changes page takes the stream grant's visibility condition without its `deleted` term
   (`visibility.visible_records(..., with_deleted=True)`): a deleted record gives a tombstone
   exactly where it would be visible were it not deleted, whatever the filter (its comparable
   values are gone at the delete); a live record must match the filter.
2. Changes go by (connection_id, change_seq) ascending, strictly after the bookmark's position
   per connection (a connection the bookmark does not name: from the beginning): the change
   sequence is per connection (`tables` Rule 9).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Integer, and_, bindparam, or_, select, true

from pdpp_store._core.filters import Filter
from pdpp_store._core.grants import StreamGrant

from . import visibility
from .filters import filter_condition
from .requests import Execute, Rows
from .tables import change_counters, records
from .visibility import grant_terms

__all__ = ["ChangeRow", "change_rows", "changes_page", "counter_tops", "tops"]


def changes_page(
    grant: StreamGrant,
    filter: Filter,
    *,
    connection_id: str | None,
    positions: Mapping[str, int],
    limit: int,
) -> Execute:
    """The next `limit` changes after `positions` (per connection, the last change seen) in
    (connection_id, change_seq) order: visible records matching `filter` and tombstones of
    records that would be visible were they not deleted (Rules 1, 4), decoded by
    `change_rows`."""
    shape, terms = grant_terms(grant)
    scope = visibility.visible_records(shape, with_deleted=True)
    if connection_id is not None:
        scope = and_(scope, records.c.connection_id == connection_id)
    named = sorted(positions)
    since = [
        and_(records.c.connection_id == conn, records.c.change_seq > positions[conn])
        for conn in named
    ]
    if named:
        since.append(records.c.connection_id.not_in(named))
    statement = (
        select(
            records.c.connection_id,
            records.c.record_id,
            records.c.change_seq,
            records.c.deleted,
        )
        .where(
            scope,
            or_(*since) if since else true(),
            or_(records.c.deleted == True, filter_condition(filter, records)),  # noqa: E712
        )
        .order_by(records.c.connection_id, records.c.change_seq)
        .limit(bindparam("q_limit", limit, type_=Integer))
    )
    return Execute(statement, dict(terms))


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
