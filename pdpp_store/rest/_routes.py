"""The `/v1` routes, at module level on `router`: each calls one library operation and renders
its card (docs/contract.md §10). The store and the grant are dependencies (`_deps`); `create_app`
includes the router in each application it makes.

    GET /v1/streams/{stream}/records/{record_id}/field-window   read_field_window
    GET /v1/streams/{stream}/records/{record_id}                 read_record
    GET /v1/search                                               search
    GET /v1/streams/{stream}/aggregate                           aggregate
    GET /v1/blobs/{blob_id}                                      blob_info + read_blob_range
    GET /v1/schema, /v1/streams[/{stream}[/records]]             `_asking`: discovery, query_records

Rules:
1. A handler holds no store rules: identity, selectors, grants and errors are the library's.
   What it adds is HTTP: links, entity tags, conditionals, ranges, caching headers.
2. Query parameters and headers are declared once per route (`_params`), which documents them
   in OpenAPI and parses them; path parameters are FastAPI's.
3. Answers are private: `Cache-Control: private, no-store` on every one.
4. A field window's `ETag` is the field's digest, a record's its revision (granted fields
   only): the same URL with the same tag is the same answer. On both, `If-Match` naming another
   tag is 412 (what the client paged through has changed), then `If-None-Match` naming the
   current one is 304 (RFC 9110 §13.2.2's order), each after the read, so every refusal of the
   read comes first.
5. Blob bytes are streamed in bounded ranges read through the grant (`read_blob_range`), never
   held whole; metadata, conditionals and the range are settled before the first byte is sent, so
   every refusal is a proper status and envelope.
6. A download is bound to the blob its headers describe (the digest, hence the bytes, and the
   length) and every step is still read through the grant. A step the grant no longer reaches
   (the record deleted or changed mid-download) or that differs from what the headers promised
   aborts the response: the connection is closed before the declared `Content-Length`, which
   every HTTP client reports as an incomplete body, never taken for the whole blob
   (docs/decisions.md).
7. `ROUTE_OPERATIONS` says which catalogued operations each route performs and
   `ABSENT_OPERATIONS` why the other reads have no route; a test holds both to the catalogue.
8. `HEAD` is answered wherever `GET` is (`_get` registers both): the same handler, status and
   headers; the server sends no body for `HEAD`, and a blob's `HEAD` reads no byte of it. The
   `HEAD` twins stay out of the OpenAPI document.
9. A blob request is one read audit entry (`OneAuditEntry`), however many steps its body takes: the
   range sent and the bytes actually served, with the outcome `aborted` (and why) when the body
   ended before its last byte (the grant lost, the blob changed, the client gone).
10. A field window's card, which holds no float, is written by `_json.IntegralJSONResponse`:
   the bytes `JSONResponse` writes, in a fifth of the time.
"""

import logging
import re
from collections.abc import AsyncGenerator, Callable
from typing import Annotated, Any, TypeVar
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from pdpp_store import (
    SELECTOR_ARGS,
    AsyncStore,
    BlobInfo,
    FieldWindow,
    Grant,
    OneAuditEntry,
    RecordRef,
    StoreError,
    UnscopedRecordRef,
)

from ._conditionals import etag, if_match_fails, none_match, parse_range, range_applies
from ._deps import DirectRoute, GrantDep, StoreDep, current_grant
from ._errors import PreconditionFailed, RangeNotSatisfiable
from ._json import IntegralJSONResponse
from ._params import Param, Params
from ._schemas import card_schema, error_responses, field_window_schema, headers, json_response

__all__ = [
    "ABSENT_OPERATIONS",
    "AGGREGATE_PARAMS",
    "BLOB_CHUNK_BYTES",
    "BLOB_PARAMS",
    "RECORD_PARAMS",
    "ROUTE_OPERATIONS",
    "SEARCH_PARAMS",
    "WINDOW_PARAMS",
    "DownloadAborted",
    "router",
]

WINDOW_OPERATION = "read_field_window"
BLOB_CHUNK_BYTES = 1 << 16
"""Bytes read (and held) per step of a blob download."""

PRIVATE = {"Cache-Control": "private, no-store"}

log = logging.getLogger("pdpp_store.rest")


class DownloadAborted(Exception):
    """A blob download that cannot finish as its headers promised (rule 6): raised inside the
    body, after the status was sent, so the server closes the connection mid-body."""


