"""`serve`: run the REST server (and its MCP mount) under uvicorn, on one event loop.

Rules:
1. The tokens file is read and checked before the database is opened: a bad file is one clear
   `invalid_tokens` error and nothing is started.
2. The `AsyncStore` is opened on the loop that serves (its connections belong to that loop) and
   closed by the application's shutdown, before uvicorn hands a captured Ctrl-C back.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

import uvicorn

from pdpp_store import AsyncStore, Grant, load_tokens

from ._app import create_app

__all__ = ["serve"]


def _mcp_app(store: AsyncStore, tokens: Mapping[str, Grant]) -> Any | None:
    """The MCP server's Streamable HTTP app, when the MCP surface is installed."""
    try:
        mcp = importlib.import_module("pdpp_store.mcp")
    except ImportError:
        return None
    factory = getattr(mcp, "http_app", None)
    return None if factory is None else factory(store, tokens)


async def serve(
    url: str,
    tokens_path: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    log_level: str = "info",
) -> None:
    """Serve the store at `url` to the holders of the tokens in `tokens_path` until stopped."""
    tokens = load_tokens(tokens_path)
    store = await AsyncStore.open(url)
    try:
        app = create_app(store, tokens, mcp_app=_mcp_app(store, tokens), owns_store=True)
    except BaseException:
        await store.close()
        raise
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        proxy_headers=False,
        server_header=False,
    )
    await uvicorn.Server(config).serve()
