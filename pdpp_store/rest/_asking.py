"""The routes that ask (docs/contract.md §10's stage-3 table, §11): discovery and
`query_records`, registered on `_routes.router` like the others.

    GET /v1/schema                       describe_grant (a page of streams: `limit`, `after`)
    GET /v1/streams                      describe_grant: the page's streams, as a list
    GET /v1/streams/{stream}             describe_grant(stream=...)
    GET /v1/streams/{stream}/records     query_records

Rules:
1. Each handler makes one library call and renders its card; the wire names of the records
   route are the reference's list route's: `connection_id`, `filter`, `order`, `fields` (a comma
   list), `limit`, `cursor`, `count`, `changes_since`.
2. `filter` is the filter's JSON text, handed to the library as it came (malformed JSON is the
   library's `invalid_filter`, 400). The reference's bracket form is accepted too:
   `filter[f]=v` (equality), `filter[f][in]=a,b` (or repeated), `filter[f][has]=v`,
   `filter[f][gte]=v` and the other range operators. A bracketed value that reads as a JSON
   number, `true`, `false` or `null` is that value, anything else a string (a string that looks
   like a number needs the JSON form). The two forms together, a malformed bracket or a field
   given as equality and as operators is `invalid_filter` naming `filter`.
3. Answers are private and carry a strong `ETag`, a digest of the body: `If-None-Match` naming
   it is 304 (a client polling discovery or a page learns "unchanged" without the body).
   `HEAD` is answered as `GET` (`_routes._get`).
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any

from fastapi import Path, Request, Response
from fastapi.responses import JSONResponse

from pdpp_store import AsyncStore, BadRequest, Grant
from pdpp_store.evidence import GrantSchema

from ._conditionals import etag, none_match
from ._deps import GrantDep, StoreDep
from ._params import Param, Params, query_items
from ._routes import PRIVATE, _get
from ._schemas import card_schema, error_responses, headers, json_response, ref

__all__ = ["DISCOVERY_PARAMS", "RECORDS_PARAMS", "STREAMS_PARAMS", "bracket_filter"]

Stream = Annotated[str, Path(description="The stream (a safe name).")]

_NONE_MATCH = Param(
    "If-None-Match", str, "ETags the client holds: 304 if one is the answer's.", where="header"
)
DISCOVERY_PARAMS = Params(_NONE_MATCH)
STREAMS_PARAMS = Params(
    Param("limit", int, "Streams per page (default 25).", bounds={"minimum": 1, "maximum": 100}),
    Param("after", str, "The streams after this one (the last of the previous page)."),
    _NONE_MATCH,
)
RECORDS_PARAMS = Params(
    Param("connection_id", str, "Only this connection; needed for nothing else."),
    Param(
        "filter",
        str,
        'The filter as JSON, e.g. {"from_email":"a@b.c","received_at":{"gte":"2026-03-01"}}; '
        "or the bracket form filter[field]=v, filter[field][gte]=v.",
    ),
    Param("order", str, "desc (newest first, the default) or asc, by the stream's order field."),
    Param("fields", str, "Comma-separated field names to show (within the grant)."),
    Param("limit", int, "Records per page (default 25).", bounds={"minimum": 1, "maximum": 100}),
    Param("cursor", str, "The next_cursor of the previous page."),
    Param("count", str, 'none (the default) or "exact": add the number of matching records.'),
    Param("changes_since", str, "beginning, or the next_changes_since of an earlier walk."),
    _NONE_MATCH,
)

_BRACKET = re.compile(r"filter\[([^\[\]]+)\](?:\[([a-z]+)\])?")
_JSON_SCALAR = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null")
_BRACKET_OPERATORS = frozenset({"in", "has", "gt", "gte", "lt", "lte"})


def _invalid_filter(message: str) -> BadRequest:
    return BadRequest("invalid_filter", message, param="filter")


def _scalar(raw: str) -> Any:
    return json.loads(raw) if _JSON_SCALAR.fullmatch(raw) else raw


def bracket_filter(items: list[tuple[str, str]]) -> dict[str, Any]:
    """The filter object of the bracket form's items (rule 2)."""
    built: dict[str, Any] = {}
    for name, raw in items:
        found = _BRACKET.fullmatch(name)
        if found is None:
            raise _invalid_filter("a bracketed filter is filter[field] or filter[field][operator]")
        path, operator = found.group(1), found.group(2)
        if operator is None:
            if path in built:
                raise _invalid_filter(f"filter field {path[:64]!r} is given more than once")
            built[path] = _scalar(raw)
            continue
        if operator not in _BRACKET_OPERATORS:
            raise _invalid_filter(f"unknown filter operator {operator!r}")
        clause = built.setdefault(path, {})
        if not isinstance(clause, dict):
            raise _invalid_filter(f"filter field {path[:64]!r} is both equal and compared")
        if operator == "in":
            clause.setdefault("in", []).extend(_scalar(part) for part in raw.split(","))
        elif operator in clause:
            raise _invalid_filter(f"filter operator {operator!r} is given twice for {path[:64]!r}")
        else:
            clause[operator] = _scalar(raw)
    return built


