"""The two fronts, `Store` (sync) and `AsyncStore` (async), over one set of operations.

`_StoreCore` holds everything that is not I/O: configuration, the read context (cursor codec,
declared-stream cache), and a `_op_*` method for each operation that needs more than its
generator in `_ops` (bookkeeping around it, or a choice between operations). Each front method
is one line, `self._run(name, generator)`: the driver runs the generator in the transaction the
operation's catalogue entry calls for (`_ops.catalogue`: read or write), so the fronts cannot
drift apart in behaviour, and a test holds both (and the CLI) to the catalogue.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Self, TypeVar

from sqlalchemy import Engine, create_engine
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from typing_extensions import Unpack

from ._core.cursor import CursorCodec, CursorKey, codec_for_stored_keys
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
from ._ops import reads as _reads
from ._ops import search as _search
from ._ops import writes as _ingest
from ._ops.catalogue import CATALOGUE
from ._ops.reads import ReadContext
from ._runtime import (
    HeldReader,
    async_url,
    install_hooks,
    migrate,
    opening,
    run_async,
    run_sync,
    sync_url,
)
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

    # Each `_op_*` builds one operation around its generator in `_ops`.

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
            install_hooks(engine)
            with engine.connect() as conn:
                migrate(conn)
                conn.commit()
        stored = run_sync(engine, _ingest.load_cursor_keys(create=not secrets), write=True)
        return cls(engine, _codec_from(secrets, stored), batch_size, stored_keys=not secrets)

    def _run(self, name: str, op: Op[T]) -> T:
        if CATALOGUE[name].writes:
            return run_sync(self.engine, op, write=True)
        return self._reader.run(op)

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
            install_hooks(engine.sync_engine)
            async with engine.connect() as conn:
                await conn.run_sync(migrate)
                await conn.commit()
        stored = await run_async(engine, _ingest.load_cursor_keys(create=not secrets), write=True)
        return cls(engine, _codec_from(secrets, stored), batch_size, stored_keys=not secrets)

    async def _run(self, name: str, op: Op[T]) -> T:
        return await run_async(self.engine, op, write=CATALOGUE[name].writes)

    async def close(self) -> None:
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
