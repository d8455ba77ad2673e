"""Grant-enforced read operations, each one generator driven by `_runtime` (no I/O here).

The check order is the contract's (docs/contract.md §7), identical on every backend because it is
written once:

    1 stream declared     2 field path     3 selector     4 stream granted (and grant usable)
    5 connection          6 field granted (no record row read yet; cursor signature checked)
    7 record visible      8 field present / text-like     9 cursor freshness     10 match

Steps 1 and 5 read the catalogue (manifests, connections), never a record. Steps 7 onwards are
answered by statements that carry the grant's visibility condition
(`_sql.visibility.visible_records`), so a hidden record is indistinguishable from a missing one.
Each read returns an evidence card.

One module (a little over 600 lines) because the check order above is its subject: every read
shares the same steps and their helpers, and reading them in one place is how the order is kept.
Search, a plan of its own, lives in `_ops/search.py`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from pdpp_store._core.cursor import (
    MATCH_VERSION,
    CursorCodec,
    CursorState,
    MatchCursorState,
    codec_for_stored_keys,
    cursor_binding,
    mint_match,
    open_match,
)
from pdpp_store._core.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    Unprocessable,
    shown,
)
from pdpp_store._core.fields import FieldKind
from pdpp_store._core.folding import fold
from pdpp_store._core.grants import Grant, StreamGrant, as_grant
from pdpp_store._core.identity import (
    RecordRef,
    UnscopedRecordRef,
    is_blob_id,
    parse_record_ref,
    validate_field_path,
)
from pdpp_store._core.manifest import Manifest
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._core.window import (
    DEFAULT_LIMIT_CHARS,
    MAX_LIMIT_CHARS,
    CursorSelector,
    MatchSelector,
    OffsetSelector,
    limit_clamped_warning,
    parse_selector,
    window_bounds,
)
from pdpp_store._sql import blobs as blob_sql
from pdpp_store._sql import catalogue as catalogue_sql
from pdpp_store._sql import match as match_sql
from pdpp_store._sql import reads as read_sql
from pdpp_store._sql.dialects import MAX_SQL_INT
from pdpp_store._sql.requests import Op, Rows
from pdpp_store.evidence import (
    BlobInfo,
    BlobRange,
    FieldInfo,
    FieldPreview,
    FieldWindow,
    RecordView,
)
from pdpp_store.evidence.record import built_preview, built_view
from pdpp_store.evidence.window import built_window, deferred_cursor

from . import audit
from .cards import record_card, remember_spec
from .writes import load_cursor_keys

__all__ = [
    "PREVIEW_CHARS",
    "RECORD_BUDGET_CHARS",
    "RECORD_MAX_FIELDS",
    "RECORD_PAGE_CHARS",
    "ReadContext",
    "blob_info",
    "describe_field",
    "read_blob_range",
    "read_field_window",
    "read_record",
]

DECLARED_TTL_S = 5.0
KEYS_TTL_S = 60.0
"""Stored cursor keys are reloaded by a cursor read at least this often: a key retired by
another process stops opening cursors here within this time."""
UNKNOWN_KEY_RELOAD_S = 5.0
"""A cursor naming an unknown key id reloads the keys at most once per this interval."""
PREVIEW_CHARS = 1024
"""Text (or JSON text) up to this many code points is returned whole by `read_record`; longer
values come back as a preview of this length plus the continuation of the window read that
reads on. A preview is cut from the first chunk, so it is at most `CHUNK_CHARS`."""
assert 1 <= PREVIEW_CHARS <= CHUNK_CHARS

RECORD_MAX_FIELDS = 64
"""A projection shows at most this many granted fields (in path order); a wider record says
`has_more_fields` and continues with `read_record(..., after_field=<the last path shown>)`."""
RECORD_BUDGET_CHARS = 16 * 1024
"""The code points of field values one projection shows in all (whole values and previews, in
path order). A text-like field that no longer fits is listed `unavailable`, with its metadata and
the window read of its start: so a projection is bounded whatever the record's width."""
RECORD_PAGE_CHARS = 32 * 1024
"""What one page of a projection may cost in all: its values (within `RECORD_BUDGET_CHARS`) and,
per field, what naming it costs (`FIELD_COST_CHARS` plus its path twice and the record's id,
as a ladder entry and its continuation spell them). The page ends before the field that would
pass it (always at least one field), so long paths cannot make a page unbounded either."""
FIELD_COST_CHARS = 320


