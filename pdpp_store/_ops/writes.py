"""Write operations, each one generator driven by `_runtime` (no I/O here); each returns an
evidence card (`UpsertResult`, `BlobInfo`) or nothing.

Rules:
1. `upsert_records` works in batches: a batch is encoded and checked in full before anything of
   it is written, then written in one transaction. A bad record therefore leaves its batch
   unwritten; batches before it stay committed (`UpsertResult` of a failure says how many).
   A call with at most `batch_size` records is all or nothing.
2. An identical record (same field digests) is not written at all. A changed record gets its
   version bumped and only its changed fields rewritten (their comparable values with them), so
   cursors on unchanged fields stay valid. Deletes are soft: the record and its fields stay for
   its tombstone, its comparable values go (a deleted record matches no filter).
3. Large values are written in bounded groups of chunk rows produced lazily, so ingestion holds
   the value plus a constant, not copies of it.
4. Where the store fills the search index itself (SQLite), a write indexes exactly the fields
   search may ask for (`_indexed`), in its own transaction, two statements per batch (long
   fields' chunks, then the fields indexed whole: `_sql.index.INDEX_LONG_BASE`); a manifest
   that declares more searchable fields indexes what is stored (`_index_newly_searchable`).
5. Every statement comes from a builder of `_sql` (`write_sql`, `value_sql`, `index_sql`,
   `blob_sql`, `catalogue_sql`); nothing here spells SQL.
6. Every record a batch inserts or changes, and every delete, takes the next value of its
   connection's change sequence, in the order the batch writes (record ids in code-point
   order), in the write's own transaction (`value_sql.take_change_seqs`), and says in
   `change_log` what it changed: the record's existence (insert, delete, a deleted record
   written again) and each field path rewritten, added or removed, with the field's instant
   before (`write_sql.insert_changes`, one statement per batch).
7. The word index (`_sql.tables` Rule 12) follows the fields: every text-like field a batch
   writes gets its words' rows (`_core.words.field_words`) and its word list, and the batch's
   new words go into the vocabulary, three statements per batch (`write_sql.insert_words`,
   `insert_word_lists`, `insert_vocabulary`); a text-like field rewritten or removed loses its
   rows by the words of its list (`write_sql.stored_word_lists`, `delete_words`: the index has
   no record-order key), two statements per batch, and its list with its chunks. A soft delete
   keeps them, as it keeps the fields: every read of them is under the grant's visibility.
"""

from __future__ import annotations

import hashlib
import secrets
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from itertools import islice
from typing import Any, TypeVar

from pdpp_store._core.errors import BadRequest, NotFound, StoreError
from pdpp_store._core.fields import FieldKind
from pdpp_store._core.filters import comparable_rows, stored_text
from pdpp_store._core.identity import (
    blob_id_for,
    is_unicode,
    validate_connector_id,
    validate_safe_name,
)
from pdpp_store._core.manifest import Manifest, StreamSpec
from pdpp_store._core.values import CHUNK_CHARS, EncodedField, EncodedRecord, encode_record
from pdpp_store._core.words import OVERLONG, field_words
from pdpp_store._sql import blobs as blob_sql
from pdpp_store._sql import catalogue as catalogue_sql
from pdpp_store._sql import index as index_sql
from pdpp_store._sql import values as value_sql
from pdpp_store._sql import writes as write_sql
from pdpp_store._sql.requests import COMMIT, Op
from pdpp_store.evidence import BlobInfo, UpsertResult

__all__ = [
    "add_connection",
    "delete_record",
    "load_cursor_keys",
    "load_stream",
    "put_blob",
    "register_manifest",
    "retire_cursor_keys",
    "rotate_cursor_key",
    "upsert_records",
]

CHUNK_ROWS_PER_STATEMENT = 256
T = TypeVar("T")


def _batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def _now() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------- catalogue