def _tagged(request: Request, body: dict[str, Any]) -> Response:
    """The JSON answer with its `ETag` (rule 3), or 304 when the client holds it."""
    text = json.dumps(body, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    tag = etag("sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest())
    answer_headers = {**PRIVATE, "ETag": tag}
    if none_match(request.headers.get("If-None-Match"), tag):
        return Response(status_code=304, headers=answer_headers)
    return JSONResponse(body, headers=answer_headers)


_NOT_MODIFIED = {
    304: {
        "description": "Not modified (If-None-Match names the answer's current ETag).",
        "headers": headers("ETag"),
    }
}


@_get(
    "/schema",
    tags=["discovery"],
    summary="What the grant covers, what may be asked of each stream, and how much there is",
    operation_id="describe_grant",
    response_class=JSONResponse,
    openapi_extra=STREAMS_PARAMS.openapi(),
    responses={
        200: json_response(
            card_schema("GrantSchema"), "The grant schema (docs/contract.md §11.3).", sent=("ETag",)
        ),
        **_NOT_MODIFIED,
        **error_responses(400, 401, 403, 503),
    },
)
async def schema(request: Request, store: StoreDep, grant: GrantDep) -> Response:
    return _tagged(request, (await _described(request, store, grant)).to_dict())


@_get(
    "/streams",
    tags=["discovery"],
    summary="The granted streams, each with what may be asked and its figures",
    operation_id="list_streams",
    response_class=JSONResponse,
    openapi_extra=STREAMS_PARAMS.openapi(),
    responses={
        200: json_response(ref("StreamList"), "The granted streams.", sent=("ETag",)),
        **_NOT_MODIFIED,
        **error_responses(400, 401, 403, 503),
    },
)
async def streams(request: Request, store: StoreDep, grant: GrantDep) -> Response:
    described = (await _described(request, store, grant)).to_dict()
    listed = {key: described[key] for key in ("has_more", "next")}
    return _tagged(request, {"object": "list", "data": described["streams"], **listed})


async def _described(request: Request, store: AsyncStore, grant: Grant) -> GrantSchema:
    """`describe_grant`'s page of streams the query string asks for."""
    args = STREAMS_PARAMS.parse(request)
    limit = 25 if args["limit"] is None else args["limit"]
    return await store.describe_grant(grant, limit=limit, after=args["after"])


@_get(
    "/streams/{stream}",
    tags=["discovery"],
    summary="One granted stream: what may be asked of it and its figures",
    operation_id="describe_stream",
    response_class=JSONResponse,
    openapi_extra=DISCOVERY_PARAMS.openapi(),
    responses={
        200: json_response(card_schema("StreamSchema"), "The stream.", sent=("ETag",)),
        **_NOT_MODIFIED,
        **error_responses(400, 401, 403, 503),
    },
)
async def stream_schema(
    request: Request, store: StoreDep, grant: GrantDep, stream: Stream
) -> Response:
    DISCOVERY_PARAMS.parse(request)
    described = (await store.describe_grant(grant, stream=stream)).to_dict()
    return _tagged(request, described["streams"][0])


@_get(
    "/streams/{stream}/records",
    tags=["records"],
    summary="A page of the stream's visible records: filtered, newest first, projected",
    operation_id="query_records",
    response_class=JSONResponse,
    openapi_extra=RECORDS_PARAMS.openapi(),
    responses={
        200: json_response(
            card_schema("RecordPage"), "A page of records (docs/contract.md §11.2).", sent=("ETag",)
        ),
        **_NOT_MODIFIED,
        **error_responses(400, 401, 403, 404, 410, 503),
    },
)
async def records(request: Request, store: StoreDep, grant: GrantDep, stream: Stream) -> Response:
    items = query_items(request)
    bracketed = [(name, raw) for name, raw in items if name.startswith("filter[")]
    args = RECORDS_PARAMS.parse_items(
        request, [(name, raw) for name, raw in items if not name.startswith("filter[")]
    )
    filter_: Any = args["filter"]
    if bracketed:
        if filter_ is not None:
            raise _invalid_filter("give the filter as JSON or in brackets, not both")
        filter_ = bracket_filter(bracketed)
    fields = args["fields"]
    page = await store.query_records(
        grant,
        stream,
        connection_id=args["connection_id"],
        filter=filter_,
        order="desc" if args["order"] is None else args["order"],
        fields=None if fields is None else fields.split(","),
        limit=25 if args["limit"] is None else args["limit"],
        cursor=args["cursor"],
        count="none" if args["count"] is None else args["count"],
        changes_since=args["changes_since"],
    )
    return _tagged(request, page.to_dict())
