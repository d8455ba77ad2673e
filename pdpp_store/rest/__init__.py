"""`pdpp_store.rest`: the REST resource server (FastAPI), behind the `[server]` extra
(docs/contract.md §10).

    app = create_app(store, tokens)          # an AsyncStore, {token: Grant}

`pdpp_store.serve` runs it under uvicorn (what `pdpp-store serve` runs), with the MCP server
mounted at `/mcp`. Bearer tokens, the 401, the error envelope and request ids are
`pdpp_store.http`'s, shared with the MCP server.

The package imports only public names of `pdpp_store` (`pdpp_store`, `pdpp_store.evidence`,
`pdpp_store.http`) and no other surface; nothing in `pdpp_store` below the surfaces imports it,
so the library needs no FastAPI.
"""

from ._app import create_app

__all__ = ["create_app"]