_MAX_SQL_OFFSET = MAX_SQL_INT - MAX_LIMIT_CHARS
"""The largest window offset sent to SQL: `offset + limit` stays an integer every database's
string functions take, so no readable field is longer than this."""

MAX_BLOB_RANGE_BYTES = 1 << 20

RecordInput = RecordRef | UnscopedRecordRef | str


@dataclass(slots=True)
class ReadContext:
    """What reads share across calls of one store: the cursor codec, and the
    (connection, stream) pairs seen declared in the last `DECLARED_TTL_S` seconds, which skip the
    catalogue query of step 1. The store clears it when it registers a manifest; a manifest
    registered by another process is seen within the TTL. Entries only ever say "declared", and
    records stay under the grant whatever they say."""

    codec: CursorCodec
    stored_keys: bool = True
    """The cursor keys live in the database (not configured): another process may add one."""
    declared: dict[tuple[str, str], float] = dataclass_field(default_factory=dict, compare=False)
    manifests: dict[str, tuple[Any, Manifest]] = dataclass_field(
        default_factory=dict, compare=False
    )
    """Parsed manifests by connector id, with the registration time they were parsed at (a
    re-registration, by this store or another, is seen by that time changing)."""
    card_specs: dict[tuple[str, str], tuple[float, str, Any]] = dataclass_field(
        default_factory=dict, compare=False
    )
    """(connection, stream) -> (until, connector id, registration time): whose manifest gives a
    record card its roles (`_ops.cards`); learnt by step 1 with `declared`, kept as long, and
    cleared with it."""

    keys_loaded_at: float = dataclass_field(default_factory=time.monotonic, compare=False)
    unknown_key_reload_at: float = dataclass_field(default=-math.inf, compare=False)

    def reload_keys(self) -> Op[None]:
        """Load the stored cursor keys again: another process may have rotated or retired keys
        since they were loaded."""
        self.codec = codec_for_stored_keys((yield from load_cursor_keys(create=False)))

    def keys_due(self, claimed: int | None) -> bool:
        """Whether a cursor read should reload the stored keys first: they are older than
        `KEYS_TTL_S` (another process may have retired one), or the cursor names a key id this
        store does not know (another process may have rotated), at most once per
        `UNKNOWN_KEY_RELOAD_S`, so forged key ids cannot make every read reload. Marks the
        reload as done when it answers yes."""
        now = time.monotonic()
        due = now - self.keys_loaded_at >= KEYS_TTL_S
        if not due and claimed is not None and claimed not in self.codec.key_ids:
            due = now - self.unknown_key_reload_at >= UNKNOWN_KEY_RELOAD_S
            if due:
                self.unknown_key_reload_at = now
        if due:
            self.keys_loaded_at = now
        return due


# ---------------------------------------------------------------- steps shared by every read


_ANY_CONNECTION = ""
"""The `ReadContext.declared` key of "some manifest declares the stream" (step 1 of a record
that does not name its connection): a connection id is never empty."""


def _seen_declared(ref: RecordRef | UnscopedRecordRef, seen: dict[tuple[str, str], float]) -> bool:
    """Step 1 without a statement: the record's connection declared its stream lately (for a
    record that does not name its connection: some manifest did)."""
    connection = ref.connection_id if isinstance(ref, RecordRef) else _ANY_CONNECTION
    return seen.get((connection, ref.stream), 0.0) > time.monotonic()


def _declared(ref: RecordRef | UnscopedRecordRef, covered: bool, ctx: ReadContext) -> Op[bool]:
    """Step 1. Returns whether the connection is known to exist.

    The connection-specific answer ("not declared by this connection's manifest") is given only
    for a connection the grant covers (`covered`): for any other, the answer must not depend on
    whether the connection exists or which connector it belongs to, so it falls through to the
    global question and step 5 refuses the connection exactly like a missing one.
    """
    if isinstance(ref, RecordRef):
        if _seen_declared(ref, ctx.declared):
            return True
        rows = yield catalogue_sql.stream_spec(ref.connection_id, ref.stream)
        if rows:
            until = time.monotonic() + DECLARED_TTL_S
            ctx.declared[ref.connection_id, ref.stream] = until
            yield from remember_spec(ctx, ref, rows[0], until)
            return True
        if covered and (yield catalogue_sql.connection_exists(ref.connection_id)):
            raise NotFound(
                "stream_not_declared",
                f"stream {ref.stream!r} is not declared by this connection's manifest",
                param="stream",
            )
    if not (yield catalogue_sql.stream_declared_anywhere(ref.stream)):
        raise NotFound(
            "stream_not_declared", f"stream {ref.stream!r} is not declared", param="stream"
        )
    if isinstance(ref, UnscopedRecordRef):
        # Remembered as step 1 of a scoped record is: that statement scans the catalogue, so
        # on SQLite it would send every such read to a reader thread.
        ctx.declared[_ANY_CONNECTION, ref.stream] = time.monotonic() + DECLARED_TTL_S
    return False


