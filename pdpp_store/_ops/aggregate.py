"""`aggregate` (docs/contract.md §12) as an operation driven by `_runtime` (no I/O, no SQL here).

Step by step:

1. The request's shape (`_core.aggregates.parse_request`), the stream's and connection's names.
2. The grant: usable, the stream granted, the connection covered, every field the request
   names granted (`check_granted`). No record is read before this step ends.
3. The manifests of the covered connections that declare the stream (the catalogue, never a
   record); the filter checked against them (`parse_filter`: its shape, its fields granted, then
   declared), then the aggregation declared (`check_declared`).
4. For time buckets, the range of the grouping field's instants among the visible records, and
   the zone's offset changes over it (`offset_changes`), bound into the statement; for a count
   over the field's values alone, the range cut into each bucket's ranges of instants
   (`bucket_ranges`) when they are few.
5. The one statement that answers (`_sql.aggregates.aggregate`); its few rows become the card.
   A count by bucket ranges that finds instants outside its ranges (written since step 4) is
   asked again per span, in one statement that reads them all.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from pdpp_store._core.aggregates import (
    AggregateRequest,
    bucket_bounds,
    bucket_key,
    bucket_ranges,
    check_declared,
    check_granted,
    offset_changes,
    parse_request,
    reads_numbers,
)
from pdpp_store._core.errors import NotFound
from pdpp_store._core.filters import Filter, parse_filter
from pdpp_store._core.grants import Grant, as_grant
from pdpp_store._core.identity import validate_safe_name
from pdpp_store._core.manifest import StreamSpec
from pdpp_store._sql import aggregates as aggregate_sql
from pdpp_store._sql.requests import Op
from pdpp_store.evidence import AggregateGroup, AggregateResult, Continuation

from .declared import declaring
from .reads import ReadContext

__all__ = ["aggregate"]

_ESCAPE = "\x01"


def _unstored(text: str) -> str:
    """The folded string `filters.stored_text` stored as `text` (its inverse)."""
    if not text.startswith(_ESCAPE):
        return text
    out: list[str] = []
    rest = iter(text[1:])
    for char in rest:
        if char == _ESCAPE:
            follow = next(rest, "")
            out.append("\x00" if follow == "\x02" else _ESCAPE)
        else:
            out.append(char)
    return "".join(out)


def shown_instant(instant: str) -> str:
    """A normalised instant as an answer shows it: without a fraction of zeros."""
    if instant.endswith(".000000Z"):
        return instant[:19] + "Z"
    return instant


def _specs(
    ctx: ReadContext, grant: Grant, stream: str, connection_id: str | None
) -> Op[tuple[StreamSpec, ...]]:
    found = yield from declaring(ctx, grant, [stream], connection_id)
    specs: dict[str, StreamSpec] = {}
    for _, name, manifest in found:
        spec = manifest.spec(name)
        if spec is not None:
            specs.setdefault(manifest.connector_id, spec)
    return tuple(specs[connector] for connector in sorted(specs))


def _filter(raw: object, specs: tuple[StreamSpec, ...], stream: str, scope: Any) -> Filter:
    """The filter checked against every declaring manifest (the first one's parse is kept:
    equal checks give equal filters); with none, against a manifest that declares nothing."""
    parsed = [parse_filter(raw, spec, scope) for spec in specs]
    if parsed:
        return parsed[0]
    return parse_filter(raw, StreamSpec(stream, ("id",), None, {}), scope)


def _raw_filter(raw: object) -> dict[str, Any]:
    if raw is None:
        return {}
    if isinstance(raw, str):
        loaded = json.loads(raw)
        return dict(loaded) if isinstance(loaded, Mapping) else {}
    return dict(raw) if isinstance(raw, Mapping) else {}


def _group_key(request: AggregateRequest, row: aggregate_sql.GroupRow) -> Any:
    if request.group_by is not None:
        if row.kind == "string":
            return _unstored(str(row.text))
        if row.kind == "boolean":
            return row.text == "true"
        if row.kind == "number":
            return row.number
        return None
    if row.bucket is None:
        return None
    return bucket_key(request.granularity, row.bucket, row.offset)


def _query(
    request: AggregateRequest,
    *,
    specs: tuple[StreamSpec, ...],
    stream: str,
    connection_id: str | None,
    raw_filter: dict[str, Any],
    key: Any,
) -> Continuation | None:
    """The `query_records` call listing a group's records: the request's filter and a clause
    naming the group, where a filter can (a non-null key; for a time bucket, a `gte`/`lt`
    range the manifests declare on the field)."""
    name = request.group_by or request.group_by_time
    if key is None or name is None or name in raw_filter or not specs:
        return None
    clause: Any = key
    if request.group_by_time is not None:
        if not all({"gte", "lt"} <= set(spec.range_filters.get(name, ())) for spec in specs):
            return None
        start, end = bucket_bounds(request.granularity, str(key), request.zone)
        clause = {"gte": shown_instant(start), "lt": shown_instant(end)}
    arguments: dict[str, Any] = {"stream": stream, "filter": {**raw_filter, name: clause}}
    if connection_id is not None:
        arguments["connection_id"] = connection_id
    return Continuation("query_records", arguments)


def aggregate(
    ctx: ReadContext,
    grant: Grant,
    stream: object,
    *,
    metric: object = "count",
    field: object = None,
    group_by: object = None,
    group_by_time: object = None,
    granularity: object = "month",
    time_zone: object = "UTC",
    filter: object = None,
    connection_id: object = None,
    limit: object = 25,
) -> Op[AggregateResult]:
    request = parse_request(
        metric,
        field=field,
        group_by=group_by,
        group_by_time=group_by_time,
        granularity=granularity,
        time_zone=time_zone,
        limit=limit,
    )
    validate_safe_name(stream, "stream")
    assert isinstance(stream, str)
    if connection_id is not None:
        validate_safe_name(connection_id, "connection_id")
    conn = connection_id if isinstance(connection_id, str) else None
    grant = as_grant(grant)
    grant.ensure_usable()
    stream_grant = grant.stream(stream)
    if conn is not None and not stream_grant.covers_connection(conn):
        raise NotFound(
            "connection_not_found", f"connection {conn!r} is not found", param="connection_id"
        )
    check_granted(request, stream, stream_grant)
    specs = yield from _specs(ctx, grant, stream, conn)
    parsed = _filter(filter, specs, stream, stream_grant)
    check_declared(request, specs, stream)
    numbers = request.field is not None and reads_numbers(specs, request.field)
    offsets = None
    low = high = "1970-01-01T00:00:00.000000Z"
    if request.group_by_time is not None:
        span = aggregate_sql.instant_span(
            (yield aggregate_sql.instant_range(stream_grant, conn, parsed, request.group_by_time))
            or []
        )
        low, high = span if span is not None else (low, high)
        offsets = offset_changes(request.zone, low, high)
    plan = aggregate_sql.AggregatePlan(
        request.metric,
        request.field,
        numbers,
        request.group_by,
        request.group_by_time,
        request.granularity,
        offsets,
        request.limit,
        by_values=(request.group_by or request.group_by_time) is not None
        and aggregate_sql.counts_by_values(request.metric, stream_grant, parsed),
    )
    if plan.by_values and offsets is not None:
        plan = replace(plan, ranges=bucket_ranges(request.granularity, offsets, low, high))
    rows = (yield aggregate_sql.aggregate(plan, stream_grant, conn, parsed)) or []
    if aggregate_sql.ranges_missed(plan, rows):
        plan = replace(plan, ranges=None)
        rows = (yield aggregate_sql.aggregate(plan, stream_grant, conn, parsed)) or []
    if request.group_by is None and request.group_by_time is None:
        value = aggregate_sql.aggregate_value(plan, rows)
        if isinstance(value, str):
            value = shown_instant(value)
        return AggregateResult(stream, request.metric, request.field, value)
    found, total = aggregate_sql.aggregate_groups(plan, rows)
    raw = _raw_filter(filter)
    groups: list[AggregateGroup] = []
    for row in found:
        key = _group_key(request, row)
        value = shown_instant(row.value) if isinstance(row.value, str) else row.value
        query = _query(
            request, specs=specs, stream=stream, connection_id=conn, raw_filter=raw, key=key
        )
        groups.append(AggregateGroup(key, value, row.records, query))
    shown = sum(group.records for group in groups)
    return AggregateResult(
        stream,
        request.metric,
        request.field,
        groups=tuple(groups),
        other_count=total - shown,
        group_by=request.group_by,
        group_by_time=request.group_by_time,
        granularity=request.granularity if request.group_by_time is not None else None,
        time_zone=request.time_zone if request.group_by_time is not None else None,
    )