async def blob_body(
    store: AsyncStore, grant: Grant, info: BlobInfo, first: int, last: int, *, audit: OneAuditEntry
) -> AsyncGenerator[bytes, None]:
    """Bytes `first`..`last` of the blob, `BLOB_CHUNK_BYTES` per step, each step read through
    `grant` and checked against `info` (rule 6); the download is one `audit` entry, written
    when the body ends however it ends (rule 9)."""
    offset = first
    why = "client_gone"  # until the last byte is sent: a body not run to its end
    try:
        while offset <= last:
            length = min(BLOB_CHUNK_BYTES, last - offset + 1)
            try:
                with audit.counting():
                    part = await store.read_blob_range(grant, info.blob_id, offset, length)
            except StoreError as refused:
                why = refused.code
                reason = f"the grant no longer reaches it ({refused.code})"
            else:
                if part.blob.sha256 == info.sha256 and len(part.data) == length:
                    yield part.data
                    offset += length
                    continue
                why = "blob_changed"
                reason = "it no longer matches its headers"
            sent, size = offset - first, last - first + 1
            log.warning("blob download aborted after %d of %d bytes: %s", sent, size, reason)
            raise DownloadAborted(f"blob download aborted after {sent} of {size} bytes: {reason}")
        why = ""
    finally:
        served = {"served_bytes": offset - first}
        audit.close(
            {**_asked_range(info, first, last), **served, **({"aborted": why} if why else {})},
            "aborted" if why else None,
        )


def _asked_range(info: BlobInfo, first: int, last: int) -> dict[str, object]:
    return {"offset_bytes": first, "length_bytes": last - first + 1}


_MIME = re.compile(r"[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+")

Stream = Annotated[str, Path(description="The stream (a safe name).")]
RecordId = Annotated[str, Path(description="The record id: the canonical primary-key string.")]

_CONNECTION = Param(
    "connection_id", str, "The record's connection; needed when the grant covers several."
)
_SELECTOR_BOUNDS: dict[str, dict[str, Any]] = {
    "offset_chars": {"minimum": 0},
    "limit_chars": {"minimum": 1},
    "q": {"minLength": 1, "maxLength": 1024},
    "before_chars": {"minimum": 0, "maximum": 8192},
    "after_chars": {"minimum": 0, "maximum": 8192},
    "occurrence": {"minimum": 1, "maximum": 10000},
}
"""What OpenAPI documents of each selector argument's range (the library checks them all)."""

WINDOW_PARAMS = Params(
    Param("field", str, "The field: a top-level key, taken literally.", required=True),
    _CONNECTION,
    *(
        Param(arg.name, arg.type, arg.help, bounds=_SELECTOR_BOUNDS.get(arg.name, {}))
        for arg in SELECTOR_ARGS.values()
    ),
    Param(
        "If-Match",
        str,
        "The field digest the client holds (its ETag): 412 if the field has changed.",
        where="header",
    ),
    Param(
        "If-None-Match",
        str,
        "ETags the client holds: 304 if one is the field's current digest.",
        where="header",
    ),
    window=True,
)
RECORD_PARAMS = Params(
    _CONNECTION,
    Param("fields", str, "Comma-separated field names: show only these of the granted fields."),
    Param("after_field", str, "A wide record's next page: the fields after this path."),
    Param(
        "If-Match",
        str,
        "The record revision the client holds (its ETag): 412 if the record has changed.",
        where="header",
    ),
    Param(
        "If-None-Match",
        str,
        "ETags the client holds: 304 if one is the record's current revision.",
        where="header",
    ),
)
SEARCH_PARAMS = Params(
    Param(
        "q",
        str,
        'Terms split on whitespace; a "double-quoted phrase" is one term.',
        required=True,
        bounds={"minLength": 1},
    ),
    Param("streams", list, "Only these streams: repeat the parameter, or separate with commas."),
    Param("connection_id", str, "Only this connection."),
    Param("filter", str, "A JSON object, one clause per granted field (docs/contract.md §11.1)."),
    Param(
        "order",
        str,
        "relevance (default: by score, ties newest first), desc (newest first) or asc.",
        bounds={"enum": ["relevance", "desc", "asc"]},
    ),
    Param("limit", int, "Hits per page (default 10).", bounds={"minimum": 1, "maximum": 50}),
    Param("cursor", str, "The next_cursor of the previous page."),
    Param("count", str, "exact: add the number of hits.", bounds={"enum": ["none", "exact"]}),
)
AGGREGATE_PARAMS = Params(
    Param(
        "metric",
        str,
        "count (default), or sum, min, max, count_distinct of `field`, as the stream declares.",
        bounds={"enum": ["count", "sum", "min", "max", "count_distinct"]},
    ),
    Param("field", str, "The field the metric reads (not with count)."),
    Param("group_by", str, "Group by this declared field: the largest groups first."),
    Param("group_by_time", str, "Group in time buckets of this declared field: oldest first."),
    Param(
        "granularity",
        str,
        "The buckets of group_by_time (default month; week is ISO, from Monday).",
        bounds={"enum": ["hour", "day", "week", "month", "year"]},
    ),
    Param("time_zone", str, "The IANA time zone of the buckets (default UTC)."),
    Param("filter", str, "A filter (docs/contract.md §11.1) as JSON text."),
    Param("connection_id", str, "Only this connection."),
    Param("limit", int, "Groups shown (default 25).", bounds={"minimum": 1, "maximum": 100}),
)
BLOB_PARAMS = Params(
    Param("Range", str, "One range: bytes=a-b, a- or -n.", where="header"),
    Param("If-None-Match", str, "ETags the client holds: 304 if one is current.", where="header"),
    Param("If-Range", str, "Honour Range only if this ETag is still current.", where="header"),
)


