"""Grants: what a grant lets an agent see (`grant describe`)."""

from __future__ import annotations

from typing import IO

import click

from pdpp_store.evidence import text as evidence_text
from pdpp_store.mcp.calls import as_tool_call

from ._io import echo_json, format_option, load_grant, open_store, required_grant_option
from ._root import cli


@cli.group("grant")
def grant_group() -> None:
    """What a grant lets an agent see."""


@grant_group.command("describe")
@required_grant_option
@click.option("--stream", metavar="STREAM", help="Only this granted stream.")
@format_option()
@click.pass_context
def grant_describe(ctx: click.Context, grant: IO[bytes], stream: str | None, output: str) -> None:
    """The granted streams: their fields (type, text or binary, role, searchable), what may be
    asked of each (filters, order field, aggregations, views) and, over the records the grant
    can see, their count, the order field's oldest and newest values and the last write."""
    card = open_store(ctx).describe_grant(load_grant(grant), stream=stream).to_dict()
    if output == "json":
        echo_json(card)
        return
    click.echo(evidence_text.schema_text(card, as_tool_call))
