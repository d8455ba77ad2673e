"""The `/v1` routes: each calls one library operation and renders its card (§10).

    GET /v1/streams/{stream}/records/{record_id}/field-window   read_field_window
    GET /v1/streams/{stream}/records/{record_id}                 read_record
    GET /v1/search                                               search
    GET /v1/blobs/{blob_id}                                      blob_info + read_blob_range

Rules:
1. A handler holds no store rules: identity, selectors, grants and errors are the library's.
   What it adds is HTTP: links, entity tags, conditionals, ranges, caching headers.
2. Answers are private: `Cache-Control: private, no-store` on every one.
3. A field window's `ETag` is the field's digest; `If-Match` naming another is 412 (the text the
   client paged through has changed). A record's `ETag` is its revision (granted fields only).
4. Blob bytes are streamed in bounded ranges read through the grant (`read_blob_range`), never
   held whole; metadata, conditionals and the range are settled before the first byte is sent, so
   every refusal is a proper status and envelope.
"""

import re
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from pdpp_store import AsyncStore, FieldWindow, Grant, RecordRef, UnscopedRecordRef

from ._errors import WINDOW_OPERATION, PreconditionFailed, RangeNotSatisfiable
from ._http import etag, if_match_fails, none_match, parse_range, range_applies
from ._schemas import card_schema, error_responses, field_window_schema, json_response

__all__ = ["BLOB_CHUNK_BYTES", "add_routes"]

BLOB_CHUNK_BYTES = 1 << 16
"""Bytes read (and held) per step of a blob download."""

PRIVATE = {"Cache-Control": "private, no-store"}
_MIME = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+")

Stream = Annotated[str, Path(description="The stream (a safe name).")]
RecordId = Annotated[str, Path(description="The record id: the canonical primary-key string.")]
ConnectionId = Annotated[
    str | None,
    Query(description="The record's connection; needed when the grant covers several."),
]


def _int(description: str, minimum: int, maximum: int | None = None) -> Any:
    """An integer query parameter whose bounds are documented but checked by the library, so
    that its errors (and their order, §7) are the library's."""
    bounds: dict[str, Any] = {"minimum": minimum}
    if maximum is not None:
        bounds["maximum"] = maximum
    return Query(description=description, json_schema_extra=bounds)


def _record(stream: str, record_id: str, connection_id: str | None) -> Any:
    if connection_id is None:
        return UnscopedRecordRef(stream, record_id)
    return RecordRef(connection_id, stream, record_id)


def _window_links(request: Request, window: FieldWindow, limit: int | None) -> dict[str, Any]:
    """`url` (as asked), and links that re-read this window and continue it."""
    base = request.url.path
    common = {"field": window.field.path, "connection_id": window.connection_id}

    def link(**selector: Any) -> str:
        query = {**common, **{k: v for k, v in selector.items() if v is not None}}
        return f"{base}?{urlencode(query)}"

    asked = request.url.query
    return {
        "url": f"{base}?{asked}" if asked else base,
        "links": {
            "self": link(offset_chars=window.start_chars, limit_chars=window.limit_chars),
            "next": None
            if window.next_cursor is None
            else link(cursor=window.next_cursor, limit_chars=limit),
            "previous": None
            if window.previous_cursor is None
            else link(cursor=window.previous_cursor, limit_chars=limit),
        },
    }