def _connection(
    ref: RecordRef | UnscopedRecordRef, stream_grant: StreamGrant, known: bool
) -> Op[RecordRef]:
    """Step 5: the record's connection, which the grant must cover and which must exist."""
    if isinstance(ref, UnscopedRecordRef):
        candidates = stream_grant.instance_ids
        if candidates is not None and not candidates:
            raise NotFound(
                "connection_not_found",
                f"record {ref.id!r}: the grant covers no connection",
                param="connection_id",
            )
        if candidates is None or len(candidates) != 1:
            raise Conflict(
                "ambiguous_connection",
                f"record {ref.id!r} does not name its connection and the grant covers "
                "several; give connection_id or a self-contained id",
                param="connection_id",
            )
        ref = ref.scoped(candidates[0])
        # Step 1 asked only whether any manifest declares the stream; now that the connection
        # is known, its own manifest must (and the connection must exist).
        if not (yield catalogue_sql.stream_spec(ref.connection_id, ref.stream)):
            if (yield catalogue_sql.connection_exists(ref.connection_id)):
                raise NotFound(
                    "stream_not_declared",
                    f"stream {ref.stream!r} is not declared by this connection's manifest",
                    param="stream",
                )
            known = False
        else:
            known = True
    if not stream_grant.covers_connection(ref.connection_id) or not (
        known or (yield catalogue_sql.connection_exists(ref.connection_id))
    ):
        raise NotFound(
            "connection_not_found",
            f"connection {ref.connection_id!r} is not found",
            param="connection_id",
        )
    return ref


def _resolve(
    ctx: ReadContext,
    grant: Grant,
    record: RecordInput,
    connection_id: str | None,
    path: str | None,
    *,
    selector: Mapping[str, Any] | None = None,
) -> Op[tuple[RecordRef, StreamGrant, str, Any, tuple[dict[str, str], ...]]]:
    """Steps 1 to 6 for one record (and one field, when `path` is given)."""
    grant = as_grant(grant)
    ref = parse_record_ref(record, connection_id=connection_id)
    known = _seen_declared(ref, ctx.declared)
    if not known:
        covered = isinstance(ref, RecordRef) and grant.covers(ref.stream, ref.connection_id)
        known = yield from _declared(ref, covered, ctx)
    checked_path = validate_field_path(path) if path is not None else ""
    chosen, warnings = parse_selector(**selector) if selector is not None else (None, ())
    grant.ensure_usable()
    stream_grant = grant.stream(ref.stream)
    if known and type(ref) is RecordRef and stream_grant.covers_connection(ref.connection_id):
        scoped = ref  # what `_connection` answers here, without a generator per read
    else:
        scoped = yield from _connection(ref, stream_grant, known)
    if path is not None and not stream_grant.allows_field(checked_path):
        raise Forbidden(
            "field_not_granted",
            f"field {checked_path!r} is not granted for stream {scoped.stream!r}",
            param="field",
        )
    return scoped, stream_grant, checked_path, chosen, warnings


def _field_arg(field: object) -> str:
    """A field argument as `_resolve` takes it: there `None` means "no field" (a record read),
    so a `None` given for a field becomes the empty path, refused as `invalid_field_path` at the
    step where the contract checks the path."""
    return "" if field is None else field  # type: ignore[return-value]


def _present(rows: Rows | None, ref: RecordRef, path: str) -> FieldInfo:
    """Steps 7 and 8 (presence) from the rows of a field statement."""
    if not rows:
        raise NotFound("not_found", f"record {ref.id!r} is not found", param="record")
    info = read_sql.field_info(rows[0])
    if info is None:
        raise NotFound("field_not_found", f"record {ref.id!r} has no field {path!r}", param="field")
    return info


def _text_like(info: FieldInfo, ref: RecordRef) -> FieldInfo:
    """Step 8 (text-like): binary-only fields are refused with their metadata."""
    if not info.text_like:
        raise Unprocessable(
            "field_not_text",
            f"field {info.path!r} of record {ref.id!r} is binary-only ({info.kind.value}); "
            "read its metadata or export it instead",
            param="field",
            details={"field": info.to_dict()},
        )
    return info


