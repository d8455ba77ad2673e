"""The MCP server over an `AsyncStore`: five tools, three resource templates, one grant source.

Rules:
1. Each tool handler checks its arguments' names, makes one library call and renders its card
   (`_render`). The store enforces everything else: grants, selectors, ids, bounds.
2. The grant comes from the request, never from an id, URI or cursor: a fixed `Grant` (stdio),
   or a function of the transport's request (HTTP: the bearer token's grant).
3. Nothing escapes a handler: a `StoreError` is its envelope (an `isError` tool result, or for
   `resources/read` a JSON-RPC error carrying the envelope as data); any other exception is the
   fixed `internal_error` envelope and is logged by type only (its text may quote data).
4. `search` and `fetch` also answer in the ChatGPT shape (`_render` rule 5). Their `url`s use
   the server's public base URL, from `public_url` (fixed, or a function of the request as the
   grant is: over HTTP, the base `serve` names itself by), handed to the handler for the call
   it makes (`_BASE_URL`); none (stdio) means `pdpp://` URIs. A search hit's title is its
   record card's, which the search page carries (no read per hit); a hit without a title slot
   keeps its id as title.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from pdpp_store import (
    SELECTOR_ARGS,
    AsyncStore,
    BadRequest,
    FieldWindow,
    Grant,
    RecordRef,
    StoreError,
    audit_context,
    parse_field_window_uri,
)

from . import _render as render
from ._inputs import IDENTITY as _IDENTITY
from ._inputs import TOOL_INPUTS
from ._tools import RESOURCE_TEMPLATES, TOOLS

__all__ = ["GrantSource", "PublicUrlSource", "create_server"]

log = logging.getLogger("pdpp_store.mcp")

GrantSource = Grant | Callable[[Any], Grant]
"""A fixed grant, or a function from the transport's request (`None` in-process and over
stdio; a Starlette request over HTTP) to the grant of that request."""

PublicUrlSource = str | Callable[[Any], str | None] | None
"""The server's public base URL (`https://host[:port]`), a function from the transport's
request to it, or None (the server knows none)."""

_BASE_URL: ContextVar[str | None] = ContextVar("pdpp_store_mcp_base_url", default=None)
"""The public base URL of the tool call being answered (rule 4)."""

FIELD_WINDOW_PREFIX = "pdpp://field-window/"
RECORD_PREFIX = "pdpp://record/"
BLOB_PREFIX = "pdpp://blob/"
_ACCEPTED = {tool: tuple(schema["properties"]) for tool, schema in TOOL_INPUTS.items()}
"""Each tool's argument names, in its input schema's order (the order a refusal lists them)."""
_SELECTOR = tuple(name for name in _ACCEPTED["read_record_field"] if name in SELECTOR_ARGS)

INSTRUCTIONS = (
    "Personal data under a grant. From a question to evidence: schema lists each stream's "
    "fields, filters, order field and record count. query_records lists a stream's records "
    'newest first, narrowed by a filter, e.g. {"from_email": "a@b.c", "received_at": '
    '{"gte": "2026-03-01", "lt": "2026-04-01"}}; aggregate counts or sums them by a field or '
    "by month; search finds records by their words, best first. Each row or hit carries its "
    "fetch call: fetch opens the record, read_record_field reads a long field in windows. "
    "Follow each answer's 'next' call for more. search's structured results also list "
    "{id, title, url} and fetch(id) answers {id, title, text, url, metadata}, its text bounded "
    "(long fields continue with read_record_field)."
)
"""The server's `instructions`: the way from a question to evidence, within 512 characters."""

Handler = Callable[[AsyncStore, Grant, Mapping[str, Any]], Awaitable[types.CallToolResult]]


def _invalid(param: str, message: str) -> BadRequest:
    return BadRequest("invalid_request", message, param=param)


