"""The record cards of a page of records (docs/contract.md §13), possibly of several streams,
in one statement: the values of their declared-role fields.

Rules:
1. The fields read are named one by one in the bound targets, decided in Python from the
   manifests' roles and the grant (`_ops.cards.page_cards`): a field the grant does not cover
   is never named, so none of its bytes leaves the database.
2. Every row carries the visibility condition of the stream grant of its record's stream
   (`visibility.visible_records`, one disjunct per stream grant, each naming its stream): a
   record hidden since the page was chosen gives no row, and its card no slot.
3. Only text-like fields, and of each only the first `c_chars` code points of its first chunk
   (a slot shows fewer): a card costs the same whatever its fields' sizes.
4. As everywhere in `_sql`: every selected column is labelled and the rows are decoded by label
   (`card_values`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache, partial
from typing import Any

from sqlalchemy import Integer, Select, and_, bindparam, func, or_, select

from pdpp_store._core.grants import StreamGrant
from pdpp_store.evidence import FieldInfo

from . import visibility
from .dialects import BoundColumns, Capabilities, bound_rows
from .reads import FIELD_META, field_info
from .requests import Execute, Rows
from .tables import field_chunks, fields, records
from .visibility import GrantShape, few_terms, grant_params, kind_in, same_record

__all__ = ["MAX_TARGETS", "CardTarget", "CardValue", "card_fields", "card_values"]

MAX_TARGETS = 1024
"""Up to this many fields, a page's card statement is `bounded` (a page of 50 hits with a
handful of role fields each stays well below)."""

CardTarget = tuple[str, str, str, str]
"""A role field of a record on the page: (connection_id, stream, record_id, path)."""

CardValue = tuple[FieldInfo, str | None]
"""A role field's metadata and the first code points of its stored text (None: no text)."""

_TARGET_COLUMNS: BoundColumns = tuple(
    (name, True) for name in ("connection_id", "stream", "record_id", "path")
)


def card_fields(
    grants: Sequence[StreamGrant], targets: Sequence[CardTarget], chars: int
) -> Execute:
    """The metadata and the first `chars` code points of each target field (rules 1-3), for a
    whole page; decoded by `card_values`. `grants` are the page's stream grants, one per
    stream at most."""
    params: dict[str, Any] = {"c_chars": chars}
    for number, grant in enumerate(grants):
        params.update(grant_params(grant, f"g{number}"))
    params["c_targets"] = json.dumps([list(target) for target in targets], ensure_ascii=False)
    shapes = tuple(GrantShape.of(grant) for grant in grants)
    bounded = all(few_terms(grant) for grant in grants) and len(targets) <= MAX_TARGETS
    return Execute(partial(_card_fields, shapes), params, bounded=bounded)


@cache
def _card_fields(shapes: tuple[GrantShape, ...], caps: Capabilities) -> Select[Any]:
    targets = bound_rows(caps, "c_targets", _TARGET_COLUMNS)
    first_chunk = and_(
        same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        field_chunks.c.chunk_no == 0,
    )
    # Record tables are joined to each other by key, not only to the bound targets (Citus
    # co-locates by `connection_id`, as `search._page_fields` does).
    joined = (
        targets.join(records, same_record(records, targets))
        .join(fields, and_(same_record(fields, records), fields.c.path == targets.c.path))
        .outerjoin(field_chunks, first_chunk)
    )
    visible = or_(*(visibility.visible_records(shape, f"g{n}") for n, shape in enumerate(shapes)))
    return (
        select(
            fields.c.connection_id,
            fields.c.stream,
            fields.c.record_id,
            *FIELD_META,
            func.substr(field_chunks.c.text, 1, bindparam("c_chars", type_=Integer)).label("head"),
        )
        .select_from(joined)
        .where(visible, kind_in(text_like=True))
    )


def card_values(rows: Rows | None) -> dict[CardTarget, CardValue]:
    """`card_fields`' answer, by target: the visible text-like fields only."""
    found: dict[CardTarget, CardValue] = {}
    for row in rows or ():
        info = field_info(row)
        if info is not None:
            target = (str(row["connection_id"]), str(row["stream"]), str(row["record_id"]))
            found[(*target, info.path)] = (info, row["head"])
    return found
