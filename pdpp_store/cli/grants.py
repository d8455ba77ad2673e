"""Grants: what a grant lets an agent see (`grant describe`), and the grants the store keeps
(`grant add|list|revoke`), which tokens name by id."""

from __future__ import annotations

from typing import IO

import click

from pdpp_store.evidence import text as evidence_text
from pdpp_store.mcp.calls import as_tool_call

from ._io import (
    echo_json,
    format_option,
    load_grant,
    load_json,
    open_store,
    required_grant_option,
)
from ._root import cli


@cli.group("grant")
def grant_group() -> None:
    """Grants: what one lets an agent see, and the grants the store keeps (tokens name them)."""


@grant_group.command("add")
@click.argument("file", type=click.File("rb"), metavar="FILE.json")
@click.pass_context
def grant_add(ctx: click.Context, file: IO[bytes]) -> None:
    """Keep the grant of FILE.json (PDPP grant JSON) in the store; a tokens file or an
    authorization server's token may then name it by its grant_id. Prints the stored grant."""
    echo_json(open_store(ctx).add_grant(load_json(file, "'FILE.json'")).to_dict())


@grant_group.command("revoke")
@click.argument("grant_id")
@click.pass_context
def grant_revoke(ctx: click.Context, grant_id: str) -> None:
    """Revoke a stored grant for good: every server refuses it (grant_revoked) on its next
    request, with no restart. Prints the revoked grant."""
    echo_json(open_store(ctx).revoke_grant(grant_id).to_dict())


@grant_group.command("list")
@click.option("--grant-id", "grant_id", default=None, metavar="ID", help="Only this grant.")
@click.pass_context
def grant_list(ctx: click.Context, grant_id: str | None) -> None:
    """The stored grants, by id, each with its status now (active, expired or revoked)."""
    echo_json([stored.to_dict() for stored in open_store(ctx).list_grants(grant_id)])


@grant_group.command("describe")
@required_grant_option
@click.option("--stream", metavar="STREAM", help="Only this granted stream.")
@click.option("--limit", type=int, default=25, show_default=True, help="Streams a page (1..100).")
@click.option("--after", metavar="STREAM", help="The streams after this one (a page's next).")
@format_option()
@click.pass_context
def grant_describe(
    ctx: click.Context,
    *,
    grant: IO[bytes],
    stream: str | None,
    limit: int,
    after: str | None,
    output: str,
) -> None:
    """The granted streams, a page at a time in name order: their fields (type, text or binary,
    role, searchable), what may be asked of each (filters, order field, aggregations, views)
    and, over the records the grant can see, their count, the order field's oldest and newest
    values and the last write."""
    card = (
        open_store(ctx)
        .describe_grant(load_grant(grant), stream=stream, limit=limit, after=after)
        .to_dict()
    )
    if output == "json":
        echo_json(card)
        return
    click.echo(evidence_text.schema_text(card, as_tool_call))