def register_manifest(manifest: Manifest) -> Op[None]:
    stored = write_sql.manifest_document(
        (yield write_sql.stored_manifest(manifest.connector_id)) or []
    )
    before = _parsed(stored) if stored is not None else None
    # Not `yield from`: the runtime sends each statement's rows back, a tuple cannot take them.
    for statement in write_sql.replace_manifest(manifest, _now()):  # noqa: UP028
        yield statement
    if before is not None:  # a new connector has no connection, so nothing stored to index
        yield from _index_newly_searchable(before, manifest)
        yield from _value_newly_declared(before, manifest)


VALUE_PAGE_RECORDS = 500


def _comparable_paths(spec: StreamSpec | None) -> set[str]:
    """The fields `comparable_rows` looks at: declared and text-like."""
    if spec is None:
        return set()
    return {name for name, known in spec.declared.items() if known.text_like}


def _value_newly_declared(before: Manifest, after: Manifest) -> Op[None]:
    """Stored records' comparable values follow the manifest (`value_sql` Rule 4): a field no
    longer declared (or now binary) loses its rows, a field newly declared text-like gets them,
    read back from what is stored, a page of records at a time, one connection at a time."""
    for spec in after.streams:
        old = _comparable_paths(before.spec(spec.name))
        new = _comparable_paths(spec)
        added, removed = sorted(new - old), sorted(old - new)
        if not added and not removed:
            continue
        ids = value_sql.connection_ids(
            (yield value_sql.connector_connections(after.connector_id)) or []
        )
        for connection_id in ids:
            yield value_sql.lock_changes(connection_id)  # its counts change: `value_sql` Rule 5
            if removed:
                # not `yield from`: the runtime sends each statement's rows back
                for statement in value_sql.delete_path_values(connection_id, spec.name, removed):  # noqa: UP028
                    yield statement
            if added:
                yield from _value_stored(connection_id, spec, added)


def _value_stored(connection_id: str, spec: StreamSpec, paths: list[str]) -> Op[None]:
    after = ""
    while True:
        page = value_sql.live_record_ids(
            (yield value_sql.live_record_page(connection_id, spec.name, after, VALUE_PAGE_RECORDS))
            or []
        )
        if not page:
            return
        stored = value_sql.stored_short_values(
            (yield value_sql.short_values(connection_id, spec.name, page, paths)) or []
        )
        valued = [(record_id, sorted(values)) for record_id, values in sorted(stored.items())]
        rows = _value_rows(connection_id, spec.name, spec, stored, valued)
        if rows:
            yield value_sql.insert_values(rows)
            counted = value_sql.count_values(rows)
            if counted is not None:
                yield counted
        after = page[-1]


def _index_newly_searchable(before: Manifest, after: Manifest) -> Op[None]:
    """The search index covers the fields a write knew to be searchable (`_indexed`): when a
    manifest declares more `lexical_fields`, their stored values are indexed now. (Fields no
    longer declared stay indexed: search never asks for them.)"""
    for spec in after.streams:
        old = before.spec(spec.name)
        added = sorted(set(spec.lexical_fields) - set(old.lexical_fields if old else ()))
        if not added:
            continue
        rows = yield index_sql.index_top()
        if rows is None:  # the database maintains its own index (Postgres)
            return
        yield index_sql.register_backfill(after.connector_id, spec.name, added)
        for statement in index_sql.index_above(int(rows[0]["top"])):  # noqa: UP028
            yield statement


@lru_cache(maxsize=64)
def _parsed(document: str) -> Manifest:
    return Manifest.from_json(document)


def add_connection(connection_id: str, connector_id: str) -> Op[None]:
    validate_safe_name(connection_id, "connection_id")
    validate_connector_id(connector_id)
    known = yield write_sql.manifest_registered(connector_id)
    if not known:
        raise BadRequest(
            "invalid_request",
            f"connector {connector_id!r} has no registered manifest",
            param="connector_id",
        )
    existing = catalogue_sql.connector_of(
        (yield catalogue_sql.connection_exists(connection_id)) or []
    )
    if existing is not None:
        if existing != connector_id:
            raise BadRequest(
                "invalid_request",
                f"connection {connection_id!r} already belongs to connector {existing!r}",
                param="connection_id",
            )
        return
    yield write_sql.insert_connection(connection_id, connector_id, _now())
    yield value_sql.insert_change_counter(connection_id)