def _stale(info: FieldInfo) -> Conflict:
    return Conflict(
        "stale_cursor",
        f"field {info.path!r} changed since the cursor was made; restart from its current digest",
        param="cursor",
        details={"digest": info.digest, "size_chars": info.size_chars},
    )


# ---------------------------------------------------------------- field windows


def read_field_window(
    ctx: ReadContext,
    grant: Grant,
    record: RecordInput,
    field: str,
    *,
    connection_id: str | None = None,
    **selector: Any,
) -> Op[FieldWindow]:
    grant = as_grant(grant)
    ref, stream_grant, path, chosen, warnings = yield from _resolve(
        ctx, grant, record, connection_id, _field_arg(field), selector=selector
    )
    binding = cursor_binding(
        grant.fingerprint(ref.stream), ref.connection_id, ref.stream, ref.record_id, path
    )
    match: tuple[int, int] | None = None
    from_chars, bound = 0, None
    header = None
    if isinstance(chosen, CursorSelector):
        header = ctx.codec.claimed(chosen.cursor, binding)
        if ctx.stored_keys and ctx.keys_due(None if header is None else header[1]):
            yield from ctx.reload_keys()
    if header is not None and header[0] == MATCH_VERSION:
        assert isinstance(chosen, CursorSelector)
        continued = open_match(ctx.codec, chosen.cursor, binding)
        from_chars, bound = continued.from_chars, "sha256:" + continued.digest_prefix.hex()
        chosen = MatchSelector(
            continued.q,
            continued.before_chars,
            continued.after_chars,
            chosen.limit_chars or continued.limit_chars,
        )
    if isinstance(chosen, MatchSelector):
        bounds, rows = yield from _find(
            ref, path, stream_grant, chosen, from_chars=from_chars, bound=bound
        )
        match = (bounds.match_start, bounds.match_end)
        start, limit = bounds.start, bounds.limit
        # Paging on from a match reads windows of the caller's `limit_chars`, else of the
        # default size, never of the match window's (docs/decisions.md, "Reads").
        onward = min(chosen.limit_chars or DEFAULT_LIMIT_CHARS, MAX_LIMIT_CHARS)
        if bounds.clamped and limit_clamped_warning() not in warnings:
            warnings = (*warnings, limit_clamped_warning())
        prefix: str | None = None  # the window was cut from the text the match was found in
    else:
        if isinstance(chosen, CursorSelector):
            state: CursorState = ctx.codec.open(chosen.cursor, binding)
            start, limit = state.offset_chars, chosen.limit_chars or state.limit_chars
            prefix = state.digest_start
        else:
            assert isinstance(chosen, OffsetSelector)
            start, limit, prefix = chosen.offset_chars, chosen.limit_chars, None
        onward = limit
        # Every offset at or past the field's end reads the same empty window, so the statement
        # gets an offset its SQL arithmetic can hold (Postgres `substr` takes 32-bit integers).
        rows = (
            yield read_sql.field_window(
                ref,
                path,
                stream_grant,
                start=min(start, _MAX_SQL_OFFSET),
                limit=limit,
                digest_prefix=prefix,
            )
        ) or []
    info = _text_like(_present(rows, ref, path), ref)
    if prefix is not None and not info.digest.startswith(prefix):
        raise _stale(info)
    text = read_sql.window_text(rows)
    start = window_bounds(start, info.size_chars)
    end = start + len(text)
    codec = ctx.codec
    return built_window(  # `FieldWindow(...)`, checked as its constructor checks
        ref.connection_id,
        ref.stream,
        ref.record_id,
        info,
        text,
        start,
        limit,
        match[0] if match else None,
        match[1] if match else None,
        # Minted when first read (`deferred_cursor`): a caller that wants the text pays no MAC.
        deferred_cursor(codec.mint, binding, info.digest, end, onward)
        if end < info.size_chars
        else None,
        deferred_cursor(codec.mint, binding, info.digest, max(0, start - onward), onward)
        if start > 0
        else None,
        tuple(warnings),
        deferred_cursor(
            mint_match,
            codec,
            binding,
            info.digest,
            MatchCursorState(
                b"",
                match[0] + 1,
                chosen.before_chars,
                chosen.after_chars,
                chosen.limit_chars,
                chosen.q,
            ),
        )
        if match is not None and isinstance(chosen, MatchSelector) and match[1] < info.size_chars
        else None,
    )


