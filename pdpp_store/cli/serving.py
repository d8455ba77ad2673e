"""Serving: `serve` (REST and MCP over HTTP) and `mcp` (MCP over stdio)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import IO

import click

from pdpp_store import AsyncStore, BadRequest, Grant

from ._io import load_json
from ._root import cli


@cli.command()
@click.option(
    "--tokens",
    "tokens_path",
    default=None,
    type=click.Path(path_type=Path),  # any bad path is the library's `invalid_tokens`
    metavar="FILE.json",
    help="A JSON object mapping each bearer token (or sha256:<hex> of it) to the PDPP grant it"
    " carries or the id of a stored grant; read again when it changes.",
)
@click.option(
    "--issuer",
    default=None,
    metavar="URL",
    help="An OAuth authorization server whose tokens this server accepts (its issuer).",
)
@click.option(
    "--introspection-url",
    default=None,
    metavar="URL",
    help="Its RFC 7662 introspection endpoint (with --client-id and --client-secret-file).",
)
@click.option("--client-id", default=None, metavar="ID", help="This server's client id there.")
@click.option(
    "--client-secret-file",
    default=None,
    type=click.File("r"),
    metavar="FILE",
    help="A file holding this server's client secret there (never on the command line).",
)
@click.option(
    "--jwks-url",
    default=None,
    metavar="URL",
    help="Its JWKS, to check RFC 9068 JWT access tokens locally.",
)
@click.option(
    "--introspection-cache-seconds",
    default=60.0,
    show_default=True,
    type=click.FloatRange(0, 60),
    metavar="S",
    help="How long an introspected token is trusted before asking again (a revocation there"
    " is seen within this bound).",
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
    tokens_path: Path | None,
    issuer: str | None,
    introspection_url: str | None,
    client_id: str | None,
    client_secret_file: IO[str] | None,
    jwks_url: str | None,
    introspection_cache_seconds: float,
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
    oauth = None
    if issuer is not None or introspection_url is not None or jwks_url is not None:
        from pdpp_store.auth import OAuth

        if issuer is None:
            raise BadRequest(
                "invalid_request", "an authorization server needs --issuer", param="issuer"
            )
        secret = None if client_secret_file is None else client_secret_file.read().strip()
        try:
            oauth = OAuth(
                issuer=issuer,
                introspection_endpoint=introspection_url,
                client_id=client_id,
                client_secret=secret,
                jwks_uri=jwks_url,
                cache_seconds=introspection_cache_seconds,
            )
        except ValueError as error:
            raise BadRequest("invalid_request", str(error), param="issuer") from None
    run(
        ctx.find_root().params["db"],
        tokens_path,
        host=host,
        port=port,
        workers=workers,
        public_url=public_url,
        oauth=oauth,
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