def load_stream(connection_id: str, stream: str) -> Op[StreamSpec]:
    """The stream's spec for a connection: `connection_not_found` / `stream_not_declared`."""
    validate_safe_name(connection_id, "connection_id")
    validate_safe_name(stream, "stream")
    spec = catalogue_sql.stream_spec_of(
        stream, (yield catalogue_sql.stream_spec(connection_id, stream)) or []
    )
    if spec is None:
        if not (yield catalogue_sql.connection_exists(connection_id)):
            raise NotFound(
                "connection_not_found",
                f"connection {connection_id!r} is not found",
                param="connection_id",
            )
        raise NotFound(
            "stream_not_declared",
            f"stream {stream!r} is not declared by this connection's manifest",
            param="stream",
        )
    return spec


# ---------------------------------------------------------------- records


@dataclass(slots=True)
class _BatchPlan:
    new_records: list[dict[str, Any]] = field(default_factory=list)
    changed_records: list[dict[str, Any]] = field(default_factory=list)
    dropped_fields: list[dict[str, Any]] = field(default_factory=list)
    new_fields: list[tuple[str, EncodedField]] = field(default_factory=list)
    valued: list[tuple[str, list[str]]] = field(default_factory=list)
    """Per record written, the paths whose comparable values are (re)written."""
    changes: list[dict[str, Any]] = field(default_factory=list)
    """The rows of `new_records` and `changed_records` in the order they take change values."""
    changed_paths: list[list[tuple[str, bool, str | None]]] = field(default_factory=list)
    """Per row of `changes`, what it changed (Rule 6): (path, live before, instant before)."""

    def number_changes(self, top: int) -> None:
        """Give the changes the connection's values `top - n + 1 .. top`, in order (Rule 6)."""
        first = top - len(self.changes) + 1
        for offset, row in enumerate(self.changes):
            row["change_seq"] = first + offset

    def change_rows(self, connection_id: str, stream: str) -> list[tuple[Any, ...]]:
        """`change_log` rows in `write_sql.CHANGE_COLUMNS` order, once numbered."""
        return [
            (
                connection_id,
                stream,
                row["change_seq"],
                path,
                row.get("record_id", row.get("k_record_id")),
                live_before,
                time_before,
            )
            for row, paths in zip(self.changes, self.changed_paths, strict=True)
            for path, live_before, time_before in paths
        ]


def _field_rows(
    connection_id: str, stream: str, new_fields: list[tuple[str, EncodedField]]
) -> list[tuple[Any, ...]]:
    """`fields` rows in `write_sql.FIELD_COLUMNS` order."""
    return [
        (
            connection_id,
            stream,
            record_id,
            item.path,
            item.kind.value,
            item.json_type,
            item.size_chars,
            item.size_bytes,
            item.digest,
            item.item_count,
            item.mime_type,
            item.blob_id,
            item.time_value,
        )
        for record_id, item in new_fields
    ]


def _value_rows(
    connection_id: str,
    stream: str,
    spec: StreamSpec,
    raw: Mapping[str, Mapping[str, Any]],
    valued: list[tuple[str, list[str]]],
) -> list[tuple[Any, ...]]:
    """`field_values` rows in `value_sql.VALUE_COLUMNS` order: the comparable forms
    (`comparable_rows`) of each record's listed fields, elements numbered from 1."""
    rows: list[tuple[Any, ...]] = []
    for record_id, paths in valued:
        item = raw[record_id]
        element = 0
        last = None
        for stored in comparable_rows(spec, {path: item[path] for path in paths}):
            form = stored.form
            if stored.field != last:
                element, last = 0, stored.field
            if stored.element:
                element += 1
            if form.kind == "string":
                text = stored_text(str(form.value))
            elif form.kind == "boolean":
                text = "true" if form.value else "false"
            else:
                text = None
            rows.append(
                (
                    connection_id,
                    stream,
                    record_id,
                    stored.field,
                    element if stored.element else 0,
                    form.kind,
                    text,
                    form.value if form.kind == "number" else None,
                    form.instant,
                )
            )
    return rows


