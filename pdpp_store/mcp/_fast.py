"""A `tools/call` over Streamable HTTP answered without the SDK's per-request transport.

The SDK's stateless transport (`StreamableHTTPSessionManager(stateless=True,
json_response=True)`) spends most of a request on plumbing: a transport, two task groups, four
memory streams, a message router and a dispatcher, each made and torn down per POST. For the
common request, one JSON-RPC `tools/call`, this module runs the same SDK pieces that decide the
answer, in the request's own task:

- the body parsed and classified by the SDK's own `pydantic_core.from_json` and
  `jsonrpc_message_adapter`, as the transport does;
- the SDK's `ServerRunner` over a born-ready `Connection` of the request's protocol version (what
  the stateless transport builds), so the middleware (OpenTelemetry), the per-version validation
  of the params, the handler and the serialization of its result are the SDK's own;
- the answer framed as the transport frames it (`JSONRPCResponse`/`JSONRPCError` dumped with
  `by_alias=True, exclude_unset=True`, `Content-Type: application/json`, status 200).

Rules:
1. Only a request the fast path is sure of is taken: a POST whose `Content-Type` and `Accept` the
   SDK's transport accepts as they are, an `MCP-Protocol-Version` absent or one of the handshake
   versions (any other goes to the SDK's modern entry), and a body that parses and validates as
   one `JSONRPCRequest` with method `tools/call`. Anything else returns `False` before any work:
   the caller hands the request to the SDK unchanged.
2. Before the runner is called, the params are checked here by the same two SDK checks the
   runner makes before its handler (`validate_client_request` for the version's surface, then the
   handler's `params_type`); a request that fails either is handed to the SDK, which answers it
   itself, and nothing has run. Once the runner is called the request is never handed back,
   whatever it raises (a middleware's or a handler's error, the SDK's serialization refusing a
   result): it is answered here as the SDK's dispatcher answers it, so a tool never runs twice.
   The tool handlers catch their own failures (`_server` rule 3).
3. The grant rides the request's own scope (`GRANT_SCOPE_KEY`), read by the same grant source as
   on the SDK path; the runner, connection and context are made per request, never shared.
4. In JSON-response mode a handler's notifications (progress, logs) have no wire: the SDK's
   router drops them. Here they are dropped where they are made; a server-to-client request is
   refused (`NoBackChannelError`), as on the stateless transport.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
import pydantic_core
from mcp.server.connection import Connection
from mcp.server.lowlevel.server import Server
from mcp.server.runner import ServerRunner, aclose_shielded
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
    jsonrpc_message_adapter,
)
from mcp_types.methods import validate_client_request
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope, Send

__all__ = ["answer_tool_call"]

log = logging.getLogger("pdpp_store.mcp")

_VERSION_HEADER = b"mcp-protocol-version"
_JSON = "application/json"
_TRANSPORT = TransportContext(kind="streamable-http", can_send_request=False)


class _Context:
    """The dispatch context of one request answered here: the SDK's `DispatchContext` protocol
    in JSON-response mode, where nothing but the answer reaches the wire (rule 4)."""

    def __init__(self, request_id: RequestId, metadata: ServerMessageMetadata) -> None:
        self.transport = _TRANSPORT
        self.message_metadata = metadata
        self.cancel_requested = anyio.Event()
        self._request_id = request_id

    @property
    def request_id(self) -> RequestId:
        return self._request_id

    @property
    def can_send_request(self) -> bool:
        return False

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        log.debug("dropped %s: a JSON response carries only the answer", method)

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        return None

    def close(self) -> None:
        return None


def _protocol_version(scope: Scope) -> str | None:
    """The first `MCP-Protocol-Version`, read as the SDK's session manager reads it."""
    for name, value in scope["headers"]:
        if name == _VERSION_HEADER:
            return bytes(value).decode("latin-1")
    return None


def _sure_of_headers(request: Request, limit: int) -> bool:
    """The `Content-Length`, `Content-Type` and `Accept` the SDK's transport takes without a word
    (rule 1): a declared length it reads as over its `limit` (`+5000000`, say, which the app's
    own check does not read as a length) is its to refuse."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                return False
        except ValueError:
            pass
    content_type = request.headers.get("content-type")
    if content_type is None or not content_type.lower().startswith(_JSON):
        return False
    parts = [part.strip() for part in content_type.split(";")[0].split(",")]
    return _JSON in parts and check_accept_headers(request)[0]


async def answer_tool_call(
    server: Server[Any],
    manager: StreamableHTTPSessionManager,
    request: Request,
    send: Send,
    body: bytes,
) -> bool:
    """Answer one `tools/call` POST (`request` already carries its grant in its scope) and return
    True, or return False having done nothing, for the SDK to answer (rules 1 and 2). `manager`
    is the SDK's session manager of `server`, whose lifespan state the runner is given."""
    scope, receive = request.scope, request.receive
    if getattr(manager, "_task_group", None) is None:  # not running: the SDK says so
        return False
    version = _protocol_version(scope)
    if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return False
    if not _sure_of_headers(request, manager.max_request_body_size):
        return False
    try:
        message = jsonrpc_message_adapter.validate_python(
            pydantic_core.from_json(body), by_name=False
        )
    except (ValueError, ValidationError):
        return False
    if not isinstance(message, JSONRPCRequest) or message.method != "tools/call":
        return False
    protocol = version or DEFAULT_NEGOTIATED_VERSION
    entry = server.get_request_handler(message.method)
    if entry is None:
        return False
    try:  # rule 2: what the runner would refuse before its handler is the SDK's to answer
        validate_client_request(message.method, protocol, message.params)
        entry.params_type.model_validate(
            {} if message.params is None else message.params, by_name=False
        )
    except (ValueError, KeyError):  # ValidationError is a ValueError
        return False
    metadata = ServerMessageMetadata(request_context=request, can_send_request=False)
    context = _Context(message.id, metadata)
    connection = Connection.from_envelope(protocol, None, None)
    runner = ServerRunner(server, connection, getattr(manager, "_lifespan_state", None))
    answer: JSONRPCResponse | JSONRPCError
    try:
        result = await runner.on_request(context, message.method, message.params)
        answer = JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result)
    except Exception as error:  # never handed back from here: the tool may have run (rule 2)
        mapped = handler_exception_to_error_data(error)
        if mapped is None:
            log.error("handler for %r raised %s", message.method, type(error).__name__)
            mapped = ErrorData(code=0, message=str(error))
        answer = JSONRPCError(jsonrpc="2.0", id=message.id, error=mapped)
    finally:
        await aclose_shielded(connection)
    response = Response(
        answer.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=200,
        headers={"Content-Type": _JSON},
    )
    await response(scope, receive, send)
    return True
