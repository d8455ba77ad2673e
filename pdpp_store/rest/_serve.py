"""`serve` / `run`: the REST server, with the MCP server at `/mcp`, under uvicorn, on one loop.

Rules:
1. The tokens file is read and checked before the database is opened: a bad file is one clear
   `invalid_tokens` error and nothing is started.
2. The `AsyncStore` is opened on the loop that serves (its connections belong to that loop) and
   closed by the application's shutdown, before uvicorn hands a captured Ctrl-C back.
3. `run` picks uvicorn's fastest available parts (uvloop, httptools) exactly as `uvicorn.run`
   would ("auto"); without them it serves on asyncio and h11, slower but the same.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping

import uvicorn

from pdpp_store import AsyncStore, Grant, load_tokens
from pdpp_store.mcp import http_app

from ._app import create_app

__all__ = ["run", "serve"]


async def serve(
    url: str,
    tokens: str | os.PathLike[str] | Mapping[str, Grant],
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    log_level: str = "info",
) -> None:
    """Serve the store at `url` to the holders of `tokens` (a tokens file, or token -> grant)
    until stopped."""
    grants = tokens if isinstance(tokens, Mapping) else load_tokens(tokens)
    store = await AsyncStore.open(url)
    try:
        app = create_app(store, grants, mcp_app=http_app(store, grants), owns_store=True)
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


def run(
    url: str,
    tokens_path: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    log_level: str = "info",
) -> None:
    """`serve` on a loop of uvicorn's choosing; returns when the server stops (Ctrl-C is a
    normal stop, not an error)."""
    tokens = load_tokens(tokens_path)  # before anything else (rule 1)
    loop_factory = uvicorn.Config("pdpp_store.rest:create_app", loop="auto").get_loop_factory()
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(serve(url, tokens, host=host, port=port, log_level=log_level))
    except KeyboardInterrupt:  # uvicorn stopped gracefully, then handed Ctrl-C back
        pass