def _plan_batch(
    connection_id: str,
    stream: str,
    *,
    encoded: dict[str, EncodedRecord],
    existing: dict[str, write_sql.StoredRecord],
    old_fields: dict[str, dict[str, write_sql.StoredField]],
    result: UpsertResult,
) -> _BatchPlan:
    plan = _BatchPlan()
    now = _now()
    # Rows are written in key order, so two batches touching the same records take their locks
    # in the same order and cannot deadlock each other (Postgres locks a new key on insert).
    for record_id, record in sorted(encoded.items()):
        digest = record.digest
        before = existing.get(record_id)
        if before is None:
            plan.new_records.append(
                {
                    "connection_id": connection_id,
                    "stream": stream,
                    "record_id": record_id,
                    "version": 1,
                    "digest": digest,
                    "deleted": False,
                    "updated_at": now,
                }
            )
            plan.changes.append(plan.new_records[-1])
            plan.changed_paths.append([(write_sql.EXISTENCE, False, None)])
            plan.new_fields.extend((record_id, f) for f in record.fields)
            plan.valued.append((record_id, [f.path for f in record.fields]))
            result.inserted += 1
            continue
        if before.digest == digest and not before.deleted:
            result.unchanged += 1
            continue
        plan.changed_records.append(
            {
                "k_connection_id": connection_id,
                "k_stream": stream,
                "k_record_id": record_id,
                "version": before.version + 1,
                "digest": digest,
                "deleted": False,
                "updated_at": now,
            }
        )
        plan.changes.append(plan.changed_records[-1])
        result.updated += 1
        stored = old_fields.get(record_id, {})
        kept = set()
        for item in record.fields:
            old = stored.get(item.path)
            if old is not None and (old.kind, old.digest) == (item.kind.value, item.digest):
                kept.add(item.path)
            else:
                plan.new_fields.append((record_id, item))
        live = not before.deleted
        touched = sorted({f.path for f in record.fields} | set(stored))
        plan.changed_paths.append(
            ([] if live else [(write_sql.EXISTENCE, False, None)])
            + [
                (path, live, stored[path].time_value if path in stored else None)
                for path in touched
                if path not in kept
            ]
        )
        # A deleted record has no values left (Rule 2): coming back, every field gets its own.
        valued = [f.path for f in record.fields if before.deleted or f.path not in kept]
        if valued:
            plan.valued.append((record_id, valued))
        plan.dropped_fields.extend(
            {
                "k_connection_id": connection_id,
                "k_stream": stream,
                "k_record_id": record_id,
                "k_path": path,
            }
            for path in stored
            if path not in kept
        )
    return plan


def _declared(connection_id: str, stored: StreamSpec) -> Op[StreamSpec]:
    """The stream as its manifest declares it (fields, `lexical_fields`): `load_stream`'s spec
    is built from the stream's stored row, which keeps only its key, consent field and hints."""
    rows = yield value_sql.connection_manifest(connection_id)
    declared = _parsed(rows[0]["document"]).spec(stored.name) if rows else None
    return declared if declared is not None else stored


def _indexed(item: EncodedField, searchable: frozenset[str]) -> bool:
    """Whether a field's chunks go into the search index: text-like fields that search may ask
    for (the manifest's `lexical_fields`), and any text-like field longer than a match scan
    reads before it asks the index (`index_sql.SCAN_CHUNKS`), so `q` stays as fast in every
    field.
    A shorter field is always found by the scan alone."""
    if not item.kind.text_like:
        return False
    return item.path in searchable or len(item.stored) > index_sql.SCAN_CHUNKS * CHUNK_CHARS


