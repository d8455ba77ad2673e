"""Serving: `serve` (REST and MCP over HTTP) and `mcp` (MCP over stdio)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import IO, Any

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
@click.option(
    "--allow-origin",
    "allow_origins",
    multiple=True,
    metavar="ORIGIN",
    help="A browser origin allowed to call (CORS on REST and /mcp, and past /mcp's Origin"
    " check); repeatable. Default: none.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="HOST",
    help="Another name the server may be called by at /mcp (its Host check); repeatable.",
)
@click.option("--max-head-bytes", type=int, default=16384, show_default=True, metavar="N")
@click.option("--max-request-line", type=int, default=8192, show_default=True, metavar="N")
@click.option("--max-headers", type=int, default=100, show_default=True, metavar="N")
@click.option(
    "--max-body-bytes",
    type=int,
    default=1 << 20,
    show_default=True,
    metavar="N",
    help="Request bodies outside /mcp.",
)
@click.option("--max-mcp-body-bytes", type=int, default=4 << 20, show_default=True, metavar="N")
@click.option(
    "--head-timeout",
    type=float,
    default=10.0,
    show_default=True,
    metavar="S",
    help="Seconds a request head may take to arrive.",
)
@click.option(
    "--body-timeout",
    type=float,
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds a request body may take to arrive.",
)
@click.option(
    "--idle-timeout",
    type=float,
    default=5.0,
    show_default=True,
    metavar="S",
    help="Seconds a kept-alive connection may wait for its next request.",
)
@click.option(
    "--write-timeout",
    type=float,
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds a client may leave an answer unread (past 64 KiB waiting) before it is cut.",
)
@click.option("--max-connections", type=int, default=1000, show_default=True, metavar="N")
@click.option(
    "--max-mcp-streams",
    type=int,
    default=16,
    show_default=True,
    metavar="N",
    help="MCP requests one token may have in flight at once.",
)
@click.option(
    "--audit/--no-audit",
    default=True,
    show_default=True,
    help="Record every answered read in the store's read audit (pdpp-store audit list).",
)
@click.pass_context
def serve(  # noqa: PLR0917 (click passes each option by keyword)
    ctx: click.Context,
    /,
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
    allow_origins: tuple[str, ...],
    allow_hosts: tuple[str, ...],
    audit: bool,
    **limits: Any,
) -> None:
    """Serve the store over HTTP: the REST routes under /v1 and MCP at /mcp (needs the
    `server` extra: pip install 'pdpp-store[server]'). Stops on Ctrl-C.

    The door's limits (request heads, bodies, timeouts, connections, MCP requests per token)
    are answered before any token is read; docs/cli.md lists them, docs/decisions.md gives
    each default's reason."""
    try:
        from pdpp_store.serve import Limits, run
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
        limits=Limits(
            max_head_bytes=limits["max_head_bytes"],
            max_request_line=limits["max_request_line"],
            max_headers=limits["max_headers"],
            max_body_bytes=limits["max_body_bytes"],
            max_mcp_body_bytes=limits["max_mcp_body_bytes"],
            head_timeout_s=limits["head_timeout"],
            body_timeout_s=limits["body_timeout"],
            idle_timeout_s=limits["idle_timeout"],
            write_timeout_s=limits["write_timeout"],
            max_connections=limits["max_connections"],
            max_mcp_streams_per_token=limits["max_mcp_streams"],
        ),
        allow_origins=allow_origins,
        allow_hosts=allow_hosts,
        audit=audit,
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
