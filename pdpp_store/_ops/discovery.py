"""Discovery (docs/contract.md §11.3): what a grant covers, what may be asked of each granted
stream, and how much there is to ask about, as an operation driven by `_runtime` (no I/O here).

Per granted stream, in this order:

1. The covered connections whose manifest declares it, and from their manifests the declared
   fields the grant covers, with type, text-likeness, searchability and declared role (where
   connectors declare a field differently, the first declaring connection's, by id).
2. What may be asked, from the first declaring connection's manifest and under the grant:
   filter operators per granted field (`_core.filters.filter_operators`), the order field when
   granted, the aggregations and views naming granted fields only. Nothing read here names a
   field the grant does not cover.
3. The figures, in SQL over the visible records of those connections (`_sql.discovery`): the
   record count and the newest write, then, only when the order field is granted, its bounds
   (per connection, each end by a walk of the value index that stops at the first visible
   record; the least and greatest of those).
   A stream no covered connection declares reads nothing and counts zero.

`stream` narrows the answer to one stream: it must be a safe name the grant names
(`grant_stream_not_allowed` otherwise), checked before anything is read.

Without it the answer is a page of the grant's streams in name order (docs/decisions.md,
"`describe_grant` a page at a time"): those after `after` (a safe name, any: the names are the
grant's own), at most `limit` (1..`MAX_LIMIT`, default 25), and the page ends before the stream
whose schema would take the page's JSON past `PAGE_BUDGET_CHARS` (a page always shows one).
`next` is the call that lists the rest. So one answer reads at most `limit` streams' figures and
is bounded in size whatever the grant names. Arguments are checked before anything is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pdpp_store._core.errors import BadRequest
from pdpp_store._core.filters import filter_operators
from pdpp_store._core.grants import Grant, StreamGrant, as_grant
from pdpp_store._core.identity import validate_safe_name
from pdpp_store._core.manifest import StreamSpec
from pdpp_store._sql import discovery as discovery_sql
from pdpp_store._sql.requests import Op
from pdpp_store.evidence import (
    Continuation,
    FieldSchema,
    GrantSchema,
    StreamOrder,
    StreamSchema,
)

from .declared import declaring
from .reads import ReadContext

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "PAGE_BUDGET_CHARS", "describe_grant"]

DEFAULT_LIMIT = 25
MAX_LIMIT = 100
PAGE_BUDGET_CHARS = 64 * 1024
"""The characters of JSON one page of streams shows in all: the page ends before the stream
that would pass it (a page always shows at least one)."""


def _aggregations(spec: StreamSpec, scope: StreamGrant) -> dict[str, Any]:
    shown = spec.aggregations.to_json()
    granted: dict[str, Any] = {"count": shown.pop("count")}
    for name, names in shown.items():
        kept = [path for path in names if scope.allows_field(path)]
        if kept:
            granted[name] = kept
    return granted


def _views(spec: StreamSpec, scope: StreamGrant) -> tuple[Mapping[str, Any], ...]:
    views = []
    for view in spec.views:
        kept = [path for path in view.fields if scope.allows_field(path)]
        if kept:
            views.append({"id": view.id, "label": view.label, "fields": kept})
    return tuple(views)


def _numeric(spec: StreamSpec, path: str) -> bool:
    """Whether the order field's bounds are numbers: its declared type holds numbers and no
    strings (a string field, or one of undeclared type, is bounded by its instants)."""
    known = spec.declared[path]
    return not known.admits("string") and known.admits("integer")


def _fields(scope: StreamGrant, specs: list[StreamSpec]) -> tuple[FieldSchema, ...]:
    """The declared fields the grant covers, the first declaring spec's declaration of each."""
    merged: dict[str, FieldSchema] = {}
    for spec in specs:
        for name, known in spec.declared.items():
            if name not in merged and scope.allows_field(name):
                merged[name] = FieldSchema(
                    name, known.json_type, known.text_like, name in spec.lexical_fields, known.role
                )
    return tuple(merged[name] for name in sorted(merged))


def _described(scope: StreamGrant, conns: list[str], specs: list[StreamSpec]) -> Op[StreamSchema]:
    if not specs:
        return StreamSchema(scope.name, tuple(conns), ())
    spec = specs[0]
    fields = _fields(scope, specs)
    figures = discovery_sql.read_figures((yield discovery_sql.stream_figures(scope, conns)) or [])
    order = StreamOrder()
    path = spec.order_field
    if path is not None and scope.allows_field(path):
        numeric = _numeric(spec, path)
        ends: list[list[Any]] = [[], []]
        for conn in conns:
            for newest in (False, True):
                asked = discovery_sql.order_bounds(
                    scope, conn, path, numeric=numeric, newest=newest
                )
                found = discovery_sql.read_bound((yield asked) or [], numeric=numeric)
                if found is not None:
                    ends[newest].append(found)
        oldest = min(ends[0]) if ends[0] else None
        latest = max(ends[1]) if ends[1] else None
        order = StreamOrder(path, oldest, latest)
    return StreamSchema(
        scope.name,
        tuple(conns),
        fields,
        filters=filter_operators(spec, scope),
        order=order,
        aggregations=_aggregations(spec, scope),
        views=_views(spec, scope),
        record_count=figures.record_count,
        last_written_at=figures.last_written_at,
    )


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise BadRequest(
            "invalid_request", f"limit must be an integer between 1 and {MAX_LIMIT}", param="limit"
        )
    return value


def _size(schema: StreamSchema) -> int:
    return len(json.dumps(schema.to_dict(), ensure_ascii=False, separators=(",", ":")))


def describe_grant(
    ctx: ReadContext,
    grant: Grant,
    stream: object = None,
    limit: object = DEFAULT_LIMIT,
    after: object = None,
) -> Op[GrantSchema]:
    """The grant's streams, what may be asked of each, and their figures (see the module)."""
    grant = as_grant(grant)
    if stream is not None:
        validate_safe_name(stream, "stream")
    size = _limit(limit)
    if after is not None:
        validate_safe_name(after, "after")
        if stream is not None:
            raise BadRequest(
                "invalid_request", "after pages the grant's streams: not with stream", param="after"
            )
    grant.ensure_usable()
    if stream is not None:
        assert isinstance(stream, str)
        names = [grant.stream(stream).name]  # grant_stream_not_allowed
    else:
        names = sorted(s.name for s in grant.streams if after is None or s.name > str(after))
    more = len(names) > size
    names = names[:size]
    catalogue = (yield from declaring(ctx, grant, names, None)) if names else []
    described: list[StreamSchema] = []
    used = 0
    for name in names:
        scope = grant.stream(name)
        conns: list[str] = []
        specs: list[StreamSpec] = []
        for conn, declared, manifest in sorted(catalogue, key=lambda item: item[0]):
            spec = manifest.spec(name) if declared == name else None
            if spec is not None:
                conns.append(conn)
                specs.append(spec)
        schema = yield from _described(scope, sorted(set(conns)), specs)
        used += _size(schema)
        if described and used > PAGE_BUDGET_CHARS:
            more = True
            break
        described.append(schema)
    following = None
    if more:
        arguments: dict[str, Any] = {"after": described[-1].name}
        if size != DEFAULT_LIMIT:
            arguments["limit"] = size
        following = Continuation("describe_grant", arguments)
    return GrantSchema(grant.grant_id, tuple(described), following)