def _record(stream: str, record_id: str, connection_id: str | None) -> Any:
    if connection_id is None:
        return UnscopedRecordRef(stream, record_id)
    return RecordRef(connection_id, stream, record_id)


_UNRESERVED = re.compile(r"[A-Za-z0-9_.~-]*")
"""What `quote(text, safe="")` leaves as it is: RFC 3986's unreserved characters."""


def _quoted(text: str) -> str:
    """`quote(text, safe="")`, without its steps for a text it leaves alone (a cursor, being
    base64url, always is)."""
    return text if _UNRESERVED.fullmatch(text) else quote(text, safe="")


def _window_links(request: Request, window: FieldWindow, limit: int | None) -> dict[str, Any]:
    """`url` (as asked), and links that re-read this window and continue it."""
    base = request.url.path
    common = f"{base}?field={_quoted(window.field.path)}"
    common += f"&connection_id={_quoted(window.connection_id)}"
    keep = "" if limit is None else f"&limit_chars={limit}"

    def by_cursor(cursor: str | None) -> str | None:
        return None if cursor is None else f"{common}&cursor={_quoted(cursor)}{keep}"

    asked = request.url.query
    return {
        "url": f"{base}?{asked}" if asked else base,
        "links": {
            "self": f"{common}&offset_chars={window.start_chars}&limit_chars={window.limit_chars}",
            "next": by_cursor(window.next_cursor),
            "previous": by_cursor(window.previous_cursor),
        },
    }


def _not_modified(args: dict[str, Any], tag: str, what: str, details: dict[str, Any]) -> bool:
    """Whether to answer 304 (`If-None-Match` names `tag`); 412 if `If-Match` names another
    (rule 4). `details` say what is current now."""
    if if_match_fails(args["If-Match"], tag):
        raise PreconditionFailed(
            "precondition_failed",
            f"the {what} has changed since the tag in If-Match: start again",
            param="If-Match",
            details=details,
        )
    return none_match(args["If-None-Match"], tag)


def _blob_headers(info: BlobInfo) -> dict[str, str]:
    """The headers of every answer about the blob's bytes (200, 206 and 304)."""
    return {
        **PRIVATE,
        "ETag": etag(f"sha256:{info.sha256}"),
        "Accept-Ranges": "bytes",
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": "default-src 'none'; sandbox",
    }


def _byte_range(
    range_: str | None, if_range: str | None, info: BlobInfo, headers: dict[str, str]
) -> tuple[int, int]:
    """The bytes to send, `first`..`last`, with their headers added to `headers` (a range sets
    `Content-Range`); a range past the end is 416."""
    tag = headers["ETag"]
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
    if wanted is not None:
        headers["Content-Range"] = f"bytes {first}-{last}/{info.size_bytes}"
    return first, last