def _chunk_rows(
    connection_id: str, stream: str, new_fields: list[tuple[str, EncodedField]]
) -> Iterator[tuple[Any, ...]]:
    """`field_chunks` rows in `write_sql.CHUNK_COLUMNS` order, lazily (Rule 3)."""
    for record_id, item in new_fields:
        for chunk in item.chunks():
            yield (
                connection_id,
                stream,
                record_id,
                item.path,
                chunk.chunk_no,
                chunk.text,
                chunk.folded,
                chunk.lookahead,
            )


def _word_rows(
    connection_id: str, stream: str, new_fields: list[tuple[str, EncodedField]]
) -> tuple[list[write_sql.FieldWords], list[tuple[str, str, str, str]]]:
    """The words of the new text-like fields (`write_sql.FieldWords`), and the batch's distinct
    words per path for the vocabulary, in key order (Rule 7)."""
    fields: list[write_sql.FieldWords] = []
    held: dict[str, set[str]] = {}
    for record_id, item in new_fields:
        if not item.kind.text_like:
            continue
        counts = field_words(item.stored)
        if counts:
            fields.append((record_id, item.path, item.size_chars, counts))
            held.setdefault(item.path, set()).update(counts)
    vocabulary = sorted(
        (connection_id, stream, path, word)
        for path, words in held.items()
        for word in words
        if word != OVERLONG
    )
    return fields, vocabulary


def _unword_fields(
    connection_id: str,
    stream: str,
    dropped: list[tuple[str, str]],
    old_fields: dict[str, dict[str, write_sql.StoredField]],
) -> Op[None]:
    """Delete the word rows of the text-like fields of `dropped` (`(record_id, path)` pairs),
    by the words their lists hold (Rule 7); the lists go with the fields."""
    worded = [
        (record_id, path)
        for record_id, path in dropped
        if FieldKind(old_fields[record_id][path].kind).text_like
    ]
    if not worded:
        return
    gone = write_sql.word_lists(
        (yield write_sql.stored_word_lists(connection_id, stream, worded)) or []
    )
    if not gone:
        return
    # not `yield from`: the runtime sends each statement's rows back, a tuple cannot take them
    for statement in write_sql.delete_words(connection_id, stream, gone):  # noqa: UP028
        yield statement


