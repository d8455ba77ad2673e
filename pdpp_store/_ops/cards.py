"""The record card at the head of `read_record` (docs/contract.md §13), as a step of that read.

Rules:
1. The card's slots come from the fields whose manifest declares a role, under the same stream
   grant as the read (`RecordCard.build` keeps only granted, text-like fields): never a field the
   projection could not show.
2. The stream's spec (with its roles) comes from the connection's parsed manifest, kept in the
   read context's caches: which connector's manifest declares a (connection, stream), learnt by
   the catalogue question every read asks first (step 1, `remember_spec`) and kept as long as
   its answer (`ReadContext.card_specs`), and the parsed manifest by connector and registration
   time (`ReadContext.manifests`, the cache search uses), loaded by step 1 when the manifest was
   registered since. So a read of a stream read lately asks the catalogue nothing, and a card
   costs no statement of its own unless rule 3 needs one.
3. The values are the page's own previews when the page shows every granted role field (the
   first page of a record usually does); otherwise (a field off the page, or past the page's
   budget) one bounded statement reads the previews of
   just those fields (`_sql.reads.record_preview` narrowed to them, the grant's own shape). A
   preview holds `PREVIEW_CHARS` code points, more than any slot shows, so a slot cut from it is
   cut exactly as from the whole value.
4. A stream that declares no role (or whose roles the grant does not cover) gets a card with no
   slots, and no statement for values.
5. A page of cards (`page_cards`: a search page's hits, of any streams) reads its values in one
   statement for the whole page (`_sql.cards.card_fields`), naming only the role fields rule 1
   allows, each cut to `PAGE_CARD_CHARS`; no statement when no hit has such a field.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pdpp_store._core.fields import FieldKind
from pdpp_store._core.grants import StreamGrant
from pdpp_store._core.identity import RecordRef
from pdpp_store._core.manifest import Manifest, StreamSpec
from pdpp_store._sql import cards as cards_sql
from pdpp_store._sql import catalogue as catalogue_sql
from pdpp_store._sql import reads as read_sql
from pdpp_store._sql.requests import Op
from pdpp_store.evidence import FieldInfo, FieldPreview, RecordCard
from pdpp_store.evidence.card import SLOT_BOUNDS, SLOT_ROLES

from .declared import parsed_manifests

__all__ = ["PAGE_CARD_CHARS", "page_cards", "record_card", "remember_spec"]

PAGE_CARD_CHARS = max(SLOT_BOUNDS.values()) + 1
"""The code points of a role field a page's card statement reads: one more than any slot
shows, so a slot knows whether it cut its value (rule 5)."""

Preview = Callable[[RecordRef, read_sql.PreviewRow, int], FieldPreview]


def _parsed(ctx: Any, connector_id: str, stamp: Any) -> Op[Manifest | None]:
    """The connector's manifest as registered at `stamp`, parsed once per registration."""
    found = yield from parsed_manifests(ctx.manifests, {connector_id: stamp})
    return found.get(connector_id)


def remember_spec(ctx: Any, ref: RecordRef, row: Mapping[str, Any], until: float) -> Op[None]:
    """Step 1 of a read found `ref`'s stream declared (`row`, of `catalogue.stream_spec`): keep
    which manifest declares it until `until`, and have that manifest parsed (rule 2). A
    statement only when the manifest was registered since it was last parsed."""
    connector_id, stamp = row.get("connector_id"), row.get("registered_at")
    if connector_id is None:  # a row of an older shape: the card asks for itself (`_spec`)
        return
    ctx.card_specs[ref.connection_id, ref.stream] = (until, connector_id, stamp)
    yield from _parsed(ctx, connector_id, stamp)


def _spec(ctx: Any, ref: RecordRef, ttl_s: float) -> Op[StreamSpec | None]:
    """The spec of `ref`'s stream as its connection's manifest declares it (rule 2): what step 1
    remembered, else (a record named without its connection) the catalogue's answer."""
    known = ctx.card_specs.get((ref.connection_id, ref.stream))
    if known is not None and known[0] > time.monotonic():
        connector_id, stamp = known[1], known[2]
    else:
        rows = (yield catalogue_sql.stream_spec(ref.connection_id, ref.stream)) or []
        if not rows:
            return None
        connector_id, stamp = rows[0]["connector_id"], rows[0]["registered_at"]
        ctx.card_specs[ref.connection_id, ref.stream] = (
            time.monotonic() + ttl_s,
            connector_id,
            stamp,
        )
    manifest = yield from _parsed(ctx, connector_id, stamp)
    return None if manifest is None else manifest.spec(ref.stream)


