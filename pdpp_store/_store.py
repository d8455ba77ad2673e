"""The two fronts, `Store` (sync) and `AsyncStore` (async), over one set of operations.

`_StoreCore` holds everything that is not I/O: configuration, the read context (cursor codec,
declared-stream cache), and a `_op_*` method for each operation that needs more than its
generator in `_ops` (bookkeeping around it, or a choice between operations). Each front method
is one line, `self._run(name, generator)`: the driver runs the generator in the transaction the
operation's catalogue entry calls for (`_ops.catalogue`: read or write), so the fronts cannot
drift apart in behaviour, and a test holds both (and the CLI) to the catalogue.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Self, TypeVar

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from typing_extensions import Unpack

from ._core.cursor import CursorCodec, CursorKey, codec_for_stored_keys
from ._core.errors import BadRequest, StoreError
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
from ._ops import reads as _reads
from ._ops import search as _search
from ._ops import writes as _ingest
from ._ops.catalogue import CATALOGUE
from ._ops.reads import ReadContext
from ._runtime import (
    DEFAULT_BUSY_TIMEOUT_S,
    WRITER_SLOTS,
    AsyncReaders,
    HeldReader,
    async_url,
    busy,
    check_busy_timeout,
    engine_options,
    install_hooks,
    opening,
    run_async,
    run_sync,
    sync_url,
)
from ._runtime import migrate as _migrate
from ._sql.requests import COMMIT, Op
from .evidence import (
    BlobInfo,
    BlobRange,
    FieldInfo,
    FieldWindow,
    GrantSchema,
    RecordView,
    SearchPage,
    UpsertResult,
)

__all__ = ["AsyncStore", "Store"]

DEFAULT_BATCH_SIZE = 500
T = TypeVar("T")
RecordInput = RecordRef | UnscopedRecordRef | str


MIN_SECRET_BYTES = 16


def _check_secrets(configured: object, previous: object) -> tuple[bytes, ...]:
    """The configured cursor secrets, checked before anything is opened."""
    if configured is None:
        if previous:
            raise BadRequest(
                "invalid_request",
                "previous_cursor_secrets needs cursor_secret",
                param="previous_cursor_secrets",
            )
        return ()
    if isinstance(previous, bytes | str) or not isinstance(previous, Sequence):
        raise BadRequest(
            "invalid_request",
            "previous_cursor_secrets must be a list of bytes",
            param="previous_cursor_secrets",
        )
    secrets = (configured, *previous)
    for number, secret in enumerate(secrets):
        if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
            raise BadRequest(
                "invalid_request",
                f"cursor secrets must be bytes of at least {MIN_SECRET_BYTES} bytes",
                param="cursor_secret" if number == 0 else "previous_cursor_secrets",
            )
    return secrets


_OPEN_RETRY_S = 0.05
MAX_BATCH_SIZE = 10_000
"""A batch's ids are bound one parameter each: well under what SQLite (32,766) and Postgres
(65,535) accept."""


def _check_options(
    configured: object,
    previous: object,
    batch_size: object,
    migrate: object = True,
    busy_timeout_s: object = DEFAULT_BUSY_TIMEOUT_S,
) -> tuple[bytes, ...]:
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, int)
        or not 1 <= batch_size <= MAX_BATCH_SIZE
    ):
        raise BadRequest(
            "invalid_request",
            f"batch_size must be an integer in 1..{MAX_BATCH_SIZE}",
            param="batch_size",
        )
    if not isinstance(migrate, bool):
        raise BadRequest("invalid_request", "migrate must be True or False", param="migrate")
    check_busy_timeout(busy_timeout_s)
    return _check_secrets(configured, previous)


def _check_grace(older_than: object) -> timedelta:
    """A grace period: a `timedelta` or a number of seconds, finite and >= 0."""
    if isinstance(older_than, timedelta):
        seconds = older_than.total_seconds()
    elif isinstance(older_than, int | float) and not isinstance(older_than, bool):
        seconds = float(older_than)
    else:
        seconds = math.nan
    if not 0 <= seconds <= 100 * 365 * 86400:
        raise BadRequest(
            "invalid_request",
            "older_than must be a timedelta (or seconds) between 0 and 100 years",
            param="older_than",
        )
    return timedelta(seconds=seconds)


def _codec_from(configured: tuple[bytes, ...], stored: list[tuple[int, bytes]]) -> CursorCodec:
    """Configured secrets win (key id from the secret itself); else the keys kept in the store."""
    if not configured:
        return codec_for_stored_keys(stored)
    keys = [CursorKey(hashlib.sha256(s).digest()[0], s) for s in configured]
    return CursorCodec(keys[0], keys[1:])


class _StoreCore:
    def __init__(self, codec: CursorCodec, batch_size: int, stored_keys: bool) -> None:
        self._ctx = ReadContext(codec, stored_keys=stored_keys)
        self._batch_size = batch_size

    # Each `_op_*` builds one operation around its generator in `_ops`.

    def _op_register_manifest(self, manifest: Mapping[str, Any]) -> Op[None]:
        parsed = manifest if isinstance(manifest, Manifest) else Manifest.from_dict(manifest)
        yield from _ingest.register_manifest(parsed)
        yield COMMIT
        self._ctx.declared.clear()  # the new manifest may declare fewer streams

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
        limit: int,
        cursor: str | None,
    ) -> Op[SearchPage]:
        return _search.search(
            self._ctx,
            grant,
            q,
            streams=streams,
            connection_id=connection_id,
            limit=limit,
            cursor=cursor,
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
    ) -> None:
        super().__init__(codec, batch_size, stored_keys)
        self.engine = engine
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
    ) -> Self:
        """Open the store at `url`; with `migrate=False` the database must already be at the
        newest schema (see `pdpp-store migrate`), else `storage_unavailable`."""
        secrets = _check_options(
            cursor_secret, previous_cursor_secrets, batch_size, migrate, busy_timeout_s
        )
        with opening(url):
            plain_url = sync_url(url)
            engine = create_engine(plain_url, **engine_options(plain_url, busy_timeout_s))
        try:
            install_hooks(engine, busy_timeout_s)
            deadline = time.monotonic() + busy_timeout_s
            while True:
                try:
                    with opening(url), engine.connect() as conn:
                        _migrate(conn, upgrade=migrate)
                        conn.commit()
                    stored = run_sync(
                        engine, _ingest.load_cursor_keys(create=not secrets), write=True
                    )
                    break
                except StoreError as error:
                    # Openers of one fresh SQLite file can meet a lock that SQLite reports at
                    # once (switching to WAL): retried within the busy timeout.
                    if error.code != "storage_busy" or time.monotonic() >= deadline:
                        raise
                    time.sleep(_OPEN_RETRY_S)
        except BaseException:
            engine.dispose()
            raise
        return cls(
            engine,
            _codec_from(secrets, stored),
            batch_size,
            stored_keys=not secrets,
            busy_timeout_s=busy_timeout_s,
        )

    def _run(self, name: str, op: Op[T]) -> T:
        if not CATALOGUE[name].writes:
            return self._reader.run(op)
        if not self._writers.acquire(timeout=self._busy_timeout_s):
            op.close()
            raise busy("every writer slot of this store is in use; retry the operation")
        try:
            return run_sync(self.engine, op, write=True)
        finally:
            self._writers.release()

    def close(self) -> None:
        self._reader.close()
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def register_manifest(self, manifest: Mapping[str, Any]) -> None:
        return self._run("register_manifest", self._op_register_manifest(manifest))

    def add_connection(self, connection_id: str, connector_id: str) -> None:
        return self._run("add_connection", _ingest.add_connection(connection_id, connector_id))

    def upsert_records(
        self, connection_id: str, stream: str, records: Iterable[object]
    ) -> UpsertResult:
        return self._run("upsert_records", self._op_upsert_records(connection_id, stream, records))

    def delete_record(self, connection_id: str, stream: str, record_id: str) -> None:
        return self._run("delete_record", _ingest.delete_record(connection_id, stream, record_id))

    def put_blob(self, data: bytes, mime_type: str) -> BlobInfo:
        return self._run("put_blob", _ingest.put_blob(data, mime_type))

    def rotate_cursor_key(self) -> None:
        return self._run("rotate_cursor_key", self._op_rotate_cursor_key())

    def retire_cursor_keys(self, older_than: timedelta | float) -> int:
        """Delete the stored cursor keys superseded more than `older_than` ago (a grace period
        of the caller's choosing); cursors they signed become `invalid_cursor`. Returns how
        many were retired. The active key is never retired."""
        return self._run("retire_cursor_keys", self._op_retire_cursor_keys(older_than))

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
            "read_field_window",
            _reads.read_field_window(
                self._ctx, grant, record, field, connection_id=connection_id, **selector
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
            "read_record",
            _reads.read_record(
                self._ctx,
                grant,
                record,
                connection_id=connection_id,
                after_field=after_field,
                fields=fields,
            ),
        )

    def search(
        self,
        grant: Grant,
        q: str,
        *,
        streams: Sequence[str] | None = None,
        connection_id: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> SearchPage:
        return self._run(
            "search",
            self._op_search(
                grant, q, streams=streams, connection_id=connection_id, limit=limit, cursor=cursor
            ),
        )

    def describe_grant(self, grant: Grant) -> GrantSchema:
        return self._run("describe_grant", _search.describe_grant(self._ctx, grant))

    def describe_field(
        self, grant: Grant, record: RecordInput, field: str, *, connection_id: str | None = None
    ) -> FieldInfo:
        return self._run(
            "describe_field",
            _reads.describe_field(self._ctx, grant, record, field, connection_id=connection_id),
        )

    def read_resource(self, grant: Grant, uri: str) -> RecordView | FieldWindow:
        return self._run("read_resource", self._op_read_resource(grant, uri))

    def blob_info(self, grant: Grant, blob_id: str) -> BlobInfo:
        return self._run("blob_info", _reads.blob_info(grant, blob_id))

    def read_blob_range(
        self, grant: Grant, blob_id: str, offset_bytes: int = 0, length_bytes: int = 65536
    ) -> BlobRange:
        return self._run(
            "read_blob_range", _reads.read_blob_range(grant, blob_id, offset_bytes, length_bytes)
        )


class AsyncStore(_StoreCore):
    """The asynchronous store: the same operations as `Store`, awaited."""

    def __init__(
        self,
        engine: AsyncEngine,
        codec: CursorCodec,
        batch_size: int,
        stored_keys: bool = True,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    ) -> None:
        super().__init__(codec, batch_size, stored_keys)
        self.engine = engine
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
    ) -> Self:
        """As `Store.open`."""
        secrets = _check_options(
            cursor_secret, previous_cursor_secrets, batch_size, migrate, busy_timeout_s
        )
        with opening(url):
            plain_url = async_url(url)
            engine = create_async_engine(plain_url, **engine_options(plain_url, busy_timeout_s))
        try:
            install_hooks(engine.sync_engine, busy_timeout_s)
            deadline = time.monotonic() + busy_timeout_s
            while True:
                try:
                    with opening(url):
                        async with engine.connect() as conn:
                            await conn.run_sync(_migrate, upgrade=migrate)
                            await conn.commit()
                    stored = await run_async(
                        engine, _ingest.load_cursor_keys(create=not secrets), write=True
                    )
                    break
                except StoreError as error:  # as in `Store.open`
                    if error.code != "storage_busy" or time.monotonic() >= deadline:
                        raise
                    await asyncio.sleep(_OPEN_RETRY_S)
        except BaseException:
            await engine.dispose()
            raise
        return cls(
            engine,
            _codec_from(secrets, stored),
            batch_size,
            stored_keys=not secrets,
            busy_timeout_s=busy_timeout_s,
        )

    async def _run(self, name: str, op: Op[T]) -> T:
        if not CATALOGUE[name].writes:
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
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
        await self._readers.close()
        await self.engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def register_manifest(self, manifest: Mapping[str, Any]) -> None:
        return await self._run("register_manifest", self._op_register_manifest(manifest))

    async def add_connection(self, connection_id: str, connector_id: str) -> None:
        return await self._run(
            "add_connection", _ingest.add_connection(connection_id, connector_id)
        )

    async def upsert_records(
        self, connection_id: str, stream: str, records: Iterable[object]
    ) -> UpsertResult:
        return await self._run(
            "upsert_records", self._op_upsert_records(connection_id, stream, records)
        )

    async def delete_record(self, connection_id: str, stream: str, record_id: str) -> None:
        return await self._run(
            "delete_record", _ingest.delete_record(connection_id, stream, record_id)
        )

    async def put_blob(self, data: bytes, mime_type: str) -> BlobInfo:
        return await self._run("put_blob", _ingest.put_blob(data, mime_type))

    async def rotate_cursor_key(self) -> None:
        return await self._run("rotate_cursor_key", self._op_rotate_cursor_key())

    async def retire_cursor_keys(self, older_than: timedelta | float) -> int:
        """As `Store.retire_cursor_keys`."""
        return await self._run("retire_cursor_keys", self._op_retire_cursor_keys(older_than))

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
            "read_field_window",
            _reads.read_field_window(
                self._ctx, grant, record, field, connection_id=connection_id, **selector
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
            "read_record",
            _reads.read_record(
                self._ctx,
                grant,
                record,
                connection_id=connection_id,
                after_field=after_field,
                fields=fields,
            ),
        )

    async def search(
        self,
        grant: Grant,
        q: str,
        *,
        streams: Sequence[str] | None = None,
        connection_id: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> SearchPage:
        return await self._run(
            "search",
            self._op_search(
                grant, q, streams=streams, connection_id=connection_id, limit=limit, cursor=cursor
            ),
        )

    async def describe_grant(self, grant: Grant) -> GrantSchema:
        return await self._run("describe_grant", _search.describe_grant(self._ctx, grant))

    async def describe_field(
        self, grant: Grant, record: RecordInput, field: str, *, connection_id: str | None = None
    ) -> FieldInfo:
        return await self._run(
            "describe_field",
            _reads.describe_field(self._ctx, grant, record, field, connection_id=connection_id),
        )

    async def read_resource(self, grant: Grant, uri: str) -> RecordView | FieldWindow:
        return await self._run("read_resource", self._op_read_resource(grant, uri))

    async def blob_info(self, grant: Grant, blob_id: str) -> BlobInfo:
        return await self._run("blob_info", _reads.blob_info(grant, blob_id))

    async def read_blob_range(
        self, grant: Grant, blob_id: str, offset_bytes: int = 0, length_bytes: int = 65536
    ) -> BlobRange:
        return await self._run(
            "read_blob_range", _reads.read_blob_range(grant, blob_id, offset_bytes, length_bytes)
        )