def add_routes(router: APIRouter, store: AsyncStore, current_grant: Callable[..., Any]) -> None:
    """Add the `/v1` routes over `store` to `router`."""
    GrantDep = Annotated[Grant, Depends(current_grant)]

    @router.get(
        "/streams/{stream}/records/{record_id}/field-window",
        tags=["records"],
        summary="A bounded window of one text field",
        operation_id=WINDOW_OPERATION,
        response_class=JSONResponse,
        responses={
            200: json_response(field_window_schema(), "The field window (§3), with links."),
            **error_responses(400, 401, 403, 404, 409, 412, 422, 503),
        },
    )
    async def field_window(
        request: Request,
        *,
        grant: GrantDep,
        stream: Stream,
        record_id: RecordId,
        field: Annotated[str, Query(description="The field: a top-level key, taken literally.")],
        connection_id: ConnectionId = None,
        offset_chars: Annotated[int | None, _int("Start, in code points (default 0).", 0)] = None,
        limit_chars: Annotated[
            int | None, _int("Length in code points (default 4096; above 16384 clamped).", 1)
        ] = None,
        q: Annotated[
            str | None,
            Query(
                description="Centre the window on the first case-insensitive match.",
                json_schema_extra={"minLength": 1, "maxLength": 1024},
            ),
        ] = None,
        before_chars: Annotated[
            int | None, _int("Context before the match (default 2048).", 0, 8192)
        ] = None,
        after_chars: Annotated[
            int | None, _int("Context after the match (default 2048).", 0, 8192)
        ] = None,
        cursor: Annotated[
            str | None, Query(description="A next_cursor or previous_cursor to continue from.")
        ] = None,
        if_match: Annotated[
            str | None,
            Header(description="The field digest the client holds (its ETag): 412 if changed."),
        ] = None,
    ) -> Response:
        window = await store.read_field_window(
            grant,
            _record(stream, record_id, connection_id),
            field,
            offset_chars=offset_chars,
            limit_chars=limit_chars,
            q=q,
            before_chars=before_chars,
            after_chars=after_chars,
            cursor=cursor,
        )
        tag = etag(window.field.digest)
        if if_match_fails(if_match, tag):
            raise PreconditionFailed(
                "precondition_failed",
                "the field has changed since the digest in If-Match: start again",
                param="If-Match",
                details={"current_digest": window.field.digest},
            )
        body = {**window.to_dict(), **_window_links(request, window, limit_chars)}
        return JSONResponse(body, headers={**PRIVATE, "ETag": tag})

    @router.get(
        "/streams/{stream}/records/{record_id}",
        tags=["records"],
        summary="A record projected under the grant",
        operation_id="read_record",
        response_class=JSONResponse,
        responses={
            200: json_response(card_schema("RecordView"), "The projection (§5)."),
            **error_responses(400, 401, 403, 404, 409, 503),
        },
    )
    async def record(
        grant: GrantDep,
        stream: Stream,
        record_id: RecordId,
        connection_id: ConnectionId = None,
        fields: Annotated[
            str | None,
            Query(
                description="Comma-separated field names: show only these of the granted fields."
            ),
        ] = None,
    ) -> Response:
        view = await store.read_record(grant, _record(stream, record_id, connection_id))
        body = view.to_dict()
        if fields is not None:
            wanted = set(fields.split(","))
            for part in ("data", "content_ladder"):
                body[part] = {k: v for k, v in body[part].items() if k in wanted}
        return JSONResponse(body, headers={**PRIVATE, "ETag": etag(view.revision)})

    @router.get(
        "/search",
        tags=["search"],
        summary="Records that match, with proven evidence per matched field",
        operation_id="search",
        response_class=JSONResponse,
        responses={
            200: json_response(card_schema("SearchPage"), "A page of hits (§9)."),
            **error_responses(400, 401, 403, 404, 503),
        },
    )
    async def search(
        *,
        grant: GrantDep,
        q: Annotated[
            str,
            Query(
                description='Terms split on whitespace; a "double-quoted phrase" is one term.',
                json_schema_extra={"minLength": 1},
            ),
        ],
        streams: Annotated[
            list[str] | None,
            Query(description="Only these streams: repeat the parameter, or separate with commas."),
        ] = None,
        connection_id: ConnectionId = None,
        limit: Annotated[int | None, _int("Hits per page (default 10).", 1, 50)] = None,
        cursor: Annotated[
            str | None, Query(description="The next_cursor of the previous page.")
        ] = None,
    ) -> Response:
        names = None if streams is None else [n for value in streams for n in value.split(",")]
        page = await store.search(
            grant,
            q,
            streams=names,
            connection_id=connection_id,
            limit=10 if limit is None else limit,
            cursor=cursor,
        )
        return JSONResponse(page.to_dict(), headers=PRIVATE)

    @router.get(
        "/blobs/{blob_id}",
        tags=["blobs"],
        summary="A blob's bytes, through a record the grant can see",
        operation_id="read_blob",
        response_class=Response,
        responses={
            200: {
                "description": "The whole blob.",
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            },
            206: {
                "description": "One byte range (Content-Range).",
                "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
            },
            304: {"description": "Not modified (If-None-Match names the current ETag)."},
            **error_responses(400, 401, 403, 404, 416, 503),
        },
    )
    async def blob(
        grant: GrantDep,
        blob_id: Annotated[str, Path(description="blob_sha256_<hex>.")],
        range_: Annotated[
            str | None, Header(alias="Range", description="One range: bytes=a-b, a- or -n.")
        ] = None,
        if_none_match: Annotated[str | None, Header(description="ETags the client holds.")] = None,
        if_range: Annotated[
            str | None, Header(description="Honour Range only if the ETag still matches.")
        ] = None,
    ) -> Response:
        info = await store.blob_info(grant, blob_id)
        tag = etag(f"sha256:{info.sha256}")
        headers = {
            **PRIVATE,
            "ETag": tag,
            "Accept-Ranges": "bytes",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "default-src 'none'; sandbox",
        }
        if none_match(if_none_match, tag):
            return Response(status_code=304, headers=headers)
        try:
            wanted = parse_range(range_, info.size_bytes) if range_applies(if_range, tag) else None
        except ValueError:
            raise RangeNotSatisfiable(
                "range_not_satisfiable",
                f"the range is outside the blob's {info.size_bytes} bytes",
                param="Range",
                details={"size_bytes": info.size_bytes},
            ) from None
        first, last = wanted if wanted is not None else (0, info.size_bytes - 1)
        headers["Content-Type"] = (
            info.mime_type if _MIME.fullmatch(info.mime_type) else "application/octet-stream"
        )
        headers["Content-Length"] = str(last - first + 1)
        status = 200
        if wanted is not None:
            status = 206
            headers["Content-Range"] = f"bytes {first}-{last}/{info.size_bytes}"

        async def chunks() -> AsyncIterator[bytes]:
            offset = first
            while offset <= last:
                length = min(BLOB_CHUNK_BYTES, last - offset + 1)
                part = await store.read_blob_range(grant, info.blob_id, offset, length)
                if not part.data:
                    return
                yield part.data
                offset += len(part.data)

        return StreamingResponse(chunks(), status_code=status, headers=headers)