def upsert_records(
    connection_id: str, stream: str, items: Iterable[object], batch_size: int
) -> Op[UpsertResult]:
    spec = yield from load_stream(connection_id, stream)
    declared = yield from _declared(connection_id, spec)
    searchable = frozenset(declared.lexical_fields)  # indexed where the store fills the index
    result = UpsertResult()
    changed: Counter[str] = Counter()  # rows written per record table since the last ANALYZE
    position = 0
    batches = _batched(items, batch_size)
    while True:
        encoded: dict[str, EncodedRecord] = {}
        raw: dict[str, Mapping[str, Any]] = {}
        try:
            batch = next(batches, None)
            if batch is None:
                break
            for item in batch:
                record = encode_record(item, spec, position)
                encoded[record.record_id] = record  # the last of duplicates in a batch wins
                if isinstance(item, Mapping):  # always: `encode_record` checked it
                    raw[record.record_id] = item
                position += 1
        except StoreError as exc:
            exc.details.update(index=position, committed=result.to_dict())
            raise
        except Exception as exc:  # the caller's iterable failed: say what is already stored
            exc.add_note(f"pdpp_store: records committed before this: {result.to_dict()}")
            raise
        ids = sorted(encoded)
        existing = write_sql.stored_records(
            (yield write_sql.existing_records(connection_id, stream, ids)) or []
        )
        old_fields: dict[str, dict[str, write_sql.StoredField]] = {}
        if existing:
            old_fields = write_sql.stored_fields(
                (yield write_sql.existing_fields(connection_id, stream, list(existing))) or []
            )
        plan = _plan_batch(
            connection_id,
            stream,
            encoded=encoded,
            existing=existing,
            old_fields=old_fields,
            result=result,
        )
        if plan.changes:
            top = yield value_sql.take_change_seqs(connection_id, len(plan.changes))
            plan.number_changes(value_sql.change_seq_top(top or []))
            logged = plan.change_rows(connection_id, stream)
            yield write_sql.insert_changes(logged)
            changed["change_log"] += len(logged)
        if plan.new_records:
            yield write_sql.insert_records(plan.new_records)
        if plan.changed_records:
            yield write_sql.update_records(plan.changed_records)
        if plan.dropped_fields:
            dropped = [(row["k_record_id"], row["k_path"]) for row in plan.dropped_fields]
            # while their chunks still hold the text
            for statement in index_sql.unindex_whole_fields(connection_id, stream, dropped):
                yield statement
            yield from _unword_fields(connection_id, stream, dropped, old_fields)
            # while their values are still there to count (`value_sql` Rule 5)
            for statement in value_sql.uncount_values(connection_id, stream, dropped):
                yield statement
            for statement in write_sql.delete_fields(plan.dropped_fields):
                yield statement
            yield index_sql.unregister_index_fields(connection_id, stream, dropped)
        values = _value_rows(connection_id, stream, declared, raw, plan.valued)
        if values:
            yield value_sql.insert_values(values)
            changed["field_values"] += len(values)
            counted = value_sql.count_values(values)
            if counted is not None:
                yield counted
        if plan.new_fields:
            yield write_sql.insert_fields(_field_rows(connection_id, stream, plan.new_fields))
            rows = _chunk_rows(connection_id, stream, plan.new_fields)
            for group in _batched(rows, CHUNK_ROWS_PER_STATEMENT):
                yield write_sql.insert_chunks(group)
                changed["field_chunks"] += len(group)
            words, vocabulary = _word_rows(connection_id, stream, plan.new_fields)
            if words:  # the word index (Rule 7)
                yield write_sql.insert_words(connection_id, stream, words)
                yield write_sql.insert_word_lists(connection_id, stream, words)
                yield write_sql.insert_vocabulary(vocabulary)
                changed["search_words"] += sum(len(counts) for *_, counts in words)
                changed["search_word_lists"] += len(words)
                changed["search_vocabulary"] += len(vocabulary)
            indexed = [
                (rid, item.path) for rid, item in plan.new_fields if _indexed(item, searchable)
            ]
            if indexed:  # SQLite's search index is filled by the write itself (migration 0005)
                for statement in index_sql.index_fields(connection_id, stream, indexed):
                    yield statement
            for _, item in plan.new_fields:
                if item.payload is not None and item.mime_type is not None:
                    yield from _store_blob(memoryview(item.payload), item.mime_type)
        yield COMMIT
        changed["records"] += len(plan.new_records) + len(plan.changed_records)
        changed["fields"] += len(plan.new_fields) + len(plan.dropped_fields)
        if (yield from _keep_statistics_current(changed)):
            changed.clear()
    return result


def _keep_statistics_current(changed: Counter[str]) -> Op[bool]:
    """After a batch, analyse the record tables whose statistics have fallen behind, so the next
    batch's key lookups keep their index plans (see `write_sql.stale_tables`): ingestion stays
    linear in the records present, whatever autovacuum does. `changed` counts the rows this call
    wrote since it last analysed, which the database's own counts may not show yet (they reach
    the shared statistics up to a second late). Returns whether it analysed."""
    stale = yield write_sql.stale_tables(changed)
    if not stale:
        return False
    yield write_sql.analyze(write_sql.stale_table_names(stale))
    yield COMMIT
    return True