def _arguments(raw: object, accepted: frozenset[str] | tuple[str, ...]) -> dict[str, Any]:
    """The call's arguments without nulls; an unknown name is `invalid_request` naming it."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _invalid("arguments", "arguments must be an object")
    for name in sorted(raw):
        if name not in accepted:
            raise _invalid(name, f"unknown argument {name!r}; accepted: {', '.join(accepted)}")
    return {name: value for name, value in raw.items() if value is not None}


def _string(args: Mapping[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value:
        raise _invalid(name, f"{name} must be a non-empty string")
    return value


# ---------------------------------------------------------------- tools


async def read_record_field(
    store: AsyncStore, grant: Grant, raw: Mapping[str, Any]
) -> types.CallToolResult:
    args = _arguments(raw, _ACCEPTED["read_record_field"])
    selector = {name: args[name] for name in _SELECTOR if name in args}
    record: RecordRef | str
    field = args.get("field_path")
    connection_id = args.get("connection_id")
    if "id" in args:
        for name in ("stream", "record_id"):
            if name in args:
                raise _invalid(name, "give id, or connection_id, stream and record_id: not both")
        record = _string(args, "id")
        if record.startswith(FIELD_WINDOW_PREFIX):
            named = parse_field_window_uri(record, param="id")
            if field is not None and field != named.field:
                raise _invalid("field_path", "field_path names another field than the id's URI")
            record, field = named.record, named.field
            selector = _beside_uri(dict(named.selector()), selector)
    else:
        missing = [name for name in _IDENTITY if name not in args]
        if missing:
            raise _invalid(missing[0], "give id, or all of connection_id, stream and record_id")
        record = RecordRef(args["connection_id"], args["stream"], args["record_id"])
        connection_id = None
    if field is None:
        raise _invalid("field_path", "field_path is required")
    window = await store.read_field_window(
        grant, record, field, connection_id=connection_id, **selector
    )
    return render.window_result(window, selector.get("q"))


_POSITION = frozenset({"offset_chars", "cursor", "q"})


def _beside_uri(named: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """The window a field-window URI names, changed by the selector arguments given beside it:
    a position given (`offset_chars`, `cursor` or `q`) replaces the URI's, a `limit_chars` its
    limit; whatever is left cannot go together and the library refuses it by name."""
    if given.keys() & _POSITION:
        named = {name: value for name, value in named.items() if name not in _POSITION}
    return {**named, **given}


async def fetch(store: AsyncStore, grant: Grant, raw: Mapping[str, Any]) -> types.CallToolResult:
    args = _arguments(raw, _ACCEPTED["fetch"])
    target = _string(args, "id")
    shape = render.FetchShape(_BASE_URL.get())
    if target.startswith(BLOB_PREFIX):
        blob = await store.blob_info(grant, target.removeprefix(BLOB_PREFIX))
        return render.blob_result(blob, shape)
    if target.startswith(FIELD_WINDOW_PREFIX):
        window = await store.read_resource(grant, target)
        assert isinstance(window, FieldWindow)
        return render.window_result(window, fetched=shape)
    view = await store.read_record(
        grant, target, connection_id=args.get("connection_id"), after_field=args.get("after_field")
    )
    return render.record_result(view, shape)


async def search(store: AsyncStore, grant: Grant, raw: Mapping[str, Any]) -> types.CallToolResult:
    args = _arguments(raw, _ACCEPTED["search"])
    query = {name: value for name, value in args.items() if name != "q"}
    page = await store.search(grant, _string(args, "q"), **query)
    return render.search_result(page, _BASE_URL.get())


async def schema(store: AsyncStore, grant: Grant, raw: Mapping[str, Any]) -> types.CallToolResult:
    args = _arguments(raw, _ACCEPTED["schema"])
    return render.schema_result(await store.describe_grant(grant, **args))


async def query_records(
    store: AsyncStore, grant: Grant, raw: Mapping[str, Any]
) -> types.CallToolResult:
    args = _arguments(raw, _ACCEPTED["query_records"])
    asked = {name: value for name, value in args.items() if name != "stream"}
    return render.records_result(await store.query_records(grant, _string(args, "stream"), **asked))


async def aggregate(
    store: AsyncStore, grant: Grant, raw: Mapping[str, Any]
) -> types.CallToolResult:
    args = _arguments(raw, _ACCEPTED["aggregate"])
    stream = _string(args, "stream")
    query = {name: value for name, value in args.items() if name != "stream"}
    return render.aggregate_result(await store.aggregate(grant, stream, **query))


HANDLERS: dict[str, Handler] = {
    "aggregate": aggregate,
    "search": search,
    "fetch": fetch,
    "read_record_field": read_record_field,
    "schema": schema,
    "query_records": query_records,
}


# ---------------------------------------------------------------- resources


async def read_resource(store: AsyncStore, grant: Grant, uri: str) -> types.ReadResourceResult:
    if uri.startswith(BLOB_PREFIX):
        return render.blob_contents(
            await store.blob_info(grant, uri.removeprefix(BLOB_PREFIX)), uri
        )
    if not uri.startswith((RECORD_PREFIX, FIELD_WINDOW_PREFIX)):
        raise _invalid("uri", "not a pdpp:// record, field-window or blob URI")
    found = await store.read_resource(grant, uri)
    if isinstance(found, FieldWindow):
        return render.window_contents(found, uri)
    return render.record_contents(found, uri)


_JSONRPC_CODE = {400: types.INVALID_PARAMS, 403: types.INVALID_PARAMS, 404: -32002}


def _resource_error(error: StoreError) -> MCPError:
    code = _JSONRPC_CODE.get(error.http_status, types.INVALID_PARAMS)
    if error.http_status >= 500:
        code = types.INTERNAL_ERROR
    return MCPError(code=code, message=error.message, data=error.to_dict())


# ---------------------------------------------------------------- the server


def _grant_of(source: GrantSource, ctx: ServerRequestContext[Any, Any]) -> Grant:
    return source if isinstance(source, Grant) else source(ctx.request)


def _request_id_of(ctx: ServerRequestContext[Any, Any]) -> str:
    """The read audit's request id: the HTTP request's (`X-Request-Id`) when there is one, else
    the JSON-RPC request's (stdio)."""
    scope = getattr(ctx.request, "scope", None)
    state = scope.get("state") if isinstance(scope, dict) else None
    given = state.get("request_id") if isinstance(state, dict) else None
    return given if isinstance(given, str) else f"jsonrpc_{ctx.request_id}"


