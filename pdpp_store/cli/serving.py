"""Serving: `serve` (REST and MCP over HTTP) and `mcp` (MCP over stdio)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import IO

import click

from pdpp_store import AsyncStore, Grant

from ._io import load_json
from ._root import cli


@cli.command()
@click.option(
    "--tokens",
    "tokens_path",
    required=True,
    type=click.Path(path_type=Path),  # any bad path is the library's `invalid_tokens`
    metavar="FILE.json",
    help="A JSON object mapping each bearer token to the PDPP grant it carries.",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--workers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 64),
    metavar="N",
    help="Serve from N processes sharing the port (one per core: a process uses one core).",
)
@click.option(
    "--public-url",
    default=None,
    metavar="URL",
    help="The http(s) origin clients reach the server by, named in its OAuth metadata and 401s"
    " (default: the address it listens on; never a request's Host header).",
)
@click.pass_context
def serve(  # noqa: PLR0917 (click passes each option by keyword)
    ctx: click.Context,
    tokens_path: Path,
    host: str,
    port: int,
    workers: int,
    public_url: str | None,
) -> None:
    """Serve the store over HTTP: the REST routes under /v1 and MCP at /mcp (needs the
    `server` extra: pip install 'pdpp-store[server]'). Stops on Ctrl-C."""
    try:
        from pdpp_store.serve import run
    except ImportError as error:
        raise click.UsageError(
            f"serving needs the server extra (pip install 'pdpp-store[server]'): {error}"
        ) from None
    run(
        ctx.find_root().params["db"],
        tokens_path,
        host=host,
        port=port,
        workers=workers,
        public_url=public_url,
    )


@cli.command()
@click.option(
    "--grant",
    "grant_file",
    type=click.File("rb"),
    required=True,
    metavar="FILE.json",
    help="The PDPP grant every request is answered under.",
)
@click.pass_context
def mcp(ctx: click.Context, grant_file: IO[bytes]) -> None:
    """Serve MCP over stdio (for an MCP host's command + args), under the grant of --grant.

    Over HTTP, `pdpp-store serve` serves the same server at /mcp with bearer tokens. Needs the
    server extra: pip install 'pdpp-store[server]'.
    """
    grant = Grant.from_dict(load_json(grant_file, "'--grant'"))
    asyncio.run(_serve_stdio(ctx.find_root().params["db"], grant))


async def _serve_stdio(url: str, grant: Grant) -> None:
    from pdpp_store.mcp import serve_stdio

    async with await AsyncStore.open(url) as store:
        await serve_stdio(store, grant)
