"""The read audit's statements: write a batch of entries, list them for the owner, prune them.

Rows decode here too: `entry_of` turns a row into the `AuditEntry` card. Instants are
fixed-width UTC text (`normalize_instant`), so the filters by time compare strings in SQL.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from sqlalchemy import Delete, Select, and_, bindparam, delete, func, select, true

from pdpp_store.evidence import AuditEntry

from .dialects import Capabilities
from .requests import DriverSQL, Execute, Row
from .tables import read_audit

__all__ = [
    "ENTRY_COLUMNS",
    "count_before",
    "entry_of",
    "insert_entries",
    "list_entries",
    "prune_before",
]


ENTRY_COLUMNS = tuple(column.name for column in read_audit.columns if column.name != "audit_id")
"""The columns an entry gives (`_ops.audit.entry_row`'s keys), in the order they are inserted."""


def insert_entries(entries: Sequence[Mapping[str, Any]]) -> Execute:
    """One batch of entries (an executemany): each a mapping of `read_audit`'s columns but
    `audit_id`, as `_ops.audit.entry_row` makes them. Sent in the driver's own form, positional
    rows, without SQLAlchemy's per-row parameter processing (which cost the writer five times
    what the driver does; the audit's cost is measured in docs/benchmarks.md)."""
    rows = [tuple(entry[name] for name in ENTRY_COLUMNS) for entry in entries]
    return Execute(_insert, rows=rows)


@cache
def _insert(caps: Capabilities) -> DriverSQL:
    markers = ", ".join(caps.positional_marker for _ in ENTRY_COLUMNS)
    return DriverSQL(f"INSERT INTO read_audit ({', '.join(ENTRY_COLUMNS)}) VALUES ({markers})")


def list_entries(
    *,
    grant_id: str | None,
    since: str | None,
    until: str | None,
    after_id: int,
    limit: int,
) -> Execute:
    """At most `limit` entries after `after_id`, oldest first, narrowed to one grant and to
    `since <= at < until` when given."""
    return Execute(
        _list(grant_id is not None, since is not None, until is not None),
        {
            "a_grant": grant_id,
            "a_since": since,
            "a_until": until,
            "a_after": after_id,
            "a_limit": limit,
        },
    )


@cache
def _list(by_grant: bool, by_since: bool, by_until: bool) -> Select[Any]:
    conditions = [read_audit.c.audit_id > bindparam("a_after")]
    if by_grant:
        conditions.append(read_audit.c.grant_id == bindparam("a_grant"))
    if by_since:
        conditions.append(read_audit.c.at >= bindparam("a_since"))
    if by_until:
        conditions.append(read_audit.c.at < bindparam("a_until"))
    return (
        select(*read_audit.c)
        .where(and_(true(), *conditions))
        .order_by(read_audit.c.audit_id)
        .limit(bindparam("a_limit"))
    )


def count_before(before: str) -> Execute:
    """How many entries were written before `before` (what `prune_before` deletes)."""
    return Execute(_count(), {"a_before": before})


@cache
def _count() -> Select[Any]:
    return select(func.count().label("n")).where(read_audit.c.at < bindparam("a_before"))


def prune_before(before: str) -> Execute:
    """Delete the entries written before `before`."""
    return Execute(_prune(), {"a_before": before})


@cache
def _prune() -> Delete:
    return delete(read_audit).where(read_audit.c.at < bindparam("a_before"))


def entry_of(row: Row) -> AuditEntry:
    terms = json.loads(row["terms"])
    return AuditEntry(
        audit_id=int(row["audit_id"]),
        at=row["at"],
        surface=row["surface"],
        operation=row["operation"],
        outcome=row["outcome"],
        request_id=row["request_id"],
        grant_id=row["grant_id"],
        client=row["client"],
        stream=row["stream"],
        connection_id=row["connection_id"],
        record_ids=tuple(json.loads(row["record_ids"])),
        record_count=int(row["record_count"]),
        fields=tuple(json.loads(row["fields"])),
        terms=terms if isinstance(terms, dict) else {},
    )
