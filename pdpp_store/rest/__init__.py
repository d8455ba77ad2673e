"""`pdpp_store.rest`: the REST resource server (FastAPI), behind the `[server]` extra (§10).

    app = create_app(store, tokens)          # an AsyncStore, {token: Grant}
    run(url, tokens_path, host="127.0.0.1", port=8787)   # what `pdpp-store serve` runs
    await serve(url, tokens, ...)                         # the same, on a running loop

`Tokens`, `bearer_token` and `unauthenticated_response` are how every HTTP surface here (this
API and the MCP server's Streamable HTTP app) turns a bearer token into a grant or a 401, and
`METADATA_PATH` with `protected_resource_metadata` how each serves the metadata its 401 names.

The package imports only public names of `pdpp_store` (and `pdpp_store.evidence`,
`pdpp_store.mcp`); nothing in `pdpp_store` itself imports it, so the library needs no FastAPI.
"""

from ._app import create_app
from ._auth import Tokens, bearer_token
from ._errors import (
    METADATA_PATH,
    Unauthenticated,
    protected_resource_metadata,
    unauthenticated_response,
)
from ._serve import run, serve

__all__ = [
    "METADATA_PATH",
    "Tokens",
    "Unauthenticated",
    "bearer_token",
    "create_app",
    "protected_resource_metadata",
    "run",
    "serve",
    "unauthenticated_response",
]