router = APIRouter(prefix="/v1", dependencies=[Depends(current_grant)], route_class=DirectRoute)
"""The `/v1` routes; every one first resolves the request's grant, and its handler is given its
arguments directly (`_deps`, rules 1-3)."""

ROUTE_OPERATIONS: dict[str, tuple[str, ...]] = {
    "read_field_window": ("read_field_window",),
    "read_record": ("read_record",),
    "search": ("search",),
    "aggregate": ("aggregate",),
    "read_blob": ("blob_info", "read_blob_range"),
    "describe_grant": ("describe_grant",),
    "list_streams": ("describe_grant",),
    "describe_stream": ("describe_grant",),
    "query_records": ("query_records",),
}
"""The catalogued operations each route calls, by the route's OpenAPI `operation_id` (the asking
routes are `_asking`'s); tests hold the served routes to the catalogue with it."""

ABSENT_OPERATIONS: dict[str, str] = {
    "describe_field": "a field window carries its field's metadata, and a refusal of a field "
    "that is not text carries it in the error",
    "read_resource": "pdpp:// URIs are the MCP server's addresses; REST addresses the same "
    "records and windows by path",
}
"""Read operations no route calls, each with the reason."""

_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def _get(path: str, **options: Any) -> Callable[[_Handler], _Handler]:
    """`router.get(path, **options)`, and the same handler for `HEAD` (rule 8)."""

    def register(handler: _Handler) -> _Handler:
        registered = router.get(path, **options)(handler)  # first: what the OpenAPI document shows
        router.add_api_route(
            path,
            handler,
            methods=["HEAD"],
            response_class=options["response_class"],
            include_in_schema=False,
        )
        return registered

    return register


@_get(
    "/streams/{stream}/records/{record_id}/field-window",
    tags=["records"],
    summary="A bounded window of one text field",
    operation_id=WINDOW_OPERATION,
    response_class=JSONResponse,
    openapi_extra=WINDOW_PARAMS.openapi(),
    responses={
        200: json_response(
            field_window_schema(),
            "The field window (docs/contract.md §3), with links.",
            sent=("ETag",),
        ),
        304: {
            "description": "Not modified (If-None-Match names the field's current digest).",
            "headers": headers("ETag"),
        },
        **error_responses(400, 401, 403, 404, 409, 412, 422, 503),
    },
)
async def field_window(
    request: Request, store: StoreDep, grant: GrantDep, stream: Stream, record_id: RecordId
) -> Response:
    args = WINDOW_PARAMS.parse(request)
    ref = _record(stream, record_id, args["connection_id"])
    selector = {name: args[name] for name in SELECTOR_ARGS}
    window = await store.read_field_window(grant, ref, args["field"], **selector)
    headers = {**PRIVATE, "ETag": etag(window.field.digest)}
    current = {"current_digest": window.field.digest}
    if _not_modified(args, headers["ETag"], "field", current):
        return Response(status_code=304, headers=headers)
    body = {**window.to_dict(), **_window_links(request, window, args["limit_chars"])}
    return IntegralJSONResponse(body, headers=headers)  # a card with no float (`_json`)


@_get(
    "/streams/{stream}/records/{record_id}",
    tags=["records"],
    summary="A record projected under the grant",
    operation_id="read_record",
    response_class=JSONResponse,
    openapi_extra=RECORD_PARAMS.openapi(),
    responses={
        200: json_response(
            card_schema("RecordView"), "The projection (docs/contract.md §5).", sent=("ETag",)
        ),
        304: {
            "description": "Not modified (If-None-Match names the record's revision).",
            "headers": headers("ETag"),
        },
        **error_responses(400, 401, 403, 404, 409, 412, 503),
    },
)
async def record(
    request: Request, store: StoreDep, grant: GrantDep, stream: Stream, record_id: RecordId
) -> Response:
    args = RECORD_PARAMS.parse(request)
    view = await store.read_record(
        grant,
        _record(stream, record_id, args["connection_id"]),
        after_field=args["after_field"],
        fields=None if args["fields"] is None else args["fields"].split(","),
    )
    headers = {**PRIVATE, "ETag": etag(view.revision)}
    if _not_modified(args, headers["ETag"], "record", {"current_revision": view.revision}):
        return Response(status_code=304, headers=headers)
    return JSONResponse(view.to_dict(), headers=headers)


