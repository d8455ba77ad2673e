"""`query_records` (docs/contract.md §11.2) as an operation driven by `_runtime` (no I/O here).

Step by step:

1. Arguments, by shape alone: `stream` and `connection_id` safe names, `order` `desc`|`asc`,
   `limit` 1..100, `count` `none`|`exact`, `cursor` and `changes_since` non-empty strings,
   `fields` a list of field paths.
2. The grant: usable, the stream granted (`grant_stream_not_allowed`), the connection covered
   (`connection_not_found`), every field of `fields` granted (`field_not_granted`, param
   `fields`). No record row is read before these, nor before step 4.
3. The catalogue: the manifests of the covered connections declaring the stream (none:
   `stream_not_declared`).
4. The filter (`_core.filters.parse_filter`: shape, then grant, then declaration), under every
   declaring manifest. The order field is the stream's (`StreamSpec.order_field`) when every
   declaring manifest names the same one and the grant covers it; otherwise key order, stated
   in the page (ordering by an ungranted field would disclose it).
5. Cursors and bookmarks (`_core.cursor` Rule 7): a page cursor opens only under the binding
   of everything that shaped the page; a bookmark only under the grant and stream, and one
   naming a change beyond a connection's current top is `cursor_expired` (410).
6. The page: `limit + 1` keys in order (or in change order), the projected fields of the page's
   records in one statement, cut to `ROW_PREVIEW_CHARS` a value and `ROW_BUDGET_CHARS` a row, the
   page ending early (with `has_more`) before the row that would pass `PAGE_BUDGET_CHARS` of
   field text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pdpp_store._core.cursor import (
    bookmark_binding,
    list_binding,
    mint_bookmark,
    mint_list_page,
    open_bookmark,
    open_list_page,
)
from pdpp_store._core.errors import BadRequest, Forbidden, Gone, NotFound
from pdpp_store._core.fields import FieldKind
from pdpp_store._core.filters import Clause, Equals, Filter, Has, OneOf, parse_filter
from pdpp_store._core.grants import Grant, StreamGrant, as_grant
from pdpp_store._core.identity import RecordRef, validate_field_path, validate_safe_name
from pdpp_store._core.manifest import StreamSpec
from pdpp_store._sql import catalogue as catalogue_sql
from pdpp_store._sql import changes as changes_sql
from pdpp_store._sql import query as query_sql
from pdpp_store._sql.requests import Op
from pdpp_store.evidence import (
    Continuation,
    FieldPreview,
    PageOrder,
    RecordCard,
    RecordPage,
    RecordRow,
    RecordTombstone,
)
from pdpp_store.evidence.record import built_preview

from .declared import declaring
from .reads import ReadContext

__all__ = [
    "MAX_LIMIT",
    "PAGE_BUDGET_CHARS",
    "ROW_BUDGET_CHARS",
    "ROW_PREVIEW_CHARS",
    "query_records",
]

MAX_LIMIT = 100
ROW_PREVIEW_CHARS = 512
"""A listed value up to this many code points is shown whole; a longer one is cut to it, with
the window read that goes on (like `read_record`'s previews, shorter: a page shows many)."""
ROW_BUDGET_CHARS = 4096
"""The code points of values one row shows in all; a field past it is `unavailable`, with the
read of its first window."""
PAGE_BUDGET_CHARS = 32 * 1024
"""The code points of field text one page shows in all: the page ends before the row that would
pass it (a page always shows at least one row)."""
MAX_FIELDS = 256


def _bad(message: str, param: str) -> BadRequest:
    return BadRequest("invalid_request", message, param=param)


def _choice(value: object, allowed: tuple[str, ...], param: str) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise _bad(f"{param} must be one of {', '.join(allowed)}", param)
    return value


def _limit(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LIMIT:
        raise _bad(f"limit must be an integer between 1 and {MAX_LIMIT}", "limit")
    return value


def _token(value: object, param: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise BadRequest("invalid_cursor", f"{param} must be a non-empty string", param=param)
    return value


def _fields(value: object, grant: StreamGrant, stream: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise _bad("fields must be a list of field paths", "fields")
    if not 1 <= len(value) <= MAX_FIELDS:
        raise _bad(f"fields must name between 1 and {MAX_FIELDS} fields", "fields")
    chosen = tuple(sorted({validate_field_path(path, param="fields") for path in value}))
    for path in chosen:
        if not grant.allows_field(path):
            raise Forbidden(
                "field_not_granted",
                f"field {path!r} is not granted for stream {stream!r}",
                param="fields",
            )
    return chosen


def _order(specs: list[StreamSpec], grant: StreamGrant) -> tuple[str | None, query_sql.OrderKind]:
    names = {spec.order_field for spec in specs}
    name = names.pop() if len(names) == 1 else None
    if name is None or not grant.allows_field(name):
        return None, "instant"
    declared = [spec.declared[name] for spec in specs if name in spec.declared]
    strings = all(known.admits("string") for known in declared)
    return name, "instant" if strings else "number"


def _projection(
    specs: list[StreamSpec], grant: StreamGrant, chosen: tuple[str, ...] | None
) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
    """(the fields a row shows, or None for every granted one; the fields read for it and its
    card, or None for every granted one)."""
    roles = sorted({path for spec in specs for names in spec.roles.values() for path in names})
    slots = [path for path in roles if grant.allows_field(path)]
    if chosen is not None:
        return chosen, tuple(sorted({*chosen, *slots}))
    if not roles:
        return None, None
    keys = {path for spec in specs for path in spec.primary_key}
    shown = tuple(sorted(path for path in {*roles, *keys} if grant.allows_field(path)))
    return shown, shown


def _preview(ref: RecordRef, row: query_sql.RowField, budget: int) -> FieldPreview:
    info, item_count, head = row
    kind, size = info.kind, info.size_chars
    if not kind.text_like:
        return built_preview(ref, info, "binary-only", item_count=item_count)
    if min(size, ROW_PREVIEW_CHARS) > budget:
        return built_preview(ref, info, "unavailable", item_count=item_count)
    head = head or ""
    if size <= ROW_PREVIEW_CHARS:
        value = head if kind is FieldKind.TEXT else json.loads(head)
        return built_preview(ref, info, "complete", value)
    preview = head[:ROW_PREVIEW_CHARS]
    shown = preview if kind is FieldKind.TEXT else None
    return built_preview(ref, info, "truncated", shown, preview, item_count)


def _row(
    ref: RecordRef,
    spec: StreamSpec,
    grant: StreamGrant,
    found: list[query_sql.RowField],
    shown: tuple[str, ...] | None,
) -> tuple[RecordRow, int]:
    """A listed record and the code points of field text it shows."""
    previews: list[FieldPreview] = []
    values: dict[str, Any] = {}
    budget = ROW_BUDGET_CHARS
    for field in found:
        item = _preview(ref, field, budget)
        if item.status == "complete" or (
            item.status == "truncated" and item.info.kind is FieldKind.TEXT
        ):
            values[item.info.path] = item.value
        if shown is None or item.info.path in shown:
            previews.append(item)
            budget -= item.shown_chars
    card = RecordCard.build(ref, spec, grant, values)
    return RecordRow(card, tuple(previews)), ROW_BUDGET_CHARS - budget


DRIVE_CAP = 2000
"""A filter's equality (`eq`, `in`, `has`) leads a page when at most this many visible records
match it: those are read by its value index and sorted, instead of the order field's index
being walked with every record re-checked (costly when matches are rare)."""


def _driving_clause(
    stream_grant: StreamGrant, parsed: Filter, connections: list[str]
) -> Op[Clause | None]:
    """The first equality clause of the filter that few visible records match, if any."""
    for clause in parsed.clauses:
        if isinstance(clause, Equals | OneOf | Has):
            found = query_sql.match_count(
                (yield query_sql.few_matches(stream_grant, parsed, connections, clause, DRIVE_CAP))
            )
            return clause if found < DRIVE_CAP else None
    return None


def _listed(
    stream_grant: StreamGrant,
    parsed: Filter,
    *,
    connection_id: str | None,
    connections: list[str],
    order_field: str | None,
    order_kind: query_sql.OrderKind,
    direction: Any,
    after: query_sql.PageKey | None,
    wanted: int,
) -> Op[list[query_sql.PageRow]]:
    """The next `wanted` keys in the page's order: in key order, or the records with an order
    value (driven by its index) and then, once those run out, those without one."""
    if order_field is None:
        return query_sql.page_rows(
            (
                yield query_sql.key_page(
                    stream_grant,
                    parsed,
                    connection_id=connection_id,
                    direction=direction,
                    after=None if after is None else after[1:],
                    limit=wanted,
                )
            )
        )
    listed: list[query_sql.PageRow] = []
    scope = [connection_id] if connection_id is not None else connections
    if after is None or after[0] is not None:
        drive = yield from _driving_clause(stream_grant, parsed, scope)
        listed = query_sql.page_rows(
            (
                yield query_sql.valued_page(
                    stream_grant,
                    parsed,
                    drive=drive,
                    connections=scope,
                    order_field=order_field,
                    order_kind=order_kind,
                    direction=direction,
                    after=after,
                    limit=wanted,
                )
            )
        )
    if len(listed) < wanted:
        listed += query_sql.page_rows(
            (
                yield query_sql.missing_page(
                    stream_grant,
                    parsed,
                    connection_id=connection_id,
                    order_field=order_field,
                    order_kind=order_kind,
                    direction=direction,
                    after=None if after is None or after[0] is not None else after[1:],
                    limit=wanted - len(listed),
                )
            )
        )
    return listed


def query_records(
    ctx: ReadContext,
    grant: Grant,
    stream: str,
    *,
    connection_id: str | None = None,
    filter: Mapping[str, Any] | str | None = None,
    order: str = "desc",
    fields: Sequence[str] | None = None,
    limit: int = 25,
    cursor: str | None = None,
    count: str = "none",
    changes_since: str | None = None,
) -> Op[RecordPage]:
    # 1. arguments
    validate_safe_name(stream, "stream")
    if connection_id is not None:
        validate_safe_name(connection_id, "connection_id")
    direction = _choice(order, ("desc", "asc"), "order")
    size = _limit(limit)
    counting = _choice(count, ("none", "exact"), "count") == "exact"
    token = _token(cursor, "cursor")
    since = _token(changes_since, "changes_since")
    # 2. the grant
    grant = as_grant(grant)
    grant.ensure_usable()
    stream_grant = grant.stream(stream)
    if connection_id is not None and not stream_grant.covers_connection(connection_id):
        raise NotFound(
            "connection_not_found",
            f"connection {connection_id!r} is not found",
            param="connection_id",
        )
    chosen = _fields(fields, stream_grant, stream)
    # 3. the catalogue
    catalogue = yield from declaring(ctx, grant, [stream], connection_id)
    spec_of: dict[str, StreamSpec] = {}
    for conn, _, manifest in catalogue:
        found_spec = manifest.spec(stream)
        if found_spec is not None:
            spec_of[conn] = found_spec
    if not spec_of:
        if connection_id is not None and not (yield catalogue_sql.connection_exists(connection_id)):
            raise NotFound(
                "connection_not_found",
                f"connection {connection_id!r} is not found",
                param="connection_id",
            )
        raise NotFound("stream_not_declared", f"stream {stream!r} is not declared", param="stream")
    specs = list({id(spec): spec for spec in spec_of.values()}.values())
    # 4. the filter, the order and the projection
    parsed: Filter | None = None
    for spec in specs:
        parsed = parse_filter(filter, spec, stream_grant)
    assert parsed is not None
    order_field, order_kind = _order(specs, stream_grant)
    shown, read = _projection(specs, stream_grant, chosen)
    mode = "changes" if since is not None else "list"
    binding = list_binding(
        grant.fingerprint(stream),
        stream,
        connection_id,
        parsed.fingerprint,
        f"{direction}:{order_field or ''}",
        chosen,
        mode,
    )
    # 5. cursors and bookmarks
    if (token is not None or since not in (None, "beginning")) and ctx.stored_keys:
        yield from ctx.reload_keys()
    positions: dict[str, int] = {}
    after: query_sql.PageKey | None = None
    if since is not None:
        if token is not None:
            positions = open_bookmark(ctx.codec, token, binding, param="cursor")
        elif since != "beginning":
            positions = open_bookmark(
                ctx.codec, since, bookmark_binding(grant.fingerprint(stream), stream)
            )
        if positions:
            tops = changes_sql.tops((yield changes_sql.counter_tops(sorted(positions))))
            for conn, seen in positions.items():
                if seen > tops.get(conn, -1):
                    raise Gone(
                        "cursor_expired",
                        "changes_since names changes this store no longer keeps; "
                        "start again from 'beginning'",
                        param="changes_since",
                    )
    elif token is not None:
        after = open_list_page(ctx.codec, token, binding)
    # 6. the page
    keys: list[tuple[str, str]]
    tombstones: set[tuple[str, str]] = set()
    seqs: dict[tuple[str, str], int] = {}
    values: dict[tuple[str, str], query_sql.OrderValue] = {}
    if since is not None:
        # One connection a statement, in order: each reads its change log along the key from
        # its position, and stops at the page's end (a walk over several connections at once
        # would sort each connection's changes before the first row).
        changes: list[changes_sql.ChangeRow] = []
        for conn in [connection_id] if connection_id is not None else sorted(spec_of):
            if len(changes) > size:
                break
            changes += changes_sql.change_rows(
                (
                    yield changes_sql.changes_page(
                        stream_grant,
                        parsed,
                        connection_id=conn,
                        positions={conn: positions[conn]} if conn in positions else {},
                        limit=size + 1 - len(changes),
                    )
                )
            )
        more = len(changes) > size
        keys = [(row.connection_id, row.record_id) for row in changes[:size]]
        for row in changes[:size]:
            seqs[row.connection_id, row.record_id] = row.change_seq
            if row.deleted:
                tombstones.add((row.connection_id, row.record_id))
    else:
        listed = yield from _listed(
            stream_grant,
            parsed,
            connection_id=connection_id,
            connections=sorted(spec_of),
            order_field=order_field,
            order_kind=order_kind,
            direction=direction,
            after=after,
            wanted=size + 1,
        )
        more = len(listed) > size
        keys = [(row.connection_id, row.record_id) for row in listed[:size]]
        values = {(row.connection_id, row.record_id): row.value for row in listed[:size]}
    live = [key for key in keys if key not in tombstones]
    found = (
        query_sql.row_previews(
            (yield query_sql.row_fields(stream_grant, live, read, ROW_PREVIEW_CHARS))
        )
        if live
        else {}
    )
    rows: list[RecordRow | RecordTombstone] = []
    spent = 0
    for key in keys:
        ref = RecordRef(key[0], stream, key[1])
        if key in tombstones:
            rows.append(RecordTombstone(ref))
            continue
        listed_row, cost = _row(
            ref, spec_of.get(key[0], specs[0]), stream_grant, found.get(key, []), shown
        )
        if rows and spent + cost > PAGE_BUDGET_CHARS:
            more = True
            break
        rows.append(listed_row)
        spent += cost
    shown_keys = keys[: len(rows)]
    total: int | None = None
    if counting:
        total = query_sql.match_count(
            (
                yield query_sql.record_count(
                    stream_grant,
                    parsed,
                    connection_id=connection_id,
                    connections=[connection_id] if connection_id is not None else sorted(spec_of),
                )
            )
        )
    arguments: dict[str, Any] = {"stream": stream, "order": direction, "limit": size}
    if connection_id is not None:
        arguments["connection_id"] = connection_id
    if filter is not None:
        arguments["filter"] = filter if isinstance(filter, str) else dict(filter)
    if chosen is not None:
        arguments["fields"] = list(chosen)
    if counting:
        arguments["count"] = "exact"
    next_cursor: str | None = None
    next_changes: str | None = None
    if since is not None:
        arguments["changes_since"] = since
        reached = dict(positions)
        for key in shown_keys:
            reached[key[0]] = max(reached.get(key[0], 0), seqs[key])
        if more:
            next_cursor = mint_bookmark(ctx.codec, binding, reached)
        else:
            next_changes = mint_bookmark(
                ctx.codec, bookmark_binding(grant.fingerprint(stream), stream), reached
            )
        page_order = PageOrder(None, "asc", "change")
    else:
        if more and shown_keys:
            last = shown_keys[-1]
            next_cursor = mint_list_page(ctx.codec, binding, (values[last], *last))
        page_order = PageOrder(
            order_field,
            "desc" if direction == "desc" else "asc",
            "field" if order_field is not None else "key",
        )
    following = None
    if next_cursor is not None:
        following = Continuation("query_records", {**arguments, "cursor": next_cursor})
    return RecordPage(
        stream,
        tuple(rows),
        page_order,
        next_cursor,
        following,
        total,
        next_changes,
    )
