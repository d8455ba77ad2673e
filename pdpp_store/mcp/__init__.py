"""The MCP server: the content ladder for agents, over stdio and Streamable HTTP.

    server = create_server(async_store, grant)          # a `mcp.server.Server`
    await serve_stdio(async_store, grant)               # what `pdpp-store mcp --grant FILE` runs
    app = http_app(async_store, {"token": grant})       # ASGI; `pdpp_store.serve` mounts it at /mcp

Tools: `search`, `fetch`, `read_record_field`, `schema` (read-only, idempotent). Resource
templates: `pdpp://record/{handle}`, `pdpp://field-window/{handle}`, `pdpp://blob/{handle}`
(metadata only). See docs/mcp.md.

Rules:
1. Behind the `[server]` extra: importing this package needs no SDK; the SDK is imported when a
   server is made. `as_tool_call` (how a continuation is called here) is SDK-free, so the CLI
   renders the same text as `content[]`.
2. A surface: it imports only `pdpp_store`'s and `pdpp_store.evidence`'s public names, and
   `pdpp_store.http`'s for the bearer tokens and the one HTTP 401 both servers answer with;
   never another surface (`pdpp_store.rest`, `pdpp_store.serve`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .calls import TOOL_OF_OPERATION, as_tool_call

if TYPE_CHECKING:
    from mcp.server import Server
    from starlette.applications import Starlette

    from pdpp_store import AsyncStore, Grant

    from ._server import GrantSource

__all__ = ["TOOL_OF_OPERATION", "as_tool_call", "create_server", "http_app", "serve_stdio"]


def create_server(store: AsyncStore, grant: GrantSource) -> Server[Any]:
    """The MCP server over `store`, under a fixed grant or a per-request grant function."""
    from ._server import create_server as create

    return create(store, grant)


def http_app(
    store: AsyncStore, tokens: Mapping[str, Grant], *, resource_path: str = "/mcp"
) -> Starlette:
    """The Streamable HTTP app: each request's bearer token names its grant; a refusal is the
    HTTP door's 401 (`pdpp_store.http`), naming the metadata of the resource at `resource_path`."""
    from ._http import http_app as build

    return build(store, tokens, resource_path=resource_path)


async def serve_stdio(store: AsyncStore, grant: Grant) -> None:
    """Serve MCP over this process's stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = create_server(store, grant)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