def delete_record(connection_id: str, stream: str, record_id: str) -> Op[None]:
    validate_safe_name(record_id, "record_id")
    yield from load_stream(connection_id, stream)
    version = write_sql.record_version(
        (yield write_sql.live_record_version(connection_id, stream, record_id)) or []
    )
    if version is None:
        raise NotFound("not_found", f"record {record_id!r} is not found", param="record_id")
    top = value_sql.change_seq_top((yield value_sql.take_change_seqs(connection_id, 1)) or [])
    # not `yield from`: the runtime sends each statement's rows back, a tuple cannot take them
    for statement in value_sql.uncount_record_values(connection_id, stream, record_id):  # noqa: UP028
        yield statement
    yield value_sql.delete_record_values(connection_id, stream, record_id)
    yield write_sql.mark_deleted(
        connection_id, stream, record_id, version=version + 1, now=_now(), change_seq=top
    )
    yield write_sql.insert_changes(
        [(connection_id, stream, top, write_sql.EXISTENCE, record_id, True, None)]
    )


# ---------------------------------------------------------------- blobs


def put_blob(data: bytes, mime_type: str) -> Op[BlobInfo]:
    if not isinstance(data, bytes | bytearray | memoryview):
        raise BadRequest("invalid_request", "blob data must be bytes", param="data")
    if not isinstance(mime_type, str) or "/" not in mime_type or not is_unicode(mime_type):
        raise BadRequest(
            "invalid_request", "mime_type must be a MIME type such as text/plain", param="mime_type"
        )
    return (yield from _store_blob(memoryview(data), mime_type))


def _store_blob(view: memoryview, mime_type: str) -> Op[BlobInfo]:
    """Content-addressed: bytes already stored are not written again (their MIME type stays).
    Rows are inserted with `ON CONFLICT DO NOTHING`, so concurrent writers of the same bytes all
    succeed (each waits for the first to commit, then skips), and all answer the stored row."""
    sha = hashlib.sha256(view).hexdigest()
    blob_id = blob_id_for(sha)
    found = blob_sql.blob_info((yield blob_sql.blob_exists(blob_id)) or [])
    if found is not None:
        return found
    yield blob_sql.insert_blob(blob_id, sha, mime_type, len(view), _now())
    offsets = range(0, len(view), blob_sql.BLOB_CHUNK_BYTES)
    for group in _batched(offsets, 16):
        yield blob_sql.insert_blob_chunks(blob_id, view, group)
    stored = blob_sql.blob_info((yield blob_sql.blob_exists(blob_id)) or [])
    return stored if stored is not None else BlobInfo(blob_id, sha, mime_type, len(view))


# ---------------------------------------------------------------- cursor keys


def load_cursor_keys(create: bool) -> Op[list[tuple[int, bytes]]]:
    """Stored cursor keys, newest first; with `create`, make the first one if there is none
    (stores opening one fresh database at once all end up with the same first key)."""
    keys = write_sql.cursor_key_list((yield write_sql.cursor_keys_newest_first()) or [])
    if keys or not create:
        return keys
    yield write_sql.insert_first_cursor_key(secrets.token_bytes(32), _now())
    return (yield from load_cursor_keys(create=False))


def rotate_cursor_key() -> Op[int]:
    newest = write_sql.newest_key_id((yield write_sql.newest_cursor_key()) or [])
    if newest >= 255:
        raise BadRequest("invalid_request", "all 255 cursor key ids are in use", param="key_id")
    yield write_sql.insert_cursor_key(newest + 1, secrets.token_bytes(32), _now())
    return newest + 1


def retire_cursor_keys(grace: timedelta) -> Op[int]:
    """Delete the keys superseded (by the next newer key's creation) more than `grace` ago.
    The newest key, which signs, is never retired. Returns how many were deleted."""
    rows = (yield write_sql.cursor_key_ages()) or []
    cutoff = _now() - grace
    retired = [
        int(older["key_id"])
        for older, newer in zip(rows[1:], rows, strict=False)
        if _aware(newer["created_at"]) <= cutoff  # superseded when the newer key was made
    ]
    if retired:
        yield write_sql.delete_cursor_keys(retired)
    return len(retired)


def _aware(moment: datetime) -> datetime:
    """SQLite gives back naive datetimes (stored as UTC): make them comparable."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