def _find(
    ref: RecordRef,
    path: str,
    stream_grant: StreamGrant,
    chosen: MatchSelector,
    *,
    from_chars: int = 0,
    bound: str | None = None,
) -> Op[tuple[match_sql.MatchBounds, Rows]]:
    """Steps 7, 8, 9 and 10 for a match: the window around the `occurrence`-th case-folded
    occurrence of `q` at or after `from_chars` (its bounds, and its rows as `field_window`'s).
    Each occurrence before it is one statement (a hop, bound to the digest the first hop saw,
    so every hop reads the same text); the last cuts the window too. When nothing matched, the
    field's metadata says which check failed first (with `bound`, a changed field is a stale
    cursor, its text never read)."""
    needle = fold(chosen.q)
    for hop in range(chosen.occurrence):
        last = hop == chosen.occurrence - 1
        found = yield from match_sql.find(
            ref,
            path,
            stream_grant,
            needle=needle,
            before=chosen.before_chars if last else 0,
            after=chosen.after_chars if last else 0,
            limit=chosen.limit_chars if last else 1,
            from_chars=from_chars,
            digest_prefix=bound,
        )
        if found is None:
            break
        bounds, rows = found
        if last:
            return bounds, rows
        from_chars, bound = bounds.match_start + 1, str(rows[0]["digest"])
    info = _text_like(
        _present((yield read_sql.field_meta(ref, path, stream_grant)), ref, path), ref
    )
    if bound is not None and not info.digest.startswith(bound):
        raise _stale(info)
    raise NotFound(
        "query_not_found",
        f"q does not occur in field {path!r} of record {ref.id!r}"
        + (" that often" if chosen.occurrence > 1 else "")
        + (" after the previous match" if from_chars else ""),
        param="q",
    )


def describe_field(
    ctx: ReadContext,
    grant: Grant,
    record: RecordInput,
    field: str,
    *,
    connection_id: str | None = None,
) -> Op[FieldInfo]:
    ref, stream_grant, path, _, _ = yield from _resolve(
        ctx, grant, record, connection_id, _field_arg(field)
    )
    return _present((yield read_sql.field_meta(ref, path, stream_grant)), ref, path)


# ---------------------------------------------------------------- records


def _preview(ref: RecordRef, row: read_sql.PreviewRow, budget: int) -> FieldPreview:
    """One field as the projection shows it, with at most `budget` code points of its value.
    Built unchecked (`built_preview`): each branch gives a preview exactly when it truncates,
    and `binary-only` exactly to a field that is not text-like."""
    info, item_count, head = row
    kind, size = info.kind, info.size_chars
    if not kind.text_like:
        return built_preview(ref, info, "binary-only", item_count=item_count)
    if size > budget and budget < PREVIEW_CHARS:  # min(size, PREVIEW_CHARS) > budget
        return built_preview(ref, info, "unavailable", item_count=item_count)
    head = head or ""
    if size <= PREVIEW_CHARS:
        value = head if kind is FieldKind.TEXT else json.loads(head)
        return built_preview(ref, info, "complete", value)
    preview = head[:PREVIEW_CHARS]
    shown = preview if kind is FieldKind.TEXT else None  # half a JSON text is no value
    return built_preview(ref, info, "truncated", shown, preview, item_count)


def read_record(
    ctx: ReadContext,
    grant: Grant,
    record: RecordInput,
    *,
    connection_id: str | None = None,
    after_field: str | None = None,
    fields: Sequence[str] | None = None,
) -> Op[RecordView]:
    ref, stream_grant, _, _, _ = yield from _resolve(ctx, grant, record, connection_id, None)
    if after_field is not None:
        after_field = validate_field_path(after_field, param="after_field")
    only = None if fields is None else _chosen_fields(fields, stream_grant, ref)
    rows = yield read_sql.record_preview(
        ref,
        stream_grant,
        PREVIEW_CHARS,
        after_field=after_field,
        only=only,
        max_fields=RECORD_MAX_FIELDS + 1,  # one more than shown: whether there are more
    )
    if not rows:
        raise NotFound("not_found", f"record {ref.id!r} is not found", param="record")
    version, found = read_sql.preview_rows(rows)
    previews: list[FieldPreview] = []
    budget, spent = RECORD_BUDGET_CHARS, 0
    naming = len(ref.id) + FIELD_COST_CHARS
    for row in found[:RECORD_MAX_FIELDS]:
        item = _preview(ref, row, budget)
        shown = item.shown_chars
        cost = shown + 2 * len(row[0].path) + naming
        if previews and spent + cost > RECORD_PAGE_CHARS:
            break
        previews.append(item)
        budget -= shown
        spent += cost
    more = len(found) > len(previews)
    on_page = {item.info.path: item for item in previews}
    card = yield from record_card(
        ctx,
        ref,
        grant=stream_grant,
        page=on_page,
        preview=_preview,
        preview_chars=PREVIEW_CHARS,
        ttl_s=DECLARED_TTL_S,
    )
    return built_view(
        ref,
        version if stream_grant.fields is None else None,
        tuple(previews),
        after_field,
        previews[-1].info.path if more and previews else None,
        only,
        card,
    )