@_get(
    "/search",
    tags=["search"],
    summary="Records that match, with proven evidence per matched field",
    operation_id="search",
    response_class=JSONResponse,
    openapi_extra=SEARCH_PARAMS.openapi(),
    responses={
        200: json_response(card_schema("SearchPage"), "A page of hits (docs/contract.md §9)."),
        **error_responses(400, 401, 403, 404, 503),
    },
)
async def search(request: Request, store: StoreDep, grant: GrantDep) -> Response:
    args = SEARCH_PARAMS.parse(request)
    streams = args["streams"]
    names = None if streams is None else [n for value in streams for n in value.split(",")]
    page = await store.search(
        grant,
        args["q"],
        streams=names,
        connection_id=args["connection_id"],
        filter=args["filter"],
        order="relevance" if args["order"] is None else args["order"],
        limit=10 if args["limit"] is None else args["limit"],
        cursor=args["cursor"],
        count="none" if args["count"] is None else args["count"],
    )
    return JSONResponse(page.to_dict(), headers=PRIVATE)


@_get(
    "/streams/{stream}/aggregate",
    tags=["records"],
    summary="Counts, sums, ranges and time buckets of a stream's visible records",
    operation_id="aggregate",
    response_class=JSONResponse,
    openapi_extra=AGGREGATE_PARAMS.openapi(),
    responses={
        200: json_response(card_schema("AggregateResult"), "The aggregate (docs/contract.md §12)."),
        **error_responses(400, 401, 403, 404, 422, 503),
    },
)
async def aggregate(
    request: Request,
    store: StoreDep,
    grant: GrantDep,
    stream: Annotated[str, Path(description="The stream's name.")],
) -> Response:
    args = AGGREGATE_PARAMS.parse(request)
    answer = await store.aggregate(
        grant,
        stream,
        metric="count" if args["metric"] is None else args["metric"],
        field=args["field"],
        group_by=args["group_by"],
        group_by_time=args["group_by_time"],
        granularity="month" if args["granularity"] is None else args["granularity"],
        time_zone="UTC" if args["time_zone"] is None else args["time_zone"],
        filter=args["filter"],
        connection_id=args["connection_id"],
        limit=25 if args["limit"] is None else args["limit"],
    )
    return JSONResponse(answer.to_dict(), headers=PRIVATE)


@_get(
    "/blobs/{blob_id}",
    tags=["blobs"],
    summary="A blob's bytes, through a record the grant can see",
    operation_id="read_blob",
    response_class=Response,
    openapi_extra=BLOB_PARAMS.openapi(),
    responses={
        200: {
            "description": "The whole blob.",
            "headers": headers("ETag"),
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        },
        206: {
            "description": "One byte range (Content-Range).",
            "headers": headers("ETag", "Content-Range"),
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        },
        304: {
            "description": "Not modified (If-None-Match names the current ETag).",
            "headers": headers("ETag"),
        },
        **error_responses(400, 401, 403, 404, 416, 503),
    },
)
async def blob(
    request: Request,
    store: StoreDep,
    grant: GrantDep,
    blob_id: Annotated[str, Path(description="blob_sha256_<hex>.")],
) -> Response:
    args = BLOB_PARAMS.parse(request)
    # rule 9: one entry for the request, however many reads it takes
    audit = OneAuditEntry({"blob_id": blob_id, "range": args["Range"]})
    try:
        with audit.counting():
            info = await store.blob_info(grant, blob_id)
        headers = _blob_headers(info)
        if none_match(args["If-None-Match"], headers["ETag"]):
            audit.close()
            return Response(status_code=304, headers=headers)
        first, last = _byte_range(args["Range"], args["If-Range"], info, headers)
    except BaseException as error:  # refused (the read's own code is kept) or a 416
        audit.close(None, error.code if isinstance(error, StoreError) else None)
        raise
    status = 206 if "Content-Range" in headers else 200
    if request.method == "HEAD":  # rule 8: the headers, and no byte read
        audit.close({**_asked_range(info, first, last), "served_bytes": 0})
        return Response(status_code=status, headers=headers)
    body = blob_body(store, grant, info, first, last, audit=audit)
    return StreamingResponse(body, status_code=status, headers=headers)