def _declared_client(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The read audit's client where no token names one (stdio): the name and version the MCP
    client declared in `initialize` (its own word; whoever started the process chose it)."""
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name, version = getattr(info, "name", None), getattr(info, "version", None)
    if not isinstance(name, str) or not name:
        return None
    declared = f"{name}/{version}" if isinstance(version, str) and version else name
    return declared[:256]


def _base_url_of(source: PublicUrlSource, ctx: ServerRequestContext[Any, Any]) -> str | None:
    return source(ctx.request) if callable(source) else source


def create_server(
    store: AsyncStore,
    grant: GrantSource,
    *,
    name: str = "pdpp-store",
    public_url: PublicUrlSource = None,
) -> Server[Any]:
    """The MCP server over `store`, answering under `grant` (see the module's rules)."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        try:
            handler = HANDLERS.get(params.name)
            if handler is None:
                raise _invalid("name", f"unknown tool {params.name!r}")
            base = _BASE_URL.set(_base_url_of(public_url, ctx))
            try:
                with audit_context("mcp", request_id=_request_id_of(ctx)) as reader:
                    reader.client = reader.client or _declared_client(ctx)
                    return await handler(store, _grant_of(grant, ctx), params.arguments or {})
            finally:
                _BASE_URL.reset(base)
        except StoreError as error:
            return render.error_result(error)
        except Exception as error:  # rule 3: never an exception's text
            log.error("tool %s failed: %s", params.name, type(error).__name__)
            return render.error_result(render.INTERNAL_ERROR)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[])

    async def list_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=RESOURCE_TEMPLATES)

    async def on_read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        try:
            with audit_context("mcp", request_id=_request_id_of(ctx)) as reader:
                reader.client = reader.client or _declared_client(ctx)
                return await read_resource(store, _grant_of(grant, ctx), str(params.uri))
        except StoreError as error:
            raise _resource_error(error) from None
        except Exception as error:  # rule 3
            log.error("resources/read failed: %s", type(error).__name__)
            envelope = render.INTERNAL_ERROR
            raise MCPError(
                code=types.INTERNAL_ERROR, message=envelope["error"]["message"], data=envelope
            ) from None

    return Server(
        name,
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=on_read_resource,
    )


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pdpp-store")
    except PackageNotFoundError:
        return "0"
