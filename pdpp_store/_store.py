"""The two fronts, `Store` (sync) and `AsyncStore` (async), over one set of operations.

`_StoreCore` holds everything that is not I/O: configuration, the cursor codec, and one method
per operation that builds its generator (`_ingest`, `_reads`). Each front method is one line that
drives such a generator with its own driver, so the fronts cannot drift apart in behaviour.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self, TypedDict, TypeVar

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from typing_extensions import Unpack

from ._core.cursor import CursorCodec, CursorKey, codec_for_stored_keys
from ._core.errors import BadRequest
from ._core.fields import FieldInfo
from ._core.grants import Grant
from ._core.identity import (
    RECORD_URI_PREFIX,
    RecordRef,
    UnscopedRecordRef,
    parse_field_window_uri,
    parse_record_uri,
)
from ._core.manifest import Manifest
from ._core.window import FieldWindow
from ._ops import reads as _reads
from ._ops import search as _search
from ._ops import writes as _ingest
from ._ops.reads import BlobRange, ReadContext, RecordView
from ._ops.writes import BlobInfo, UpsertResult
from ._runtime import (
    COMMIT,
    HeldReader,
    Op,
    async_url,
    install_sqlite_hooks,
    migrate,
    opening,
    run_async,
    run_sync,
    sync_url,
)
from .evidence.grant_schema import GrantSchema
from .evidence.search import SearchPage

__all__ = ["AsyncStore", "Store"]

DEFAULT_BATCH_SIZE = 500
T = TypeVar("T")
RecordInput = RecordRef | UnscopedRecordRef | str


class WindowArgs(TypedDict, total=False):
    """The keyword arguments of `read_field_window` (one selector, see §3 of the contract)."""

    connection_id: str | None
    offset_chars: int | None
    limit_chars: int | None
    q: str | None
    before_chars: int | None
    after_chars: int | None
    cursor: str | None


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


def _check_options(configured: object, previous: object, batch_size: object) -> tuple[bytes, ...]:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BadRequest(
            "invalid_request", "batch_size must be an integer >= 1", param="batch_size"
        )
    return _check_secrets(configured, previous)


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

    @property
    def cursor_codec(self) -> CursorCodec:
        return self._ctx.codec

    # Each `_op_*` builds one operation; the fronts drive it (writes with `write=True`).

    def _op_register_manifest(self, manifest: Mapping[str, Any]) -> Op[None]:
        yield from _ingest.register_manifest(Manifest.from_dict(manifest))
        yield COMMIT
        self._ctx.declared.clear()  # the new manifest may declare fewer streams

    def _op_upsert_records(
        self, connection_id: str, stream: str, records: Iterable[object]
    ) -> Op[UpsertResult]:
        if isinstance(records, Mapping | str | bytes):
            raise BadRequest(
                "invalid_request",
                "records must be a list (or iterable) of records",
                param="records",
            )
        return _ingest.upsert_records(connection_id, stream, records, self._batch_size)

    def _op_read_field_window(
        self, grant: Grant, record: RecordInput, field: str, args: WindowArgs
    ) -> Op[FieldWindow]:
        return _reads.read_field_window(self._ctx, grant, record, field, **args)

    def _op_read_record(
        self, grant: Grant, record: RecordInput, connection_id: str | None
    ) -> Op[RecordView]:
        return _reads.read_record(self._ctx, grant, record, connection_id=connection_id)

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
    ) -> None:
        super().__init__(codec, batch_size, stored_keys)
        self.engine = engine
        self._reader = HeldReader(engine)

    @classmethod
    def open(
        cls,
        url: str,
        *,
        cursor_secret: bytes | None = None,
        previous_cursor_secrets: Sequence[bytes] = (),
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Self:
        secrets = _check_options(cursor_secret, previous_cursor_secrets, batch_size)
        with opening(url):
            engine = create_engine(sync_url(url), hide_parameters=True)
            if engine.dialect.name == "sqlite":
                install_sqlite_hooks(engine)
            with engine.connect() as conn:
                migrate(conn)
                conn.commit()
        stored = run_sync(engine, _ingest.load_cursor_keys(create=not secrets), write=True)
        return cls(engine, _codec_from(secrets, stored), batch_size, stored_keys=not secrets)

    def _run(self, op: Op[T], *, write: bool = False) -> T:
        return run_sync(self.engine, op, write=True) if write else self._reader.run(op)

    def close(self) -> None:
        self._reader.close()
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def register_manifest(self, manifest: Mapping[str, Any]) -> None:
        return self._run(self._op_register_manifest(manifest), write=True)

    def add_connection(self, connection_id: str, connector_id: str) -> None:
        return self._run(_ingest.add_connection(connection_id, connector_id), write=True)

    def upsert_records(
        self, connection_id: str, stream: str, records: Iterable[object]
    ) -> UpsertResult:
        return self._run(self._op_upsert_records(connection_id, stream, records), write=True)

    def delete_record(self, connection_id: str, stream: str, record_id: str) -> None:
        return self._run(_ingest.delete_record(connection_id, stream, record_id), write=True)

    def put_blob(self, data: bytes, mime_type: str) -> BlobInfo:
        return self._run(_ingest.put_blob(data, mime_type), write=True)

    def rotate_cursor_key(self) -> None:
        return self._run(self._op_rotate_cursor_key(), write=True)

    def read_field_window(
        self, grant: Grant, record: RecordInput, field: str, **args: Unpack[WindowArgs]
    ) -> FieldWindow:
        return self._run(self._op_read_field_window(grant, record, field, args))

    def read_record(
        self, grant: Grant, record: RecordInput, *, connection_id: str | None = None
    ) -> RecordView:
        return self._run(self._op_read_record(grant, record, connection_id))

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
            self._op_search(
                grant, q, streams=streams, connection_id=connection_id, limit=limit, cursor=cursor
            )
        )

    def describe_grant(self, grant: Grant) -> GrantSchema:
        return self._run(_search.describe_grant(self._ctx, grant))

    def describe_field(
        self, grant: Grant, record: RecordInput, field: str, *, connection_id: str | None = None
    ) -> FieldInfo:
        return self._run(
            _reads.describe_field(self._ctx, grant, record, field, connection_id=connection_id)
        )

    def read_resource(self, grant: Grant, uri: str) -> RecordView | FieldWindow:
        return self._run(self._op_read_resource(grant, uri))

    def blob_info(self, grant: Grant, blob_id: str) -> BlobInfo:
        return self._run(_reads.blob_info(grant, blob_id))

    def read_blob_range(
        self, grant: Grant, blob_id: str, offset_bytes: int = 0, length_bytes: int = 65536
    ) -> BlobRange:
        return self._run(_reads.read_blob_range(grant, blob_id, offset_bytes, length_bytes))


class AsyncStore(_StoreCore):
    """The asynchronous store: the same operations as `Store`, awaited."""

    def __init__(
        self,
        engine: AsyncEngine,
        codec: CursorCodec,
        batch_size: int,
        stored_keys: bool = True,
    ) -> None:
        super().__init__(codec, batch_size, stored_keys)
        self.engine = engine

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        cursor_secret: bytes | None = None,
        previous_cursor_secrets: Sequence[bytes] = (),
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> Self:
        secrets = _check_options(cursor_secret, previous_cursor_secrets, batch_size)
        with opening(url):
            engine = create_async_engine(async_url(url), hide_parameters=True)
            if engine.dialect.name == "sqlite":
                install_sqlite_hooks(engine.sync_engine)
            async with engine.connect() as conn:
                await conn.run_sync(migrate)
                await conn.commit()
        stored = await run_async(engine, _ingest.load_cursor_keys(create=not secrets), write=True)
        return cls(engine, _codec_from(secrets, stored), batch_size, stored_keys=not secrets)

    async def _run(self, op: Op[T], *, write: bool = False) -> T:
        return await run_async(self.engine, op, write=write)

    async def close(self) -> None:
        await self.engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def register_manifest(self, manifest: Mapping[str, Any]) -> None:
        return await self._run(self._op_register_manifest(manifest), write=True)

    async def add_connection(self, connection_id: str, connector_id: str) -> None:
        return await self._run(_ingest.add_connection(connection_id, connector_id), write=True)

    async def upsert_records(
        self, connection_id: str, stream: str, records: Iterable[object]
    ) -> UpsertResult:
        return await self._run(self._op_upsert_records(connection_id, stream, records), write=True)

    async def delete_record(self, connection_id: str, stream: str, record_id: str) -> None:
        return await self._run(_ingest.delete_record(connection_id, stream, record_id), write=True)

    async def put_blob(self, data: bytes, mime_type: str) -> BlobInfo:
        return await self._run(_ingest.put_blob(data, mime_type), write=True)

    async def rotate_cursor_key(self) -> None:
        return await self._run(self._op_rotate_cursor_key(), write=True)

    async def read_field_window(
        self, grant: Grant, record: RecordInput, field: str, **args: Unpack[WindowArgs]
    ) -> FieldWindow:
        return await self._run(self._op_read_field_window(grant, record, field, args))

    async def read_record(
        self, grant: Grant, record: RecordInput, *, connection_id: str | None = None
    ) -> RecordView:
        return await self._run(self._op_read_record(grant, record, connection_id))

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
            self._op_search(
                grant, q, streams=streams, connection_id=connection_id, limit=limit, cursor=cursor
            )
        )

    async def describe_grant(self, grant: Grant) -> GrantSchema:
        return await self._run(_search.describe_grant(self._ctx, grant))

    async def describe_field(
        self, grant: Grant, record: RecordInput, field: str, *, connection_id: str | None = None
    ) -> FieldInfo:
        return await self._run(
            _reads.describe_field(self._ctx, grant, record, field, connection_id=connection_id)
        )

    async def read_resource(self, grant: Grant, uri: str) -> RecordView | FieldWindow:
        return await self._run(self._op_read_resource(grant, uri))

    async def blob_info(self, grant: Grant, blob_id: str) -> BlobInfo:
        return await self._run(_reads.blob_info(grant, blob_id))

    async def read_blob_range(
        self, grant: Grant, blob_id: str, offset_bytes: int = 0, length_bytes: int = 65536
    ) -> BlobRange:
        return await self._run(_reads.read_blob_range(grant, blob_id, offset_bytes, length_bytes))