def _role_fields(spec: StreamSpec, grant: StreamGrant) -> tuple[str, ...]:
    paths = {
        path
        for role in SLOT_ROLES.values()
        for path in spec.fields_with_role(role)
        if spec.declared[path].text_like and grant.allows_field(path)
    }
    return tuple(sorted(paths))


def _shown(item: FieldPreview) -> tuple[bool, Any]:
    """Whether a preview holds a value a slot can show, and that value."""
    if item.status == "complete":
        return True, item.value
    if item.status == "truncated" and item.info.kind is FieldKind.TEXT:
        return True, item.value
    return False, None


def record_card(
    ctx: Any,
    ref: RecordRef,
    *,
    grant: StreamGrant,
    page: Mapping[str, FieldPreview],
    preview: Preview,
    preview_chars: int,
    ttl_s: float,
) -> Op[RecordCard]:
    """The card of the record `ref` read under `grant`, whose page of previews is `page` (by
    path); `preview` builds a field's preview from a row as the page did (rules 1-4)."""
    spec = yield from _spec(ctx, ref, ttl_s)
    if spec is None or not spec.declares_roles:
        return RecordCard(ref)
    wanted = _role_fields(spec, grant)
    if not wanted:
        return RecordCard(ref)
    items = {path: page[path] for path in wanted if path in page and _shown(page[path])[0]}
    if len(items) < len(wanted):  # off the page, or past its budget (`unavailable`)
        rows = yield read_sql.record_preview(
            ref, grant, preview_chars, only=wanted, max_fields=len(wanted)
        )
        if rows:
            _, found = read_sql.preview_rows(rows)
            items = {row[0].path: preview(ref, row, preview_chars) for row in found}
    values: dict[str, Any] = {}
    for path, item in items.items():
        usable, value = _shown(item)
        if usable:
            values[path] = value
    return RecordCard.build(ref, spec, grant, values)


Key = tuple[str, str, str]
"""A record's key: (connection_id, stream, record_id)."""


def _value(info: FieldInfo, head: str | None) -> tuple[bool, Any]:
    """Whether a role field's head (`PAGE_CARD_CHARS` code points at most) holds a value a slot
    can show, and that value: a string (cut: its slot says so), or a whole JSON scalar."""
    if head is None:  # no chunk: an empty string, or a chunk gone since the field was read
        if info.size_chars:
            return False, None
        head = ""
    if info.kind is FieldKind.TEXT:
        return True, head
    if info.size_chars > len(head):  # a JSON value longer than any slot: not a scalar it shows
        return False, None
    return True, json.loads(head)


def page_cards(
    grants: Mapping[str, StreamGrant],
    specs: Mapping[tuple[str, str], StreamSpec],
    keys: Sequence[Key],
) -> Op[dict[Key, RecordCard]]:
    """The cards of the records `keys` (rule 5): `grants` by stream name, `specs` by
    (connection_id, stream) as the connection's manifest declares the stream (a key with none
    gets a card without slots)."""
    wanted: dict[Key, tuple[str, ...]] = {}
    for key in keys:
        spec = specs.get(key[:2])
        if spec is not None and spec.declares_roles:
            wanted[key] = _role_fields(spec, grants[key[1]])
    targets = [(*key, path) for key, paths in wanted.items() for path in paths]
    values: dict[cards_sql.CardTarget, cards_sql.CardValue] = {}
    if targets:
        streams = sorted({key[1] for key in wanted if wanted[key]})
        values = cards_sql.card_values(
            (
                yield cards_sql.card_fields(
                    [grants[name] for name in streams], targets, PAGE_CARD_CHARS
                )
            )
        )
    cards: dict[Key, RecordCard] = {}
    for key in keys:
        ref = RecordRef(*key)
        spec = specs.get(key[:2])
        if spec is None or not wanted.get(key):
            cards[key] = RecordCard(ref)
            continue
        shown: dict[str, Any] = {}
        for path in wanted[key]:
            found = values.get((*key, path))
            if found is not None:
                usable, value = _value(*found)
                if usable:
                    shown[path] = value
        cards[key] = RecordCard.build(ref, spec, grants[key[1]], shown)
    return cards
