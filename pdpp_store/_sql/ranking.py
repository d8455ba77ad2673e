"""Statements that feed the relevance order of search (docs/contract.md §9, "Order";
`_core.relevance`): the scored text of every hit's searchable granted fields, and the hits'
order-field instants for ties.

Rules:
1. Only targets the operation chose (the hits' searchable granted fields, the granted order
   field) are read, each joined to its record under its stream grant's visibility, as the
   page's evidence is (`search._page_fields`): nothing else leaves the database.
   `hit_counts` reads the searched groups' paths of given records under the search's own
   scope (`search._in_scope`'s visibility, connections and filter), as `search.hits` does:
   the filter's fields and values bound, the statement cached per its shape (`search` Rule 6).
2. Texts are the stored chunks, first `chunks` of each field, in order, with the field's whole
   length: the score reads a bounded prefix (`relevance.SCORE_CHARS`).
3. Occurrences are counted in the database (`replace`), never by sending text: the folded
   prefix has `min(size_chars, chunks * CHUNK_CHARS)` code points (folding keeps lengths), so
   one `replace` per needle gives its count. A phrase (`layout.is_phrase`) is counted in the
   squeezed prefix (`match.squeezed`) with its squeezed needle: the counts `layout.spans`
   gives (docs/decisions.md, "Phrases that forgive layout").
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, partial
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    false,
    func,
    literal,
    or_,
    select,
)

from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.layout import is_phrase
from pdpp_store._core.values import CHUNK_CHARS

from . import visibility
from .dialects import Capabilities, bound_rows, least
from .filters import FilterShape, shaped_condition
from .match import bound_needle, squeezed
from .requests import Execute, Rows
from .search import (
    _TARGET_COLUMNS,
    SearchGroup,
    Target,
    _bound_json,
    _filter_prefix,
    _filters,
    _layout,
    _page_fields,
    _page_params,
    _scope_params,
)
from .shapes import per_shape
from .tables import field_chunks, fields, records
from .visibility import GrantShape, kind_in, same_record

__all__ = [
    "field_counts",
    "field_texts",
    "hit_counts",
    "occurrence_counts",
    "scored_texts",
    "time_values",
    "times",
]


def scored_texts(grants: Sequence[StreamGrant], targets: Sequence[Target], chunks: int) -> Execute:
    """The first `chunks` chunks of each target field that is visible and text-like, with the
    field's length (decoded by `field_texts`)."""
    params = {**_page_params(grants), "r_targets": _bound_json(targets), "r_chunks": chunks}
    shapes = tuple(GrantShape.of(grant) for grant in grants)
    return Execute(partial(_scored_texts, shapes), params)


@cache
def _scored_texts(shapes: tuple[GrantShape, ...], caps: Capabilities) -> Select[Any]:
    targets = bound_rows(caps, "r_targets", _TARGET_COLUMNS)
    page, conditions = _page_fields(shapes, targets)
    chunk = field_chunks
    joined = page.outerjoin(
        chunk,
        and_(
            same_record(chunk, fields),
            chunk.c.path == fields.c.path,
            chunk.c.chunk_no < bindparam("r_chunks", type_=Integer),
        ),
    )
    return (
        select(
            fields.c.connection_id,
            fields.c.stream,
            fields.c.record_id,
            fields.c.path,
            fields.c.size_chars,
            chunk.c.chunk_no,
            chunk.c.text,
        )
        .select_from(joined)
        .where(conditions)
    )


def field_texts(rows: Rows) -> dict[Target, tuple[str, int]]:
    """`scored_texts`' answer: per target, (its first chunks' text, its whole length)."""
    parts: dict[Target, dict[int, str]] = {}
    sizes: dict[Target, int] = {}
    for row in rows:
        target = (row["connection_id"], row["stream"], row["record_id"], row["path"])
        sizes[target] = int(row["size_chars"])
        pieces = parts.setdefault(target, {})
        if row["chunk_no"] is not None:
            pieces[int(row["chunk_no"])] = row["text"]
    return {
        target: ("".join(parts[target][n] for n in sorted(parts[target])), sizes[target])
        for target in sizes
    }