MAX_CHOSEN_FIELDS = 256


def _chosen_fields(fields: object, grant: StreamGrant, ref: RecordRef) -> tuple[str, ...]:
    """The fields a projection is narrowed to: field paths the grant covers (checked before any
    record row is read, like every field read), at most `MAX_CHOSEN_FIELDS`."""
    if isinstance(fields, str | bytes) or not isinstance(fields, Sequence):
        raise BadRequest("invalid_request", "fields must be a list of field paths", param="fields")
    if not 1 <= len(fields) <= MAX_CHOSEN_FIELDS:
        raise BadRequest(
            "invalid_request",
            f"fields must name between 1 and {MAX_CHOSEN_FIELDS} fields",
            param="fields",
        )
    chosen = tuple(sorted({validate_field_path(path, param="fields") for path in fields}))
    for path in chosen:
        if not grant.allows_field(path):
            raise Forbidden(
                "field_not_granted",
                f"field {path!r} is not granted for stream {ref.stream!r}",
                param="fields",
            )
    return chosen


# ---------------------------------------------------------------- blobs


def _blob_not_found(blob_id: object) -> NotFound:
    return NotFound("blob_not_found", f"blob {shown(blob_id)} is not found", param="blob_id")


def blob_info(grant: Grant, blob_id: str) -> Op[BlobInfo]:
    """A blob's metadata, only through a visible record whose granted field references it: first
    the grant's reach (record tables), then the blob itself (blob tables), as two statements so
    the two can live on differently distributed tables (docs/scaling.md). The records it was
    reached through go to the read audit's entry of the call (`audit.note_reach`)."""
    return _blob_info(grant, blob_id, audit.reach_of_call())


def _blob_info(grant: Grant, blob_id: str, reach: audit.Reach | None) -> Op[BlobInfo]:
    # `reach` is taken when the op is made, in the caller's context: the op itself may run in a
    # connection's thread, where the caller's context variables are not
    grant = as_grant(grant)
    if not is_blob_id(blob_id):
        raise _blob_not_found(blob_id)
    grant.ensure_usable()
    rows = (yield blob_sql.blob_referenced(list(grant.streams), blob_id)) or []
    if not rows:
        raise _blob_not_found(blob_id)
    audit.note_reach(reach, rows)
    info = blob_sql.blob_info((yield blob_sql.blob_metadata(blob_id)) or [])
    if info is None:
        raise _blob_not_found(blob_id)
    return info


def read_blob_range(
    grant: Grant, blob_id: str, offset_bytes: int = 0, length_bytes: int = 65536
) -> Op[BlobRange]:
    return _read_blob_range(grant, blob_id, offset_bytes, length_bytes, audit.reach_of_call())


def _read_blob_range(
    grant: Grant, blob_id: str, offset_bytes: int, length_bytes: int, reach: audit.Reach | None
) -> Op[BlobRange]:
    for name, value, low in (("offset_bytes", offset_bytes, 0), ("length_bytes", length_bytes, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise BadRequest("invalid_request", f"{name} must be an integer >= {low}", param=name)
    if length_bytes > MAX_BLOB_RANGE_BYTES:
        raise BadRequest(
            "invalid_request",
            f"length_bytes must be at most {MAX_BLOB_RANGE_BYTES}",
            param="length_bytes",
        )
    info = yield from _blob_info(grant, blob_id, reach)
    start = min(offset_bytes, info.size_bytes)
    rows = yield blob_sql.blob_range(info.blob_id, start, length_bytes)
    return BlobRange(info, start, blob_sql.blob_bytes(rows or []))
