"""The two fronts, `Store` (sync) and `AsyncStore` (async), over one set of operations.

`_StoreCore` holds everything that is not I/O: configuration, the read context (cursor codec,
declared-stream cache), and a `_op_*` method for each operation that needs more than its
generator in `_ops` (bookkeeping around it, or a choice between operations). Each front method
is one line, `self._run(ENTRY, generator)`: the operation's catalogue entry (`_ops.catalogue`)
travels with its generator, and `_run` runs it as a read or in a write transaction as the entry's
`kind` says, so the fronts cannot drift apart in behaviour, and a test holds both (and the CLI)
to the catalogue. Opening is written once too (`_opening`): each front's `open` only does its
steps with its own I/O.

Closing an `AsyncStore` (`AsyncStore.close`) is bounded, and cancels nothing that writes:
1. It waits for the writes still running (a cancelled caller's write runs to its end), each
   bounded as every write is, by the busy timeout's waits.
2. It stops the read audit's writer without cancelling the batch it writes, and waits for it at
   most `busy_timeout_s` (`_runtime.audit`, Rule 5): a cancellation delivered inside the driver
   can come back as another error (psycopg, in an `executemany`), which a writer that took it
   for a failed batch survived, and a close that awaited it then waited for ever.
3. It lets go of the kept read connections (a read still running closes its own at its end),
   then disposes of the engine. Only connections whose last operation ended normally or with a
   `StoreError` were kept or pooled (`_runtime.errors.healthy`), so giving them back sends the
   database nothing that could wait.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Self, TypeVar

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from typing_extensions import Unpack

from ._core.cursor import CursorCodec, codec_for_stored_keys
from ._core.errors import BadRequest
from ._core.grants import Grant
from ._core.identity import (
    RECORD_URI_PREFIX,
    RecordRef,
    UnscopedRecordRef,
    parse_field_window_uri,
    parse_record_uri,
)
from ._core.manifest import Manifest
from ._core.selector import SelectorArgs
from ._opening import DEFAULT_BATCH_SIZE, Opening, opened_async, opened_sync
from ._ops import aggregate as _aggregate
from ._ops import audit as _audit
from ._ops import discovery as _discovery
from ._ops import grants as _grants
from ._ops import query as _query
from ._ops import reads as _reads
from ._ops import search as _search
from ._ops import writes as _ingest
from ._ops.catalogue import (
    ADD_CONNECTION,
    ADD_GRANT,
    AGGREGATE,
    BLOB_INFO,
    CATALOGUE,
    DELETE_RECORD,
    DESCRIBE_FIELD,
    DESCRIBE_GRANT,
    LIST_AUDIT,
    LIST_GRANTS,
    PRUNE_AUDIT,
    PUT_BLOB,
    QUERY_RECORDS,
    READ_BLOB_RANGE,
    READ_FIELD_WINDOW,
    READ_RECORD,
    READ_RESOURCE,
    REGISTER_MANIFEST,
    RETIRE_CURSOR_KEYS,
    REVOKE_GRANT,
    ROTATE_CURSOR_KEY,
    SEARCH,
    UPSERT_RECORDS,
    Operation,
)
from ._ops.reads import ReadContext
from ._runtime import (
    DEFAULT_BUSY_TIMEOUT_S,
    WRITER_SLOTS,
    AsyncReaders,
    HeldReader,
    async_url,
    busy,
    install_hooks,
    run_async,
    run_sync,
    sync_url,
)
from ._runtime.audit import AsyncAuditWriter, Pending, SyncAuditWriter
from ._sql.requests import COMMIT, Op
from .evidence import (
    AggregateResult,
    AuditEntry,
    BlobInfo,
    BlobRange,
    FieldInfo,
    FieldWindow,
    GrantSchema,
    RecordPage,
    RecordView,
    SearchPage,
    StoredGrant,
    UpsertResult,
)

__all__ = ["AsyncStore", "Store"]

T = TypeVar("T")
RecordInput = RecordRef | UnscopedRecordRef | str
FilterInput = Mapping[str, Any] | str | None


def _check_grace(older_than: object) -> timedelta:
    """A grace period: a `timedelta` or a number of seconds, finite and >= 0."""
    if isinstance(older_than, timedelta):
        seconds = older_than.total_seconds()
    elif isinstance(older_than, float):
        seconds = older_than
    elif isinstance(older_than, int) and not isinstance(older_than, bool):
        seconds = float(older_than) if abs(older_than) < 2**53 else math.inf  # never overflows
    else:
        seconds = math.nan
    if not 0 <= seconds <= 100 * 365 * 86400:
        raise BadRequest(
            "invalid_request",
            "older_than must be a timedelta (or seconds) between 0 and 100 years",
            param="older_than",
        )
    return timedelta(seconds=seconds)


class _StoreCore:
    def __init__(
        self, codec: CursorCodec, batch_size: int, stored_keys: bool, audit: bool = True
    ) -> None:
        self._ctx = ReadContext(codec, stored_keys=stored_keys)
        self._batch_size = batch_size
        self._auditing: Pending | None = Pending() if audit else None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The read audit, in one place (`_ops.audit` rule 1): each front's method of every read
        # of the catalogue records its entry, so no read, present or future, goes unrecorded.
        super().__init_subclass__(**kwargs)
        for entry in CATALOGUE.values():
            if not entry.writes and entry.name in vars(cls):
                setattr(cls, entry.name, _audit.audited(entry, vars(cls)[entry.name]))

    _audit_writer: SyncAuditWriter | AsyncAuditWriter | None = None

    def _audit_entry(self, row: Mapping[str, Any]) -> None:
        if self._auditing is not None and self._audit_writer is not None:
            self._auditing.add(row)
            self._audit_writer.started()

    # Each `_op_*` builds one operation around its generator in `_ops`.

    def _op_register_manifest(self, manifest: Mapping[str, Any]) -> Op[None]:
        parsed = manifest if isinstance(manifest, Manifest) else Manifest.from_dict(manifest)
        yield from _ingest.register_manifest(parsed)
        yield COMMIT
        self._ctx.declared.clear()  # the new manifest may declare fewer streams
        self._ctx.card_specs.clear()

    def _op_upsert_records(
        self, connection_id: str, stream: str, records: Iterable[object]
    ) -> Op[UpsertResult]:
        if isinstance(records, Mapping | str | bytes | bytearray) or not isinstance(
            records, Iterable
        ):
            raise BadRequest(
                "invalid_request",
                "records must be a list (or iterable) of records",
                param="records",
            )
        return _ingest.upsert_records(connection_id, stream, records, self._batch_size)

    def _op_search(
        self,
        grant: Grant,
        q: str,
        *,
        streams: Sequence[str] | None,
        connection_id: str | None,
        filter: FilterInput,
        order: str,
        limit: int,
        cursor: str | None,
        count: str,
    ) -> Op[SearchPage]:
        return _search.search(
            self._ctx,
            grant,
            q,
            streams=streams,
            connection_id=connection_id,
            filter=filter,
            order=order,
            limit=limit,
            cursor=cursor,
            count=count,
        )

    def _op_query_records(
        self,
        grant: Grant,
        stream: str,
        *,
        connection_id: str | None,
        filter: FilterInput,
        order: str,
        fields: Sequence[str] | None,
        limit: int,
        cursor: str | None,
        count: str,
        changes_since: str | None,
    ) -> Op[RecordPage]:
        return _query.query_records(
            self._ctx,
            grant,
            stream,
            connection_id=connection_id,
            filter=filter,
            order=order,
            fields=fields,
            limit=limit,
            cursor=cursor,
            count=count,
            changes_since=changes_since,
        )

    def _op_aggregate(
        self,
        grant: Grant,
        stream: str,
        *,
        metric: str,
        field: str | None,
        group_by: str | None,
        group_by_time: str | None,
        granularity: str,
        time_zone: str,
        filter: FilterInput,
        connection_id: str | None,
        limit: int,
    ) -> Op[AggregateResult]:
        return _aggregate.aggregate(
            self._ctx,
            grant,
            stream,
            metric=metric,
            field=field,
            group_by=group_by,
            group_by_time=group_by_time,
            granularity=granularity,
            time_zone=time_zone,
            filter=filter,
            connection_id=connection_id,
            limit=limit,
        )

    def _op_rotate_cursor_key(self) -> Op[None]:
        if not self._ctx.stored_keys:
            raise BadRequest(
                "invalid_request",
                "this store's cursor secret is configured: rotate it by configuration "
                "(a new cursor_secret, the old one in previous_cursor_secrets)",
                param="cursor_secret",
            )
        yield from _ingest.rotate_cursor_key()
        stored = yield from _ingest.load_cursor_keys(create=False)
        yield COMMIT
        self._ctx.codec = codec_for_stored_keys(stored)

    def _op_retire_cursor_keys(self, older_than: object) -> Op[int]:
        grace = _check_grace(older_than)
        if not self._ctx.stored_keys:
            raise BadRequest(
                "invalid_request",
                "this store's cursor secret is configured: retire a key by removing it from "
                "previous_cursor_secrets",
                param="cursor_secret",
            )
        retired = yield from _ingest.retire_cursor_keys(grace)
        stored = yield from _ingest.load_cursor_keys(create=False)
        yield COMMIT
        self._ctx.codec = codec_for_stored_keys(stored)
        return retired

    def _op_read_resource(self, grant: Grant, uri: str) -> Op[RecordView | FieldWindow]:
        if isinstance(uri, str) and uri.startswith(RECORD_URI_PREFIX):
            return (yield from _reads.read_record(self._ctx, grant, parse_record_uri(uri)))
        ref = parse_field_window_uri(uri)
        return (
            yield from _reads.read_field_window(
                self._ctx,
                grant,
                ref.record,
                ref.field,
                offset_chars=ref.offset_chars,
                limit_chars=ref.limit_chars,
                cursor=ref.cursor,
            )
        )


class Store(_StoreCore):
    """The synchronous store. `Store.open(url)` migrates the database if needed."""

    def __init__(
        self,
        engine: Engine,
        codec: CursorCodec,
        batch_size: int,
        stored_keys: bool = True,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        *,
        audit: bool = True,
    ) -> None:
        super().__init__(codec, batch_size, stored_keys, audit)
        self.engine = engine
        self._audit_writer = (
            None
            if self._auditing is None
            else SyncAuditWriter(engine, self._auditing, _audit.write_entries, busy_timeout_s)
        )
        self._reader = HeldReader(engine)
        self._busy_timeout_s = busy_timeout_s
        self._writers = threading.BoundedSemaphore(WRITER_SLOTS)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        cursor_secret: bytes | None = None,
        previous_cursor_secrets: Sequence[bytes] = (),
        batch_size: int = DEFAULT_BATCH_SIZE,
        migrate: bool = True,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        audit: bool = True,
    ) -> Self:
        """Open the store at `url`; with `migrate=False` the database must already be at the
        newest schema (see `pdpp-store migrate`), else `storage_unavailable`. With
        `audit=False` reads under a grant are not recorded (docs/contract.md §14)."""
        plan = Opening(
            url,
            cursor_secret=cursor_secret,
            previous_cursor_secrets=previous_cursor_secrets,
            batch_size=batch_size,
            migrate=migrate,
            busy_timeout_s=busy_timeout_s,
        )
        engine = plan.engine(sync_url, create_engine)
        try:
            install_hooks(engine, busy_timeout_s)
            stored = opened_sync(engine, plan)
        except BaseException:
            engine.dispose()
            raise
        return plan.store(cls, engine, stored, audit=audit)

    def _run(self, operation: Operation, op: Op[T]) -> T:
        if not operation.writes:
            return self._reader.run(op)
        if not self._writers.acquire(timeout=self._busy_timeout_s):
            op.close()
            raise busy("every writer slot of this store is in use; retry the operation")
        try:
            return run_sync(self.engine, op, write=True)
        finally:
            self._writers.release()

    def close(self) -> None:
        if isinstance(self._audit_writer, SyncAuditWriter):
            self._audit_writer.close()
        self._reader.close()
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def register_manifest(self, manifest: Mapping[str, Any]) -> None:
        return self._run(REGISTER_MANIFEST, self._op_register_manifest(manifest))

    def add_connection(self, connection_id: str, connector_id: str) -> None:
        return self._run(ADD_CONNECTION, _ingest.add_connection(connection_id, connector_id))

    def upsert_records(
        self, connection_id: str, stream: str, records: Iterable[object]
    ) -> UpsertResult:
        return self._run(UPSERT_RECORDS, self._op_upsert_records(connection_id, stream, records))

    def delete_record(self, connection_id: str, stream: str, record_id: str) -> None:
        return self._run(DELETE_RECORD, _ingest.delete_record(connection_id, stream, record_id))

    def put_blob(self, data: bytes, mime_type: str) -> BlobInfo:
        return self._run(PUT_BLOB, _ingest.put_blob(data, mime_type))

    def rotate_cursor_key(self) -> None:
        return self._run(ROTATE_CURSOR_KEY, self._op_rotate_cursor_key())

    def retire_cursor_keys(self, older_than: timedelta | float) -> int:
        """Delete the stored cursor keys superseded more than `older_than` ago (a grace period
        of the caller's choosing); cursors they signed become `invalid_cursor`. Returns how
        many were retired. The active key is never retired."""
        return self._run(RETIRE_CURSOR_KEYS, self._op_retire_cursor_keys(older_than))

    def read_field_window(
        self,
        grant: Grant,
        record: RecordInput,
        field: str,
        *,
        connection_id: str | None = None,
        **selector: Unpack[SelectorArgs],
    ) -> FieldWindow:
        return self._run(
            READ_FIELD_WINDOW,
            _grants.checked(
                grant,
                _reads.read_field_window(
                    self._ctx, grant, record, field, connection_id=connection_id, **selector
                ),
            ),
        )

    def read_record(
        self,
        grant: Grant,
        record: RecordInput,
        *,
        connection_id: str | None = None,
        after_field: str | None = None,
        fields: Sequence[str] | None = None,
    ) -> RecordView:
        return self._run(
            READ_RECORD,
            _grants.checked(
                grant,
                _reads.read_record(
                    self._ctx,
                    grant,
                    record,
                    connection_id=connection_id,
                    after_field=after_field,
                    fields=fields,
                ),
            ),
        )

    def search(
        self,
        grant: Grant,
        q: str,
        *,
        streams: Sequence[str] | None = None,
        connection_id: str | None = None,
        filter: FilterInput = None,
        order: str = "relevance",
        limit: int = 10,
        cursor: str | None = None,
        count: str = "none",
    ) -> SearchPage:
        return self._run(
            SEARCH,
            _grants.checked(
                grant,
                self._op_search(
                    grant,
                    q,
                    streams=streams,
                    connection_id=connection_id,
                    filter=filter,
                    order=order,
                    limit=limit,
                    cursor=cursor,
                    count=count,
                ),
            ),
        )

    def aggregate(
        self,
        grant: Grant,
        stream: str,
        *,
        metric: str = "count",
        field: str | None = None,
        group_by: str | None = None,
        group_by_time: str | None = None,
        granularity: str = "month",
        time_zone: str = "UTC",
        filter: FilterInput = None,
        connection_id: str | None = None,
        limit: int = 25,
    ) -> AggregateResult:
        """An aggregate of the stream's visible records (docs/contract.md §12): `metric` (count,
        or sum/min/max/count_distinct of `field`), grouped by a declared field (`group_by`) or in
        time buckets of a declared field (`group_by_time`, `granularity`, IANA `time_zone`),
        narrowed by `filter` (an object or its JSON text); at most `limit` (1..100) groups."""
        return self._run(
            AGGREGATE,
            _grants.checked(
                grant,
                self._op_aggregate(
                    grant,
                    stream,
                    metric=metric,
                    field=field,
                    group_by=group_by,
                    group_by_time=group_by_time,
                    granularity=granularity,
                    time_zone=time_zone,
                    filter=filter,
                    connection_id=connection_id,
                    limit=limit,
                ),
            ),
        )

    def describe_grant(
        self, grant: Grant, *, stream: str | None = None, limit: int = 25, after: str | None = None
    ) -> GrantSchema:
        return self._run(
            DESCRIBE_GRANT,
            _grants.checked(
                grant, _discovery.describe_grant(self._ctx, grant, stream, limit, after)
            ),
        )

    def query_records(
        self,
        grant: Grant,
        stream: str,
        *,
        connection_id: str | None = None,
        filter: FilterInput = None,
        order: str = "desc",
        fields: Sequence[str] | None = None,
        limit: int = 25,
        cursor: str | None = None,
        count: str = "none",
        changes_since: str | None = None,
    ) -> RecordPage:
        """A page of the stream's visible records (docs/contract.md §11.2): filtered (`filter`, an
        object or its JSON text), ordered by the stream's order field (`order` "desc" or "asc";
        key order when the grant does not cover it), projected (`fields`), `limit` 1..100, with
        the signed `cursor` of the previous page, `count="exact"`, or the changes since a
        bookmark (`changes_since`: "beginning" or a page's `next_changes_since`)."""
        return self._run(
            QUERY_RECORDS,
            _grants.checked(
                grant,
                self._op_query_records(
                    grant,
                    stream,
                    connection_id=connection_id,
                    filter=filter,
                    order=order,
                    fields=fields,
                    limit=limit,
                    cursor=cursor,
                    count=count,
                    changes_since=changes_since,
                ),
            ),
        )

    def describe_field(
        self, grant: Grant, record: RecordInput, field: str, *, connection_id: str | None = None
    ) -> FieldInfo:
        return self._run(
            DESCRIBE_FIELD,
            _grants.checked(
                grant,
                _reads.describe_field(self._ctx, grant, record, field, connection_id=connection_id),
            ),
        )

    def read_resource(self, grant: Grant, uri: str) -> RecordView | FieldWindow:
        return self._run(READ_RESOURCE, _grants.checked(grant, self._op_read_resource(grant, uri)))

    def blob_info(self, grant: Grant, blob_id: str) -> BlobInfo:
        return self._run(BLOB_INFO, _grants.checked(grant, _reads.blob_info(grant, blob_id)))

    def read_blob_range(
        self, grant: Grant, blob_id: str, offset_bytes: int = 0, length_bytes: int = 65536
    ) -> BlobRange:
        return self._run(
            READ_BLOB_RANGE,
            _grants.checked(
                grant, _reads.read_blob_range(grant, blob_id, offset_bytes, length_bytes)
            ),
        )

    def add_grant(self, grant: Grant | Mapping[str, Any]) -> StoredGrant:
        """Keep `grant` in the store (a `Grant` or its JSON); servers whose tokens name its id
        serve it, until `revoke_grant`. Idempotent for the same terms; other terms under a
        stored id are `grant_exists`."""
        return self._run(ADD_GRANT, _grants.add_grant(grant))

    def revoke_grant(self, grant_id: str) -> StoredGrant:
        """Revoke the stored grant `grant_id` for good: every read under it, on every surface
        and in every process, is `grant_revoked` from the next call on."""
        return self._run(REVOKE_GRANT, _grants.revoke_grant(grant_id))

    def list_grants(self, grant_id: str | None = None) -> list[StoredGrant]:
        """Every stored grant (or only `grant_id`'s), by id, with its status now."""
        return self._run(LIST_GRANTS, _grants.list_grants(grant_id))

    def list_audit(
        self,
        *,
        grant_id: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 100,
        after_id: int = 0,
    ) -> list[AuditEntry]:
        """The read audit (docs/contract.md §14): the entries after `after_id`, oldest first,
        at most `limit` (1..1000), of one grant and from `since` to `until` (ISO-8601, the
        second exclusive) when given. This process's pending entries are written first."""
        if isinstance(self._audit_writer, SyncAuditWriter):
            self._audit_writer.flush()
        return self._run(LIST_AUDIT, _audit.list_audit(grant_id, since, until, limit, after_id))

    def prune_audit(self, older_than: timedelta | float) -> int:
        """Delete the audit entries older than `older_than` (a `timedelta` or seconds); returns
        how many."""
        return self._run(PRUNE_AUDIT, _audit.prune_audit(_check_grace(older_than)))


class AsyncStore(_StoreCore):
    """The asynchronous store: the same operations as `Store`, awaited."""

    def __init__(
        self,
        engine: AsyncEngine,
        codec: CursorCodec,
        batch_size: int,
        stored_keys: bool = True,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        *,
        audit: bool = True,
    ) -> None:
        super().__init__(codec, batch_size, stored_keys, audit)
        self.engine = engine
        self._audit_writer = (
            None
            if self._auditing is None
            else AsyncAuditWriter(engine, self._auditing, _audit.write_entries, busy_timeout_s)
        )
        self._readers = AsyncReaders(engine, busy_timeout_s)
        self._busy_timeout_s = busy_timeout_s
        self._writers = asyncio.Semaphore(WRITER_SLOTS)
        self._writes: set[asyncio.Future[Any]] = set()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        cursor_secret: bytes | None = None,
        previous_cursor_secrets: Sequence[bytes] = (),
        batch_size: int = DEFAULT_BATCH_SIZE,
        migrate: bool = True,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
        audit: bool = True,
    ) -> Self:
        """As `Store.open`."""
        plan = Opening(
            url,
            cursor_secret=cursor_secret,
            previous_cursor_secrets=previous_cursor_secrets,
            batch_size=batch_size,
            migrate=migrate,
            busy_timeout_s=busy_timeout_s,
        )
        engine = plan.engine(async_url, create_async_engine)
        try:
            install_hooks(engine.sync_engine, busy_timeout_s)
            stored = await opened_async(engine, plan)
        except BaseException:
            await engine.dispose()
            raise
        return plan.store(cls, engine, stored, audit=audit)

    async def _run(self, operation: Operation, op: Op[T]) -> T:
        if not operation.writes:
            return await self._readers.run(op)
        # A write runs to its end (commit or rollback) even if the caller is cancelled: the
        # caller gets `CancelledError` at once, and the write finishes in the background, so a
        # cancellation never leaves a transaction, a lock or a connection half-way (the next
        # call waits for it like any concurrent write). `close()` waits for such writes.
        task = asyncio.ensure_future(self._write(op))
        self._writes.add(task)
        task.add_done_callback(self._write_done)
        return await asyncio.shield(task)

    def _write_done(self, task: asyncio.Future[Any]) -> None:
        self._writes.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: its caller may have gone, the outcome is in the db

    async def _write(self, op: Op[T]) -> T:
        try:
            # Not `wait_for`: on Python 3.11 it can lose a slot that was acquired just as the
            # caller was cancelled. `Semaphore.acquire` itself is cancellation-safe.
            async with asyncio.timeout(self._busy_timeout_s):
                await self._writers.acquire()
        except TimeoutError:
            op.close()
            raise busy("every writer slot of this store is in use; retry the operation") from None
        try:
            return await run_async(self.engine, op, write=True)
        finally:
            self._writers.release()

    async def close(self) -> None:
        """Wait for the writes still running, stop the read audit's writer (what it holds is
        written, within `busy_timeout_s`), let go of the kept read connections and dispose of
        the engine (bounded: see the module's rules on closing)."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        if isinstance(self._audit_writer, AsyncAuditWriter):
            await self._audit_writer.close()
        await self._readers.close()
        await self.engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def register_manifest(self, manifest: Mapping[str, Any]) -> None:
        return await self._run(REGISTER_MANIFEST, self._op_register_manifest(manifest))

    async def add_connection(self, connection_id: str, connector_id: str) -> None:
        return await self._run(ADD_CONNECTION, _ingest.add_connection(connection_id, connector_id))

    async def upsert_records(
        self, connection_id: str, stream: str, records: Iterable[object]
    ) -> UpsertResult:
        return await self._run(
            UPSERT_RECORDS, self._op_upsert_records(connection_id, stream, records)
        )

    async def delete_record(self, connection_id: str, stream: str, record_id: str) -> None:
        return await self._run(
            DELETE_RECORD, _ingest.delete_record(connection_id, stream, record_id)
        )

    async def put_blob(self, data: bytes, mime_type: str) -> BlobInfo:
        return await self._run(PUT_BLOB, _ingest.put_blob(data, mime_type))

    async def rotate_cursor_key(self) -> None:
        return await self._run(ROTATE_CURSOR_KEY, self._op_rotate_cursor_key())

    async def retire_cursor_keys(self, older_than: timedelta | float) -> int:
        """As `Store.retire_cursor_keys`."""
        return await self._run(RETIRE_CURSOR_KEYS, self._op_retire_cursor_keys(older_than))

    async def read_field_window(
        self,
        grant: Grant,
        record: RecordInput,
        field: str,
        *,
        connection_id: str | None = None,
        **selector: Unpack[SelectorArgs],
    ) -> FieldWindow:
        return await self._run(
            READ_FIELD_WINDOW,
            _grants.checked(
                grant,
                _reads.read_field_window(
                    self._ctx, grant, record, field, connection_id=connection_id, **selector
                ),
            ),
        )

    async def read_record(
        self,
        grant: Grant,
        record: RecordInput,
        *,
        connection_id: str | None = None,
        after_field: str | None = None,
        fields: Sequence[str] | None = None,
    ) -> RecordView:
        return await self._run(
            READ_RECORD,
            _grants.checked(
                grant,
                _reads.read_record(
                    self._ctx,
                    grant,
                    record,
                    connection_id=connection_id,
                    after_field=after_field,
                    fields=fields,
                ),
            ),
        )

    async def search(
        self,
        grant: Grant,
        q: str,
        *,
        streams: Sequence[str] | None = None,
        connection_id: str | None = None,
        filter: FilterInput = None,
        order: str = "relevance",
        limit: int = 10,
        cursor: str | None = None,
        count: str = "none",
    ) -> SearchPage:
        return await self._run(
            SEARCH,
            _grants.checked(
                grant,
                self._op_search(
                    grant,
                    q,
                    streams=streams,
                    connection_id=connection_id,
                    filter=filter,
                    order=order,
                    limit=limit,
                    cursor=cursor,
                    count=count,
                ),
            ),
        )

    async def aggregate(
        self,
        grant: Grant,
        stream: str,
        *,
        metric: str = "count",
        field: str | None = None,
        group_by: str | None = None,
        group_by_time: str | None = None,
        granularity: str = "month",
        time_zone: str = "UTC",
        filter: FilterInput = None,
        connection_id: str | None = None,
        limit: int = 25,
    ) -> AggregateResult:
        """As `Store.aggregate`."""
        return await self._run(
            AGGREGATE,
            _grants.checked(
                grant,
                self._op_aggregate(
                    grant,
                    stream,
                    metric=metric,
                    field=field,
                    group_by=group_by,
                    group_by_time=group_by_time,
                    granularity=granularity,
                    time_zone=time_zone,
                    filter=filter,
                    connection_id=connection_id,
                    limit=limit,
                ),
            ),
        )

    async def describe_grant(
        self, grant: Grant, *, stream: str | None = None, limit: int = 25, after: str | None = None
    ) -> GrantSchema:
        return await self._run(
            DESCRIBE_GRANT,
            _grants.checked(
                grant, _discovery.describe_grant(self._ctx, grant, stream, limit, after)
            ),
        )

    async def query_records(
        self,
        grant: Grant,
        stream: str,
        *,
        connection_id: str | None = None,
        filter: FilterInput = None,
        order: str = "desc",
        fields: Sequence[str] | None = None,
        limit: int = 25,
        cursor: str | None = None,
        count: str = "none",
        changes_since: str | None = None,
    ) -> RecordPage:
        """As `Store.query_records`."""
        return await self._run(
            QUERY_RECORDS,
            _grants.checked(
                grant,
                self._op_query_records(
                    grant,
                    stream,
                    connection_id=connection_id,
                    filter=filter,
                    order=order,
                    fields=fields,
                    limit=limit,
                    cursor=cursor,
                    count=count,
                    changes_since=changes_since,
                ),
            ),
        )

    async def describe_field(
        self, grant: Grant, record: RecordInput, field: str, *, connection_id: str | None = None
    ) -> FieldInfo:
        return await self._run(
            DESCRIBE_FIELD,
            _grants.checked(
                grant,
                _reads.describe_field(self._ctx, grant, record, field, connection_id=connection_id),
            ),
        )

    async def read_resource(self, grant: Grant, uri: str) -> RecordView | FieldWindow:
        return await self._run(
            READ_RESOURCE, _grants.checked(grant, self._op_read_resource(grant, uri))
        )

    async def blob_info(self, grant: Grant, blob_id: str) -> BlobInfo:
        return await self._run(BLOB_INFO, _grants.checked(grant, _reads.blob_info(grant, blob_id)))

    async def read_blob_range(
        self, grant: Grant, blob_id: str, offset_bytes: int = 0, length_bytes: int = 65536
    ) -> BlobRange:
        return await self._run(
            READ_BLOB_RANGE,
            _grants.checked(
                grant, _reads.read_blob_range(grant, blob_id, offset_bytes, length_bytes)
            ),
        )

    async def add_grant(self, grant: Grant | Mapping[str, Any]) -> StoredGrant:
        """As `Store.add_grant`."""
        return await self._run(ADD_GRANT, _grants.add_grant(grant))

    async def revoke_grant(self, grant_id: str) -> StoredGrant:
        """As `Store.revoke_grant`."""
        return await self._run(REVOKE_GRANT, _grants.revoke_grant(grant_id))

    async def list_grants(self, grant_id: str | None = None) -> list[StoredGrant]:
        """As `Store.list_grants`."""
        return await self._run(LIST_GRANTS, _grants.list_grants(grant_id))

    async def list_audit(
        self,
        *,
        grant_id: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 100,
        after_id: int = 0,
    ) -> list[AuditEntry]:
        """As `Store.list_audit`."""
        if isinstance(self._audit_writer, AsyncAuditWriter):
            await self._audit_writer.flush()
        return await self._run(
            LIST_AUDIT, _audit.list_audit(grant_id, since, until, limit, after_id)
        )

    async def prune_audit(self, older_than: timedelta | float) -> int:
        """As `Store.prune_audit`."""
        return await self._run(PRUNE_AUDIT, _audit.prune_audit(_check_grace(older_than)))