def occurrence_counts(
    grants: Sequence[StreamGrant], targets: Sequence[Target], needles: Sequence[str], chunks: int
) -> Execute:
    """Per target field that is visible and text-like: its whole length and, per needle, the
    code points that removing the needle's occurrences from its folded first `chunks` chunks
    removes (decoded by `field_counts` into occurrence counts). Occurrences are found left to
    right without overlap (`replace`), as `relevance.occurrence_weight` finds them, so the
    counts bound the score from above without any text leaving the database."""
    params: dict[str, Any] = {
        **_page_params(grants),
        "r_targets": _bound_json(targets),
        **{f"r_n{n}": bound_needle(needle) for n, needle in enumerate(needles)},
    }
    shapes = tuple(GrantShape.of(grant) for grant in grants)
    return Execute(partial(_occurrence_counts, shapes, _phrases(needles), chunks), params)


def _phrases(needles: Sequence[str]) -> tuple[bool, ...]:
    """Per needle, whether it is a phrase (counted in squeezed text, Rule 3)."""
    return tuple(is_phrase(needle) for needle in needles)


@cache
def _occurrence_counts(
    shapes: tuple[GrantShape, ...], needles: tuple[bool, ...], chunks: int, caps: Capabilities
) -> Select[Any]:
    targets = bound_rows(caps, "r_targets", _TARGET_COLUMNS)
    joined, conditions = _page_fields(shapes, targets)
    return _counted(joined, needles, chunks, "r_n", conditions)


def _counted(
    joined: Any,
    needles: tuple[bool, ...],
    chunks: int,
    prefix_name: str,
    *where: ColumnElement[bool],
) -> Select[Any]:
    """The rows `field_counts` decodes: each field of `joined` that meets `where`, its whole
    length and its needles' `removed<n>` counts (`_prefix_counts`)."""
    joined, removed = _prefix_counts(joined, needles, chunks, prefix_name)
    return (
        select(
            fields.c.connection_id,
            fields.c.stream,
            fields.c.record_id,
            fields.c.path,
            fields.c.size_chars,
            *removed,
        )
        .select_from(joined)
        .where(*where)
    )


def _prefix_counts(
    joined: Any, needles: tuple[bool, ...], chunks: int, prefix_name: str
) -> tuple[Any, list[Any]]:
    """`joined` (which holds `fields`) with the field's first `chunks` chunks outer-joined, and
    per needle (parameters `<prefix_name><n>`; `needles` says which are phrases) the code
    points its occurrences take in the folded prefix (squeezed, for a phrase), labelled
    `removed<n>` (Rule 3)."""
    prefix: Any = literal("", String)
    for number in range(chunks):
        chunk = field_chunks.alias(f"c{number}")
        joined = joined.outerjoin(
            chunk,
            and_(
                same_record(chunk, fields),
                chunk.c.path == fields.c.path,
                chunk.c.chunk_no == number,
            ),
        )
        prefix = prefix + func.coalesce(chunk.c.folded, chunk.c.text, "")
    length = least(fields.c.size_chars, chunks * CHUNK_CHARS)
    squeezed_prefix = squeezed(prefix, chunks * CHUNK_CHARS)
    removed = []
    for n, phrase in enumerate(needles):
        needle = bindparam(f"{prefix_name}{n}", type_=String)
        text, size = (squeezed_prefix, func.length(squeezed_prefix)) if phrase else (prefix, length)
        removed.append((size - func.length(func.replace(text, needle, ""))).label(f"removed{n}"))
    return joined, removed


def hit_counts(
    grants: Sequence[StreamGrant],
    groups: Sequence[SearchGroup],
    needles: Sequence[str],
    chunks: int,
    among: Sequence[Target],
) -> Execute:
    """For each target field `among` (the searched paths of records the search may find) of a
    record the search may return (`search._in_scope` without the terms: visible under its
    stream grant, in a searched connection, matching its group's filter) that is text-like: the
    field's whole length and the needles' occurrence counts in its folded first `chunks`
    chunks, as `occurrence_counts` gives them (decoded by `field_counts`). A record whose
    searched fields all lie within the counted prefix is a hit exactly when every needle is
    counted in one of them: the counts decide the hit and bound its score in one pass."""
    params: dict[str, Any] = {
        **_scope_params(grants, groups, None),
        "k_targets": _bound_json(among),
        **{f"k_n{n}": bound_needle(needle) for n, needle in enumerate(needles)},
    }
    shapes, layout = _layout(grants, groups)
    filters, filter_params = _filters(groups)
    params.update(filter_params)
    return Execute(partial(_hit_counts, shapes, layout, filters, _phrases(needles), chunks), params)


def _searched_paths(targets: Any) -> ColumnElement[bool]:
    """The field is the target's path: one of its group's searched paths (Rule 1)."""
    same: ColumnElement[bool] = fields.c.path == targets.c.path
    return same


@per_shape
def _hit_counts(  # noqa: PLR0917 - the statement's shape
    shapes: tuple[GrantShape, ...],
    layout: tuple[int, ...],
    filters: tuple[FilterShape, ...],
    needles: tuple[bool, ...],
    chunks: int,
    caps: Capabilities,
) -> Select[Any]:
    targets = bound_rows(caps, "k_targets", _TARGET_COLUMNS)
    joined = targets.join(records, same_record(records, targets)).join(
        fields, and_(same_record(fields, records), _searched_paths(targets))
    )
    in_scope: list[ColumnElement[bool]] = [
        and_(
            visibility.visible_records(shapes[grant_index], f"g{grant_index}"),
            # On the bound targets, not on `records`: the same record (joined by key), but
            # no index on it for a planner to walk every record of the stream with (SQLite
            # did, reading the bound targets again for each).
            targets.c.connection_id.in_(bindparam(f"c{number}", expanding=True)),
            *(
                (shaped_condition(filters[number], records, prefix=_filter_prefix(number)),)
                if filters
                else ()
            ),
        )
        for number, grant_index in enumerate(layout)
    ]
    condition = or_(*in_scope) if in_scope else false()
    return _counted(joined, needles, chunks, "k_n", condition, kind_in(text_like=True))


def field_counts(rows: Rows, needles: Sequence[str]) -> dict[Target, tuple[tuple[int, ...], int]]:
    """`occurrence_counts`' answer: per target, (occurrences per needle, whole length)."""
    return {
        (row["connection_id"], row["stream"], row["record_id"], row["path"]): (
            tuple(
                int(row[f"removed{n}"]) // len(bound_needle(needle))
                for n, needle in enumerate(needles)
            ),
            int(row["size_chars"]),
        )
        for row in rows
    }


def times(grants: Sequence[StreamGrant], targets: Sequence[Target]) -> Execute:
    """The normalised instant (`fields.time_value`) of each target field (the hits' order
    field, where granted), visible records only (decoded by `time_values`)."""
    params = {**_page_params(grants), "r_targets": _bound_json(targets)}
    shapes = tuple(GrantShape.of(grant) for grant in grants)
    return Execute(partial(_times, shapes), params)


@cache
def _times(shapes: tuple[GrantShape, ...], caps: Capabilities) -> Select[Any]:
    targets = bound_rows(caps, "r_targets", _TARGET_COLUMNS)
    page, conditions = _page_fields(shapes, targets)  # an instant is text: text-like kinds
    return (
        select(fields.c.connection_id, fields.c.stream, fields.c.record_id, fields.c.time_value)
        .select_from(page)
        .where(conditions)
    )


def time_values(rows: Rows) -> dict[tuple[str, str, str], str | None]:
    """`times`' answer, by record key."""
    return {
        (row["connection_id"], row["stream"], row["record_id"]): row["time_value"] for row in rows
    }
